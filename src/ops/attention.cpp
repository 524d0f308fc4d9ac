// Scaled dot-product attention. The forward keeps only out and the per-row log-sum-exp (lse);
// the backward recomputes the probabilities from q, k and lse, so no Tq x Tk tensor is ever
// allocated through the allocator (the CUDA kernel tiles; the CPU reference uses host scratch).
#include <cmath>

#include "ops/op_common.h"

namespace lt {
using namespace detail;

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal,
                                    const Tensor& mask_in, double scale) {
  const char* name = "scaled_dot_product_attention";
  OpNameScope op("attention");
  Device dev = common_device(name, {q_in, k_in, v_in, mask_in});
  check_floating(name, q_in);
  check_same_dtype(name, q_in, k_in);
  check_same_dtype(name, q_in, v_in);
  check_rank(name, q_in, 4, "q [B, H, Tq, D]");
  check_rank(name, k_in, 4, "k [B, H, Tk, D]");
  check_rank(name, v_in, 4, "v [B, H, Tk, D]");
  const int64_t B = q_in.size(0), H = q_in.size(1), Tq = q_in.size(2), D = q_in.size(3), Tk = k_in.size(2);
  const std::string shapes =
      "q " + shape_str(q_in.shape()) + ", k " + shape_str(k_in.shape()) + ", v " + shape_str(v_in.shape());
  LT_CHECK(k_in.size(0) == B && k_in.size(1) == H && k_in.size(3) == D && v_in.shape() == k_in.shape(),
           std::string(name) + ": q, k, v shapes do not fit", shapes,
           "use q [B, H, Tq, D] and k, v [B, H, Tk, D] with equal B, H, D (repeat k/v heads for grouped queries)");
  LT_CHECK(D > 0 && Tq > 0 && Tk > 0, std::string(name) + ": empty head dim or sequence", shapes,
           "pass at least one query, one key and D > 0");
  if (mask_in.defined()) {
    LT_CHECK(mask_in.dtype() == DType::U8 && mask_in.shape() == Shape({B, Tk}),
             std::string(name) + ": key_padding_mask is " + dtype_name(mask_in.dtype()) + " " +
                 shape_str(mask_in.shape()),
             "it must be u8 [B, Tk] = [" + std::to_string(B) + ", " + std::to_string(Tk) + "] with 1 = attend",
             "build it from the attention mask as u8");
  }
  const float sc = scale > 0 ? float(scale) : float(1.0 / std::sqrt(double(D)));
  Tensor q = contiguous(q_in), k = contiguous(k_in), v = contiguous(v_in);
  Tensor mask = mask_in.defined() ? contiguous_data(mask_in) : Tensor();
  Tensor out = Tensor::empty(q.shape(), q.dtype(), dev);
  Tensor lse = Tensor::empty({B, H, Tq}, aux_dtype(q.dtype()), dev);
  backend_for(dev).attention_fwd(out, lse, q, k, v, mask, causal, sc);
  // Every gradient needs the probabilities (q, k, lse) and v or out; save them all.
  const bool need_q = q.requires_grad(), need_k = k.requires_grad(), need_v = v.requires_grad();
  Tensor so = out.detach();
  record(out, "attention", {q, k, v}, [=](const Tensor& g) {
    Tensor dq = Tensor::empty(q.shape(), g.dtype(), g.device());
    Tensor dk = Tensor::empty(k.shape(), g.dtype(), g.device());
    Tensor dv = Tensor::empty(v.shape(), g.dtype(), g.device());
    backend_of(g).attention_bwd(dq, dk, dv, contiguous_data(g), q, k, v, so, lse, mask, causal, sc);
    return std::vector<Tensor>{need_q ? dq : Tensor(), need_k ? dk : Tensor(), need_v ? dv : Tensor()};
  });
  return out;
}

}  // namespace lt
