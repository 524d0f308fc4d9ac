// --objective dpo: a preference loss over (prompt, chosen, rejected) pairs with no second model
// in memory. A micro-batch of B pairs is one [2B, T] forward of the policy (chosen and rejected
// rows of each pair side by side). The reference log-probabilities come from
//   - LoRA / QLoRA: the same model with the adapters off (nn::AdaptersOffScope), a forward under
//     inference mode before the policy's, so it keeps nothing for backward;
//   - a full fine-tune: a first pass over the data with the starting weights (compute_reference),
//     kept in host memory (two floats a pair) and saved with every checkpoint, so a resumed run
//     reads them instead of recomputing them from weights that have moved;
//   - SimPO: none.
// They ride to the device with the batch (Batch::aux), so the step reads nothing on the host.
// docs/decisions.md ("DPO without a second model") says why this shape.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "leantrain/data.h"
#include "leantrain/models.h"
#include "leantrain/train.h"

namespace lt {

class StagedDir;
struct Task;

struct PreferenceLossOptions {
  DpoLoss kind = DpoLoss::Sigmoid;
  double beta = 0.1, label_smoothing = 0, simpo_gamma = 0.5;
};
PreferenceLossOptions preference_loss_options(const RunConfig& c);

// Per-pair losses [B] of policy log-probabilities [B, 2] (column 0 chosen, 1 rejected) against
// the reference's (undefined for SimPO), as TRL defines them with h = (pc - pr) - (rc - rr):
//   sigmoid  -(1 - ls) log_sigmoid(beta h) - ls log_sigmoid(-beta h)
//   ipo      (h - 1 / (2 beta))^2
//   simpo    -(1 - ls) log_sigmoid(beta (pc - pr) - gamma) - ls log_sigmoid(gamma - beta (pc - pr))
// (IPO and SimPO take log-probabilities averaged over each completion's tokens.) Any float dtype.
Tensor preference_losses(const Tensor& policy, const Tensor& reference, const PreferenceLossOptions& o);

// The log-probability of each row's completion, summed over its target tokens: inputs and
// targets [R, T] (targets -100 outside the completion) -> [R] in the loss's dtype (f32 for a 16-bit model).
Tensor sequence_logps(models::Model& m, const Tensor& inputs, const Tensor& targets);

// TRL's metrics of a set of pairs, as means over them.
struct PreferenceMetrics {
  double chosen = 0, rejected = 0, accuracy = 0, margin = 0;
};
// From host values: policy and reference log-probabilities, two per pair (chosen, rejected).
PreferenceMetrics preference_metrics(const std::vector<double>& policy, const std::vector<double>& reference,
                                     const PreferenceLossOptions& o);

class PreferenceObjective {
 public:
  PreferenceObjective(const RunConfig& c, std::shared_ptr<PairDataset> train, std::shared_ptr<PairDataset> validation);

  // The mean loss of one micro-batch (inputs and targets [B, 2, T], aux [B, 4]). Keeps the
  // pairs' log-probabilities (detached) for take_metrics.
  Tensor loss(models::Model& m, const Batch& b);
  // The metrics of the micro-batches since the last call (their mean), and forgets them. Reads
  // the device: call after the step's backward. Zeros on meta.
  PreferenceMetrics take_metrics();

  // Where the reference comes from.
  enum class Reference { AdaptersOff, Precomputed, None };
  Reference reference() const { return reference_; }
  // Precomputed: whether the pass still has to run (not done, not loaded from a checkpoint).
  bool needs_reference_pass() const { return reference_ == Reference::Precomputed && !have_reference_; }
  // The first pass: each pair's log-probabilities under the model as it is now, in inference mode
  // and eval mode, micro_batch pairs at a time (the last batch padded to full size), for the
  // training and the validation pairs. On meta (a plan) the pass stops once the allocator's
  // layout repeats, at the point of its cycle the whole pass ends at: the same allocations as
  // the run's pass, without its length.
  void compute_reference(models::Model& m, Device device, int64_t micro_batch, int workers, Precision precision);

  // Held-out evaluation (in inference mode, the model in eval mode): the mean loss, the
  // accuracy (rewards/accuracies) and TRL's reward means, over the validation pairs.
  EvalInfo evaluate(Task& t, int64_t batch_size, int64_t max_batches, const std::function<bool(Batch&)>& prepare,
                    const std::function<void(EvalSums&)>& combine);

  // The precomputed reference in a checkpoint (kReferenceFile), and back; nothing otherwise.
  void save(const std::string& dir) const;
  void load(const std::string& dir);
  static constexpr const char* kReferenceFile = "dpo_reference.safetensors";

  const PreferenceLossOptions& options() const { return opt_; }

 private:
  // Policy and reference log-probabilities [B, 2] of a batch (averaged for IPO and SimPO).
  Tensor reference_logps(models::Model& m, const Batch& b);
  Tensor per_token(const Tensor& logps, const Batch& b) const;

  PreferenceLossOptions opt_;
  Reference reference_;
  bool have_reference_ = false;
  std::shared_ptr<PairDataset> train_, val_;
  std::vector<Tensor> kept_policy_, kept_reference_;  // per micro-batch, detached
};

// The metrics as the progress line and --metrics name them (TRL's names).
std::vector<Metric> metric_list(const PreferenceMetrics& m);

}  // namespace lt
