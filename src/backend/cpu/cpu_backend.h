// The reference backend. It defines what each op means: accumulation in f32 (f64 for f64),
// f16/bf16 converted on load and store. Each op family's kernels live in their own file.
#pragma once
#include "backend/backend.h"

namespace lt {

class CpuBackend final : public Backend {
 public:
  // cpu_copy.cpp
  void fill(const Tensor& out, double value) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void copy_from_host(const Tensor& dst, const void* src) override;
  void copy_to_host(void* dst, const Tensor& src) override;
  void fill_random(const Tensor& out, RandomKind kind, float a, float b, uint64_t seed, uint64_t offset) override;
  // cpu_elementwise.cpp
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override;
  void unary(UnaryOp op, const Tensor& out, const Tensor& x, float alpha) override;
  void unary_backward(UnaryOp op, const Tensor& dx, const Tensor& dy, const Tensor& x, float alpha) override;
  void dropout(const Tensor& out, const Tensor& x, float p, uint64_t seed, uint64_t offset) override;
  // cpu_reduce.cpp
  void reduce_sum(const Tensor& out, const Tensor& in) override;
  void argmax_lastdim(const Tensor& out, const Tensor& x) override;
  void sum_squares(const Tensor& out, std::span<const Tensor> xs) override;
  // cpu_gemm.cpp
  void gemm(const Tensor& c, const Tensor& a, const Tensor& b, const GemmDesc& d, const Tensor& bias) override;
  // cpu_norm.cpp
  void layernorm_fwd(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& w,
                     const Tensor& b, float eps) override;
  void layernorm_bwd(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Tensor& mean, const Tensor& rstd) override;
  void rmsnorm_fwd(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, float eps) override;
  void rmsnorm_bwd(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                   const Tensor& rstd) override;
  void add_layernorm_fwd(const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                         const Tensor& r, const Tensor& w, const Tensor& b, float eps) override;
  void add_layernorm_bwd(const Tensor& dsum, const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& ds,
                         const Tensor& sum, const Tensor& w, const Tensor& mean, const Tensor& rstd) override;
  void add_rmsnorm_fwd(const Tensor& sum, const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& r,
                       const Tensor& w, float eps) override;
  void add_rmsnorm_bwd(const Tensor& dsum, const Tensor& dw, const Tensor& dy, const Tensor& ds, const Tensor& sum,
                       const Tensor& w, const Tensor& rstd) override;
  void softmax_fwd(const Tensor& y, const Tensor& x) override;
  void softmax_bwd(const Tensor& dx, const Tensor& dy, const Tensor& y) override;
  // cpu_attention.cpp
  void attention_fwd(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& mask, bool causal, float scale) override;
  void attention_bwd(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                     const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& mask,
                     bool causal, float scale) override;
  // cpu_embedding.cpp
  void embedding_fwd(const Tensor& out, const Tensor& ids, const Tensor& weight) override;
  void embedding_bwd(const Tensor& dweight, const Tensor& dout, const Tensor& ids) override;
  void rope(const Tensor& out, const Tensor& x, float base, int64_t pos_offset, bool inverse) override;
  // cpu_loss.cpp
  void cross_entropy_fwd(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& targets,
                         int64_t ignore_index) override;
  void cross_entropy_bwd(const Tensor& dlogits, const Tensor& dloss, const Tensor& logits, const Tensor& lse,
                         const Tensor& targets, int64_t ignore_index) override;
  // cpu_optim.cpp
  void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                  std::span<const Tensor> v, const AdamWArgs& args) override;
  void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> momentum_bufs,
                const SgdArgs& args) override;
  // cpu_optim_lean.cpp (Lion, 8-bit block-wise AdamW and Lion)
  void lion_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                 const LionArgs& args) override;
  void adamw8bit_step(std::span<const Tensor> params, std::span<const Tensor> grads, const QuantState& m,
                      const QuantState& v, const AdamWArgs& args) override;
  void lion8bit_step(std::span<const Tensor> params, std::span<const Tensor> grads, const QuantState& m,
                     const LionArgs& args) override;
};

}  // namespace lt
