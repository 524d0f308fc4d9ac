// The Tensor methods that run ops or the backward engine (to(), clone(), item(), backward()...).
// They live above ops and autograd, not in core/tensor.cpp, so that the tensor itself depends on
// its storage only (src/layers.txt).
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "leantrain/tensor.h"

namespace lt {

void Tensor::backward(const Tensor& grad, bool retain_graph) const { run_backward(*this, grad, retain_graph); }

Tensor Tensor::to(Device d) const { return to_device(*this, d); }
Tensor Tensor::to(DType t) const { return cast(*this, t); }
Tensor Tensor::contiguous() const { return lt::contiguous(*this); }
Tensor Tensor::clone() const {
  Tensor out = lt::empty(shape(), dtype(), device());
  copy_(out, *this);
  return out;
}

static Tensor host_copy(const Tensor& t, DType want) {
  LT_CHECK(!t.device().is_meta(), "cannot read values of a meta tensor", "meta tensors have shapes only",
           "run on cpu or cuda to get values");
  MemoryCategoryScope s(Category::Other);
  NoGradGuard ng;
  return cast(to_device(t, Device::cpu()), want).contiguous();
}

std::vector<float> Tensor::to_float_vector() const {
  Tensor h = host_copy(*this, DType::F32);
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}
std::vector<double> Tensor::to_double_vector() const {
  Tensor h = host_copy(*this, DType::F64);
  return std::vector<double>(h.data<double>(), h.data<double>() + h.numel());
}
std::vector<int64_t> Tensor::to_int_vector() const {
  Tensor h = host_copy(*this, DType::I64);
  return std::vector<int64_t>(h.data<int64_t>(), h.data<int64_t>() + h.numel());
}
double Tensor::item() const {
  LT_CHECK(numel() == 1, "item() needs a one-element tensor", "this one has shape " + shape_str(shape()),
           "reduce it first");
  return to_double_vector()[0];
}

}  // namespace lt
