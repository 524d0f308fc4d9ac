// The dry-run device: every kernel is a no-op. Allocation happens in the op front-ends, so a
// step on meta makes exactly the allocations a real step makes, with no memory and no compute.
#pragma once
#include "backend/backend.h"
#include "memory/host_allocators.h"

namespace lt {

class MetaBackend final : public Backend {
 public:
  void fill(const Tensor&, double) override {}
  void copy(const Tensor&, const Tensor&) override {}
  void copy_from_host(const Tensor&, const void*) override {}
  void copy_to_host(void*, const Tensor&) override {}
  void fill_random(const Tensor&, RandomKind, float, float, uint64_t, uint64_t) override {}
  void binary(BinaryOp, const Tensor&, const Tensor&, const Tensor&) override {}
  void unary(UnaryOp, const Tensor&, const Tensor&, float) override {}
  void unary_backward(UnaryOp, const Tensor&, const Tensor&, const Tensor&, float) override {}
  void dropout(const Tensor&, const Tensor&, float, uint64_t, uint64_t) override {}
  void reduce_sum(const Tensor&, const Tensor&) override {}
  void argmax_lastdim(const Tensor&, const Tensor&) override {}
  void sum_squares(const Tensor&, std::span<const Tensor>) override {}
  // Mirrors the CUDA backend's cuBLASLt workspace (taken at the first GEMM) when meta simulates CUDA.
  void gemm(const Tensor&, const Tensor&, const Tensor&, const GemmDesc&, const Tensor&) override {
    simulate_gemm_workspace();
  }
  void layernorm_fwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     float) override {}
  void layernorm_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     const Tensor&, const Tensor&) override {}
  void rmsnorm_fwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float) override {}
  void rmsnorm_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void add_layernorm_fwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, float) override {}
  void add_layernorm_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, const Tensor&) override {}
  void add_rmsnorm_fwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       float) override {}
  void add_rmsnorm_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const Tensor&) override {}
  void softmax_fwd(const Tensor&, const Tensor&) override {}
  void softmax_bwd(const Tensor&, const Tensor&, const Tensor&) override {}
  void attention_fwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool,
                     float) override {}
  void attention_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, float) override {}
  void embedding_fwd(const Tensor&, const Tensor&, const Tensor&) override {}
  void embedding_bwd(const Tensor&, const Tensor&, const Tensor&) override {}
  void rope(const Tensor&, const Tensor&, float, int64_t, bool) override {}
  void cross_entropy_fwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t) override {}
  void cross_entropy_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t) override {}
  void adamw_step(std::span<const Tensor>, std::span<const Tensor>, std::span<const Tensor>, std::span<const Tensor>,
                  const AdamWArgs&) override {}
  void sgd_step(std::span<const Tensor>, std::span<const Tensor>, std::span<const Tensor>, const SgdArgs&) override {}
  void lion_step(std::span<const Tensor>, std::span<const Tensor>, std::span<const Tensor>, const LionArgs&) override {}
  void adamw8bit_step(std::span<const Tensor>, std::span<const Tensor>, const QuantState&, const QuantState&,
                      const AdamWArgs&) override {}
  void lion8bit_step(std::span<const Tensor>, std::span<const Tensor>, const QuantState&, const LionArgs&) override {}
};

}  // namespace lt
