// Optimizers, gradient clipping and learning-rate schedules.
//
// An optimizer owns a list of named parameters (split into groups that may override the weight
// decay) and, per parameter NAME, its state tensors and step count: the name, not the tensor, is
// the key, so a parameter that is swapped, re-materialized or resharded keeps its state (rebind).
// State is allocated lazily at the first update inside MemoryCategoryScope(Category::OptimizerState),
// on the state device: the parameter's own by default, or one set with set_state_device (offload
// puts it on the host). A parameter whose state lives on another device is updated there, on a
// copy of the parameter and of its gradient (Workspace), and copied back.
// step() makes one backend call per group (a fused multi-tensor kernel on the GPU); parameters
// without a grad are skipped, as in PyTorch. step_param() updates one parameter, for the
// optimizer step inside backward (called from a post-accumulate-grad hook).
//
// Master weights (the -true precision policies): with set_master_weights(true), each f16/bf16
// parameter gets an f32 copy ("<param>.master", Category::OptimizerState), created from the
// parameter at its first update. Each update casts that parameter's gradient to f32 (a Workspace
// temporary the size of one parameter), updates the copy with f32 state, and writes it back
// rounded to nearest into the parameter. Every optimizer gets this from the base class.
//
// Stochastic rounding (set_stochastic_rounding; for 16-bit parameters WITHOUT master weights):
// the update is computed in f32 as always, then stored into the bf16/f16 parameter rounded up or
// down at random, with probability proportional to closeness, so the expected stored value is the
// f32 one and updates under half an ulp still move the weights on average. The random bits come
// from random.h's counter RNG keyed on (seed, step, parameter index, element index): CPU and CUDA
// store the same bits, and a resumed run (per-parameter steps are in the state dict) draws what
// the uninterrupted run would have. No memory: the bits are generated inside the update kernels.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "leantrain/choices.h"
#include "leantrain/tensor.h"

namespace lt {

using NamedTensor = std::pair<std::string, Tensor>;

struct ParamGroup {
  std::vector<NamedTensor> params;
  std::optional<double> weight_decay;  // unset: the optimizer's
};

// A checkpointable optimizer state: "<param name>.<state name>" -> tensor (e.g. "h.0.attn.c_attn.weight.exp_avg"),
// "<param name>.step" -> i64 [1] on the CPU, and the step count (the largest per-parameter step).
struct OptimizerStateDict {
  std::map<std::string, Tensor> tensors;
  int64_t step = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual const char* name() const = 0;  // "sgd", "adamw", ...

  // Updates every parameter that has a grad. Gradients are multiplied by grad_scale first
  // (clip coefficient, 1/loss scale) inside the update: no extra pass over them.
  void step(float grad_scale = 1.0f);
  // A skipped step (a loss-scale overflow): allocates exactly what step() would, in the same order
  // (missing state and master copies are created, zeroed and copied for real), but updates nothing
  // and counts no step (Note [Dry compute], src/backend/dry_compute.h). So the memory layout after
  // a skipped step is that of an applied one, which the plan assumes. An update that computes
  // outside the backends (the host step of --offload optimizer) checks DryCompute::active().
  void dry_step(float grad_scale = 1.0f);
  // The trainer's unclipped step: updates as step() does and adds every gradient's sum of squares
  // into `sumsq` (f32 [1] on the parameters' device) from the update's own read of the gradients,
  // leaving the elements whose gradient is not finite as they were. Only where measures_norm().
  void step_measuring(const Tensor& sumsq);
  // Whether step_measuring can run: the update kernel sums the squares (AdamW) and every parameter
  // is updated in place on the one device they share (no master copies, no state elsewhere).
  bool measures_norm() const;
  // Updates the parameter of that name (must have a grad), e.g. from a post-accumulate-grad hook.
  void step_param(const std::string& name, float grad_scale = 1.0f);
  // The same, finding the name of `param` (a linear search: prefer the name).
  void step_param(const Tensor& param, float grad_scale = 1.0f);
  // Creates the parameter's state (and master copy) if missing, on the current stream, and says
  // whether its update then runs in place, allocating nothing: false when it goes through a
  // master copy or state on another device (temporaries). A fused step moves only in-place
  // updates to another stream.
  bool prepare_param(const std::string& name);
  void zero_grad(bool set_to_none = true);

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t step_count() const;  // largest per-parameter step
  std::vector<Tensor> params() const;
  std::vector<NamedTensor> named_params() const;
  // Points `name` at another tensor of the same shape, dtype and device (a parameter that was
  // swapped or re-materialized), keeping its state and step. Throws lt::Error otherwise.
  void rebind(const std::string& name, const Tensor& param);
  // Where state (and master copies) are allocated: unset = each parameter's device. Before the
  // first update only.
  void set_state_device(std::optional<Device> d);
  std::optional<Device> state_device() const { return state_device_; }
  // Bytes of state allocated so far (0 before the first step), master copies included.
  int64_t state_bytes() const;
  // Turns master weights on or off; before the first update only. f32/f64 parameters never get one.
  void set_master_weights(bool on);
  bool master_weights() const { return master_; }
  // The f32 master copy of the parameter of that name (undefined when it has none yet).
  Tensor master_of(const std::string& name) const;
  Tensor master_of(const Tensor& param) const;  // by the name of `param`
  // Rounds bf16/f16 parameter updates stochastically (see above), with random bits keyed on
  // `seed`. Any time; throws lt::Error together with master weights (whose updates are f32).
  void set_stochastic_rounding(bool on, uint64_t seed = 0);
  bool stochastic_rounding() const { return sr_; }
  // Kept casts (LEANTRAIN_KEEP_CASTS; detail::keep_cast in leantrain/autocast.h): from now on every
  // update also writes a `dtype` (bf16/f16) copy of each f32 parameter that autocast() had to cast,
  // kept between steps and handed out by autocast() instead of a cast: no weight cast in the next
  // forward, +2 bytes a cast parameter (category parameter). AdamW writes it in its update kernel;
  // the others copy after the update. nullopt stops and frees the copies.
  void set_kept_casts(std::optional<DType> dtype);

  // Virtual for optimizers whose state lives elsewhere between steps (--offload-dir's file).
  virtual OptimizerStateDict state_dict() const;
  // Copies the saved state into this optimizer's (allocating it where needed). Throws lt::Error
  // on a key that matches no parameter, a missing state tensor, or a shape mismatch.
  virtual void load_state_dict(const OptimizerStateDict& sd);

 protected:
  // One parameter and what the optimizer keeps for it.
  struct Slot {
    std::string name;
    Tensor param;
    std::vector<Tensor> state;  // empty until the first update (or load)
    int64_t step = 0;           // updates applied so far
    double weight_decay = 0;
    Tensor master;              // f32 copy of a 16-bit parameter (master weights), else undefined
    int64_t index = 0;          // position among all parameters (construction order): keys the rounding bits
    Tensor kept;                // the kept cast written after each update (set_kept_casts), else undefined
  };

  Optimizer(std::vector<ParamGroup> groups, double lr, double default_weight_decay, const char* kind);
  // Names of the state tensors, in the order state_for() allocates them.
  virtual std::vector<std::string> state_names() const = 0;
  // Allocates zeroed state for `param` on `device` (called under the OptimizerState scope).
  virtual std::vector<Tensor> make_state(const Tensor& param, Device device) const = 0;
  // One backend call updating `slots` (same device, same step, same weight decay, all with grads).
  virtual void update(const std::vector<Slot*>& slots, float grad_scale) = 0;
  // Whether `grad` may stand for the gradient of `param` on another device: an optimizer that
  // reads both through host memory says yes (--offload params: a block weight resting in pinned
  // host memory is a CPU tensor, its drained gradient a device-typed view of pinned memory).
  virtual bool accepts_grad_device(const Tensor& param, const Tensor& grad) const { return false; }
  // Whether update() writes each slot's kept cast itself (with the new values); else the base
  // copies it after the update.
  virtual bool writes_kept_casts() const { return false; }
  // Whether update() honours measuring() (AdamWArgs::sumsq).
  virtual bool update_measures_norm() const { return false; }
  // step_measuring's accumulator while it runs, else undefined.
  const Tensor& measuring() const { return measuring_; }
  // The stochastic-rounding stream of `s` for its coming update (step s.step + 1), for
  // StochasticRounding::streams; only meaningful while stochastic_rounding() is on.
  uint64_t sr_stream_of(const Slot& s) const;
  // The streams of `slots` in order, or none when stochastic rounding is off.
  std::vector<uint64_t> sr_streams(const std::vector<Slot*>& slots) const;

 private:
  void update_batch(std::vector<Slot*>& slots, float grad_scale);
  void update_elsewhere(Slot& s, float grad_scale);
  bool wants_master(const Slot& s) const;
  Device state_device_of(const Slot& s) const { return state_device_.value_or(s.param.device()); }
  bool updates_elsewhere(const Slot& s) const { return s.master.defined() || !(state_device_of(s) == s.param.device()); }
  void ensure_master(Slot& s);
  void ensure_state(Slot& s);
  void ensure_kept(Slot& s);
  void drop_kept();
  Slot& slot(const std::string& name, const char* what);
  const Slot* find_slot(const Tensor& param) const;

  std::vector<std::vector<Slot>> groups_;
  std::unordered_map<std::string, std::pair<size_t, size_t>> index_;  // name -> (group, slot)
  std::optional<Device> state_device_;
  double lr_;
  bool master_ = false;
  bool sr_ = false;
  uint64_t sr_seed_ = 0;
  std::optional<DType> kept_dtype_;  // set_kept_casts
  Tensor measuring_;                 // step_measuring
};

// torch.optim.SGD: g += wd*p; buf = momentum*buf + (1-dampening)*g (buf = g at the first step);
// g = nesterov ? g + momentum*buf : buf; p -= lr*g. State: "momentum_buffer" (only when momentum != 0).
struct SgdOptions {
  double lr = 1e-2;
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  std::optional<DType> state_dtype;  // unset: the parameter's dtype
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, const SgdOptions& o);
  SGD(std::vector<NamedTensor> params, const SgdOptions& o) : SGD(std::vector<ParamGroup>{{std::move(params), {}}}, o) {}
  const char* name() const override { return "sgd"; }
  const SgdOptions& options() const { return opt_; }

 protected:
  std::vector<std::string> state_names() const override;
  std::vector<Tensor> make_state(const Tensor& param, Device device) const override;
  void update(const std::vector<Slot*>& slots, float grad_scale) override;

 private:
  SgdOptions opt_;
};

// torch.optim.AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
// p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). State: "exp_avg", "exp_avg_sq".
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  std::optional<DType> state_dtype;  // unset: the parameter's dtype
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& o);
  AdamW(std::vector<NamedTensor> params, const AdamWOptions& o)
      : AdamW(std::vector<ParamGroup>{{std::move(params), {}}}, o) {}
  const char* name() const override { return "adamw"; }
  const AdamWOptions& options() const { return opt_; }

 protected:
  std::vector<std::string> state_names() const override;
  std::vector<Tensor> make_state(const Tensor& param, Device device) const override;
  void update(const std::vector<Slot*>& slots, float grad_scale) override;
  bool writes_kept_casts() const override { return true; }
  bool update_measures_norm() const override { return true; }

 private:
  AdamWOptions opt_;
};

// Everything a run's config says about the optimizer; make_optimizer picks the class by name.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::AdamW;  // the 8-bit ones: optim_lean.h
  double lr = 1e-3;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;        // adamw, adamw8bit
  double momentum = 0, dampening = 0;                    // sgd
  bool nesterov = false;                                 // sgd
  double lion_beta1 = 0.9, lion_beta2 = 0.99;            // lion, lion8bit (the paper's defaults)
  int64_t min_8bit_size = 4096;                          // adamw8bit, lion8bit: smaller tensors keep f32 state
  std::optional<DType> state_dtype;                      // adamw, sgd, lion (8-bit ones quantise instead)
  bool master_weights = false;                           // f32 copies of f16/bf16 parameters (any optimizer)
  bool stochastic_rounding = false;                      // round 16-bit parameter updates stochastically
  uint64_t seed = 0;                                     // keys the stochastic rounding bits
  std::optional<Device> state_device;                    // unset: each parameter's device
};
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, std::vector<ParamGroup> groups);

// Splits parameters the usual way for transformers: weights with >= 2 dims decay, biases and
// norm weights (< 2 dims) do not (weight_decay 0).
std::vector<ParamGroup> decay_groups(const std::vector<NamedTensor>& params);

// ---- gradient clipping ----

struct GradNorm {
  double norm = 0;         // global L2 norm of the gradients (times pre_scale); NaN/inf if any is
  float clip_coef = 1;     // min(1, max_norm / (norm + 1e-6))
  float grad_scale = 1;    // pre_scale * clip_coef: pass this to Optimizer::step
  bool finite() const;
};
// Global norm over every parameter's grad (those without one are skipped), computed by the
// backend's sum_squares per device. Gradients are not modified: the optimizer applies
// grad_scale inside its step. pre_scale is a factor the grads still carry (1/loss scale).
// max_norm <= 0 only measures. On the meta device the norm is 0 (no data) and grad_scale pre_scale.
GradNorm clip_grad_norm(const std::vector<Tensor>& params, double max_norm, float pre_scale = 1.0f);
// The same from a sum of squared gradient entries already taken (the fused step's norm pass).
GradNorm grad_norm_from_sum_squares(double sum_squares, double max_norm, float pre_scale = 1.0f);

// ---- learning-rate schedules (Hugging Face get_*_schedule_with_warmup semantics) ----

enum class LrScheduleKind { Constant, WarmupConstant, WarmupLinear, WarmupCosine };
LrScheduleKind parse_lr_schedule(const std::string& s);  // "constant", "warmup-constant", "linear", "cosine"
const char* lr_schedule_name(LrScheduleKind k);

// lr(step) for the 0-based index of the optimizer step about to run: linear warmup from 0 over
// `warmup_steps` (lr(0) = 0 when warmup_steps > 0, as in HF), then constant, linear or cosine decay
// from lr to min_lr, reached at total_steps and held after it.
struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  double lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // needed by linear and cosine
  double min_lr = 0;
  double at(int64_t step) const;
};

}  // namespace lt
