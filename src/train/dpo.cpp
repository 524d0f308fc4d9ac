// --objective dpo (train/dpo.h): the loss, the reference, the metrics and the held-out evaluation.
#include "train/dpo.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/nn_lora.h"
#include "leantrain/precision.h"
#include "leantrain/safetensors.h"
#include "memory/caching_policy.h"
#include "train/task.h"
#include "train/trainer_state.h"

namespace lt {

PreferenceLossOptions preference_loss_options(const RunConfig& c) {
  return {c.dpo_loss, c.beta, c.label_smoothing, c.simpo_gamma};
}

namespace {

// x * s and x + s with s in x's dtype: the scalar ops' alpha is an f32, which would round beta and
// gamma in an f64 computation (the unit tests check these losses to f64 rounding).
Tensor times(const Tensor& x, double s) { return mul(x, full({1}, s, x.dtype(), x.device())); }
Tensor plus(const Tensor& x, double s) { return add(x, full({1}, s, x.dtype(), x.device())); }

}  // namespace

Tensor preference_losses(const Tensor& policy, const Tensor& reference, const PreferenceLossOptions& o) {
  LT_CHECK(policy.dim() == 2 && policy.size(1) == 2, "preference loss: log-probabilities " + shape_str(policy.shape()),
           "they are [pairs, 2]: chosen, then rejected", "pass one row per pair");
  const bool simpo = o.kind == DpoLoss::Simpo;
  LT_CHECK(simpo || (reference.defined() && reference.shape() == policy.shape()),
           "preference loss without a reference", "DPO and IPO compare the policy with the reference",
           "pass the reference's log-probabilities");
  Tensor h = sub(select(policy, 1, 0), select(policy, 1, 1));  // pi_logratios
  if (!simpo) h = sub(h, sub(select(reference, 1, 0), select(reference, 1, 1)));
  if (o.kind == DpoLoss::Ipo) {
    Tensor d = plus(h, -1.0 / (2.0 * o.beta));
    return mul(d, d);
  }
  Tensor z = times(h, o.beta);
  if (simpo) z = plus(z, -o.simpo_gamma);
  Tensor losses = times(log_sigmoid(z), -(1.0 - o.label_smoothing));
  if (o.label_smoothing != 0) losses = sub(losses, times(log_sigmoid(neg(z)), o.label_smoothing));
  return losses;
}

Tensor sequence_logps(models::Model& m, const Tensor& inputs, const Tensor& targets) {
  LT_CHECK(inputs.dim() == 2 && targets.shape() == inputs.shape(), "sequence_logps: inputs " + shape_str(inputs.shape()),
           "inputs and targets are [rows, T]", "pass one row per sequence");
  return neg(sum(m.token_losses(inputs, targets), {1}));
}

PreferenceMetrics preference_metrics(const std::vector<double>& policy, const std::vector<double>& reference,
                                     const PreferenceLossOptions& o) {
  PreferenceMetrics m;
  const size_t pairs = policy.size() / 2;
  if (pairs == 0) return m;
  for (size_t i = 0; i < pairs; ++i) {
    const double rc = reference.empty() ? 0 : reference[2 * i], rr = reference.empty() ? 0 : reference[2 * i + 1];
    const double c = o.beta * (policy[2 * i] - rc), r = o.beta * (policy[2 * i + 1] - rr);
    m.chosen += c, m.rejected += r, m.accuracy += c > r ? 1 : 0, m.margin += c - r;
  }
  const double n = double(pairs);
  m.chosen /= n, m.rejected /= n, m.accuracy /= n, m.margin /= n;
  return m;
}

std::vector<Metric> metric_list(const PreferenceMetrics& m) {
  return {{"rewards/chosen", m.chosen}, {"rewards/rejected", m.rejected}, {"rewards/accuracies", m.accuracy},
          {"rewards/margins", m.margin}};
}

PreferenceObjective::PreferenceObjective(const RunConfig& c, std::shared_ptr<PairDataset> train,
                                         std::shared_ptr<PairDataset> validation)
    : opt_(preference_loss_options(c)), train_(std::move(train)), val_(std::move(validation)) {
  reference_ = opt_.kind == DpoLoss::Simpo ? Reference::None
               : c.lora_rank > 0           ? Reference::AdaptersOff
                                           : Reference::Precomputed;
}

namespace {

// Rows [B, 2, T] as [2B, T]: each pair's chosen row, then its rejected one.
Tensor rows_of(const Tensor& t) {
  LT_CHECK(t.dim() == 3 && t.size(1) == 2, "preference batch " + shape_str(t.shape()),
           "a batch of pairs is [pairs, 2, T]", "train --objective dpo on preference pairs");
  return reshape(t, {2 * t.size(0), t.size(2)});
}

// The model's log-probabilities [B, 2] of a batch of pairs.
Tensor pair_logps(models::Model& m, const Batch& b) {
  return reshape(sequence_logps(m, rows_of(b.inputs), rows_of(b.targets)), {b.inputs.size(0), 2});
}

// Eval mode (no dropout) for as long as it lives; the mode before is back after.
class EvalMode {
 public:
  explicit EvalMode(nn::Module& m) : m_(m), was_(m.is_training()) { m_.eval(); }
  ~EvalMode() { m_.train(was_); }

 private:
  nn::Module& m_;
  bool was_;
};

// A split's pairs padded to whole batches by repeating its last pair: every batch of the
// reference pass has one shape, so the plan's allocations are the run's.
class PaddedPairs : public Dataset {
 public:
  PaddedPairs(std::shared_ptr<const PairDataset> d, int64_t batch)
      : d_(std::move(d)), n_(d_->size()), padded_((n_ + batch - 1) / batch * batch) {}
  int64_t size() const override { return padded_; }
  Shape input_shape() const override { return d_->input_shape(); }
  DType input_dtype() const override { return d_->input_dtype(); }
  Shape target_shape() const override { return d_->target_shape(); }
  void get(int64_t i, void* input, int64_t* target) const override { d_->get(std::min(i, n_ - 1), input, target); }

 private:
  std::shared_ptr<const PairDataset> d_;
  int64_t n_, padded_;
};

}  // namespace

Tensor PreferenceObjective::per_token(const Tensor& logps, const Batch& b) const {
  if (opt_.kind == DpoLoss::Sigmoid) return logps;
  // IPO and SimPO: the mean over each completion's tokens (aux columns 2 and 3 count them).
  LT_CHECK(b.aux.defined(), "preference batch without counts", "IPO and SimPO average over the completion's tokens",
           "load the pairs through PairDataset");
  return div(logps, cast(slice(b.aux, 1, 2, 4), logps.dtype()));
}

Tensor PreferenceObjective::reference_logps(models::Model& m, const Batch& b) {
  switch (reference_) {
    case Reference::None:
      return Tensor();
    case Reference::Precomputed:
      LT_CHECK(b.aux.defined(), "preference batch without reference log-probabilities",
               "a full fine-tune's reference is computed in a first pass and rides with the batch",
               "load the pairs through PairDataset");
      return slice(b.aux, 1, 0, 2);
    case Reference::AdaptersOff: {
      // The base model: the same weights with the adapters off, in inference mode (nothing kept
      // for backward) and eval mode (a reference has no dropout), before the policy's forward.
      InferenceModeGuard inference;
      nn::AdaptersOffScope off;
      EvalMode eval(m);
      return pair_logps(m, b);
    }
  }
  return Tensor();
}

Tensor PreferenceObjective::loss(models::Model& m, const Batch& b) {
  Tensor ref = reference_logps(m, b);
  Tensor pol = pair_logps(m, b);
  pol = per_token(pol, b);
  if (ref.defined()) ref = per_token(cast(ref, pol.dtype()), b);
  kept_policy_.push_back(pol.detach());
  kept_reference_.push_back(ref);
  return mean_all(preference_losses(pol, ref, opt_));
}

PreferenceMetrics PreferenceObjective::take_metrics() {
  std::vector<double> pol, ref;
  bool meta = false;
  for (size_t i = 0; i < kept_policy_.size(); ++i) {
    if (kept_policy_[i].device().is_meta()) {
      meta = true;
      continue;
    }
    std::vector<double> p = kept_policy_[i].to_double_vector();
    pol.insert(pol.end(), p.begin(), p.end());
    if (kept_reference_[i].defined()) {
      std::vector<double> r = kept_reference_[i].to_double_vector();
      ref.insert(ref.end(), r.begin(), r.end());
    }
  }
  kept_policy_.clear();
  kept_reference_.clear();
  if (meta) return {};
  return preference_metrics(pol, ref, opt_);
}

void PreferenceObjective::compute_reference(models::Model& m, Device device, int64_t micro_batch, int workers,
                                            Precision precision) {
  if (!needs_reference_pass()) return;
  InferenceModeGuard inference;
  EvalMode eval(m);
  AutocastGuard autocast(precision_policy(precision).compute_dtype);
  CachingAllocator* caching = device.is_meta() ? as_caching(allocator_for(device)) : nullptr;
  for (const std::shared_ptr<PairDataset>& split : {train_, val_}) {
    if (!split || split->size() == 0) continue;
    const int64_t n = split->size();
    LoaderOptions lo;
    lo.batch_size = micro_batch;
    lo.shuffle = false;
    lo.drop_last = true;
    lo.device = device;
    lo.workers = workers;
    DataLoader loader(std::make_shared<PaddedPairs>(split, micro_batch), lo);
    const int64_t batches = loader.batches_per_epoch();
    std::vector<float> logps(size_t(2 * n));
    std::vector<uint64_t> layouts;  // meta: the allocator's layout after each batch
    for (int64_t j = 0, stop = batches; j < stop; ++j) {
      Batch b;
      {
        MemoryCategoryScope in(Category::Input);
        b = loader.next();
      }
      MemoryCategoryScope act(Category::Activation);
      Tensor lp = pair_logps(m, b);
      if (!device.is_meta()) {
        const std::vector<double> v = lp.to_double_vector();
        for (int64_t r = 0; r < micro_batch && j * micro_batch + r < n; ++r) {
          logps[size_t(2 * (j * micro_batch + r))] = float(v[size_t(2 * r)]);
          logps[size_t(2 * (j * micro_batch + r) + 1)] = float(v[size_t(2 * r + 1)]);
        }
      }
      lp = Tensor();
      b = Batch();
      // A plan: once the layout after a batch repeats the one after batch k, the batches repeat a
      // cycle of j - k; the pass ends where the run's would, (batches - 1 - j) mod cycle batches on.
      if (caching && stop == batches) {
        const uint64_t f = caching->layout_fingerprint();
        auto it = std::find(layouts.begin(), layouts.end(), f);
        if (it != layouts.end()) {
          const int64_t cycle = j - int64_t(it - layouts.begin());
          stop = j + 1 + (batches - 1 - j) % cycle;
        }
        layouts.push_back(f);
      }
    }
    split->set_reference(std::move(logps));
  }
  have_reference_ = true;
}

EvalInfo PreferenceObjective::evaluate(Task& t, int64_t batch_size, int64_t max_batches,
                                       const std::function<bool(Batch&)>& prepare,
                                       const std::function<void(EvalSums&)>& combine) {
  EvalSums sums;
  if (val_ && val_->size() > 0) {
    LoaderOptions lo;
    lo.batch_size = batch_size;
    lo.shuffle = false;
    lo.device = t.device;
    lo.workers = t.loader_workers;
    DataLoader loader(val_, lo);
    int64_t n = loader.batches_per_epoch();
    if (max_batches > 0) n = std::min(n, max_batches);
    for (int64_t i = 0; i < n; ++i) {
      Batch b = loader.next();
      const bool counts = !prepare || prepare(b);
      Tensor ref = reference_logps(*t.model, b);
      Tensor pol = per_token(pair_logps(*t.model, b), b);
      if (ref.defined()) ref = per_token(cast(ref, pol.dtype()), b);
      Tensor losses = preference_losses(pol, ref, opt_);
      if (t.device.is_meta() || !counts) continue;  // a plan has no values; another rank counts this batch
      const std::vector<double> l = losses.to_double_vector(), p = pol.to_double_vector();
      const std::vector<double> r = ref.defined() ? ref.to_double_vector() : std::vector<double>();
      const PreferenceMetrics m = preference_metrics(p, r, opt_);
      const double pairs = double(l.size());
      for (double v : l) sums.loss += v;
      sums.count += pairs;
      sums.correct += m.accuracy * pairs, sums.chosen += m.chosen * pairs, sums.rejected += m.rejected * pairs;
    }
  }
  if (combine) combine(sums);
  EvalInfo e;
  const double n = std::max(sums.count, 1.0);
  e.loss = sums.loss / n;
  PreferenceMetrics m;
  m.chosen = sums.chosen / n, m.rejected = sums.rejected / n, m.accuracy = sums.correct / n;
  m.margin = m.chosen - m.rejected;
  e.metrics = metric_list(m);
  return e;
}

void PreferenceObjective::save(const std::string& dir) const {
  if (reference_ != Reference::Precomputed || !have_reference_) return;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto [name, split] : {std::pair{"train", train_.get()}, std::pair{"validation", val_.get()}})
    if (split && split->size() > 0) tensors.push_back({name, from_vector(split->reference(), {split->size(), 2})});
  io::save_safetensors(dir + "/" + kReferenceFile, tensors, {{"format", "leantrain-dpo-reference"}});
}

void PreferenceObjective::load(const std::string& dir) {
  if (reference_ != Reference::Precomputed) return;
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(dir) / kReferenceFile, ec))
    fail("cannot resume from " + dir + ": it has no " + kReferenceFile,
         "a full fine-tune with --objective dpo keeps the starting weights' log-probabilities there, and the weights "
         "in the checkpoint have moved since",
         "resume from a checkpoint this DPO run saved, or start it again from the base model");
  std::map<std::string, Tensor> t;
  try {
    t = io::load_safetensors(dir + "/" + kReferenceFile, Device::cpu());
  } catch (const Error& e) {
    checkpoint_corrupt(dir, kReferenceFile, e.why());
  }
  for (auto [name, split] : {std::pair{"train", train_.get()}, std::pair{"validation", val_.get()}}) {
    if (!split || split->size() == 0) continue;
    auto it = t.find(name);
    if (it == t.end() || it->second.shape() != Shape{split->size(), 2} || it->second.dtype() != DType::F32)
      fail("cannot resume from " + dir + ": its " + kReferenceFile + " does not fit the data",
           std::string("the data have ") + std::to_string(split->size()) + " " + name + " pairs" +
               (it == t.end() ? ", the file none" : ", the file holds " + shape_str(it->second.shape()) + " values"),
           "resume with the --data, --seq-len and tokenizer the run used");
    std::vector<float> v = it->second.to_float_vector();
    for (float x : v)
      if (!std::isfinite(x)) checkpoint_corrupt(dir, kReferenceFile, "it holds a value that is not finite");
    split->set_reference(std::move(v));
  }
  have_reference_ = true;
}

}  // namespace lt
