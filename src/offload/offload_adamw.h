// AdamW with its state in pinned host memory and its step on the CPU: the optimizer of
// `--offload optimizer` (docs/decisions.md, "--offload optimizer"; issue #14).
//
// Per parameter (keyed by name, as every Optimizer): an f32 master copy and the f32 moments in
// one pinned-host buffer of the parameter's device (Category::OptimizerState in the pinned-host
// account), state names "exp_avg", "exp_avg_sq", "master_f32". The device keeps only the
// parameter (bf16, f16 or f32) and its gradient. An update goes bucket by bucket (parameters in
// the order given, up to bucket_bytes of gradient): the gradients are copied into a pinned
// gradient buffer (Category::Gradient), host_adamw_step updates master and moments on `threads`
// CPU threads and writes the 16-bit copy into a pinned staging buffer (Category::Workspace),
// which is copied into the parameters. The result is bitwise that of AdamW with f32 master
// weights (set_master_weights) for 16-bit parameters, and of plain AdamW for f32 ones.
//
// On meta (plan's dry run) the same pinned buffers are taken in the same order and no data moves,
// so the planner's pinned-host peak is the run's.
// Not yet: the copies are synchronous (the overlap with backward and the double-buffered copy
// stream of the design are to come), stochastic rounding and f64 parameters are refused.
#pragma once
#include <memory>

#include "leantrain/memory.h"
#include "leantrain/optim.h"
#include "offload/host_adamw.h"

namespace lt::offload {

struct OffloadAdamWOptions {
  AdamWOptions adamw;                 // state_dtype must stay unset: the host state is f32
  int threads = 0;                    // 0: every hardware thread
  SimdPath path = best_simd_path();
  int64_t bucket_bytes = 32 << 20;    // of gradient per bucket (a larger parameter is its own bucket)
};

class OffloadAdamW final : public Optimizer {
 public:
  OffloadAdamW(std::vector<ParamGroup> groups, const OffloadAdamWOptions& o);
  const char* name() const override { return "adamw"; }
  int threads() const { return threads_; }

 protected:
  std::vector<std::string> state_names() const override;
  std::vector<Tensor> make_state(const Tensor& param, Device device) const override;
  void update(const std::vector<Slot*>& slots, float grad_scale) override;

 private:
  void update_bucket(const std::vector<Slot*>& bucket, float grad_scale);
  std::shared_ptr<Storage> grown(std::shared_ptr<Storage>& buf, int64_t bytes, Device d, Category c);

  OffloadAdamWOptions opt_;
  int threads_;
  std::shared_ptr<Storage> grad_bucket_, staging_;  // pinned, grown to the largest bucket
};

}  // namespace lt::offload
