// --offload optimizer's AdamW: host state, bucketed copies, the SIMD host step (offload_adamw.h).
#include "offload/offload_adamw.h"

#include <algorithm>
#include <thread>

#include "leantrain/error.h"
#include "leantrain/ops.h"

namespace lt::offload {

namespace {

int64_t align64(int64_t b) { return (b + 63) / 64 * 64; }

// A CPU tensor over `bytes` of pinned host memory at `byte_offset` (a multiple of the dtype size).
Tensor host_view(const std::shared_ptr<Storage>& st, int64_t byte_offset, const Shape& shape, DType dt) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = st;
  impl->offset = byte_offset / int64_t(dtype_size(dt));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dt;
  impl->device = Device::cpu();
  return Tensor(impl);
}

std::shared_ptr<Storage> pin(int64_t bytes, Device d, const char* what) {
  std::shared_ptr<Storage> s = allocate_pinned_host(bytes, d);
  LT_CHECK(s != nullptr, std::string("--offload optimizer: pinning ") + std::to_string(bytes) + " bytes for " + what,
           "the system refused to pin more host memory",
           "raise the locked-memory limit (ulimit -l), or train without --offload optimizer");
  return s;
}

}  // namespace

OffloadAdamW::OffloadAdamW(std::vector<ParamGroup> groups, const OffloadAdamWOptions& o)
    : Optimizer(std::move(groups), o.adamw.lr, o.adamw.weight_decay, "adamw"), opt_(o) {
  const AdamWOptions& a = o.adamw;
  LT_CHECK(a.beta1 >= 0 && a.beta1 < 1 && a.beta2 >= 0 && a.beta2 < 1,
           "adamw: betas (" + std::to_string(a.beta1) + ", " + std::to_string(a.beta2) + ") out of range",
           "each beta must be in [0, 1)", "use e.g. 0.9 and 0.999");
  LT_CHECK(a.eps >= 0, "adamw: eps " + std::to_string(a.eps) + " is negative", "eps guards a division",
           "use e.g. 1e-8");
  LT_CHECK(!a.state_dtype || *a.state_dtype == DType::F32,
           std::string("--offload optimizer with state dtype ") + dtype_name(*a.state_dtype),
           "the offloaded state is f32 (host memory is the plentiful kind)", "drop the state dtype");
  LT_CHECK(o.bucket_bytes > 0, "--offload optimizer: bucket of " + std::to_string(o.bucket_bytes) + " bytes",
           "a bucket must hold something", "use a positive bucket size");
  threads_ = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
}

std::vector<std::string> OffloadAdamW::state_names() const { return {"exp_avg", "exp_avg_sq", "master_f32"}; }

// One pinned buffer per parameter: exp_avg | exp_avg_sq | master, each at a 64-byte boundary.
std::vector<Tensor> OffloadAdamW::make_state(const Tensor& p, Device) const {
  LT_CHECK(p.dtype() == DType::F32 || p.dtype() == DType::BF16 || p.dtype() == DType::F16,
           std::string("--offload optimizer with ") + dtype_name(p.dtype()) + " parameters",
           "the host step updates f32, bf16 and f16 parameters", "use --dtype f32, bf16 or f16");
  const int64_t part = align64(p.numel() * 4);
  std::shared_ptr<Storage> st = pin(3 * part, p.device(), "optimizer state");
  Tensor m = host_view(st, 0, p.shape(), DType::F32), v = host_view(st, part, p.shape(), DType::F32);
  Tensor master = host_view(st, 2 * part, p.shape(), DType::F32);
  std::fill_n(m.data<float>(), p.numel(), 0.0f);
  std::fill_n(v.data<float>(), p.numel(), 0.0f);
  if (!p.device().is_meta()) copy_(master, p);  // exact: f32, or a widened 16-bit value
  return {m, v, master};
}

void OffloadAdamW::update(const std::vector<Slot*>& slots, float grad_scale) {
  LT_CHECK(!master_weights(), "--offload optimizer with --master-weights fp32",
           "the offloaded state already keeps an f32 master copy on the host", "drop --master-weights");
  std::vector<Slot*> bucket;
  int64_t bytes = 0;
  for (Slot* s : slots) {
    const int64_t b = align64(s->param.nbytes());
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

std::shared_ptr<Storage> OffloadAdamW::grown(std::shared_ptr<Storage>& buf, int64_t bytes, Device d, Category c) {
  if (buf && buf->nbytes() >= bytes) return buf;
  buf.reset();  // the old one goes first: the pinned peak is the largest bucket, not two
  MemoryCategoryScope scope(c);
  buf = pin(bytes, d, c == Category::Gradient ? "the gradient bucket" : "the parameter staging buffer");
  return buf;
}

// The flow of one bucket: every gradient to the host, the host step, every parameter back.
void OffloadAdamW::update_bucket(const std::vector<Slot*>& bucket, float grad_scale) {
  const Device d = bucket.front()->param.device();
  std::vector<int64_t> off(bucket.size());
  int64_t total = 0;
  for (size_t k = 0; k < bucket.size(); ++k) {
    LT_CHECK(bucket[k]->param.device() == d, "--offload optimizer: parameters on two devices in one bucket",
             d.str() + " and " + bucket[k]->param.device().str(), "keep the model on one device");
    off[k] = total;
    total += align64(bucket[k]->param.nbytes());
  }
  grown(grad_bucket_, total, d, Category::Gradient);
  grown(staging_, total, d, Category::Workspace);
  // A dry run (meta) takes the same pinned buffers, in the same order, and moves no data.
  if (d.is_meta()) return;
  for (size_t k = 0; k < bucket.size(); ++k) {
    const Tensor& p = bucket[k]->param;
    copy_(host_view(grad_bucket_, off[k], p.shape(), p.dtype()), p.grad());
  }
  const std::vector<uint64_t> streams = sr_streams(bucket);
  for (size_t k = 0; k < bucket.size(); ++k) {
    Slot& s = *bucket[k];
    const bool narrow = s.param.dtype() != DType::F32;
    HostAdamWSpan span{s.state[2].data<float>(),
                       s.state[0].data<float>(),
                       s.state[1].data<float>(),
                       static_cast<const char*>(grad_bucket_->data()) + off[k],
                       s.param.dtype(),
                       narrow ? static_cast<char*>(staging_->data()) + off[k] : nullptr,
                       s.param.dtype(),
                       s.param.numel()};
    AdamWArgs a{float(lr()), float(opt_.adamw.beta1), float(opt_.adamw.beta2), float(opt_.adamw.eps),
                float(s.weight_decay), s.step + 1, grad_scale};
    if (!streams.empty()) a.sr.streams = std::span<const uint64_t>(&streams[k], 1);
    host_adamw_step(span, a, threads_, opt_.path);
  }
  for (size_t k = 0; k < bucket.size(); ++k) {
    Slot& s = *bucket[k];
    if (s.param.dtype() == DType::F32) copy_(s.param, s.state[2]);
    else copy_(s.param, host_view(staging_, off[k], s.param.shape(), s.param.dtype()));
  }
}

}  // namespace lt::offload
