// Parameters are drawn directly on the target device in the target dtype: no fp32 host copy
// exists at any point, so load-time peak equals parameter bytes.
//
// The flat store (InitOptions::flat) follows llm.c's single parameter buffer: sizes first (every
// make() records a slot), then one allocation per (device, dtype) carved into views in
// registration order. Each view starts on a 512-byte boundary, the allocator's granule, so the
// store takes exactly the bytes the per-parameter allocations took and every kernel sees the
// alignment it saw before. Values are identical to the per-parameter build: a slot's generator
// counters are taken at make(), in the same order, and the random kernels are keyed by counter.
#include <cmath>
#include <exception>

#include "backend/backend.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/nn.h"

namespace lt::nn {

Init Init::xavier_uniform(int64_t fan_in, int64_t fan_out) {
  return uniform(std::sqrt(6.0 / double(fan_in + fan_out)));
}

int64_t ParamFactory::flat_bytes(const Shape& shape, DType dtype) {
  const int64_t n = numel(shape) * int64_t(dtype_size(dtype));
  return (n + 511) / 512 * 512;
}

ParamFactory::~ParamFactory() noexcept(false) {
  // Not while an exception unwinds (the half-built model is being destroyed anyway).
  if (!pending_.empty() && std::uncaught_exceptions() == 0) materialize();
}

Tensor ParamFactory::make(const Shape& shape, const Init& init, DType dtype) {
  Tensor t = create(shape, init, dtype, false);
  if (is_floating(dtype)) t.set_requires_grad(true);
  return t;
}

Tensor ParamFactory::make_buffer(const Shape& shape, const Init& init, std::optional<DType> dtype) {
  return create(shape, init, dtype.value_or(opts_.dtype), true);
}

Tensor ParamFactory::create(const Shape& shape, const Init& init, DType dtype, bool buffer) {
  const bool random = init.kind == Init::Kind::Normal || init.kind == Init::Kind::Uniform;
  LT_CHECK(!random || is_floating(dtype), std::string("parameter init: random values in a ") + dtype_name(dtype) + " tensor",
           "only floating tensors are drawn from the generator", "initialize integer tensors with zeros or ones");
  for (int64_t d : shape)
    LT_CHECK(d >= 0, "negative dimension in parameter shape " + shape_str(shape), "sizes must be >= 0", "fix the shape");
  const uint64_t counter = random ? gen_.take(uint64_t(numel(shape))) : 0;
  if (!opts_.flat) {
    MemoryCategoryScope scope(Category::Parameter);
    NoGradGuard no_grad;
    Tensor t = Tensor::empty(shape, dtype, opts_.device);
    if (opts_.fill || buffer) fill(t, init, counter);
    return t;
  }
  // A slot: shape, dtype and device now, memory at materialize().
  LT_CHECK(!(dtype == DType::F64 && opts_.device.is_cuda()), "f64 is not supported on CUDA",
           "leantrain keeps f64 for CPU reference checks", "use f32, bf16 or f16");
  Tensor slot = tensor_over(nullptr, 0, shape, contiguous_strides(shape), dtype, opts_.device);
  pending_.push_back(Pending{slot.impl_ptr(), init, counter, buffer});
  return slot;
}

void fill_slot(const Tensor& t, const DeferredSlot& s) {
  switch (s.init.kind) {
    case Init::Kind::Normal:
      backend_for(t.device()).fill_random(t, RandomKind::Normal, 0.0f, float(s.init.a), s.seed, s.counter);
      break;
    case Init::Kind::Uniform:
      backend_for(t.device()).fill_random(t, RandomKind::Uniform, float(-s.init.a), float(s.init.a), s.seed, s.counter);
      break;
    case Init::Kind::Zeros: fill_(t, 0.0); break;
    case Init::Kind::Ones: fill_(t, 1.0); break;
  }
  if (s.init.zero_row >= 0 && t.dim() > 0 && s.init.zero_row < t.size(0)) fill_(select(t, 0, s.init.zero_row), 0.0);
}

void ParamFactory::fill(const Tensor& t, const Init& init, uint64_t counter) {
  fill_slot(t, DeferredSlot{t, init, gen_.seed, counter, false});
}

void ParamFactory::materialize() {
  if (pending_.empty()) return;
  std::vector<Pending> batch = std::move(pending_);
  pending_.clear();
  std::vector<DeferredSlot> slots;
  for (const Pending& p : batch) slots.push_back(DeferredSlot{Tensor(p.impl), p.init, gen_.seed, p.counter, p.buffer});
  if (opts_.deferred) {
    opts_.deferred->insert(opts_.deferred->end(), slots.begin(), slots.end());
    return;
  }
  materialize_slots(slots, opts_.fill);
}

void materialize_slots(const std::vector<DeferredSlot>& batch, bool fill) {
  if (batch.empty()) return;
  MemoryCategoryScope scope(Category::Parameter);
  NoGradGuard no_grad;
  // Sizes first: each (device, dtype) in order of first appearance, views in registration order.
  std::vector<std::pair<std::pair<Device, DType>, int64_t>> stores;  // key -> bytes
  std::vector<size_t> store_of(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    TensorImpl& t = *batch[i].tensor.impl();
    size_t s = 0;
    while (s < stores.size() && !(stores[s].first.first == t.device && stores[s].first.second == t.dtype)) ++s;
    if (s == stores.size()) stores.push_back({{t.device, t.dtype}, 0});
    store_of[i] = s;
    t.offset = stores[s].second / int64_t(dtype_size(t.dtype));
    stores[s].second += ParamFactory::flat_bytes(t.shape, t.dtype);
  }
  std::vector<std::shared_ptr<Storage>> storage;
  for (auto& [key, bytes] : stores) storage.push_back(allocate_storage(bytes, key.first));
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i].tensor.impl()->storage = storage[store_of[i]];
    if (fill || batch[i].buffer) fill_slot(batch[i].tensor, batch[i]);
  }
}

uint64_t ParamFactory::next_seed() {
  // Mixed with a tag so dropout streams never coincide with the parameter stream.
  return rng_mix64(opts_.seed ^ rng_mix64(0x64726f706f7574ull + ++seeds_));
}

}  // namespace lt::nn
