// lt::train: the run around the step. Builds the task and trainer, restores a checkpoint, then
// steps, reports progress, evaluates and saves on schedule. The step itself is Trainer::step.
#include "leantrain/cuda_info.h"
#include "leantrain/memory_snapshot.h"
#include "leantrain/ops.h"
#include <algorithm>
#include <chrono>
#include <optional>
#include <cmath>
#include <cstdio>

#include "backend/backend.h"
#include "io/file_io.h"
#include "io/text_format.h"
#include "dist/data_parallel.h"
#include "train/assemble.h"
#include "train/checkpoint.h"
#include "train/dpo.h"
#include "train/precision_hooks.h"
#include "train/trainer.h"
#include "core/knobs.h"

namespace lt {

// The pickle beside a snapshot: memory_viz reads pickles only.
std::string pickle_path_for(const std::string& json_path) {
  const std::string ext = ".json";
  bool has_ext = json_path.size() > ext.size() && json_path.compare(json_path.size() - ext.size(), ext.size(), ext) == 0;
  return (has_ext ? json_path.substr(0, json_path.size() - ext.size()) : json_path) + ".pickle";
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Each step's loss (and wall seconds) as JSON lines; appended when resuming, so the file holds
// the whole curve. "-" is standard output. Every write is checked (a full disk ends the run).
class MetricsFile {
 public:
  MetricsFile(const std::string& path, bool append) : f_(path, append, io::detail::Dash::Stdout) {}
  void step(int64_t step, const StepOutcome& o, double seconds) {
    if (!f_.is_open()) return;
    char buf[160];
    std::snprintf(buf, sizeof buf, "{\"step\": %lld, \"loss\": %.17g, \"lr\": %.17g, \"grad_norm\": ",
                  (long long)step, o.loss, o.lr);
    std::string line = buf;
    // JSON has no inf/NaN: an overflowed (skipped) 16-mixed step writes null.
    line += number_or_null(o.grad_norm);
    for (const Metric& m : o.metrics) line += ", \"" + m.name + "\": " + number_or_null(m.value);
    std::snprintf(buf, sizeof buf, "%s, \"seconds\": %.6f}\n", o.applied ? "" : ", \"skipped\": true", seconds);
    f_.write(line + buf);
  }
  void eval(const EvalInfo& e) {
    if (!f_.is_open()) return;
    std::string line = "{\"step\": " + std::to_string(e.step) + ", \"eval_loss\": " + number_or_null(e.loss);
    if (e.accuracy) line += ", \"eval_accuracy\": " + number_or_null(*e.accuracy, "%.6g");
    for (const Metric& m : e.metrics) line += ", \"eval_" + m.name + "\": " + number_or_null(m.value);
    f_.write(line + "}\n");
  }
  void close() { f_.close(); }

 private:
  static std::string number_or_null(double v, const char* format = "%.17g") {
    if (!std::isfinite(v)) return "null";
    char buf[40];
    std::snprintf(buf, sizeof buf, format, v);
    return buf;
  }
  io::detail::StreamFile f_;
};

// Which checkpoint holds a good state, for the message of a run that stops on a NaN: the last
// save of this run, else the checkpoint it resumed from, else none.
class LastGoodCheckpoint {
 public:
  LastGoodCheckpoint(const RunConfig& cfg, int64_t resumed_step) : save_(cfg.save) {
    if (!cfg.resume.empty()) dir_ = cfg.resume, step_ = resumed_step;
  }
  void saved(int64_t step) { dir_ = save_, step_ = step; }
  std::string note() const {
    if (!dir_.empty()) return "the checkpoint in " + dir_ + " (step " + std::to_string(step_) + ") is intact";
    if (save_.empty()) return "no checkpoint was saved (--save keeps one)";
    return "no checkpoint was saved; " + save_ + " was not written by this run";
  }
  // `e` with the note added to its fix.
  NumericError with_note(const NumericError& e) const {
    return NumericError(e.what_part(), e.why(), e.fix().empty() ? note() : e.fix() + "; " + note());
  }

 private:
  std::string save_, dir_;
  int64_t step_ = 0;
};

void say(const RunObserver& obs, const std::string& s) {
  if (obs.on_message) obs.on_message(s);
}

}  // namespace

RunResult train(const RunConfig& cfg, const RunObserver& obs) {
  validate(cfg);
  set_gemm_workspace_bytes(cfg.gemm_workspace);
  set_attention_kernel(cfg.attention_kernel);
  Device device = resolve_device(cfg.device);
  allocator_for(device).reset_peak_stats();
  pinned_host_allocator(device).reset_peak_stats();
  disk_allocator(device).reset_peak_stats();
  if (cfg.memory_history || !cfg.memory_snapshot.empty() || !cfg.memory_report.empty()) {
    allocator_for(device).clear_history();  // from here on, parameter creation included
    allocator_for(device).set_history(true);
  }
  AssembledRun run = assemble_run(cfg, device);
  Task* task = run.task.get();
  Trainer& trainer = *run.trainer;
  const std::string& checkpointing = run.checkpointing;
  if (!cfg.resume.empty()) {
    load_checkpoint(cfg.resume, trainer);
    say(obs, "resumed from " + cfg.resume + " at step " + std::to_string(trainer.steps_done()));
  }
  const int64_t total = trainer.total_steps();
  const int64_t end = cfg.stop_at > 0 ? std::min(cfg.stop_at, total) : total;
  if (trainer.steps_done() >= end)
    throw UsageError("nothing to train: the checkpoint is at step " + std::to_string(trainer.steps_done()),
                     cfg.stop_at > 0 && cfg.stop_at < total ? "--stop-at is " + std::to_string(cfg.stop_at)
                                                             : "--steps is " + std::to_string(total),
                     "pass a larger --steps to continue training");
  const bool reference_pass = task->objective && task->objective->needs_reference_pass();
  const auto started = Clock::now();
  trainer.start();  // --objective dpo of a full fine-tune: the reference pass runs here
  say(obs, task->description);
  if (!task->lora_note.empty()) say(obs, task->lora_note);
  if (task->objective && task->objective->reference() == PreferenceObjective::Reference::Precomputed)
    say(obs, reference_pass ? "reference log-probabilities of every pair computed with the starting weights (" +
                                  format_duration(seconds_since(started)) + ")"
                            : "reference log-probabilities read from " + cfg.resume);
  char line[200];
  int64_t mb = cfg.micro_batch ? cfg.micro_batch : cfg.batch;
  std::snprintf(line, sizeof line, "training %lld steps on %s: batch %lld (%lld x micro-batch %lld), %s lr %.3g, %s schedule",
                (long long)total, device.str().c_str(), (long long)cfg.batch, (long long)(cfg.batch / mb),
                (long long)mb, name_of(cfg.optimizer).c_str(), cfg.lr, name_of(cfg.schedule).c_str());
  say(obs, line);
  if (std::string k = knobs_header(); !k.empty()) say(obs, k);  // LEANTRAIN_* knobs not at their defaults
  if (cfg.precision != Precision::True32 || cfg.fused_step)
    say(obs, "precision " + name_of(cfg.precision) + (cfg.master_weights == MasterWeights::Fp32 ? " with f32 master weights" : "") +
                 (cfg.stochastic_rounding ? " with stochastic rounding" : "") +
                 (cfg.keep_casts ? " with kept 16-bit weight copies" : "") +
                 (cfg.fused_step ? "; optimizer step fused into backward" : ""));
  if (std::string w = precision_warning(cfg); !w.empty()) say(obs, w);
  if (!checkpointing.empty()) say(obs, checkpointing);
  if (end < total) say(obs, "stopping after step " + std::to_string(end) + " (--stop-at); --resume continues the run");

  MetricsFile metrics(cfg.metrics, !cfg.resume.empty());
  RunResult result;
  result.device = device;
  result.unit = task->unit;
  auto t0 = Clock::now();
  const int64_t first = trainer.steps_done();
  // Throughput counts the steps' own seconds (evaluations and saves are left out). The steady
  // rate leaves out this process's first step, as bench/peers/*_torch.py do.
  int64_t items = 0, steady_items = 0;
  double step_seconds = 0, steady_seconds = 0;
  LastGoodCheckpoint good(cfg, trainer.steps_done());
  auto evaluate_and_save = [&]() {
    EvalInfo e = trainer.evaluate();
    result.eval = e;
    metrics.eval(e);
    if (obs.on_eval) obs.on_eval(e);
    // A diverged state is never saved (save_checkpoint checks the weights and optimizer state).
    if (!std::isfinite(e.loss))
      throw NumericError("the evaluation loss is " + short_number(e.loss) + " at step " + std::to_string(e.step),
                         "training diverged", "lower the learning rate, e.g. --lr " + short_number(cfg.lr / 10, 3));
    if (!cfg.save.empty()) {
      save_checkpoint(cfg.save, trainer);
      good.saved(trainer.steps_done());
      if (obs.on_save) obs.on_save(cfg.save, trainer.steps_done());
    }
  };
  // A step whose gradient norm is read at the next step (StepOutcome::grad_norm_pending) writes
  // its metrics line then.
  struct Unwritten {
    int64_t step;
    StepOutcome o;
    double seconds;
  };
  std::optional<Unwritten> unwritten;
  auto write_unwritten = [&]() {
    if (!unwritten) return;
    unwritten->o.grad_norm = trainer.grad_norm_of(unwritten->step);
    metrics.step(unwritten->step, unwritten->o, unwritten->seconds);
    unwritten.reset();
  };
  try {
    // No synchronisation between steps: while the GPU runs a step's optimizer kernels the host
    // writes the metrics, takes the next batch and enqueues its forward, so the GPU goes from
    // the update to the next forward without waiting (TinyLlama's step had 1-3 ms idle there).
    // The trainer's own reads of the loss and the gradient norm keep the host at most one
    // update ahead. A step's time is the time between two returns of trainer.step(): in steady
    // state the GPU's period, each holding one optimizer step.
    auto last = Clock::now();
    while (trainer.steps_done() < end) {
      StepOutcome o = trainer.step();
      const auto now = Clock::now();
      const double sec = std::chrono::duration<double>(now - last).count();
      last = now;
      const int64_t s = trainer.steps_done();
      items += o.items;
      step_seconds += sec;
      if (s - first >= 2) {
        steady_items += o.items;
        steady_seconds += sec;
      }
      result.losses.push_back(o.loss);
      result.step_seconds.push_back(sec);
      result.final_loss = o.loss;
      result.final_metrics = o.metrics;
      write_unwritten();
      if (o.grad_norm_pending) unwritten = Unwritten{s, o, sec};
      else metrics.step(s, o, sec);
      if (obs.on_step) {
        double el = seconds_since(t0);
        MemoryStats ms = allocator_for(device).stats();
        ProgressInfo p;
        p.step = s;
        p.total_steps = total;
        p.epoch = trainer.epochs_done();
        p.loss = o.loss;
        p.lr = o.lr;
        p.items_per_s = steady_seconds > 0 ? double(steady_items) / steady_seconds
                        : step_seconds > 0 ? double(items) / step_seconds : 0;
        p.unit = task->unit;
        p.elapsed_s = el;
        p.eta_s = el / double(s - first) * double(end - s);  // evaluations included
        p.mem_current = ms.allocated_bytes.current;
        p.mem_peak = ms.allocated_bytes.peak;
        p.metrics = o.metrics;
        obs.on_step(p);
      }
      if (cfg.eval_every > 0 && s % cfg.eval_every == 0 && s < end) {
        write_unwritten();
        evaluate_and_save();
        last = Clock::now();  // the evaluation's time is not the next step's
      }
    }
    backend_for(device).synchronize();  // the last update, before the memory snapshot and evaluation
    write_unwritten();                   // its norm (checked: a non-finite one stops the run here)
    if (!cfg.memory_snapshot.empty()) {  // while the model and optimizer state are still alive
      write_memory_snapshot(allocator_for(device), cfg.memory_snapshot);
      write_memory_snapshot_pickle(allocator_for(device), pickle_path_for(cfg.memory_snapshot));
      say(obs, "memory snapshot: " + cfg.memory_snapshot + " (+ " + pickle_path_for(cfg.memory_snapshot) +
                   " for pytorch.org/memory_viz)");
    }
    evaluate_and_save();
  } catch (const NumericError& e) {
    // The last good step's line, when its norm was read (a NaN loss of the step after it).
    try {
      if (unwritten && std::isfinite(trainer.grad_norm_of(unwritten->step))) write_unwritten();
    } catch (const Error&) {
      // its own norm is the non-finite one: the error says so
    }
    throw good.with_note(e);  // which checkpoint is good, exactly
  }
  metrics.close();
  result.memory = allocator_for(device).stats();
  result.pinned_host = pinned_host_allocator(device).stats();
  result.disk = disk_allocator(device).stats();
  result.steps = trainer.steps_done();
  result.seconds = seconds_since(t0);
  result.items_per_s = step_seconds > 0 ? double(items) / step_seconds : 0;
  result.steady_items_per_s = steady_seconds > 0 ? double(steady_items) / steady_seconds : result.items_per_s;
  if (dist::world().size() > 1) {  // every rank's peaks, for rank 0's --metrics-json (ranks differ by their shards)
    const int w = dist::world().size();
    const int64_t mine[2] = {result.memory.allocated_bytes.peak, result.memory.reserved_bytes.peak};
    std::vector<int64_t> all(size_t(2 * w));
    dist::world().all_gather(mine, all.data(), 2, DType::I64);
    for (int r = 0; r < w; ++r) {
      result.rank_peak_allocated.push_back(all[size_t(2 * r)]);
      result.rank_peak_reserved.push_back(all[size_t(2 * r + 1)]);
    }
  }
  return result;
}

}  // namespace lt
