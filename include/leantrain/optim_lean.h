// Lean optimizers: Lion (one moment) and the 8-bit block-wise AdamW and Lion of bitsandbytes.
// docs/optimizers.md compares their state bytes per parameter.
#pragma once
#include "leantrain/optim.h"

namespace lt {

// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
//   p *= 1 - lr*wd;  p -= lr * sign(b1*m + (1-b1)*g);  m = b2*m + (1-b2)*g.   State: "exp_avg".
// Every coordinate moves by exactly lr, so it wants a 3-10x smaller lr than AdamW (and a larger wd).
struct LionOptions {
  double lr = 1e-4;
  double beta1 = 0.9, beta2 = 0.99, weight_decay = 0;
  std::optional<DType> state_dtype;  // unset: the parameter's dtype (bf16 halves the state)
};

class Lion : public Optimizer {
 public:
  Lion(std::vector<ParamGroup> groups, const LionOptions& o);
  Lion(std::vector<NamedTensor> params, const LionOptions& o) : Lion(std::vector<ParamGroup>{{std::move(params), {}}}, o) {}
  const char* name() const override { return "lion"; }
  const LionOptions& options() const { return opt_; }

 protected:
  std::vector<std::string> state_names() const override;
  std::vector<Tensor> make_state(const Tensor& param, Device device) const override;
  void update(const std::vector<Slot*>& slots, float grad_scale) override;

 private:
  LionOptions opt_;
};

// ---- 8-bit block-wise states (bitsandbytes' Adam8bit / Lion8bit, blockwise) ----
// Each moment of a parameter with >= min_8bit_size elements is kept as u8 codes (the parameter's
// shape) and one f32 absmax per block of 256 elements: "<moment>" and "<moment>_absmax". The
// first moment uses a signed dynamic map, AdamW's second moment an unsigned one. Each step
// dequantises, updates in f32 and requantises to the nearest code. Smaller tensors (biases, norms)
// keep their moments in f32, with an empty "<moment>_absmax" [0] that owns no memory.

inline constexpr int64_t kMin8bitSize = 4096;

struct AdamW8bitOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  int64_t min_8bit_size = kMin8bitSize;
};

// State: "exp_avg", "exp_avg_absmax", "exp_avg_sq", "exp_avg_sq_absmax".
class AdamW8bit : public Optimizer {
 public:
  AdamW8bit(std::vector<ParamGroup> groups, const AdamW8bitOptions& o);
  AdamW8bit(std::vector<NamedTensor> params, const AdamW8bitOptions& o)
      : AdamW8bit(std::vector<ParamGroup>{{std::move(params), {}}}, o) {}
  const char* name() const override { return "adamw8bit"; }
  const AdamW8bitOptions& options() const { return opt_; }

 protected:
  std::vector<std::string> state_names() const override;
  std::vector<Tensor> make_state(const Tensor& param, Device device) const override;
  void update(const std::vector<Slot*>& slots, float grad_scale) override;

 private:
  AdamW8bitOptions opt_;
};

struct Lion8bitOptions {
  double lr = 1e-4;
  double beta1 = 0.9, beta2 = 0.99, weight_decay = 0;
  int64_t min_8bit_size = kMin8bitSize;
};

// State: "exp_avg", "exp_avg_absmax".
class Lion8bit : public Optimizer {
 public:
  Lion8bit(std::vector<ParamGroup> groups, const Lion8bitOptions& o);
  Lion8bit(std::vector<NamedTensor> params, const Lion8bitOptions& o)
      : Lion8bit(std::vector<ParamGroup>{{std::move(params), {}}}, o) {}
  const char* name() const override { return "lion8bit"; }
  const Lion8bitOptions& options() const { return opt_; }

 protected:
  std::vector<std::string> state_names() const override;
  std::vector<Tensor> make_state(const Tensor& param, Device device) const override;
  void update(const std::vector<Slot*>& slots, float grad_scale) override;

 private:
  Lion8bitOptions opt_;
};

}  // namespace lt
