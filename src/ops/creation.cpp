#include "ops/op_common.h"

namespace lt {
using namespace detail;

Tensor empty(const Shape& shape, DType dtype, Device device) { return Tensor::empty(shape, dtype, device); }

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  backend_for(device).fill(t, value);
  return t;
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

template <class V>
static Tensor from_host_values(const std::vector<V>& v, const Shape& shape, DType host_dtype, DType dtype,
                               Device device) {
  LT_CHECK(int64_t(v.size()) == numel(shape), "from_vector: " + std::to_string(v.size()) + " values",
           "shape " + shape_str(shape) + " needs " + std::to_string(numel(shape)), "pass matching sizes");
  Tensor host;
  {
    MemoryCategoryScope s(Category::Other);  // host staging is not part of the run's footprint
    host = Tensor::empty(shape, host_dtype, Device::cpu());
    if (!v.empty()) backend_for(Device::cpu()).copy_from_host(host, v.data());
  }
  Tensor out = Tensor::empty(shape, dtype, device);
  copy_(out, host);
  return out;
}

Tensor from_vector(const std::vector<float>& v, const Shape& shape, DType dtype, Device device) {
  return from_host_values(v, shape, DType::F32, dtype, device);
}
Tensor from_vector(const std::vector<double>& v, const Shape& shape, DType dtype, Device device) {
  return from_host_values(v, shape, DType::F64, dtype, device);
}
Tensor from_ints(const std::vector<int64_t>& v, const Shape& shape, DType dtype, Device device) {
  return from_host_values(v, shape, DType::I64, dtype, device);
}

Tensor randn(const Shape& shape, Generator& gen, float std, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  check_floating("randn", t);
  uint64_t n = uint64_t(t.numel());
  backend_for(device).fill_random(t, RandomKind::Normal, 0.0f, std, gen.seed, gen.take(n));
  return t;
}

Tensor rand_uniform(const Shape& shape, Generator& gen, float lo, float hi, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  check_floating("rand_uniform", t);
  backend_for(device).fill_random(t, RandomKind::Uniform, lo, hi, gen.seed, gen.take(uint64_t(t.numel())));
  return t;
}

void fill_(const Tensor& t, double value) {
  if (t.is_contiguous()) {
    backend_of(t).fill(t, value);
    return;
  }
  Tensor tmp = full(t.shape(), value, t.dtype(), t.device());
  backend_of(t).copy(t, tmp);
}

void copy_(const Tensor& dst, const Tensor& src) {
  LT_CHECK(dst.shape() == src.shape(), "copy_: shape mismatch", shape_str(dst.shape()) + " vs " + shape_str(src.shape()),
           "copy between tensors of one shape");
  if (dst.device() == src.device()) {
    backend_of(dst).copy(dst, src);
    return;
  }
  // Cross-device: stage through a contiguous tensor of dst's dtype on the host side. With a meta
  // side no data moves, but the device side allocates what it would on a GPU (a bf16 weight
  // copied into an f32 host buffer is widened on its device first): the plan sees every byte.
  MemoryCategoryScope s(Category::Other);
  if (dst.device().is_meta() || src.device().is_meta()) {
    if (src.device().is_cpu() && !dst.is_contiguous()) (void)Tensor::empty(dst.shape(), dst.dtype(), dst.device());
    if (dst.device().is_cpu() && (!src.is_contiguous() || src.dtype() != dst.dtype()))
      (void)Tensor::empty(src.shape(), dst.dtype(), src.device());
    return;
  }
  if (src.device().is_cpu()) {
    Tensor staged = src;
    if (src.dtype() != dst.dtype() || !src.is_contiguous()) {
      staged = Tensor::empty(src.shape(), dst.dtype(), Device::cpu());
      backend_of(staged).copy(staged, src);
    }
    if (dst.is_contiguous()) {
      backend_of(dst).copy_from_host(dst, staged.raw_data());
    } else {
      Tensor tmp = Tensor::empty(dst.shape(), dst.dtype(), dst.device());
      backend_of(dst).copy_from_host(tmp, staged.raw_data());
      backend_of(dst).copy(dst, tmp);
    }
  } else if (dst.device().is_cpu()) {
    Tensor c = src;
    if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
      c = Tensor::empty(src.shape(), dst.dtype(), src.device());
      backend_of(src).copy(c, src);
    }
    if (dst.is_contiguous()) {
      backend_of(src).copy_to_host(dst.raw_data(), c);
    } else {
      Tensor tmp = Tensor::empty(dst.shape(), dst.dtype(), Device::cpu());
      backend_of(src).copy_to_host(tmp.raw_data(), c);
      backend_of(dst).copy(dst, tmp);
    }
  } else {
    Tensor host = Tensor::empty(src.shape(), src.dtype(), Device::cpu());
    copy_(host, src);
    copy_(dst, host);
  }
}

}  // namespace lt
