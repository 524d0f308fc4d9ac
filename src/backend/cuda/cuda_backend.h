// The CUDA backend (sm_90). Each op family lives in its own .cu file; launchers check shapes
// and the last CUDA error. Outputs come preallocated from the op front-ends (through the
// caching allocator), so kernels never allocate, except cuBLASLt workspace, which is a
// Workspace-category tensor held by the backend.
#pragma once
#include "backend/backend.h"

namespace lt {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device_index) : device_index_(device_index) {}
  int device_index() const { return device_index_; }
  void synchronize() override;
  // copy.cu
  void fill(const Tensor& out, double value) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void copy_from_host(const Tensor& dst, const void* src) override;
  void copy_to_host(void* dst, const Tensor& src) override;
  void fill_random(const Tensor& out, RandomKind kind, float a, float b, uint64_t seed, uint64_t offset) override;
  // cuda_runtime.cpp: pinned staging memory and copy events (the data loader)
  void* alloc_staging(int64_t nbytes) override;
  void free_staging(void* p) noexcept override;
  void* create_copy_event() override;
  void destroy_copy_event(void* event) noexcept override;
  void copy_from_host_async(const Tensor& dst, const void* src) override;
  void record_copy_event(void* event) override;
  bool copy_event_done(void* event) override;
  void wait_copy_event(void* event) override;
  // elementwise.cu
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override;
  void unary(UnaryOp op, const Tensor& out, const Tensor& x, float alpha) override;
  void unary_backward(UnaryOp op, const Tensor& dx, const Tensor& dy, const Tensor& x, float alpha) override;
  void dropout(const Tensor& out, const Tensor& x, float p, uint64_t seed, uint64_t offset) override;
  // reduce.cu
  void reduce_sum(const Tensor& out, const Tensor& in) override;
  void argmax_lastdim(const Tensor& out, const Tensor& x) override;
  void sum_squares(const Tensor& out, std::span<const Tensor> xs) override;
  // gemm.cu (cuBLASLt)
  void gemm(const Tensor& c, const Tensor& a, const Tensor& b, const GemmDesc& d, const Tensor& bias) override;
  // norm.cu
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
  // attention.cu (flash-style, no TxT matrix)
  void attention_fwd(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& mask, bool causal, float scale) override;
  void attention_bwd(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                     const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& mask,
                     bool causal, float scale) override;
  // embedding.cu
  void embedding_fwd(const Tensor& out, const Tensor& ids, const Tensor& weight) override;
  void embedding_bwd(const Tensor& dweight, const Tensor& dout, const Tensor& ids) override;
  void rope(const Tensor& out, const Tensor& x, float base, int64_t pos_offset, bool inverse) override;
  // loss.cu
  void cross_entropy_fwd(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& targets,
                         int64_t ignore_index) override;
  void cross_entropy_bwd(const Tensor& dlogits, const Tensor& dloss, const Tensor& logits, const Tensor& lse,
                         const Tensor& targets, int64_t ignore_index) override;
  // optim.cu (one fused multi-tensor launch per step)
  void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                  std::span<const Tensor> v, const AdamWArgs& args) override;
  void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> momentum_bufs,
                const SgdArgs& args) override;
  // optim_lean.cu (Lion, 8-bit block-wise AdamW and Lion; one fused launch per step)
  void lion_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                 const LionArgs& args) override;
  void adamw8bit_step(std::span<const Tensor> params, std::span<const Tensor> grads, const QuantState& m,
                      const QuantState& v, const AdamWArgs& args) override;
  void lion8bit_step(std::span<const Tensor> params, std::span<const Tensor> grads, const QuantState& m,
                     const LionArgs& args) override;

 private:
  int device_index_;
};

}  // namespace lt
