// Saved tensors and their pack/unpack hooks. Without hooks a SavedTensor is the tensor itself:
// saving costs one check of the (empty) thread-local stack. With hooks it holds what pack
// returned, the unpack of the same pair, and the saved tensor's metadata, so that unpack can
// be checked and KeptOutputs can compare shapes without unpacking.
#include "autograd/kept_outputs.h"

#include "leantrain/autograd.h"
#include "leantrain/error.h"

namespace lt {

namespace {

struct HookPair {
  PackHook pack;
  UnpackHook unpack;
};

thread_local std::vector<std::shared_ptr<const HookPair>> t_hooks;

// While a hook runs: no grad, no hooks (its ops save nothing and cannot recurse into it), and
// no selective-checkpointing region (its matmuls are not the region's).
class HookCallScope {
 public:
  HookCallScope() : kept_(nullptr) { saved_.swap(t_hooks); }
  ~HookCallScope() { saved_.swap(t_hooks); }
  HookCallScope(const HookCallScope&) = delete;
  HookCallScope& operator=(const HookCallScope&) = delete;

 private:
  NoGradGuard no_grad_;
  detail::KeptOutputsScope kept_;
  std::vector<std::shared_ptr<const HookPair>> saved_;
};

std::string describe(DType d, const Shape& s, Device dev) {
  return std::string(dtype_name(d)) + " " + shape_str(s) + " on " + dev.str();
}

}  // namespace

struct SavedTensor::Packed {
  PackedTensor value;
  std::shared_ptr<const HookPair> hooks;
  Shape shape;
  DType dtype;
  Device device;
  bool contiguous;
};

SavedTensorHooksScope::SavedTensorHooksScope(PackHook pack, UnpackHook unpack) {
  LT_CHECK(pack && unpack, "saved tensor hooks: an empty pack or unpack function",
           "every saved tensor must be packed and unpacked by the same pair", "pass both functions");
  t_hooks.push_back(std::make_shared<const HookPair>(HookPair{std::move(pack), std::move(unpack)}));
}

SavedTensorHooksScope::~SavedTensorHooksScope() { t_hooks.pop_back(); }

bool saved_tensor_hooks_active() { return !t_hooks.empty(); }

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  if (t_hooks.empty()) {
    tensor_ = t;
    return;
  }
  auto p = std::make_shared<Packed>();
  p->hooks = t_hooks.back();
  p->shape = t.shape();
  p->dtype = t.dtype();
  p->device = t.device();
  p->contiguous = t.is_contiguous();
  {
    HookCallScope in_hook;
    p->value = p->hooks->pack(t);
  }
  packed_ = std::move(p);
}

Tensor SavedTensor::unpack() const {
  if (!packed_) return tensor_;
  const Packed& p = *packed_;
  Tensor t;
  {
    HookCallScope in_hook;
    t = p.hooks->unpack(p.value);
  }
  const std::string saved = describe(p.dtype, p.shape, p.device);
  LT_CHECK(t.defined(), "saved tensor hooks: unpack returned no tensor for a saved " + saved,
           "the backward needs the tensor that was packed", "return the tensor (or an equal one) from unpack");
  LT_CHECK(t.shape() == p.shape && t.dtype() == p.dtype && t.device() == p.device && (!p.contiguous || t.is_contiguous()),
           "saved tensor hooks: unpack returned " + describe(t.dtype(), t.shape(), t.device()) +
               (t.is_contiguous() ? "" : " (strided)") + " for a saved " + saved,
           "the backward reads the saved tensor with its shape, dtype, device and layout",
           "return a tensor equal to the packed one (a contiguous copy of it will do)");
  return t;
}

const Shape& SavedTensor::shape() const { return packed_ ? packed_->shape : tensor_.shape(); }
DType SavedTensor::dtype() const { return packed_ ? packed_->dtype : tensor_.dtype(); }

}  // namespace lt
