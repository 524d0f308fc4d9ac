// A task pairs a model with its data: the training loader (micro-batches in a resumable order),
// the held-out split, and what evaluation reports. The trainer sees only this, so a new model
// family (LLaMA) is an entry of the model registry (models/registry.h) and a new data set a new
// branch of make_task, not a new loop.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "leantrain/data.h"
#include "leantrain/models.h"
#include "leantrain/train.h"
#include "train/run_tokenizer.h"

namespace lt {

class PreferenceObjective;  // train/dpo.h

struct Task {
  std::shared_ptr<models::Model> model;   // parameters on the run's device
  std::unique_ptr<DataLoader> train;      // batches of the micro-batch size, shuffled, drop_last
  std::shared_ptr<const Dataset> held_out;  // Fashion-MNIST test split, or validation text
  bool classifier = false;                // accuracy is reported
  const char* unit = "img/s";             // "img/s" or "tok/s"
  std::string tokenizer;                  // its kind ("bytes", "bpe-bytelevel", ...); "" for images
  RunTokenizer text_tokenizer;            // text models: the tokenizer and its files (saved with checkpoints)
  bool masked_targets = false;            // some targets are kIgnoreTarget (prompt tokens)
  // --objective dpo: the loss over preference pairs, its reference and metrics; null for sft.
  std::shared_ptr<PreferenceObjective> objective;
  std::string description;                // one line for the log
  std::string weights_note;               // "; weights loaded from DIR (...)" with --model DIR
  std::string lora_note;                  // the LoRA adapters installed (--lora-rank), for the log; "" without
  Device device;
  int loader_workers = 1;                 // threads building batches (--workers)

  // Images or tokens in a batch (for throughput): of rows with padding, the text tokens only.
  int64_t items(const Batch& b) const {
    if (classifier) return b.inputs.size(0);
    if (b.row_tokens.empty()) return b.inputs.numel();
    int64_t n = 0;
    for (int64_t r : b.row_tokens) n += r;
    return n;
  }
};

// The loss of one training micro-batch: the model's (next-token or class cross-entropy), or the
// objective's (--objective dpo). The trainer, the plan's probes and the profiler call this.
Tensor micro_batch_loss(Task& t, models::Model& m, const Batch& b);

// Builds the model (parameters under Category::Parameter, on `device`) and loads the data.
// The preset's image size, channels and classes follow the data; --dim etc. override sizes.
// With --resume, the checkpoint's config.json must describe the same model.
std::unique_ptr<Task> make_task(const RunConfig& cfg, Device device);

// Loss (and accuracy) over the held-out split in batches of batch_size, at most max_batches
// (0: all). Call under InferenceModeGuard with the model in eval mode.
// prepare: each held-out batch before the forward (data parallelism keeps the rank's rows);
// false: evaluate it but leave it out of this rank's sums. combine: the rank's sums before the
// means (data parallelism sums them over the ranks).
EvalInfo evaluate_task(Task& task, int64_t batch_size, int64_t max_batches,
                       const std::function<bool(Batch&)>& prepare = {},
                       const std::function<void(EvalSums&)>& combine = {});

}  // namespace lt
