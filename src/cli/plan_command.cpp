// `leantrain plan`: every `train` flag, plus what the plan needs (target device type, context,
// JSON, a budget to fit). `train --fit BUDGET` plans the same way, then trains the chosen config.
#include <algorithm>
#include <cstdio>

#include "cli/cli.h"
#include "leantrain/dist.h"
#include "leantrain/plan.h"

namespace lt::cli {

void add_plan_flags(CLI::App& cmd, RunConfig& c, PlanFlags& p) {
  add_train_flags(cmd, c);
  cmd.footer("Example: leantrain plan --model vit-l-16 --data synthetic --batch 64 --budget 8GiB");
  const char* what = "Plan";
  cmd.add_option("--device-type", p.device_type, "The device the run will use: cuda (caching allocator) or cpu")
      ->capture_default_str()->group(what);
  cmd.add_option("--context-bytes", p.context, "CUDA context + stream/cuBLASLt bytes outside the allocator (default 529MiB)")
      ->group(what);
  cmd.add_option("--nccl-bytes", p.nccl, "NCCL's own buffers per rank with --devices 2+ on cuda, outside the allocator (default 860MiB)")
      ->group(what);
  cmd.add_option("--budget", p.budget, "Search precision, micro-batch, checkpoint set, optimizer-state precision and fused step for the cheapest configuration that fits this much memory, e.g. 8GiB")
      ->group(what);
  cmd.add_option("--maximize", p.maximize, "With --budget: instead of searching knobs, find the largest seq-len or batch (micro-batch = batch) that fits, every other flag as given")
      ->group(what);
  cmd.add_flag("--json", p.json, "Print one JSON object instead of the report")->group(what);
  cmd.add_option("--rank", p.rank, "With --devices N: the rank whose full report (or JSON) is printed")
      ->capture_default_str()->group(what);
}

void add_fit_flag(CLI::App& train, std::string& fit) {
  train.add_option("--fit", fit, "Plan first and train the cheapest configuration that fits this budget, e.g. 8GiB")
      ->group("Evaluation, checkpoints, output");
}

namespace {

PlanOptions options_of(const PlanFlags& p) {
  PlanOptions o;
  o.device_type = p.device_type;
  o.rank = p.rank;
  if (!p.context.empty()) o.context_bytes = parse_bytes(p.context, "--context-bytes");
  if (!p.nccl.empty()) o.nccl_bytes = parse_bytes(p.nccl, "--nccl-bytes");
  return o;
}

}  // namespace

int run_plan(const RunConfig& cfg, const PlanFlags& p) {
  PlanOptions o = options_of(p);
  if (!p.maximize.empty()) {
    if (p.budget.empty())
      throw UsageError("--maximize " + p.maximize, "it needs a budget to fit", "add --budget SIZE, e.g. --budget 24GiB");
    MaximizeResult m = maximize_fit(cfg, p.maximize, parse_bytes(p.budget, "--budget"), o);
    add_cost_prediction(m.result);
    if (p.json) {
      std::string j = plan_json(m.result);
      j.pop_back();
      std::string cmd;
      for (char c : command_line(m.result.config)) {
        if (c == '"' || c == '\\') cmd += '\\';
        cmd += c;
      }
      std::printf("%s, \"budget_bytes\": %lld, \"maximize\": \"%s\", \"maximized_value\": %lld, \"next_value\": %lld, "
                  "\"exact\": %s, \"plans\": %d, \"command\": \"%s\"}\n",
                  j.c_str(), (long long)m.budget, m.what.c_str(), (long long)m.value, (long long)m.next,
                  m.exact ? "true" : "false", m.plans, cmd.c_str());
    } else {
      std::printf("%s\n%s  %s\n", maximize_line(m).c_str(), plan_text(m.result).c_str(),
                  command_line(m.result.config).c_str());
    }
    return 0;
  }
  if (!p.budget.empty()) {
    const int64_t budget = parse_bytes(p.budget, "--budget");
    FitResult f = fit_budget(cfg, budget, o);
    const FitCandidate& k = f.candidates[size_t(f.chosen)];
    // The cheapest uses fewer GPUs than --devices: also the fastest way to use them all (on N
    // devices, device-seconds order candidates as their step times do).
    std::string all_devices;
    if (k.config.devices < cfg.devices) {
      PlanOptions all = o;
      all.fewer_devices = false;
      try {
        const FitResult fa = fit_budget(cfg, budget, all);
        const FitCandidate& ka = fa.candidates[size_t(fa.chosen)];
        char line[200];
        std::snprintf(line, sizeof line, "on all %lld GPUs: needs %s per GPU, predicted step time %.3f of the given config's\n  ",
                      (long long)cfg.devices, format_bytes(ka.total_needed).c_str(), ka.time);
        all_devices = line + command_line(ka.config);
      } catch (const Error& e) {
        all_devices = std::string("on all ") + std::to_string(cfg.devices) + " GPUs: " + e.what();
      }
    }
    if (p.json) {
      o.rank = k.worst_rank;
      PlanResult r = plan_run(k.config, o);
      add_cost_prediction(r);
      std::string j = plan_json(r);
      j.pop_back();
      std::string cmd;
      for (char c : command_line(k.config)) {
        if (c == '"' || c == '\\') cmd += '\\';
        cmd += c;
      }
      std::printf("%s, \"budget_bytes\": %lld, \"relative_time\": %.4f, \"relative_cost\": %.4f, \"command\": \"%s\", %s}\n",
                  j.c_str(), (long long)f.budget, k.time, k.cost, cmd.c_str(), fit_json(f).c_str());
    } else {
      std::printf("fitting %s\n%s\nchosen: needs %s of %s%s, predicted step time %.3f of the given config's\n  %s\n",
                  format_bytes(f.budget).c_str(), fit_table(f).c_str(), format_bytes(k.total_needed).c_str(),
                  format_bytes(f.budget).c_str(), k.config.devices > 1 ? " per GPU" : "", k.time,
                  command_line(k.config).c_str());
      if (!all_devices.empty()) std::printf("%s\n", all_devices.c_str());
    }
    return 0;
  }
  if (p.rank < 0 || p.rank >= std::max<int64_t>(1, cfg.devices))
    throw UsageError("--rank " + std::to_string(p.rank), "the plan has " + std::to_string(std::max<int64_t>(1, cfg.devices)) + " ranks",
                     "pass a rank from 0 to --devices - 1");
  if (cfg.devices > 1 && !p.json) {
    // Every rank's own replay (shards differ by up to one parameter), then rank 0's full report.
    std::printf("%lld ranks, --strategy %s: each rank trains on %lld of the %lld samples of every batch\n",
                (long long)cfg.devices, name_of(cfg.strategy).c_str(), (long long)(cfg.batch / cfg.devices), (long long)cfg.batch);
    int64_t outside = 0;
    for (int rank = 0; rank < int(cfg.devices); ++rank) {
      PlanOptions ro = o;
      ro.rank = rank;
      PlanResult rr = plan_run(cfg, ro);
      outside = rr.nccl_bytes;
      std::printf("  rank %d: peak allocated %s, reserved %s\n", rank, format_bytes(rr.peak_allocated).c_str(),
                  format_bytes(rr.peak_reserved).c_str());
    }
    if (o.device_type == "cuda")
      std::printf("  + per rank outside the allocator: the CUDA context and NCCL's buffers (%s, an estimate; --nccl-bytes)\n",
                  format_bytes(outside).c_str());
    std::printf("rank %d:\n", p.rank);
  }
  o.write_memory_files = true;  // --memory-snapshot / --memory-report from the predicted trace
  PlanResult r = plan_run(cfg, o);
  add_cost_prediction(r);
  std::fputs((p.json ? plan_json(r) + "\n" : plan_text(r)).c_str(), stdout);
  return 0;
}

int run_train_fit(RunConfig cfg, const std::string& fit, RunResult* result) {
  std::string device = cfg.device;
  PlanOptions o;
  o.device_type = resolve_device(device).is_cuda() ? "cuda" : "cpu";
  o.fewer_devices = false;  // the job's ranks are started: their number is fixed
  FitResult f = fit_budget(cfg, parse_bytes(fit, "--fit"), o);
  const FitCandidate& k = f.candidates[size_t(f.chosen)];
  if (dist::launch_info().rank == 0) {  // every rank searches alike; rank 0 tells
    std::printf("%schosen for %s: %s\n\n", fit_table(f).c_str(), fit.c_str(), command_line(k.config).c_str());
    std::fflush(stdout);
  }
  return run_train(k.config, result);
}

}  // namespace lt::cli
