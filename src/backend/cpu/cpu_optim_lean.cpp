// Reference kernels of the lean optimizers: Lion, and 8-bit block-wise AdamW and Lion.
//
// Lion (Chen et al. 2023), with g = grad * grad_scale:
//   c = b1*m + (1-b1)*g;  p = p*(1 - lr*wd) - lr*sign(c);  m = b2*m + (1-b2)*g    (sign(0) = 0)
// 8-bit (bitsandbytes' block-wise scheme, backend/quant8.h), per 256-element block: dequantise
// the moments with the block's old absmax, apply Lion's or AdamW's update (cpu_optim.cpp) in f32,
// store the parameter, then requantise the new moments against the block's new max |value|.
//
// The f32 math is one rounding per operation: this file is compiled without FMA contraction and
// the CUDA kernels use explicit round-to-nearest intrinsics, so both backends compute the same bits.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_sr.h"
#include "backend/optim_consts.h"
#include "backend/quant8.h"

#pragma GCC optimize("fp-contract=off")

namespace lt {
using namespace cpu;

namespace {

template <class A> inline A sign_of(A c) { return c > A(0) ? A(1) : (c < A(0) ? A(-1) : A(0)); }

template <class T, class S> void lion_one(const Tensor& param, const Tensor& grad, const Tensor& m, const LionArgs& a,
                                                  const SrStream& sr) {
  using A = acc_t<T>;  // f64 parameters keep f64 math, so tests compare exactly
  const LionConsts<A> c = lion_consts<A>(a);
  T* __restrict p = param.data<T>();
  const T* __restrict g = grad.data<T>();
  S* __restrict pm = m.data<S>();
  const int64_t n = param.numel();
  for (int64_t i = 0; i < n; ++i) {
    const A gi = A(ld(g, i)) * c.grad_scale;
    const A mi = A(ld(pm, i));
    const A ci = c.beta1 * mi + c.one_minus_beta1 * gi;
    st_param(p, i, acc_t<T>(A(ld(p, i)) * c.decay - c.lr * sign_of(ci)), sr);
    st(pm, i, acc_t<S>(c.beta2 * mi + c.one_minus_beta2 * gi));
  }
}

void check_q8(const char* op, std::span<const Tensor> params, const QuantState& q, const char* name) {
  LT_CHECK(q.map != nullptr && q.codes.size() == params.size() && q.absmax.size() == params.size(),
           std::string(op) + ": " + name + " lists do not match the parameters",
           std::to_string(q.codes.size()) + " codes, " + std::to_string(q.absmax.size()) + " absmax for " +
               std::to_string(params.size()) + " parameters",
           "pass one codes and one absmax tensor per parameter, and the map");
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor &c = q.codes[k], &a = q.absmax[k];
    LT_CHECK(c.dtype() == DType::U8 && c.numel() == params[k].numel() && c.is_contiguous() &&
                 a.dtype() == DType::F32 && a.numel() == quant_blocks(params[k].numel()) && a.is_contiguous(),
             std::string(op) + ": " + name + "[" + std::to_string(k) + "] does not fit its parameter",
             std::string(dtype_name(c.dtype())) + " codes " + shape_str(c.shape()) + ", " + dtype_name(a.dtype()) +
                 " absmax " + shape_str(a.shape()) + " for " + shape_str(params[k].shape()),
             "use contiguous u8 codes of the parameter's size and f32 absmax [ceil(n/256)]");
  }
}

// Walks the 256-element blocks of one tensor with S quantised states: dequantises each block
// into vals, calls update(first, len, vals), then requantises against the new absmax.
template <int S, class F>
void q8_walk(int64_t n, const QuantState* const (&qs)[S], size_t k, F&& update) {
  uint8_t* codes[S];
  float* absmax[S];
  for (int s = 0; s < S; ++s) {
    codes[s] = qs[s]->codes[k].template data<uint8_t>();
    absmax[s] = qs[s]->absmax[k].template data<float>();
  }
  float vals[S][kQuantBlock];
  for (int64_t b = 0; b < quant_blocks(n); ++b) {
    const int64_t first = b * kQuantBlock, len = std::min(kQuantBlock, n - first);
    for (int s = 0; s < S; ++s)
      for (int64_t j = 0; j < len; ++j) vals[s][j] = qs[s]->map[codes[s][first + j]] * absmax[s][b];
    update(first, len, vals);
    for (int s = 0; s < S; ++s) {
      float amax = 0.0f;  // NaN values are skipped, as fmaxf does on the GPU
      for (int64_t j = 0; j < len; ++j) amax = std::max(amax, std::fabs(vals[s][j]));
      absmax[s][b] = amax;
      for (int64_t j = 0; j < len; ++j)
        codes[s][first + j] = quantize_nearest(qs[s]->map, quant_normalise(vals[s][j], amax));
    }
  }
}

template <class T>
void adamw8bit_one(const Tensor& param, const Tensor& grad, const QuantState& m, const QuantState& v, size_t k,
                   const AdamWConsts& c, const SrStream& sr) {
  using A = acc_t<T>;
  T* __restrict p = param.data<T>();
  const T* __restrict g = grad.data<T>();
  const QuantState* qs[2] = {&m, &v};
  q8_walk<2>(param.numel(), qs, k, [&](int64_t first, int64_t len, float (&vals)[2][kQuantBlock]) {
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = first + j;
      const float gi = float(ld(g, i)) * c.grad_scale;
      const float mi = c.beta1 * vals[0][j] + c.one_minus_beta1 * gi;
      const float vi = c.beta2 * vals[1][j] + c.one_minus_beta2 * gi * gi;
      const float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
      const float u = c.step_size * mi / denom;
      st_param(p, i, acc_t<T>(A(ld(p, i)) * A(c.decay) - A(u)), sr);
      vals[0][j] = mi;
      vals[1][j] = vi;
    }
  });
}

template <class T>
void lion8bit_one(const Tensor& param, const Tensor& grad, const QuantState& m, size_t k, const LionConsts<float>& c,
                  const SrStream& sr) {
  using A = acc_t<T>;
  T* __restrict p = param.data<T>();
  const T* __restrict g = grad.data<T>();
  const QuantState* qs[1] = {&m};
  q8_walk<1>(param.numel(), qs, k, [&](int64_t first, int64_t len, float (&vals)[1][kQuantBlock]) {
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = first + j;
      const float gi = float(ld(g, i)) * c.grad_scale;
      const float mi = vals[0][j];
      const float ci = c.beta1 * mi + c.one_minus_beta1 * gi;
      st_param(p, i, acc_t<T>(A(ld(p, i)) * A(c.decay) - A(c.lr * sign_of(ci))), sr);
      vals[0][j] = c.beta2 * mi + c.one_minus_beta2 * gi;
    }
  });
}

void check_pairs(const char* op, std::span<const Tensor> params, std::span<const Tensor> grads) {
  LT_CHECK(grads.size() == params.size(), std::string(op) + ": " + std::to_string(grads.size()) + " grads for " +
                                              std::to_string(params.size()) + " parameters",
           "each parameter needs one", "pass matching lists");
  for (size_t k = 0; k < params.size(); ++k)
    LT_CHECK(grads[k].dtype() == params[k].dtype() && grads[k].numel() == params[k].numel() &&
                 params[k].is_contiguous() && grads[k].is_contiguous(),
             std::string(op) + ": grad " + std::to_string(k) + " does not fit its parameter",
             std::string(dtype_name(grads[k].dtype())) + " " + shape_str(grads[k].shape()) + " vs " +
                 dtype_name(params[k].dtype()) + " " + shape_str(params[k].shape()),
             "pass contiguous grads of the parameter's dtype and size");
}

}  // namespace

void CpuBackend::lion_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                           const LionArgs& args) {
  check_pairs("lion_step", params, grads);
  LT_CHECK(m.size() == params.size(), "lion_step: " + std::to_string(m.size()) + " states for " +
                                          std::to_string(params.size()) + " parameters",
           "each parameter needs one", "pass matching lists");
  for (size_t k = 0; k < params.size(); ++k) {
    LT_CHECK(m[k].numel() == params[k].numel() && m[k].is_contiguous(), "lion_step: state " + std::to_string(k) +
                                                                            " does not fit its parameter",
             shape_str(m[k].shape()) + " vs " + shape_str(params[k].shape()), "pass contiguous states of its size");
    dispatch_float(params[k].dtype(), [&](auto t) {
      dispatch_float(m[k].dtype(), [&](auto s) { 
        lion_one<decltype(t), decltype(s)>(params[k], grads[k], m[k], args, sr_stream_of(args.sr, params.size(), k));
      });
    });
  }
}

void CpuBackend::adamw8bit_step(std::span<const Tensor> params, std::span<const Tensor> grads, const QuantState& m,
                                const QuantState& v, const AdamWArgs& args) {
  check_pairs("adamw8bit_step", params, grads);
  check_q8("adamw8bit_step", params, m, "exp_avg");
  check_q8("adamw8bit_step", params, v, "exp_avg_sq");
  LT_CHECK(args.step >= 1, "adamw8bit_step: step " + std::to_string(args.step), "steps count from 1",
           "pass the 1-based step number");
  const AdamWConsts c = adamw_consts(args);
  for (size_t k = 0; k < params.size(); ++k)
    dispatch_float(params[k].dtype(), [&](auto t) { 
      adamw8bit_one<decltype(t)>(params[k], grads[k], m, v, k, c, sr_stream_of(args.sr, params.size(), k));
    });
}

void CpuBackend::lion8bit_step(std::span<const Tensor> params, std::span<const Tensor> grads, const QuantState& m,
                               const LionArgs& args) {
  check_pairs("lion8bit_step", params, grads);
  check_q8("lion8bit_step", params, m, "exp_avg");
  const LionConsts<float> c = lion_consts<float>(args);
  for (size_t k = 0; k < params.size(); ++k)
    dispatch_float(params[k].dtype(), [&](auto t) { 
      lion8bit_one<decltype(t)>(params[k], grads[k], m, k, c, sr_stream_of(args.sr, params.size(), k));
    });
}

}  // namespace lt
