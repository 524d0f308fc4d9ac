// --offload optimizer's optimizer: host state, bucketed copies, the SIMD host steps
// (offload_optimizer.h).
#include "offload/offload_optimizer.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "backend/dry_compute.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "offload/disk_state.h"
#include "offload/host_lion.h"
#include "offload/host_simd.h"
#include "core/raw_view.h"
#include "offload/host_workers.h"
#include "offload/offload_trace.h"
#include "offload/host_sgd.h"
#include "optim/q8_state.h"
#include "optim/quant_map.h"

namespace lt::offload {

namespace {

int64_t state_align64(int64_t b) { return (b + 63) / 64 * 64; }

// A CPU tensor over pinned host memory at `byte_offset` (a multiple of the dtype size).
Tensor host_view(const std::shared_ptr<Storage>& st, int64_t byte_offset, const Shape& shape, DType dt) {
  return tensor_over(st, byte_offset / int64_t(dtype_size(dt)), shape, contiguous_strides(shape), dt, Device::cpu());
}

std::shared_ptr<Storage> pin(int64_t bytes, Device d, const char* what) {
  std::shared_ptr<Storage> s = allocate_pinned_host(bytes, d);
  LT_CHECK(s != nullptr, std::string("--offload optimizer: pinning ") + std::to_string(bytes) + " bytes for " + what,
           "the system refused to pin more host memory",
           "raise the locked-memory limit (ulimit -l), or train without --offload optimizer");
  return s;
}

double lr_of(const OffloadOptions& o) {
  if (o.kind == OptimizerKind::AdamW8bit) return o.adamw8bit.lr;
  if (o.kind == OptimizerKind::Lion8bit) return o.lion8bit.lr;
  return o.kind == OptimizerKind::Lion ? o.lion.lr : o.kind == OptimizerKind::Sgd ? o.sgd.lr : o.adamw.lr;
}
double weight_decay_of(const OffloadOptions& o) {
  if (o.kind == OptimizerKind::AdamW8bit) return o.adamw8bit.weight_decay;
  if (o.kind == OptimizerKind::Lion8bit) return o.lion8bit.weight_decay;
  return o.kind == OptimizerKind::Lion ? o.lion.weight_decay : o.kind == OptimizerKind::Sgd ? o.sgd.weight_decay : o.adamw.weight_decay;
}

// memset on the worker threads, 16 MiB or more each: the first step zeroes the whole state
// (8 bytes per parameter for AdamW), which one thread does at a fraction of the memory's speed.
void zero_parallel(void* p, int64_t bytes, int threads) {
  const int64_t min_part = int64_t(16) << 20;
  const int tasks = int(std::clamp<int64_t>(bytes / min_part, 1, std::max(1, threads)));
  const int64_t per = (bytes / tasks + 63) / 64 * 64;
  run_host_tasks(tasks, [&](int t) {
    const int64_t lo = std::min(bytes, int64_t(t) * per), hi = t + 1 == tasks ? bytes : std::min(bytes, lo + per);
    std::memset(static_cast<char*>(p) + lo, 0, size_t(hi - lo));
  });
}

void check_state_dtype(const std::optional<DType>& t) {
  LT_CHECK(!t || *t == DType::F32, std::string("--offload optimizer with state dtype ") + dtype_name(*t),
           "the offloaded state is f32 (host memory is the plentiful kind)", "drop the state dtype");
}

}  // namespace

OffloadOptimizer::OffloadOptimizer(std::vector<ParamGroup> groups, const OffloadOptions& o)
    : Optimizer(std::move(groups), lr_of(o), weight_decay_of(o), name_view(o.kind).data()),
      opt_(o), kind_(o.kind) {
  if (o.kind == OptimizerKind::AdamW) {
    const AdamWOptions& a = o.adamw;
    LT_CHECK(a.beta1 >= 0 && a.beta1 < 1 && a.beta2 >= 0 && a.beta2 < 1,
             "adamw: betas (" + std::to_string(a.beta1) + ", " + std::to_string(a.beta2) + ") out of range",
             "each beta must be in [0, 1)", "use e.g. 0.9 and 0.999");
    LT_CHECK(a.eps >= 0, "adamw: eps " + std::to_string(a.eps) + " is negative", "eps guards a division",
             "use e.g. 1e-8");
    check_state_dtype(a.state_dtype);
  } else if (o.kind == OptimizerKind::Lion) {
    const LionOptions& l = o.lion;
    LT_CHECK(l.beta1 >= 0 && l.beta1 <= 1 && l.beta2 >= 0 && l.beta2 < 1,
             "lion: betas (" + std::to_string(l.beta1) + ", " + std::to_string(l.beta2) + ") out of range",
             "beta1 must be in [0, 1] and beta2 in [0, 1)", "use e.g. 0.9 and 0.99");
    check_state_dtype(l.state_dtype);
  } else if (o.kind == OptimizerKind::Sgd) {
    const SgdOptions& s = o.sgd;
    LT_CHECK(s.momentum >= 0, "sgd: momentum " + std::to_string(s.momentum) + " is negative",
             "momentum is a decay factor", "pass momentum >= 0");
    LT_CHECK(!s.nesterov || (s.momentum > 0 && s.dampening == 0),
             "sgd: Nesterov momentum needs momentum > 0 and dampening 0",
             "got momentum " + std::to_string(s.momentum) + ", dampening " + std::to_string(s.dampening),
             "set momentum (e.g. 0.9) and no dampening, or turn Nesterov off");
    check_state_dtype(s.state_dtype);
  } else if (o.kind == OptimizerKind::AdamW8bit || o.kind == OptimizerKind::Lion8bit) {
    const double b1 = o.kind == OptimizerKind::AdamW8bit ? o.adamw8bit.beta1 : o.lion8bit.beta1;
    const double b2 = o.kind == OptimizerKind::AdamW8bit ? o.adamw8bit.beta2 : o.lion8bit.beta2;
    const int64_t min8 = o.kind == OptimizerKind::AdamW8bit ? o.adamw8bit.min_8bit_size : o.lion8bit.min_8bit_size;
    LT_CHECK(b1 >= 0 && b1 <= 1 && b2 >= 0 && b2 < 1,
             name_of(o.kind) + ": betas (" + std::to_string(b1) + ", " + std::to_string(b2) + ") out of range",
             "beta1 must be in [0, 1] and beta2 in [0, 1)", "use e.g. 0.9 and 0.999");
    LT_CHECK(min8 >= 1, name_of(o.kind) + ": min_8bit_size " + std::to_string(min8),
             "it is the element count from which states are quantised", "use e.g. 4096");
  } else {
    fail("--offload optimizer with --optimizer " + name_of(o.kind),
         "the host step exists for adamw, lion, sgd, adamw8bit and lion8bit",
         "use one of those, or drop --offload");
  }
  LT_CHECK(o.bucket_bytes > 0, "--offload optimizer: bucket of " + std::to_string(o.bucket_bytes) + " bytes",
           "a bucket must hold something", "use a positive bucket size");
  threads_ = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  plan_disk_tier();
}

int OffloadOptimizer::states() const {
  if (kind_ == OptimizerKind::AdamW) return 2;
  if (kind_ == OptimizerKind::Lion) return 1;
  return opt_.sgd.momentum == 0 ? 0 : 1;
}

std::vector<std::string> OffloadOptimizer::state_names() const {
  std::vector<std::string> n;
  if (kind_ == OptimizerKind::AdamW8bit) n = {"exp_avg", "exp_avg_absmax", "exp_avg_sq", "exp_avg_sq_absmax"};
  else if (kind_ == OptimizerKind::Lion8bit) n = {"exp_avg", "exp_avg_absmax"};
  else if (kind_ == OptimizerKind::AdamW) n = {"exp_avg", "exp_avg_sq"};
  else if (kind_ == OptimizerKind::Lion) n = {"exp_avg"};
  else if (opt_.sgd.momentum != 0) n = {"momentum_buffer"};
  n.push_back("master_f32");
  return n;
}

// One pinned buffer per parameter: the states, then the master, each at a 64-byte boundary.
std::vector<Tensor> OffloadOptimizer::make_state(const Tensor& p, Device) const {
  LT_CHECK(p.dtype() == DType::F32 || p.dtype() == DType::BF16 || p.dtype() == DType::F16,
           std::string("--offload optimizer with ") + dtype_name(p.dtype()) + " parameters",
           "the host step updates f32, bf16 and f16 parameters", "use --dtype f32, bf16 or f16");
  if (const int id = disk_id_of(p); id >= 0) return make_disk_state(p, id);
  // The parts, each at a 64-byte boundary: (shape, dtype) of every state, then the master.
  std::vector<std::pair<Shape, DType>> parts;
  if (eight_bit()) {
    const int64_t min8 = kind_ == OptimizerKind::AdamW8bit ? opt_.adamw8bit.min_8bit_size : opt_.lion8bit.min_8bit_size;
    const bool q = p.numel() >= min8;  // as q8_moment: u8 codes + absmax, or f32 and an empty absmax
    for (int m = 0; m < (kind_ == OptimizerKind::AdamW8bit ? 2 : 1); ++m) {
      parts.push_back({p.shape(), q ? DType::U8 : DType::F32});
      parts.push_back({q ? Shape{quant_blocks(p.numel())} : Shape{0}, DType::F32});
    }
  } else {
    for (int i = 0; i < states(); ++i) parts.push_back({p.shape(), DType::F32});
  }
  parts.push_back({p.shape(), DType::F32});
  std::vector<int64_t> at;
  int64_t bytes = 0;
  for (auto& [shape, dt] : parts) {
    at.push_back(bytes);
    bytes += state_align64(numel(shape) * int64_t(dtype_size(dt)));
  }
  std::shared_ptr<Storage> st = pin(bytes, opt_.device.value_or(p.device()), "optimizer state");
  std::vector<Tensor> out;
  for (size_t i = 0; i < parts.size(); ++i) out.push_back(host_view(st, at[i], parts[i].first, parts[i].second));
  if (!p.device().is_meta()) {  // (a resting parameter is a CPU tensor: a host copy)
    zero_parallel(st->data(), at.back(), threads_);  // zero state (absmax 0: all codes 0)
    // Exact: f32, or a widened 16-bit value. A 16-bit device parameter is widened on the host:
    // copy_ would widen it on the device first, an f32 copy of the parameter there (250 MiB for
    // TinyLlama's embedding) only to copy it out, a segment the run then keeps reserved.
    if (p.device().is_cpu() || p.dtype() == DType::F32) {
      copy_(out.back(), p);
    } else {
      Tensor narrow = Tensor::empty(p.shape(), p.dtype(), Device::cpu());
      copy_(narrow, p);
      copy_(out.back(), narrow);
    }
  }
  return out;
}

void OffloadOptimizer::update(const std::vector<Slot*>& slots, float grad_scale) {
  trace_lap(Phase::Norm);  // since backward's end: the trainer's norm
  LT_CHECK(!master_weights(), "--offload optimizer with --master-weights fp32",
           "the offloaded state already keeps an f32 master copy on the host", "drop --master-weights");
  LT_CHECK(!(eight_bit() && stochastic_rounding()), "--offload optimizer with stochastic rounding",
           "the host step rounds the 16-bit parameters to nearest", "turn stochastic rounding off");
  // Gradients drained during backward are on the host already; any other (a parameter whose
  // hook did not drain it) takes the synchronous path.
  std::vector<Slot*> drained, rest;
  for (Slot* s : slots) (is_drained(*s) ? drained : rest).push_back(s);
  if (!drained.empty()) update_drained(drained, grad_scale);
  std::vector<Slot*> bucket;
  int64_t bytes = 0;
  for (Slot* s : rest) {
    const int64_t b = state_align64(s->param.nbytes());
    if (!bucket.empty() && bytes + b > opt_.bucket_bytes) {
      update_bucket(bucket, grad_scale);
      bucket.clear();
      bytes = 0;
    }
    bucket.push_back(s);
    bytes += b;
  }
  if (!bucket.empty()) update_bucket(bucket, grad_scale);
}

std::shared_ptr<Storage> OffloadOptimizer::grown(std::shared_ptr<Storage>& buf, int64_t bytes, Device d, Category c) {
  if (buf && buf->nbytes() >= bytes) return buf;
  buf.reset();  // the old one goes first: the pinned peak is the largest bucket, not two
  MemoryCategoryScope scope(c);
  buf = pin(bytes, d, c == Category::Gradient ? "the gradient bucket" : "the parameter staging buffer");
  return buf;
}

// The host step of one parameter: state and master updated, the 16-bit copy (when param16) written.
void OffloadOptimizer::step_one(Slot& s, const void* grad, void* param16, float grad_scale, uint64_t* sr_stream,
                                int threads) {
  if (threads <= 0) threads = threads_;
  if (const int id = disk_id_of(s.param); id >= 0) return step_from_disk(s, id, grad, param16, grad_scale, threads);
  if (eight_bit()) return step_8bit(s, grad, param16, grad_scale, threads);
  StochasticRounding sr;
  if (sr_stream) sr.streams = std::span<const uint64_t>(sr_stream, 1);
  std::vector<float*> parts;  // the states, then the master
  for (const Tensor& t : s.state) parts.push_back(t.data<float>());
  step_span(s, parts.data(), grad, param16, s.param.numel(), grad_scale, sr, threads);
}

// The f32 kinds' host step over n elements: parts[0 .. states()-1] the states, parts[states()]
// the master (a whole parameter's, or a chunk of one from the disk tier's window).
void OffloadOptimizer::step_span(const Slot& s, float* const* parts, const void* grad, void* param16, int64_t n,
                                 float grad_scale, StochasticRounding sr, int threads) {
  const DType dt = s.param.dtype();
  float* master = parts[states()];
  if (kind_ == OptimizerKind::AdamW) {
    AdamWArgs a{float(lr()), float(opt_.adamw.beta1), float(opt_.adamw.beta2), float(opt_.adamw.eps),
                float(s.weight_decay), s.step + 1, grad_scale, sr};
    host_adamw_step({master, parts[0], parts[1], grad, dt, param16, dt, n}, a, threads, opt_.path);
  } else if (kind_ == OptimizerKind::Lion) {
    LionArgs a{float(lr()), float(opt_.lion.beta1), float(opt_.lion.beta2), float(s.weight_decay), grad_scale, sr};
    host_lion_step({master, parts[0], grad, dt, param16, dt, n}, a, threads, opt_.path);
  } else {
    SgdArgs a{float(lr()), float(opt_.sgd.momentum), float(opt_.sgd.dampening), float(s.weight_decay),
              opt_.sgd.nesterov, s.step == 0, grad_scale, sr};
    host_sgd_step({master, opt_.sgd.momentum != 0 ? parts[0] : nullptr, grad, dt, param16, dt, n}, a, threads, opt_.path);
  }
}

// An 8-bit step: the CPU backend's kernel on the f32 master and the gradient widened to f32 (as
// Optimizer::update_elsewhere does for master weights), then the master rounded to nearest into
// the 16-bit copy. The parameter is cut into runs of whole 256-element blocks, one per host
// thread (simd::for_chunks): each block has its own absmax, so the cut changes no bit of the
// result. (One thread over a Qwen3-30B-A3B QLoRA's 642M adapter parameters took about 40 s a step.)
void OffloadOptimizer::step_8bit(Slot& s, const void* grad, void* param16, float grad_scale, int threads) {
  const DType dt = s.param.dtype();
  const int64_t n = s.param.numel();
  const bool q = q8_is_quantised(s.state[0]);
  const size_t esize = dtype_size(dt);
  Backend& cpu = backend_for(Device::cpu());
  std::vector<float> wide(dt != DType::F32 ? size_t(n) : 0);  // untracked scratch: the host's working memory
  simd::for_chunks(n, threads, [&](int64_t i0, int64_t i1) {
    const int64_t len = i1 - i0, b0 = i0 / kQuantBlock;
    auto run_of = [&](const Tensor& full, int64_t first, int64_t count) {  // elements first .. of a state array
      return raw_view(static_cast<const char*>(full.raw_data()) + first * int64_t(dtype_size(full.dtype())), {count},
                      full.dtype());
    };
    Tensor g = raw_view(static_cast<const char*>(grad) + i0 * int64_t(esize), {len}, dt);
    if (dt != DType::F32) {
      Tensor w = raw_view(wide.data() + i0, {len}, DType::F32);
      copy_(w, g);
      g = w;
    }
    std::vector<Tensor> p{run_of(s.state.back(), i0, len)}, gs{g};
    // Quantised states: codes per element, absmax per block; small parameters keep f32 states.
    auto state = [&](int k) { return q && k % 2 == 1 ? run_of(s.state[size_t(k)], b0, quant_blocks(len)) : run_of(s.state[size_t(k)], i0, len); };
    std::vector<Tensor> m{state(0)};
    if (kind_ == OptimizerKind::AdamW8bit) {
      const AdamW8bitOptions& o = opt_.adamw8bit;
      AdamWArgs a{float(lr()), float(o.beta1), float(o.beta2), float(o.eps), float(s.weight_decay), s.step + 1, grad_scale};
      std::vector<Tensor> v{state(2)};
      if (q) {
        std::vector<Tensor> m_absmax{state(1)}, v_absmax{state(3)};
        cpu.adamw8bit_step(p, gs, QuantState{m, m_absmax, dynamic_map_signed()},
                           QuantState{v, v_absmax, dynamic_map_unsigned()}, a);
      } else {
        cpu.adamw_step(p, gs, m, v, a);
      }
    } else {
      const Lion8bitOptions& o = opt_.lion8bit;
      LionArgs a{float(lr()), float(o.beta1), float(o.beta2), float(s.weight_decay), grad_scale};
      if (q) {
        std::vector<Tensor> m_absmax{state(1)};
        cpu.lion8bit_step(p, gs, QuantState{m, m_absmax, dynamic_map_signed()}, a);
      } else {
        cpu.lion_step(p, gs, m, a);
      }
    }
    if (param16) copy_(raw_view(static_cast<char*>(param16) + i0 * int64_t(esize), {len}, dt), p[0]);
  }, kQuantBlock);
}

// The flow of one bucket: every gradient to the host, the host step, every parameter back.
void OffloadOptimizer::update_bucket(const std::vector<Slot*>& bucket, float grad_scale) {
  const Device d = bucket.front()->param.device();
  std::vector<int64_t> off(bucket.size());
  int64_t total = 0;
  for (size_t k = 0; k < bucket.size(); ++k) {
    LT_CHECK(bucket[k]->param.device() == d, "--offload optimizer: parameters on two devices in one bucket",
             d.str() + " and " + bucket[k]->param.device().str(), "keep the model on one device");
    off[k] = total;
    total += state_align64(bucket[k]->param.nbytes());
  }
  grown(grad_bucket_, total, opt_.device.value_or(d), Category::Gradient);
  grown(staging_, total, opt_.device.value_or(d), Category::Workspace);
  // A dry run (meta) and a dry step (a skipped step, Note [Dry compute]) take the same pinned
  // buffers, in the same order, and move no data.
  if (d.is_meta() || DryCompute::active()) return;
  for (size_t k = 0; k < bucket.size(); ++k) {
    const Tensor& p = bucket[k]->param;
    copy_(host_view(grad_bucket_, off[k], p.shape(), p.dtype()), p.grad());
  }
  std::vector<uint64_t> streams = sr_streams(bucket);
  for (size_t k = 0; k < bucket.size(); ++k) {
    Slot& s = *bucket[k];
    void* narrow = s.param.dtype() != DType::F32 ? static_cast<char*>(staging_->data()) + off[k] : nullptr;
    step_one(s, static_cast<const char*>(grad_bucket_->data()) + off[k], narrow, grad_scale,
             streams.empty() ? nullptr : &streams[k]);
  }
  for (size_t k = 0; k < bucket.size(); ++k) {
    Slot& s = *bucket[k];
    if (s.param.dtype() == DType::F32) copy_(s.param, s.state.back());
    else copy_(s.param, host_view(staging_, off[k], s.param.shape(), s.param.dtype()));
  }
}

}  // namespace lt::offload
