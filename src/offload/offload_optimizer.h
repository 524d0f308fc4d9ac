// AdamW, Lion or SGD with their state in pinned host memory and their step on the CPU: the
// optimizer of `--offload optimizer` (docs/decisions.md, "--offload optimizer"; issue #14).
//
// Per parameter (keyed by name, as every Optimizer): the optimizer's f32 state and an f32 master
// copy in one pinned-host buffer of the parameter's device (Category::OptimizerState in the
// pinned-host account). State names: adamw "exp_avg", "exp_avg_sq"; lion "exp_avg"; sgd
// "momentum_buffer" (with momentum); adamw8bit and lion8bit those of AdamW8bit and Lion8bit (u8
// codes + f32 absmax, or f32 under min_8bit_size); then "master_f32". The 8-bit steps are the CPU
// backend's reference kernels (the ones the CUDA kernels equal), one thread per bucket, on the
// gradient widened to f32 in an untracked scratch buffer: the bits of AdamW8bit / Lion8bit with
// master weights. The device keeps only the parameter
// (bf16, f16 or f32) and its gradient. An update goes bucket by bucket (parameters in order, up
// to bucket_bytes of gradient): the gradients are copied into a pinned gradient buffer
// (Category::Gradient), the host step (host_adamw.h, host_lion.h, host_sgd.h) updates state and
// master on `threads` CPU threads and writes the 16-bit copy into a pinned staging buffer
// (Category::Workspace), which is copied into the parameters. The result is bitwise that of the
// same optimizer with f32 master weights (set_master_weights) for 16-bit parameters, and of the
// plain optimizer for f32 ones.
//
// On meta (plan's dry run) the same pinned buffers are taken in the same order and no data moves,
// so the planner's pinned-host peak is the run's.
//
// Draining during backward (drain_during_backward, what the trainer uses): a post-accumulate-grad
// hook on every parameter copies its gradient, as soon as backward completes it, into a pinned
// gradient area that holds every trainable gradient (Category::Gradient, parameter order, 64-byte
// aligned), on the copy stream after an event on the compute stream; the device gradient is
// freed on the spot (record_stream: reused only after the copy) and .grad becomes a tensor of the
// parameter's device over the area (CUDA reads pinned memory in place, unified addressing), so
// clipping, the loss scaler's check and the update see the usual .grad. The compute stream waits
// for the copies only once more than bucket_bytes are in flight, and at finish_backward(). The
// update then steps bucket by bucket on the worker threads, writes the 16-bit result over the
// gradient in the area (each element's gradient is read before its result is written), and copies
// each bucket back on the copy stream while the next bucket is stepped; the compute stream waits
// for the last copy with an event (the next forward), the host does not.
// With early steps (set_early_step: no clipping, no loss scaling) the buckets are stepped during
// backward instead, as their copies land, and copied back by the stepping thread right away. A
// parameter in host memory (a cpu run, a block weight resting under --offload params) takes its
// result directly, early or late, and is not copied. The views of drained gradients are tensors
// of the device that produced them, also for a parameter resting in host memory, so the trainer's
// norm is one device kernel. Refused: stochastic rounding, master weights on top,
// f64 parameters and state dtypes other than f32.
//
// The disk tier (disk_dir set: --offload-dir): the state and master of 16-bit parameters beyond
// host_limit bytes of host state (all of them without a limit) live in a file of that directory
// (disk_state.h) instead of pinned memory, assigned in parameter order at construction (first
// fit: a parameter whose state fits what is left of the limit stays on the host). Their host
// steps go a chunk at a time through the store's windows, which read ahead and write behind;
// the bits are those of the host tier. f32 parameters stay on the host. AdamW, Lion and SGD only.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "leantrain/memory.h"
#include "leantrain/optim.h"
#include "leantrain/optim_lean.h"
#include "offload/host_adamw.h"

namespace lt::offload {

struct OffloadOptions {
  OptimizerKind kind = OptimizerKind::AdamW;  // which options apply
  AdamWOptions adamw;          // state_dtype must stay unset (or f32): the host state is f32
  LionOptions lion;
  SgdOptions sgd;
  AdamW8bitOptions adamw8bit;  // 8-bit moments on the host, stepped by the CPU reference kernels
  Lion8bitOptions lion8bit;
  int threads = 0;  // 0: every hardware thread
  SimdPath path = best_simd_path();
  int64_t bucket_bytes = 32 << 20;  // of gradient per bucket (a larger parameter is its own bucket)
  // Whose pinned-host account the state and buffers join; unset: each parameter's device (a
  // parameter resting in host memory, --offload params, is a CPU tensor: pass the run's device).
  std::optional<Device> device;
  // The disk tier: the directory of the state file ("" = none), the host state's limit in bytes
  // (< 0: none, everything eligible goes to disk), the chunk and window count of its I/O.
  std::string disk_dir;
  int64_t host_limit = -1;
  int64_t disk_chunk_elems = int64_t(4) << 20;
  int disk_windows = 4;
};

class DiskStateStore;

class OffloadOptimizer final : public Optimizer {
 public:
  OffloadOptimizer(std::vector<ParamGroup> groups, const OffloadOptions& o);
  const char* name() const override { return name_view(kind_).data(); }
  int threads() const { return threads_; }
  ~OffloadOptimizer() override;

  // The disk tier (nullptr without --offload-dir, or when every state fits the host limit).
  const DiskStateStore* disk() const { return disk_.get(); }
  int64_t disk_params() const { return int64_t(disk_ids_.size()); }
  OptimizerStateDict state_dict() const override;
  void load_state_dict(const OptimizerStateDict& sd) override;

  // Registers the draining hooks (once); they act while set_draining(true) (the last micro-batch's
  // backward: earlier ones accumulate on the device as usual).
  void drain_during_backward();
  void set_draining(bool on);
  // Each bucket of drained gradients stepped on the host as soon as its copies land, by a thread
  // of its own while backward goes on (results into a pinned buffer beside the area, copied back
  // to the device at once by that thread; update() waits for it). Only for steps whose gradient scale is 1 and that nothing
  // skips: no clipping, no loss scaling. Call before the first backward.
  void set_early_step(bool on);
  // After backward: the compute stream waits for every gradient copy (the norm reads the area).
  void finish_backward();
  int64_t drained() const;       // gradients moved to the host since construction
  int64_t stepped_early() const;  // parameters stepped during backward since construction

 protected:
  std::vector<std::string> state_names() const override;
  std::vector<Tensor> make_state(const Tensor& param, Device device) const override;
  void update(const std::vector<Slot*>& slots, float grad_scale) override;
  // The host step reads parameters and gradients through host pointers: a resting (pinned host,
  // CPU-typed) block weight with a CUDA-typed view of its drained gradient in pinned memory.
  bool accepts_grad_device(const Tensor& param, const Tensor& grad) const override {
    return param.device().is_cpu() && grad.device().is_cuda();
  }

 private:
  int states() const;  // f32 state arrays before the master (the f32 kinds)
  bool eight_bit() const { return is_eight_bit(kind_); }
  void step_8bit(Slot& s, const void* grad, void* param16, float grad_scale, int threads);
  void update_bucket(const std::vector<Slot*>& bucket, float grad_scale);
  void update_drained(const std::vector<Slot*>& slots, float grad_scale);
  bool is_drained(const Slot& s) const;
  // threads <= 0: threads_.
  void step_one(Slot& s, const void* grad, void* param16, float grad_scale, uint64_t* sr_stream, int threads = 0);
  void step_span(const Slot& s, float* const* parts, const void* grad, void* param16, int64_t n, float grad_scale,
                 StochasticRounding sr, int threads);
  std::shared_ptr<Storage> grown(std::shared_ptr<Storage>& buf, int64_t bytes, Device d, Category c);

  OffloadOptions opt_;
  OptimizerKind kind_;
  int threads_;
  std::shared_ptr<Storage> grad_bucket_, staging_;  // pinned, grown to the largest bucket
  struct Drain;
  std::shared_ptr<Drain> drain_;  // the hooks hold it weakly: destroying the optimizer disarms them
  // The disk tier: the store, and the parameters whose state it holds (their store ids).
  void plan_disk_tier();  // in the constructor: the store and disk_ids_
  std::vector<Tensor> make_disk_state(const Tensor& p, int id) const;
  int disk_id_of(const Tensor& p) const;  // -1: on the host
  void step_from_disk(Slot& s, int id, const void* grad, void* param16, float grad_scale, int threads);
  std::unique_ptr<DiskStateStore> disk_;
  std::vector<std::pair<Tensor, int>> disk_ids_;
};

}  // namespace lt::offload
