// One table of op cases, each run on every backend that is built and available (cpu, meta,
// and cuda when a GPU answers) for each dtype, forward and backward, against the CPU result
// computed in f64 from the same inputs (rounded to the dtype under test first, so only the
// op's own rounding counts). On meta, output/gradient shapes and the allocation trace
// (action, size, requested, category, in order) must equal the CPU's for the same dtype.
// Inputs are fresh every run; the seed is printed, and LT_TEST_SEED=<seed> replays a run.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>

#include "leantrain/autograd.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"
#include "unit/rel_error.h"

using namespace lt;

namespace {

// ---- the op table ----
// Shapes keep reductions from ending in a handful of near-cancelling sums (one scalar that
// sums random signs has an unbounded relative error in any dtype): broadcast operands have
// several elements, and whole-tensor sums run over positive values.

enum class Kind { Normal, Positive, Ids, Targets, Mask };
struct In {
  Shape shape;
  Kind kind = Kind::Normal;
  bool grad = true;
  int64_t classes = 0;  // ids and targets: values in [0, classes)
  std::vector<double> fixed;  // a mask given as values (0 or 1) instead of drawn
};
In F(Shape s) { return {s}; }
In Fc(Shape s) { return {s, Kind::Normal, false}; }       // floating, no gradient
In Pos(Shape s) { return {s, Kind::Positive}; }           // in [0.5, 2]: log, sqrt, pow, divisors
In Ids(Shape s, int64_t v) { return {s, Kind::Ids, false, v}; }
In Tgt(Shape s, int64_t v) { return {s, Kind::Targets, false, v}; }  // about 1 in 4 is -100
In Mask(Shape s) { return {s, Kind::Mask, false}; }       // u8 [B, Tk]; the last batch sees nothing

// A fixed key-padding mask [B, Tk] (B >= 3) whose patterns every run checks, whatever the seed:
// batch 0 masks every third key, the last key and, for Tk > 64, keys 63 and 64 (the edges of
// the GPU's 64-key tiles); batch 1 sees the single key Tk / 2 (its softmax is constant, so its
// dq and dk are exactly zero); batches 2.. see nothing (zero outputs and gradients, lse = +inf).
// With causal, batch 1's queries before Tk / 2 see no key at all.
In FixedMask(int64_t b, int64_t tk) {
  std::vector<double> m(size_t(b * tk), 0.0);
  for (int64_t j = 0; j < tk; ++j) {
    m[size_t(j)] = (j % 3 == 2 || j == tk - 1 || (tk > 64 && (j == 63 || j == 64))) ? 0.0 : 1.0;
    m[size_t(tk + j)] = j == tk / 2 ? 1.0 : 0.0;
  }
  return {{b, tk}, Kind::Mask, false, 0, m};
}

using V = std::vector<Tensor>;
struct OpCase {
  std::string name;
  std::vector<In> inputs;
  std::function<Tensor(const V&)> fn;
};

Tensor sdpa(const V& x, bool causal, bool masked, double scale = 0.0) {
  return scaled_dot_product_attention(x[0], x[1], x[2], causal, masked ? x[3] : Tensor(), scale);
}

// Packed documents' positions (i32 [B, T] on x's device) for rows of the given document lengths:
// an input of the op, so made outside the allocation trace (as the harness keeps the upstream
// gradient out of it; from_ints stages through the CPU's allocator, which meta's trace lacks).
Tensor docs_like(const Tensor& x, const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> v;
  for (const auto& row : rows)
    for (int64_t n : row)
      for (int64_t i = 0; i < n; ++i) v.push_back(i);
  const int64_t B = int64_t(rows.size());
  Allocator& dev = allocator_for(x.device());
  Allocator& host = allocator_for(Device::cpu());
  const bool dev_on = dev.history_enabled(), host_on = host.history_enabled();
  dev.set_history(false);
  host.set_history(false);
  Tensor d = from_ints(v, {B, int64_t(v.size()) / B}, DType::I32, x.device());
  dev.set_history(dev_on);
  host.set_history(host_on);
  return d;
}

// The gated delta rule on packed qkv with g = -sigmoid(x[1]) (accumulation type) and beta =
// sigmoid(x[2]); packed documents when `docs` names rows.
Tensor gdn_case(const V& x, int64_t hk, int64_t dk, int64_t hv, int64_t dv, int64_t chunk,
                const std::vector<std::vector<int64_t>>& docs = {}) {
  const DType acc = x[0].dtype() == DType::F64 ? DType::F64 : DType::F32;
  const Tensor g = scale(sigmoid(cast(x[1], acc)), -1.0), beta = sigmoid(x[2]);
  return gated_delta_rule_packed(x[0], hk, dk, hv, dv, g, beta, chunk, docs.empty() ? Tensor() : docs_like(x[0], docs));
}

// A channels-last batch norm of x[0] with weight x[1], bias x[2] and running statistics made
// here (zeros and ones).
std::function<Tensor(const V&)> nhwc_norm(bool training) {
  return [training](const V& x) {
    const int64_t C = x[1].numel();
    Tensor rm = zeros({C}, x[1].dtype(), x[0].device()), rv = ones({C}, x[1].dtype(), x[0].device());
    return batch_norm(x[0], x[1], x[2], rm, rv, Tensor(), training, 0.1, 1e-5, ImageLayout::NHWC);
  };
}

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = {
      // elementwise
      {"add_bcast", {F({3, 4, 5}), F({4, 1})}, [](const V& x) { return add(x[0], x[1]); }},
      {"sub_bcast", {F({5}), F({2, 3, 5})}, [](const V& x) { return sub(x[0], x[1]); }},
      {"mul_bcast", {F({4, 1, 16}), F({12, 1})}, [](const V& x) { return mul(x[0], x[1]); }},
      {"div_bcast", {F({8, 32}), Pos({32})}, [](const V& x) { return div(x[0], x[1]); }},
      {"mul_const", {F({6, 7}), Fc({7})}, [](const V& x) { return mul(x[0], x[1]); }},
      {"scale", {F({33})}, [](const V& x) { return scale(x[0], -0.7); }},
      {"add_scalar", {F({33})}, [](const V& x) { return add_scalar(x[0], 1.5); }},
      {"neg", {F({33})}, [](const V& x) { return neg(x[0]); }},
      {"exp", {F({33})}, [](const V& x) { return exp(x[0]); }},
      {"log", {Pos({33})}, [](const V& x) { return log(x[0]); }},
      {"sqrt", {Pos({33})}, [](const V& x) { return sqrt(x[0]); }},
      {"tanh", {F({33})}, [](const V& x) { return tanh(x[0]); }},
      {"sigmoid", {F({33})}, [](const V& x) { return sigmoid(x[0]); }},
      {"log_sigmoid", {F({33})}, [](const V& x) { return log_sigmoid(x[0]); }},
      {"relu", {F({33})}, [](const V& x) { return relu(x[0]); }},
      {"gelu_tanh", {F({33})}, [](const V& x) { return gelu(x[0], GeluApprox::Tanh); }},
      {"gelu_erf", {F({33})}, [](const V& x) { return gelu(x[0], GeluApprox::Erf); }},
      {"silu", {F({33})}, [](const V& x) { return silu(x[0]); }},
      {"pow", {Pos({33})}, [](const V& x) { return pow_scalar(x[0], 1.7); }},
      {"exp_strided", {F({4, 6})}, [](const V& x) { return exp(transpose(x[0], 0, 1)); }},
      // the GPU's 16-byte kernels: whole packs plus a tail (3003 = 375 x 8 + 3), a row bias of whole
      // packs, a row of 7 (scalar), and views starting off a 16-byte boundary (scalar)
      {"gelu_tanh_packed", {F({3, 1001, 1})}, [](const V& x) { return gelu(x[0], GeluApprox::Tanh); }},
      {"silu_packed", {F({1005})}, [](const V& x) { return silu(x[0]); }},
      {"add_dense_tail", {F({5, 13}), F({5, 13})}, [](const V& x) { return add(x[0], x[1]); }},
      {"mul_dense_tail", {F({67}), F({67})}, [](const V& x) { return mul(x[0], x[1]); }},
      {"add_row_packed", {F({6, 16}), F({16})}, [](const V& x) { return add(x[0], x[1]); }},
      {"sub_row_odd", {F({4, 7}), F({7})}, [](const V& x) { return sub(x[0], x[1]); }},
      {"exp_offset", {F({4, 3})}, [](const V& x) { return exp(slice(x[0], 0, 1, 4)); }},
      {"add_offset", {F({4, 3}), F({3, 3})}, [](const V& x) { return add(slice(x[0], 0, 1, 4), x[1]); }},
      // matrix products
      {"matmul", {F({5, 7}), F({7, 3})}, [](const V& x) { return matmul(x[0], x[1]); }},
      {"matmul_batched", {F({2, 3, 4, 5}), F({2, 3, 5, 6})}, [](const V& x) { return matmul(x[0], x[1]); }},
      {"matmul_ta", {F({2, 5, 4}), F({2, 5, 3})}, [](const V& x) { return matmul(x[0], x[1], true, false); }},
      {"matmul_tb", {F({2, 4, 5}), F({2, 3, 5})}, [](const V& x) { return matmul(x[0], x[1], false, true); }},
      {"matmul_tab", {F({5, 4}), F({3, 5})}, [](const V& x) { return matmul(x[0], x[1], true, true); }},
      {"matmul_bcast", {F({4, 5}), F({3, 5, 6})}, [](const V& x) { return matmul(x[0], x[1]); }},
      {"matmul_bcast_b", {F({2, 3, 4, 5}), F({5, 6})}, [](const V& x) { return matmul(x[0], x[1]); }},
      {"linear", {F({2, 3, 8}), F({5, 8}), F({5})}, [](const V& x) { return linear(x[0], x[1], x[2]); }},
      {"linear_nobias", {F({6, 8}), F({5, 8})}, [](const V& x) { return linear(x[0], x[1], Tensor()); }},
      // fc1 + tanh GELU in one op (the GPU's GEMM epilogue): both weight layouts, and a width
      // that is not a multiple of 8 (runs as linear then gelu)
      {"linear_gelu", {F({2, 3, 16}), F({24, 16}), F({24})}, [](const V& x) { return linear_gelu(x[0], x[1], x[2]); }},
      {"linear_gelu_in_out", {F({5, 16}), F({16, 32}), F({32})},
       [](const V& x) { return linear_gelu(x[0], x[1], x[2], true); }},
      {"linear_gelu_nobias", {F({7, 8}), F({16, 8})}, [](const V& x) { return linear_gelu(x[0], x[1], Tensor()); }},
      {"linear_gelu_odd", {F({4, 8}), F({13, 8}), F({13})}, [](const V& x) { return linear_gelu(x[0], x[1], x[2]); }},
      // the linears that recompute their input in the backward (gelu(pre), layer_norm(x))
      {"gelu_linear_erf", {F({2, 3, 16}), F({8, 16}), F({8})},
       [](const V& x) { return gelu_linear(x[0], x[1], x[2], GeluApprox::Erf); }},
      {"gelu_linear_tanh_in_out", {F({5, 24}), F({24, 8})},
       [](const V& x) { return gelu_linear(x[0], x[1], Tensor(), GeluApprox::Tanh, true); }},
      {"linear_gelu_parts_then_gelu_linear", {F({2, 3, 16}), F({24, 16}), F({24}), F({16, 24}), F({16})},
       [](const V& x) {
         LinearGelu h = linear_gelu_parts(x[0], x[1], x[2], GeluApprox::Tanh);
         return gelu_linear(h.pre, x[3], x[4], GeluApprox::Tanh, false, h.act);
       }},
      {"layer_norm_linear", {F({4, 6, 32}), F({32}), F({32}), F({12, 32}), F({12})},
       [](const V& x) { return layer_norm_linear(x[0], x[1], x[2], 1e-5, x[3], x[4]); }},
      {"layer_norm_linear_nobias_in_out", {F({5, 16}), F({16}), F({16, 24})},
       [](const V& x) { return layer_norm_linear(x[0], x[1], Tensor(), 1e-5, x[2], Tensor(), true); }},
      // shapes of multiples of 8, so that on CUDA the bias gradient rides in the weight gradient's
      // GEMM (gemm_bgrad: BGRADB for [out, in] weights, BGRADA for [in, out]) and the tanh GELU's
      // backward in the input gradient's (gemm_dgelu)
      {"linear_bgrad_aligned", {F({4, 16, 32}), F({64, 32}), F({64})}, [](const V& x) { return linear(x[0], x[1], x[2]); }},
      {"linear_bgrad_in_out", {F({64, 32}), F({32, 48}), F({48})},
       [](const V& x) { return linear(x[0], x[1], x[2], true); }},
      {"gelu_linear_tanh_dgelu", {F({64, 64}), F({32, 64}), F({32})},
       [](const V& x) { return gelu_linear(x[0], x[1], x[2], GeluApprox::Tanh); }},
      {"gelu_linear_tanh_dgelu_in_out", {F({2, 32, 48}), F({48, 64}), F({64})},
       [](const V& x) { return gelu_linear(x[0], x[1], x[2], GeluApprox::Tanh, true); }},
      {"layer_norm_linear_gelu_then_gelu_linear", {F({2, 16, 32}), F({32}), F({32}), F({64, 32}), F({64}), F({32, 64}), F({32})},
       [](const V& x) {
         LinearGelu h = layer_norm_linear_gelu(x[0], x[1], x[2], 1e-5, x[3], x[4]);
         return gelu_linear(h.pre, x[5], x[6], GeluApprox::Tanh, false, h.act);
       }},
      {"layer_norm_linear_bgrad", {F({2, 32, 32}), F({32}), F({32}), F({48, 32}), F({48})},
       [](const V& x) { return layer_norm_linear(x[0], x[1], x[2], 1e-5, x[3], x[4]); }},
      // wide odd outputs come in padded rows (1001 -> 1008 in 16-bit, 1004 in f32, 1002 in f64):
      // the GEMMs write and read them through ldc/lda/ldb, and the bias epilogue writes them too
      {"linear_wide_odd", {F({2, 3, 16}), F({1001, 16})}, [](const V& x) { return linear(x[0], x[1], Tensor()); }},
      {"linear_wide_odd_bias_chain", {F({5, 16}), F({1001, 16}), F({1001}), F({7, 1001})},
       [](const V& x) { return linear(linear(x[0], x[1], x[2]), x[3], Tensor()); }},
      // reductions
      {"sum_keepdim", {F({3, 4, 5})}, [](const V& x) { return sum(x[0], {0, 2}, true); }},
      {"sum_last", {F({3, 4, 5})}, [](const V& x) { return sum(x[0], {-1}); }},
      {"mean_mid", {F({3, 4, 5})}, [](const V& x) { return mean(x[0], {1}); }},
      {"sum_all", {Pos({6, 7})}, [](const V& x) { return sum_all(x[0]); }},
      {"mean_all", {Pos({6, 7})}, [](const V& x) { return mean_all(x[0]); }},
      {"sum_to", {F({2, 3, 4})}, [](const V& x) { return sum_to(x[0], {3, 1}); }},
      // column sums (bias gradients) on the GPU's column kernel: 16-byte packs (24 columns),
      // scalar columns (37, GPT-2's 50257), more rows than row lanes, fewer rows than lanes
      {"sum_cols_tall", {F({4100, 24})}, [](const V& x) { return sum(x[0], {0}); }},
      {"sum_cols_odd", {F({300, 37})}, [](const V& x) { return sum(x[0], {0}); }},
      {"sum_cols_short_wide", {F({3, 1000})}, [](const V& x) { return sum(x[0], {0}); }},
      {"sum_cols_vocab", {F({20, 50257})}, [](const V& x) { return sum(x[0], {0}); }},
      {"linear_bias_tall", {F({2, 257, 16}), F({40, 16}), F({40})}, [](const V& x) { return linear(x[0], x[1], x[2]); }},
      {"argmax", {Fc({5, 9})}, [](const V& x) { return argmax(x[0]); }},
      // shape and layout
      {"reshape", {F({2, 3, 4})}, [](const V& x) { return reshape(x[0], {4, -1}); }},
      {"permute", {F({2, 3, 4})}, [](const V& x) { return permute(x[0], {2, 0, 1}); }},
      {"transpose_contig", {F({3, 5})}, [](const V& x) { return contiguous(transpose(x[0], 0, 1)); }},
      {"slice", {F({2, 6, 3})}, [](const V& x) { return slice(x[0], 1, 1, -1); }},
      {"select", {F({2, 3, 4})}, [](const V& x) { return select(x[0], 2, -1); }},
      {"concat", {F({2, 1, 3}), F({2, 4, 3})}, [](const V& x) { return concat({x[0], x[1]}, 1); }},
      {"expand", {F({3, 1})}, [](const V& x) { return expand(x[0], {2, 3, 4}); }},
      {"cast", {F({9})}, [](const V& x) { return cast(scale(cast(x[0], DType::F32), 2.0), x[0].dtype()); }},
      // the GPU's packed casts: 8-element packs and a tail (201 = 25 x 8 + 1), 16-bit to 16-bit
      {"cast_packed", {F({3, 67})}, [](const V& x) { return cast(scale(cast(x[0], DType::F32), 2.0), x[0].dtype()); }},
      {"cast_f16_bf16", {F({3, 67})},
       [](const V& x) { return cast(cast(x[0], x[0].dtype() == DType::F16 ? DType::BF16 : DType::F16), x[0].dtype()); }},
      {"patchify", {F({2, 3, 8, 8})}, [](const V& x) { return patchify(x[0], 4); }},
      // norms and softmax
      {"layer_norm", {F({4, 6, 32}), F({32}), F({32})}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }},
      {"layer_norm_nobias", {F({5, 16}), F({16})}, [](const V& x) { return layer_norm(x[0], x[1], Tensor()); }},
      {"layer_norm_const_w", {F({5, 16}), Fc({16}), F({16})}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }},
      {"rms_norm", {F({4, 6, 32}), F({32})}, [](const V& x) { return rms_norm(x[0], x[1]); }},
      // dw, db over more rows than the GPU's packed column kernel has lanes (two rows in flight, a tail)
      {"layer_norm_tall", {F({601, 48}), F({48}), F({48})}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }},
      {"rms_norm_tall", {F({300, 24}), F({24})}, [](const V& x) { return rms_norm(x[0], x[1]); }},
      // enough rows (and a row count no multiple of the lanes) for the weight/bias sums to split
      // their rows over a cluster of blocks on sm_90
      {"layer_norm_cluster_rows", {F({2309, 64}), F({64}), F({64})}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }},
      {"rms_norm_cluster_rows", {F({4100, 32}), F({32})}, [](const V& x) { return rms_norm(x[0], x[1]); }},
      // fused residual add + norm: both outputs (concat gives each its own upstream gradient),
      // then each alone (y only: no incoming gradient for the sum; sum only: the norm gets none)
      {"add_layer_norm", {F({4, 6, 32}), F({4, 6, 32}), F({32}), F({32})},
       [](const V& x) { AddNormResult r = add_layer_norm(x[0], x[1], x[2], x[3]); return concat({r.sum, r.y}, 0); }},
      {"add_layer_norm_y", {F({5, 40}), F({5, 40}), F({40}), F({40})},
       [](const V& x) { return add_layer_norm(x[0], x[1], x[2], x[3]).y; }},
      {"add_layer_norm_sum", {F({5, 16}), F({5, 16}), F({16})},
       [](const V& x) { return add_layer_norm(x[0], x[1], x[2], Tensor()).sum; }},
      {"add_layer_norm_nobias_wide", {F({3, 264}), F({3, 264}), F({264})},
       [](const V& x) { AddNormResult r = add_layer_norm(x[0], x[1], x[2], Tensor()); return concat({r.y, r.sum}, 1); }},
      {"add_layer_norm_odd", {F({7, 13}), F({7, 13}), F({13}), F({13})},
       [](const V& x) { AddNormResult r = add_layer_norm(x[0], x[1], x[2], x[3]); return concat({r.sum, r.y}, 0); }},
      {"add_rms_norm", {F({4, 6, 32}), F({4, 6, 32}), F({32})},
       [](const V& x) { AddNormResult r = add_rms_norm(x[0], x[1], x[2]); return concat({r.sum, r.y}, 0); }},
      {"add_rms_norm_y", {F({7, 13}), F({7, 13}), F({13})}, [](const V& x) { return add_rms_norm(x[0], x[1], x[2]).y; }},
      // Gemma's x * (1 + w): the plain, packed-row, fused-add and fused-backward paths
      {"rms_norm_unit_offset", {F({4, 6, 32}), F({32})}, [](const V& x) { return rms_norm(x[0], x[1], 1e-6, true); }},
      {"rms_norm_unit_offset_odd", {F({301, 13}), F({13})}, [](const V& x) { return rms_norm(x[0], x[1], 1e-6, true); }},
      {"add_rms_norm_unit_offset", {F({4, 6, 32}), F({4, 6, 32}), F({32})},
       [](const V& x) { AddNormResult r = add_rms_norm(x[0], x[1], x[2], 1e-6, true); return concat({r.sum, r.y}, 0); }},
      {"softmax", {F({3, 5, 17})}, [](const V& x) { return softmax(x[0]); }},
      // images (ResNet): convolutions (stride, padding, the 7x7 stem, a 1x1 shortcut, odd channels),
      // batch norm in both modes (running statistics made here: zeros and ones), max pooling
      {"conv2d_s2_p1", {F({2, 3, 9, 7}), F({5, 3, 3, 3}), F({5})},
       [](const V& x) { return conv2d(x[0], x[1], x[2], 2, 1); }},
      {"conv2d_1x1_s2", {F({2, 6, 7, 7}), F({4, 6, 1, 1})}, [](const V& x) { return conv2d(x[0], x[1], Tensor(), 2, 0); }},
      {"conv2d_stem_7x7", {F({2, 3, 16, 14}), F({8, 3, 7, 7})},
       [](const V& x) { return conv2d(x[0], x[1], Tensor(), 2, 3); }},
      {"batch_norm_train", {F({4, 5, 6, 3}), F({5}), F({5})},
       [](const V& x) {
         Tensor rm = zeros({5}, x[1].dtype(), x[0].device()), rv = ones({5}, x[1].dtype(), x[0].device());
         return batch_norm(x[0], x[1], x[2], rm, rv, Tensor(), true);
       }},
      {"batch_norm_eval", {F({3, 5, 4, 4}), F({5}), F({5})},
       [](const V& x) {
         Tensor rm = zeros({5}, x[1].dtype(), x[0].device()), rv = ones({5}, x[1].dtype(), x[0].device());
         return batch_norm(x[0], x[1], x[2], rm, rv, Tensor(), false);
       }},
      {"max_pool2d_3s2p1", {F({2, 3, 9, 8})}, [](const V& x) { return max_pool2d(x[0], 3, 2, 1); }},
      // the same ops channels-last (NHWC, x [N, H, W, C]): odd channels, 16 channels (cuDNN's
      // tensor-core candidates), and norms over more than 256 rows (the GPU's row chunks, G > 1)
      {"conv2d_nhwc_s2_p1", {F({2, 9, 7, 3}), F({5, 3, 3, 3}), F({5})},
       [](const V& x) { return conv2d(x[0], x[1], x[2], 2, 1, ImageLayout::NHWC); }},
      {"conv2d_nhwc_1x1_s2", {F({2, 7, 7, 6}), F({4, 6, 1, 1})},
       [](const V& x) { return conv2d(x[0], x[1], Tensor(), 2, 0, ImageLayout::NHWC); }},
      {"conv2d_nhwc_stem_7x7", {F({2, 16, 14, 3}), F({8, 3, 7, 7})},
       [](const V& x) { return conv2d(x[0], x[1], Tensor(), 2, 3, ImageLayout::NHWC); }},
      {"conv2d_nhwc_c16_3x3", {F({2, 9, 9, 16}), F({24, 16, 3, 3}), F({24})},
       [](const V& x) { return conv2d(x[0], x[1], x[2], 1, 1, ImageLayout::NHWC); }},
      {"batch_norm_nhwc_train", {F({4, 6, 3, 5}), F({5}), F({5})}, nhwc_norm(true)},
      {"batch_norm_nhwc_train_rows_c64", {F({2, 20, 20, 64}), F({64}), F({64})}, nhwc_norm(true)},
      {"batch_norm_nhwc_train_rows_c7", {F({3, 13, 11, 7}), F({7}), F({7})}, nhwc_norm(true)},
      {"batch_norm_nhwc_eval", {F({3, 4, 4, 5}), F({5}), F({5})}, nhwc_norm(false)},
      {"max_pool2d_nhwc_3s2p1", {F({2, 9, 8, 3})}, [](const V& x) { return max_pool2d(x[0], 3, 2, 1, ImageLayout::NHWC); }},
      // attention
      {"attention", {F({2, 3, 7, 16}), F({2, 3, 7, 16}), F({2, 3, 7, 16})}, [](const V& x) { return sdpa(x, false, false); }},
      {"attention_causal", {F({2, 3, 7, 16}), F({2, 3, 7, 16}), F({2, 3, 7, 16})}, [](const V& x) { return sdpa(x, true, false); }},
      {"attention_padded", {F({2, 2, 6, 8}), F({2, 2, 6, 8}), F({2, 2, 6, 8}), Mask({2, 6})},
       [](const V& x) { return sdpa(x, false, true); }},
      {"attention_causal_padded", {F({3, 2, 6, 8}), F({3, 2, 6, 8}), F({3, 2, 6, 8}), Mask({3, 6})},
       [](const V& x) { return sdpa(x, true, true, 0.2); }},
      {"attention_fixed_mask", {F({3, 2, 6, 8}), F({3, 2, 6, 8}), F({3, 2, 6, 8}), FixedMask(3, 6)},
       [](const V& x) { return sdpa(x, false, true); }},
      {"attention_causal_fixed_mask", {F({3, 2, 6, 8}), F({3, 2, 6, 8}), F({3, 2, 6, 8}), FixedMask(3, 6)},
       [](const V& x) { return sdpa(x, true, true); }},
      {"attention_tq_lt_tk", {F({2, 2, 3, 8}), F({2, 2, 9, 8}), F({2, 2, 9, 8})}, [](const V& x) { return sdpa(x, true, false); }},
      {"attention_tq_gt_tk", {F({1, 2, 9, 8}), F({1, 2, 4, 8}), F({1, 2, 4, 8})}, [](const V& x) { return sdpa(x, true, false); }},
      {"attention_permuted_q", {F({2, 5, 3, 8}), F({2, 3, 5, 8}), F({2, 3, 5, 8})},
       [](const V& x) { return scaled_dot_product_attention(permute(x[0], {0, 2, 1, 3}), x[1], x[2], false); }},
      // head dims 64 and 128 take the tensor-core kernels on the GPU; ragged lengths hit the tile tails
      {"attention_d64", {F({1, 2, 77, 64}), F({1, 2, 77, 64}), F({1, 2, 77, 64})}, [](const V& x) { return sdpa(x, false, false); }},
      {"attention_d64_causal", {F({2, 2, 130, 64}), F({2, 2, 130, 64}), F({2, 2, 130, 64})},
       [](const V& x) { return sdpa(x, true, false); }},
      {"attention_d64_causal_padded", {F({2, 1, 70, 64}), F({2, 1, 70, 64}), F({2, 1, 70, 64}), Mask({2, 70})},
       [](const V& x) { return sdpa(x, true, true); }},
      {"attention_d64_tq_lt_tk", {F({1, 2, 33, 64}), F({1, 2, 100, 64}), F({1, 2, 100, 64})},
       [](const V& x) { return sdpa(x, true, false); }},
      {"attention_d128_causal", {F({1, 2, 96, 128}), F({1, 2, 96, 128}), F({1, 2, 96, 128})},
       [](const V& x) { return sdpa(x, true, false); }},
      {"attention_d128_padded", {F({2, 1, 65, 128}), F({2, 1, 65, 128}), F({2, 1, 65, 128}), Mask({2, 65})},
       [](const V& x) { return sdpa(x, false, true); }},
      {"attention_d64_fixed_mask", {F({3, 1, 70, 64}), F({3, 1, 70, 64}), F({3, 1, 70, 64}), FixedMask(3, 70)},
       [](const V& x) { return sdpa(x, false, true); }},
      {"attention_d64_causal_fixed_mask", {F({3, 1, 70, 64}), F({3, 1, 70, 64}), F({3, 1, 70, 64}), FixedMask(3, 70)},
       [](const V& x) { return sdpa(x, true, true); }},
      {"attention_d80", {F({1, 2, 40, 80}), F({1, 2, 40, 80}), F({1, 2, 40, 80})}, [](const V& x) { return sdpa(x, true, false); }},
      // packed self-attention: q, k, v read in place from qkv [B, T, 3*H*D] (strided rows: batch
      // T*3C, head D, time 3C), out written [B, T, H*D], one dqkv buffer; D = 64/128 take the
      // tensor-core kernels on the GPU, the rest the SIMT path; T = 197 is ViT's ragged length
      {"attention_packed", {F({2, 7, 3 * 3 * 16})}, [](const V& x) { return self_attention_packed(x[0], 3, false); }},
      {"attention_packed_causal_padded", {F({3, 6, 3 * 2 * 8}), Mask({3, 6})},
       [](const V& x) { return self_attention_packed(x[0], 2, true, x[1], 0.2); }},
      {"attention_packed_fixed_mask", {F({3, 6, 3 * 2 * 8}), FixedMask(3, 6)},
       [](const V& x) { return self_attention_packed(x[0], 2, false, x[1]); }},
      {"attention_packed_d32_t197", {F({2, 197, 3 * 2 * 32})}, [](const V& x) { return self_attention_packed(x[0], 2, false); }},
      {"attention_packed_d64_t197", {F({2, 197, 3 * 2 * 64})}, [](const V& x) { return self_attention_packed(x[0], 2, false); }},
      {"attention_packed_d64_causal", {F({2, 130, 3 * 2 * 64})}, [](const V& x) { return self_attention_packed(x[0], 2, true); }},
      {"attention_packed_d64_causal_padded", {F({2, 70, 3 * 2 * 64}), Mask({2, 70})},
       [](const V& x) { return self_attention_packed(x[0], 2, true, x[1]); }},
      {"attention_packed_d64_fixed_mask", {F({3, 70, 3 * 1 * 64}), FixedMask(3, 70)},
       [](const V& x) { return self_attention_packed(x[0], 1, false, x[1]); }},
      {"attention_packed_d64_causal_fixed_mask", {F({3, 70, 3 * 2 * 64}), FixedMask(3, 70)},
       [](const V& x) { return self_attention_packed(x[0], 2, true, x[1]); }},
      {"attention_packed_d128_causal", {F({1, 96, 3 * 2 * 128})}, [](const V& x) { return self_attention_packed(x[0], 2, true); }},
      {"attention_packed_d128_padded", {F({2, 65, 3 * 1 * 128}), Mask({2, 65})},
       [](const V& x) { return self_attention_packed(x[0], 1, false, x[1]); }},
      // Edges of the register-tiled f32 kernels (64-row tiles, D = 32/64/128): T around the tile
      // size, Tq != Tk both ways with causal, fully masked rows (Mask: the last batch sees nothing;
      // FixedMask: keys 63/64 and single-key rows), many (b, h) blocks, packed rows.
      // (Tq = 1 with Tk = 2: with a single key the softmax is constant and dq, dk are exactly
      // zero, which a relative error cannot compare)
      {"attention_f32t_tq1_tk2_causal", {F({2, 2, 1, 64}), F({2, 2, 2, 64}), F({2, 2, 2, 64})},
       [](const V& x) { return sdpa(x, true, false); }},
      {"attention_f32t_t63_d32_causal_padded", {F({3, 2, 63, 32}), F({3, 2, 63, 32}), F({3, 2, 63, 32}), Mask({3, 63})},
       [](const V& x) { return sdpa(x, true, true); }},
      {"attention_f32t_t64_padded", {F({2, 2, 64, 64}), F({2, 2, 64, 64}), F({2, 2, 64, 64}), Mask({2, 64})},
       [](const V& x) { return sdpa(x, false, true); }},
      {"attention_f32t_t65_d128_causal", {F({1, 2, 65, 128}), F({1, 2, 65, 128}), F({1, 2, 65, 128})},
       [](const V& x) { return sdpa(x, true, false); }},
      {"attention_f32t_t197_fixed_mask", {F({3, 1, 197, 64}), F({3, 1, 197, 64}), F({3, 1, 197, 64}), FixedMask(3, 197)},
       [](const V& x) { return sdpa(x, false, true); }},
      {"attention_f32t_t197_d32_causal_fixed_mask", {F({3, 1, 197, 32}), F({3, 1, 197, 32}), F({3, 1, 197, 32}),
        FixedMask(3, 197)}, [](const V& x) { return sdpa(x, true, true); }},
      {"attention_f32t_t300_causal", {F({1, 2, 300, 64}), F({1, 2, 300, 64}), F({1, 2, 300, 64})},
       [](const V& x) { return sdpa(x, true, false); }},
      {"attention_f32t_t300_d128", {F({1, 1, 300, 128}), F({1, 1, 300, 128}), F({1, 1, 300, 128})},
       [](const V& x) { return sdpa(x, false, false); }},
      {"attention_f32t_tq65_tk197_causal", {F({2, 2, 65, 64}), F({2, 2, 197, 64}), F({2, 2, 197, 64})},
       [](const V& x) { return sdpa(x, true, false); }},
      {"attention_f32t_tq130_tk63_causal_padded", {F({2, 2, 130, 32}), F({2, 2, 63, 32}), F({2, 2, 63, 32}), Mask({2, 63})},
       [](const V& x) { return sdpa(x, true, true); }},
      {"attention_f32t_tq1_tk300", {F({2, 1, 1, 128}), F({2, 1, 300, 128}), F({2, 1, 300, 128})},
       [](const V& x) { return sdpa(x, false, false); }},
      {"attention_f32t_many_heads", {F({4, 16, 33, 32}), F({4, 16, 33, 32}), F({4, 16, 33, 32}), Mask({4, 33})},
       [](const V& x) { return sdpa(x, false, true); }},
      {"attention_f32t_packed_d64_t197_causal_padded", {F({2, 197, 3 * 2 * 64}), Mask({2, 197})},
       [](const V& x) { return self_attention_packed(x[0], 2, true, x[1]); }},
      {"attention_f32t_packed_d32_t65_fixed_mask", {F({3, 65, 3 * 3 * 32}), FixedMask(3, 65)},
       [](const V& x) { return self_attention_packed(x[0], 3, false, x[1]); }},
      {"attention_packed_d80", {F({1, 40, 3 * 2 * 80})}, [](const V& x) { return self_attention_packed(x[0], 2, true); }},
      // grouped-query attention: k, v (and dk, dv) with Hkv < H heads, query head h reads kv head
      // h / (H / Hkv); the same kernel families (tensor cores at D = 64/128, register-tiled f32 at
      // D = 32/64/128, SIMT at D = 80) with the group loop in the dK/dV blocks
      {"attention_gqa", {F({2, 4, 7, 16}), F({2, 2, 7, 16}), F({2, 2, 7, 16})}, [](const V& x) { return sdpa(x, false, false); }},
      {"attention_gqa_causal_padded", {F({3, 4, 9, 8}), F({3, 1, 9, 8}), F({3, 1, 9, 8}), Mask({3, 9})},
       [](const V& x) { return sdpa(x, true, true); }},
      {"attention_gqa_d64_causal_fixed_mask", {F({3, 4, 70, 64}), F({3, 2, 70, 64}), F({3, 2, 70, 64}), FixedMask(3, 70)},
       [](const V& x) { return sdpa(x, true, true); }},
      {"attention_gqa_d128_tq_lt_tk", {F({1, 4, 33, 128}), F({1, 1, 100, 128}), F({1, 1, 100, 128})},
       [](const V& x) { return sdpa(x, true, false); }},
      {"attention_gqa_d32_t130_causal", {F({2, 4, 130, 32}), F({2, 2, 130, 32}), F({2, 2, 130, 32})},
       [](const V& x) { return sdpa(x, true, false); }},
      {"attention_packed_gqa", {F({2, 7, (4 + 2 * 2) * 16})}, [](const V& x) { return self_attention_packed(x[0], 4, 2, false); }},
      {"attention_packed_gqa_d64_causal_padded", {F({2, 77, (4 + 2 * 1) * 64}), Mask({2, 77})},
       [](const V& x) { return self_attention_packed(x[0], 4, 1, true, x[1]); }},
      {"attention_packed_gqa_d128_fixed_mask", {F({3, 70, (2 + 2 * 1) * 128}), FixedMask(3, 70)},
       [](const V& x) { return self_attention_packed(x[0], 2, 1, false, x[1]); }},
      {"attention_packed_gqa_d80", {F({1, 40, (4 + 2 * 2) * 80})}, [](const V& x) { return self_attention_packed(x[0], 4, 2, true); }},
      // the output projection that recomputes the attention output in its backward
      {"attention_linear", {F({2, 7, 3 * 3 * 16}), F({20, 48}), F({20})},
       [](const V& x) { return attention_linear(x[0], 3, 3, false, Tensor(), x[1], x[2]); }},
      {"attention_linear_causal_padded", {F({3, 6, 3 * 2 * 8}), Mask({3, 6}), F({16, 16}), F({16})},
       [](const V& x) { return attention_linear(x[0], 2, 2, true, x[1], x[2], x[3]); }},
      {"attention_linear_d64_t197_in_out", {F({2, 197, 3 * 2 * 64}), F({128, 24})},
       [](const V& x) { return attention_linear(x[0], 2, 2, false, Tensor(), x[1], Tensor(), true); }},
      {"attention_linear_gqa_causal", {F({2, 7, (4 + 2 * 2) * 16}), F({64, 64}), F({64})},
       [](const V& x) { return attention_linear(x[0], 4, 2, true, Tensor(), x[1], x[2]); }},
      // embeddings
      {"embedding", {Ids({3, 7}, 11), F({11, 8})}, [](const V& x) { return embedding(x[0], x[1]); }},
      {"embedding_padding_idx", {Ids({3, 7}, 11), F({11, 8})}, [](const V& x) { return embedding(x[0], x[1], 4); }},
      {"rotary", {F({2, 3, 6, 8})}, [](const V& x) { return rotary_embedding(x[0], 10000.0, 3); }},
      // a packed q | k | v of 4 + 2 + 2 heads of 8, llama3-like uneven frequencies, q and k rotated
      {"rotary_packed", {F({2, 5, 8 * 8})},
       [](const V& x) { return rotary_embedding_packed(x[0], {1.0f, 0.3f, 0.01f, 2e-4f}, 6, 1000); }},
      {"swiglu_packed", {F({3, 5, 2 * 24})}, [](const V& x) { return swiglu_packed(x[0]); }},
      {"swiglu", {F({4, 7, 10}), F({4, 7, 10})}, [](const V& x) { return swiglu(x[0], x[1]); }},
      {"swiglu_linear", {F({3, 5, 2 * 24}), F({16, 24}), F({16})},
       [](const V& x) { return swiglu_linear(x[0], x[1], x[2]); }},
      // GeGLU (Gemma): packed rows of 16-byte packs and odd widths (the per-element kernels)
      {"geglu_packed", {F({3, 5, 2 * 24})}, [](const V& x) { return swiglu_packed(x[0], GateAct::GeluTanh); }},
      {"geglu", {F({4, 7, 10}), F({4, 7, 10})}, [](const V& x) { return swiglu(x[0], x[1], GateAct::GeluTanh); }},
      {"geglu_linear", {F({3, 5, 2 * 24}), F({16, 24}), F({16})},
       [](const V& x) { return swiglu_linear(x[0], x[1], x[2], GateAct::GeluTanh); }},
      // Gated DeltaNet (Qwen3.5): the chunked delta rule on a packed q | k | v (g = -sigmoid(.) in
      // (-1, 0) in the accumulation type, beta = sigmoid(.)): T not a multiple of the chunk, grouped
      // value heads, three value-column slices of the GPU's state kernels (40 = 16 + 16 + 8), full chunks of
      // 64 with head dims of 128; the decay on a column slice, the convolution, the gated norm
      {"gated_delta_rule", {F({2, 11, 2 * 1 * 8 + 2 * 6}), F({2, 11, 2}), F({2, 11, 2})},
       [](const V& x) { return gdn_case(x, 1, 8, 2, 6, 4); }},
      {"gated_delta_rule_three_slices", {F({1, 70, 2 * 1 * 16 + 2 * 40}), F({1, 70, 2}), F({1, 70, 2})},
       [](const V& x) { return gdn_case(x, 1, 16, 2, 40, 64); }},
      {"gated_delta_rule_d128", {F({1, 67, 2 * 128 + 128}), F({1, 67, 1}), F({1, 67, 1})},
       [](const V& x) { return gdn_case(x, 1, 128, 1, 128, 64); }},
      {"gated_delta_decay", {F({3, 5, 8}), F({4}), F({4})},
       [](const V& x) { return gated_delta_decay(slice(x[0], 2, 4, 8), x[1], x[2]); }},
      // packed documents: starts on and inside chunks, documents of one token and across chunks
      {"gated_delta_rule_docs", {F({2, 21, 2 * 1 * 8 + 2 * 6}), F({2, 21, 2}), F({2, 21, 2})},
       [](const V& x) { return gdn_case(x, 1, 8, 2, 6, 4, {{1, 3, 4, 6, 7}, {2, 19}}); }},
      {"gated_delta_rule_docs_c64", {F({2, 150, 2 * 1 * 16 + 2 * 24}), F({2, 150, 2}), F({2, 150, 2})},
       [](const V& x) { return gdn_case(x, 1, 16, 2, 24, 64, {{70, 1, 57, 22}, {64, 86}}); }},
      {"causal_conv1d", {F({2, 9, 12}), F({12, 4})}, [](const V& x) { return causal_conv1d(x[0], x[1]); }},
      {"causal_conv1d_docs", {F({2, 9, 12}), F({12, 4})},
       [](const V& x) { return causal_conv1d(x[0], x[1], true, docs_like(x[0], {{1, 2, 6}, {3, 3, 3}})); }},
      {"causal_conv1d_slice_k6", {F({2, 5, 20}), F({11, 6})},
       [](const V& x) { return causal_conv1d(slice(x[0], 2, 3, 14), x[1]); }},
      {"rms_norm_gated", {F({3, 5, 16}), F({3, 5, 16}), F({8})}, [](const V& x) { return rms_norm_gated(x[0], x[1], x[2]); }},
      // 12 weights, not 6: w's gradient sums 1,200 products each rounded to 16 bits, and with six
      // elements one cancelling sum could carry the whole vector's relative error past bf16's 1%
      // (seen once in about 10^3 runs).
      {"rms_norm_gated_slice_rows", {F({2, 300, 24}), F({2, 300, 32}), F({12})},
       [](const V& x) { return rms_norm_gated(x[0], slice(x[1], 2, 5, 29), x[2]); }},
      // q | k | v heads of 8: 3 + 1 normalised, 1 passed through; Gemma's offset on a column slice
      {"rms_norm_heads", {F({2, 5, 40}), F({8}), F({8})}, [](const V& x) { return rms_norm_heads(x[0], x[1], 3, x[2], 1); }},
      {"rms_norm_heads_slice_offset", {F({2, 5, 44}), F({8}), F({8})},
       [](const V& x) { return rms_norm_heads(slice(x[0], 2, 4, 36), x[1], 2, x[2], 2, 1e-6, true); }},
      // partial rotary (Qwen3.5): the first 6 of 16 dims of 2 heads rotated, the rest passed
      {"rotary_packed_partial", {F({2, 5, 3 * 16})},
       [](const V& x) { return rotary_embedding_packed(x[0], {1.0f, 0.3f, 0.01f}, 2, 7, 16); }},
      // loss and regularisation
      {"cross_entropy_mean", {F({9, 13}), Tgt({9}, 13)}, [](const V& x) { return cross_entropy(x[0], x[1]); }},
      {"cross_entropy_sum", {F({9, 13}), Tgt({9}, 13)},
       [](const V& x) { return cross_entropy(x[0], x[1], -100, Reduction::Sum); }},
      {"cross_entropy_none", {F({2, 5, 13}), Tgt({2, 5}, 13)},
       [](const V& x) { return cross_entropy(x[0], x[1], -100, Reduction::None); }},
      // a tied LM head: padded logits read in place, padded dlogits into both backward GEMMs
      // (lda of dX = dlogits @ W, the transposed a of dW = dlogits^T @ x); Conv1D layout: ldb.
      // x is scaled by ~1/sqrt(C) so the logits are ~N(0, 1): with larger ones the rounding of
      // the logits to 16 bits, not the op, dominates the softmax's error
      {"cross_entropy_wide_head", {F({6, 32}), F({1001, 32}), Tgt({6}, 1001)},
       [](const V& x) { return cross_entropy(linear(scale(x[0], 0.18), x[1], Tensor()), x[2]); }},
      {"cross_entropy_wide_head_in_out", {F({5, 16}), F({16, 1001}), Tgt({5}, 1001)},
       [](const V& x) { return cross_entropy(linear(scale(x[0], 0.25), x[1], Tensor(), true), x[2], -100, Reduction::Sum); }},
      // the model's reshapes ([B, T, V] -> [B*T, V] stays a padded view); GPT-2's own 50257 is in
      // test_padded_rows.cpp (the f32 CPU result's sequential sum of 50257 exps is off by ~1e-5)
      {"cross_entropy_head_reshaped", {F({2, 3, 16}), F({1001, 16}), Tgt({2, 3}, 1001)},
       [](const V& x) { return cross_entropy(reshape(linear(scale(x[0], 0.25), x[1], Tensor()), {-1, 1001}), reshape(x[2], {-1})); }},
      {"dropout", {F({8, 9})},
       [](const V& x) {
         Generator gen(1234);
         return dropout(x[0], 0.3, true, gen);
       }},
  };
  return cases;
}

// ---- inputs ----

uint64_t run_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("LT_TEST_SEED");
    uint64_t s = env ? std::strtoull(env, nullptr, 10)
                     : (uint64_t(std::random_device{}()) << 32) ^
                           uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    std::printf("[ops_backends] seed %llu (LT_TEST_SEED=%llu reproduces this run)\n", (unsigned long long)s,
                (unsigned long long)s);
    return s;
  }();
  return seed;
}

using Values = std::vector<std::vector<double>>;

Values make_inputs(const OpCase& c, std::mt19937_64& rng) {
  Values vals;
  for (const In& in : c.inputs) {
    std::vector<double> v(size_t(numel(in.shape)));
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> pos(0.5, 2.0), unit;
    for (double& e : v) {
      switch (in.kind) {
        case Kind::Normal: e = normal(rng); break;
        case Kind::Positive: e = pos(rng); break;
        case Kind::Ids: e = double(std::uniform_int_distribution<int64_t>(0, in.classes - 1)(rng)); break;
        case Kind::Targets:
          e = unit(rng) < 0.25 ? -100.0 : double(std::uniform_int_distribution<int64_t>(0, in.classes - 1)(rng));
          break;
        case Kind::Mask: e = unit(rng) < 0.7 ? 1.0 : 0.0; break;
      }
    }
    if (in.kind == Kind::Mask && !in.fixed.empty()) {
      v = in.fixed;
    } else if (in.kind == Kind::Mask) {
      // Every other batch sees at least two keys: with a single visible key the softmax is
      // constant, dq and dk are exactly zero, and a whole-tensor reference of zeros would judge
      // the op's rounding noise (about 1e-7 in f32) against the 1e-6 floor of rel_error.
      // FixedMask covers that pattern next to a batch that is not degenerate.
      const int64_t nb = in.shape[0], tk = in.shape[1];
      for (int64_t b = 0; b + 1 < nb; ++b) {
        auto seen = [&] {
          int64_t n = 0;
          for (int64_t j = 0; j < tk; ++j) n += v[size_t(b * tk + j)] != 0.0;
          return n;
        };
        while (seen() < std::min<int64_t>(2, tk))
          for (int64_t j = 0; j < tk; ++j) v[size_t(b * tk + j)] = unit(rng) < 0.7 ? 1.0 : 0.0;
      }
      // the last batch attends to nothing: its rows must come out 0
      for (int64_t j = 0; j < tk; ++j) v[v.size() - size_t(tk) + size_t(j)] = 0.0;
    }
    vals.push_back(std::move(v));
  }
  return vals;
}

std::vector<int64_t> as_ints(const std::vector<double>& v) { return std::vector<int64_t>(v.begin(), v.end()); }

// Values as the dtype under test stores them.
std::vector<double> round_to(const std::vector<double>& v, DType dt) {
  return from_vector(v, {int64_t(v.size())}, dt).to_double_vector();
}

V build(const OpCase& c, const Values& vals, Device dev, DType dt) {
  V xs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const In& in = c.inputs[i];
    Tensor t;
    if (in.kind == Kind::Normal || in.kind == Kind::Positive) {
      t = from_vector(vals[i], in.shape, dt, dev);
      if (in.grad) t.set_requires_grad(true);
    } else {
      t = from_ints(as_ints(vals[i]), in.shape, in.kind == Kind::Mask ? DType::U8 : DType::I64, dev);
    }
    xs.push_back(t);
  }
  return xs;
}

// ---- one run: forward, backward, read back ----

struct Result {
  std::vector<Shape> shapes;                 // output, then the gradient of each grad input
  std::vector<std::vector<double>> values;   // same order; empty on meta
  std::vector<bool> defined;
  std::vector<MemoryEvent> trace;
};

Result run(const OpCase& c, const Values& vals, const std::vector<double>& gout, Device dev, DType dt) {
  V xs = build(c, vals, dev, dt);
  Allocator& alloc = allocator_for(dev);
  alloc.clear_history();
  alloc.set_history(true);
  Tensor y = c.fn(xs);
  alloc.set_history(false);  // the upstream gradient is an input, not the op's allocation
  Tensor g = y.requires_grad() ? from_vector(gout, y.shape(), y.dtype(), dev) : Tensor();
  alloc.set_history(true);
  if (y.requires_grad()) y.backward(g);
  alloc.set_history(false);
  Result r;
  r.trace = alloc.history();
  alloc.clear_history();
  auto add = [&](const Tensor& t) {
    r.defined.push_back(t.defined());
    r.shapes.push_back(t.defined() ? t.shape() : Shape{});
    r.values.push_back(t.defined() && !dev.is_meta() ? t.to_double_vector() : std::vector<double>{});
  };
  add(y);
  for (size_t i = 0; i < xs.size(); ++i)
    if (c.inputs[i].grad) add(xs[i].grad());
  return r;
}

// ---- comparison ----

double tolerance(DType dt) {
  switch (dt) {
    case DType::F64: return 1e-12;
    case DType::F32: return 1e-5;
    case DType::BF16: return 1e-2;
    case DType::F16: return 5e-3;
    default: return 0;
  }
}

double rel_error(const std::vector<double>& a, const std::vector<double>& ref) { return test::rel_error(a, ref, 1e-6); }

std::string event_str(const MemoryEvent& e) {
  return std::string(action_name(e.action)) + " size " + std::to_string(e.size) + " requested " +
         std::to_string(e.requested) + " " + category_name(e.category) + " (op " + (e.op ? e.op : "") + ")";
}

bool same_event(const MemoryEvent& a, const MemoryEvent& b) {
  return a.action == b.action && a.size == b.size && a.requested == b.requested && a.category == b.category;
}

// ---- the parametrised test ----

struct Param {
  size_t index;
  DeviceType device;
  DType dtype;
};

std::vector<Param> all_params() {
  std::vector<Param> ps;
  for (size_t i = 0; i < op_cases().size(); ++i) {
    for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) ps.push_back({i, DeviceType::CPU, dt});
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) ps.push_back({i, DeviceType::Meta, dt});
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) ps.push_back({i, DeviceType::CUDA, dt});
  }
  return ps;
}

void PrintTo(const Param& p, std::ostream* os) {
  *os << op_cases()[p.index].name << " on " << Device{p.device, 0}.str() << " in " << dtype_name(p.dtype);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  const char* dev = p.device == DeviceType::CPU ? "cpu" : p.device == DeviceType::Meta ? "meta" : "cuda";
  return op_cases()[p.index].name + "_" + dev + "_" + dtype_name(p.dtype);
}

class OpsBackends : public ::testing::TestWithParam<Param> {};

TEST_P(OpsBackends, MatchesCpuReference) {
  const Param& p = GetParam();
  const OpCase& c = op_cases()[p.index];
  if (p.device == DeviceType::CUDA && !cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const Device dev = p.device == DeviceType::CUDA ? Device::cuda() : Device{p.device, 0};
  // With Tq = 1 and Tk = 2, dq and dk are p1 p2 (dP1 - dP2) times q or k - k': a difference that
  // the 16-bit kernels' delta = rowsum(dO * O), read from the rounded 16-bit O as FlashAttention
  // does, can cancel to a few percent of itself (5% at two seeds on the H200). The case exists for
  // the f32 register-tiled kernels; their f32 run keeps it.
  if (c.name == "attention_f32t_tq1_tk2_causal" && (p.dtype == DType::BF16 || p.dtype == DType::F16) &&
      p.device == DeviceType::CUDA)
    GTEST_SKIP() << "two keys cancel dq and dk below a 16-bit output's rounding";
  const uint64_t seed = run_seed() ^ std::hash<std::string>{}(c.name);
  SCOPED_TRACE("seed " + std::to_string(run_seed()));
  std::mt19937_64 rng(seed);
  Values vals = make_inputs(c, rng);
  for (size_t i = 0; i < vals.size(); ++i)
    if (c.inputs[i].kind == Kind::Normal || c.inputs[i].kind == Kind::Positive) vals[i] = round_to(vals[i], p.dtype);
  Shape out_shape;
  {
    NoGradGuard ng;
    out_shape = c.fn(build(c, vals, Device::cpu(), DType::F64)).shape();
  }
  // Upstream gradient: random signs, magnitudes in [0.5, 1.5] (no f16 subnormals downstream).
  std::vector<double> gout(size_t(numel(out_shape)));
  std::uniform_real_distribution<double> mag(0.5, 1.5), unit;
  for (double& e : gout) e = (unit(rng) < 0.5 ? -1.0 : 1.0) * mag(rng);
  gout = round_to(gout, p.dtype);

  if (p.device == DeviceType::Meta) {
    Result cpu = run(c, vals, gout, Device::cpu(), p.dtype);
    Result meta = run(c, vals, gout, dev, p.dtype);
    ASSERT_EQ(meta.shapes, cpu.shapes);
    ASSERT_EQ(meta.defined, cpu.defined);
    EXPECT_FALSE(cpu.trace.empty());
    const size_t n = std::min(cpu.trace.size(), meta.trace.size());
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(same_event(meta.trace[i], cpu.trace[i]))
          << "allocation " << i << ": meta " << event_str(meta.trace[i]) << ", cpu " << event_str(cpu.trace[i]);
    ASSERT_EQ(meta.trace.size(), cpu.trace.size()) << "trace lengths differ";
    return;
  }
  Result ref = run(c, vals, gout, Device::cpu(), DType::F64);
  Result got = run(c, vals, gout, dev, p.dtype);
  ASSERT_EQ(got.shapes, ref.shapes);
  ASSERT_EQ(got.defined, ref.defined);
  for (size_t k = 0; k < ref.values.size(); ++k) {
    if (!ref.defined[k]) continue;
    const double err = rel_error(got.values[k], ref.values[k]);
    EXPECT_TRUE(err <= tolerance(p.dtype))
        << (k == 0 ? "output" : "gradient " + std::to_string(k - 1)) << ": relative error " << err << " > "
        << tolerance(p.dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpsBackends, ::testing::ValuesIn(all_params()), param_name);

// The comparison must be able to fail: NaN and a wrong value do not pass.
TEST(OpsBackendsHarness, ErrorMeasureRejectsNanAndWrongValues) {
  EXPECT_FALSE(rel_error({1.0, NAN}, {1.0, 2.0}) <= 1.0);
  EXPECT_FALSE(rel_error({1.0, 2.0}, {1.0, NAN}) <= 1.0);
  EXPECT_GT(rel_error({1.0, 2.1}, {1.0, 2.0}), tolerance(DType::BF16));
  EXPECT_LT(rel_error({1.0, 2.0 + 1e-7}, {1.0, 2.0}), tolerance(DType::F32));
}

}  // namespace
