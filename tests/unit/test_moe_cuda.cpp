// The MoE kernels on CUDA against the CPU reference (skipped without a GPU): the router (the same
// experts picked, weights and the logits' gradient), the sort (identical offsets and
// permutations), and the whole expert MLP (route, gather, grouped GEMMs, combine) forward and every
// gradient, in f32 and bf16, at aligned shapes (vector loads, several 128-row tiles per expert)
// and odd ones (element loads); the weight gradient in f32 from bf16 rows; the load-balancing
// loss's gradient; and the same bits on a second run. NF4 experts: the pieces' dequantisation
// bit for bit (aligned and odd piece sizes, more pieces than one launch takes), and the grouped
// NF4 GEMMs forward and backward against the CPU for several group sizes.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "backend/moe_kernels.h"
#include "leantrain/autograd.h"
#include "leantrain/ops_moe.h"
#include "quant/nf4.h"
#include "unit/rel_error.h"

using namespace lt;

namespace {

using V = std::vector<Tensor>;

// Router logits whose values in a row are a permutation of 0.05 * (0 .. E-1) plus noise below
// 0.01: distinct in f32 and in bf16, so every backend picks the same experts.
Tensor spaced_logits(int64_t n, int64_t e, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(size_t(n * e));
  std::vector<int> perm(static_cast<size_t>(e));
  for (int64_t r = 0; r < n; ++r) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t c = 0; c < e; ++c) v[size_t(r * e + c)] = 0.05f * float(perm[size_t(c)]) - 2.0f;
  }
  return from_vector(v, {n, e});
}

Tensor randn_cpu(const Shape& s, uint64_t seed, float std = 1.0f) {
  Generator g(seed);
  return randn(s, g, std);
}

struct Result {
  std::vector<std::vector<double>> values;  // output, then each input's gradient
  std::vector<int64_t> idx;
};

// The expert MLP of one MoE block on `dev` in `dt`; gradients of sum(y * r).
Result run_ffn(const V& host, Device dev, DType dt, int64_t k, bool renorm, DType weights_dt) {
  V in;
  for (const Tensor& t : host) {
    Tensor x = to_device(cast(t, dt), dev).detach();
    x.set_requires_grad(true);
    in.push_back(x);
  }
  MoeRoute r = moe_route(in[1], k, renorm, weights_dt == DType::F32 ? DType::F32 : dt);
  MoeDispatch d = moe_dispatch(r.idx, in[2].size(0));
  Tensor gu = grouped_linear(moe_gather(in[0], d), in[2], d);
  Tensor y = moe_combine(grouped_swiglu_linear(gu, in[3], d), r.weights, r.idx, d);
  Tensor rr = to_device(cast(randn_cpu(y.shape(), 99), dt), dev);
  sum_all(mul(cast(y, DType::F32), cast(rr, DType::F32))).backward();
  Result out;
  out.values.push_back(cast(y, DType::F32).to_double_vector());
  for (const Tensor& t : in) out.values.push_back(cast(t.grad(), DType::F32).to_double_vector());
  for (double v : to_device(r.idx, Device::cpu()).to_double_vector()) out.idx.push_back(int64_t(v));
  return out;
}

void compare_ffn(int64_t n, int64_t c, int64_t f, int64_t e, int64_t k, bool renorm, DType weights_dt) {
  const V host = {randn_cpu({n, c}, 1), spaced_logits(n, e, 2), randn_cpu({e, 2 * f, c}, 3, 0.2f),
                  randn_cpu({e, c, f}, 4, 0.2f)};
  const Result ref = run_ffn(host, Device::cpu(), DType::F32, k, renorm, weights_dt);
  for (DType dt : {DType::F32, DType::BF16}) {
    const Result got = run_ffn(host, Device::cuda(), dt, k, renorm, weights_dt);
    EXPECT_EQ(got.idx, ref.idx) << dtype_name(dt);
    const double tol = dt == DType::F32 ? 2e-5 : 3e-2;
    const char* names[] = {"y", "dx", "dlogits", "dgate_up", "ddown"};
    for (size_t i = 0; i < ref.values.size(); ++i)
      EXPECT_LT(test::rel_error(got.values[i], ref.values[i]), tol)
          << names[i] << " " << dtype_name(dt) << " n" << n << " c" << c << " f" << f << " e" << e << " k" << k;
    if (dt == DType::BF16) {  // deterministic: a second run gives the same bits
      const Result again = run_ffn(host, Device::cuda(), dt, k, renorm, weights_dt);
      for (size_t i = 0; i < got.values.size(); ++i) EXPECT_EQ(got.values[i], again.values[i]) << names[i];
    }
  }
}

TEST(MoeCuda, ExpertMlpMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  compare_ffn(37, 40, 24, 6, 2, true, DType::BF16);     // Qwen3-MoE-like: weights in the dtype
  compare_ffn(300, 64, 48, 16, 4, false, DType::F32);   // Mixtral-like weights, experts over 128 rows
  compare_ffn(29, 13, 7, 5, 3, true, DType::BF16);      // odd widths: element loads
  compare_ffn(8, 32, 16, 40, 2, true, DType::BF16);     // most experts empty
}

TEST(MoeCuda, SortIsTheCpusStableSort) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int64_t e : {3, 128, 1000}) {
    std::mt19937 rng{static_cast<unsigned>(e)};
    std::vector<int64_t> v(5000);
    for (int64_t& x : v) x = int64_t(rng() % unsigned(e > 100 ? 7 : e)) * (e > 100 ? e / 7 : 1);  // skewed
    Tensor idx = from_ints(v, {1000, 5}, DType::I32);
    MoeDispatch a = moe_dispatch(idx, e), b = moe_dispatch(to_device(idx, Device::cuda()), e);
    const std::vector<std::pair<Tensor, Tensor>> pairs{{a.offsets, b.offsets}, {a.rows, b.rows}, {a.pos, b.pos}};
    for (const auto& [x, y] : pairs) EXPECT_EQ(x.to_double_vector(), to_device(y, Device::cpu()).to_double_vector()) << e;
  }
}

TEST(MoeCuda, RouterAndAuxGradientMatchTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 50, e = 8, k = 2;
  Tensor z1 = spaced_logits(n, e, 5), z2 = spaced_logits(n, e, 6);
  auto run = [&](Device dev) {
    Tensor a = to_device(z1, dev).detach(), b = to_device(z2, dev).detach();
    a.set_requires_grad(true), b.set_requires_grad(true);
    auto aux = std::make_shared<MoeAuxLoss>();
    aux->coef = 0.05, aux->experts = e;
    MoeRoute r1 = moe_route(a, k, true, DType::F32, aux), r2 = moe_route(b, k, true, DType::F32, aux);
    Tensor rr = to_device(randn_cpu({n, k}, 7), dev);
    Tensor loss = moe_add_aux_loss(add(sum_all(mul(r1.weights, rr)), sum_all(mul(r2.weights, r2.weights))), aux);
    loss.backward();
    std::vector<double> out{loss.item()};
    for (const Tensor& t : {r1.weights, a.grad(), b.grad()})
      for (double v : to_device(t, Device::cpu()).to_double_vector()) out.push_back(v);
    return out;
  };
  EXPECT_LT(test::rel_error(run(Device::cuda()), run(Device::cpu())), 1e-5);
}

TEST(MoeCuda, WeightGradientInF32FromBf16Rows) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t r = 200, n1 = 24, n2 = 40, e = 5;
  std::vector<int64_t> ex(r);
  for (int64_t i = 0; i < r; ++i) ex[size_t(i)] = (i * 7) % 4;  // expert 4 gets no rows
  MoeDispatch d = moe_dispatch(from_ints(ex, {r, 1}, DType::I32), e);
  Tensor a = cast(randn_cpu({r, n1}, 8), DType::BF16), b = cast(randn_cpu({r, n2}, 9), DType::BF16);
  Tensor want = empty({e, n1, n2}, DType::F32);
  moe_kernels_for(Device::cpu()).grouped_gemm_wgrad(want, a, b, d.offsets, 1.0f);
  MoeDispatch dg = moe_dispatch(to_device(from_ints(ex, {r, 1}, DType::I32), Device::cuda()), e);
  Tensor got = empty({e, n1, n2}, DType::F32, Device::cuda());
  moe_kernels_for(Device::cuda()).grouped_gemm_wgrad(got, to_device(a, Device::cuda()), to_device(b, Device::cuda()),
                                                  dg.offsets, 1.0f);
  EXPECT_LT(test::rel_error(to_device(got, Device::cpu()).to_double_vector(), want.to_double_vector()), 1e-5);
}

TEST(MoeCuda, LoraShapedGroupedLinearMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // Rank-16 factors around the experts: [E, r, in] (torch layout) and [E, r, out] (in-out layout).
  const int64_t n = 90, k = 2, e = 8, in = 64, r = 16, out = 96;
  std::vector<int64_t> ex(size_t(n * k));
  for (size_t i = 0; i < ex.size(); ++i) ex[i] = int64_t((i * 5 + i / 3) % size_t(e));
  auto run = [&](Device dev, DType dt) {
    MoeDispatch d = moe_dispatch(to_device(from_ints(ex, {n, k}, DType::I32), dev), e);
    V p;
    for (const Tensor& h : {randn_cpu({n * k, in}, 10), randn_cpu({e, r, in}, 11, 0.2f), randn_cpu({e, r, out}, 12, 0.2f)}) {
      Tensor t = to_device(cast(h, dt), dev).detach();
      t.set_requires_grad(true);
      p.push_back(t);
    }
    Tensor y = grouped_linear(grouped_linear(p[0], p[1], d), p[2], d, /*w_in_out=*/true);
    sum_all(mul(cast(y, DType::F32), to_device(randn_cpu(y.shape(), 13), dev))).backward();
    std::vector<double> all;
    for (const Tensor& t : {y, p[0].grad(), p[1].grad(), p[2].grad()})
      for (double v : to_device(cast(t, DType::F32), Device::cpu()).to_double_vector()) all.push_back(v);
    return all;
  };
  const std::vector<double> ref = run(Device::cpu(), DType::F32);
  EXPECT_LT(test::rel_error(run(Device::cuda(), DType::F32), ref), 2e-5);
  EXPECT_LT(test::rel_error(run(Device::cuda(), DType::BF16), ref), 3e-2);
}

TEST(MoeCuda, LoraLinearWithTheAdapterInTheEpilogueMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // grouped_lora_linear: the adapter's product added in the GEMM's epilogue (alpha, accumulate),
  // at odd widths (element loads and stores) and aligned ones (vector loads, paired stores, several
  // 128-row tiles per expert); the base trainable and frozen.
  struct Case { int64_t n, in, out; bool frozen; };
  for (const Case c : {Case{45, 61, 95, false}, Case{300, 128, 256, true}, Case{300, 128, 256, false}}) {
    const int64_t k = 2, e = 8, r = 16;
    std::vector<int64_t> ex(size_t(c.n * k));
    for (size_t i = 0; i < ex.size(); ++i) ex[i] = int64_t((i * 5 + i / 3) % size_t(e - 1));  // expert 7: no rows
    auto run = [&](Device dev, DType dt) {
      MoeDispatch d = moe_dispatch(to_device(from_ints(ex, {c.n, k}, DType::I32), dev), e);
      V p;
      for (const Tensor& h : {randn_cpu({c.n * k, c.in}, 40), randn_cpu({e, c.out, c.in}, 41, 0.1f),
                              randn_cpu({e, r, c.in}, 42, 0.2f), randn_cpu({e, r, c.out}, 43, 0.2f)}) {
        Tensor t = to_device(cast(h, dt), dev).detach();
        t.set_requires_grad(!(c.frozen && p.size() == 1));
        p.push_back(t);
      }
      Tensor y = grouped_lora_linear(p[0], p[1], p[2], p[3], 2.0, d);
      sum_all(mul(cast(y, DType::F32), to_device(randn_cpu(y.shape(), 44), dev))).backward();
      std::vector<double> all;
      for (const Tensor& t : {y, p[0].grad(), c.frozen ? Tensor() : p[1].grad(), p[2].grad(), p[3].grad()}) {
        if (!t.defined()) continue;
        for (double v : to_device(cast(t, DType::F32), Device::cpu()).to_double_vector()) all.push_back(v);
      }
      return all;
    };
    const std::vector<double> ref = run(Device::cpu(), DType::F32);
    EXPECT_LT(test::rel_error(run(Device::cuda(), DType::F32), ref), 2e-5) << c.n << " " << c.in << " " << c.out;
    EXPECT_LT(test::rel_error(run(Device::cuda(), DType::BF16), ref), 3e-2) << c.n << " " << c.in << " " << c.out;
  }
}

TEST(MoeCuda, PairOfProductsInOnePassMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // grouped_gemm_pair: c = a w_e + a2 w2_e in one launch (the second product's K tiles after the
  // first's) for both layouts, K and k2 not multiples of a K tile, several row tiles an expert and
  // an expert without rows; f32 takes the two-launch path. Against the CPU's f32 sums.
  struct Case { int64_t r, k, k2, n; bool trans; };
  struct PairKnob {  // the fused launch is opt-in (LEANTRAIN_MOE_GEMM_PAIR) until a GPU has run it
    PairKnob() { ::setenv("LEANTRAIN_MOE_GEMM_PAIR", "1", 1); }
    ~PairKnob() { ::unsetenv("LEANTRAIN_MOE_GEMM_PAIR"); }
  } knob;
  for (const Case c : {Case{300, 200, 16, 136, true}, Case{300, 200, 24, 136, false}, Case{77, 64, 16, 40, true}}) {
    const int64_t e = 6;
    std::vector<int64_t> ex(size_t(c.r));
    for (size_t i = 0; i < ex.size(); ++i) ex[i] = int64_t((i * 7 + i / 5) % size_t(e - 1));  // expert 5: no rows
    const V host = {randn_cpu({c.r, c.k}, 50), c.trans ? randn_cpu({e, c.n, c.k}, 51, 0.1f) : randn_cpu({e, c.k, c.n}, 51, 0.1f),
                    randn_cpu({c.r, c.k2}, 52), c.trans ? randn_cpu({e, c.n, c.k2}, 53, 0.2f) : randn_cpu({e, c.k2, c.n}, 53, 0.2f)};
    auto run = [&](Device dev, DType dt) {
      MoeDispatch d = moe_dispatch(to_device(from_ints(ex, {c.r, 1}, DType::I32), dev), e);
      V in;
      for (const Tensor& h : host) in.push_back(to_device(cast(h, dt), dev));
      Tensor out = empty({c.r, c.n}, dt, dev);
      moe_kernels_for(dev).grouped_gemm_pair(out, in[0], in[1], c.trans, in[2], in[3], c.trans, d.offsets);
      return to_device(cast(out, DType::F32), Device::cpu()).to_double_vector();
    };
    const std::vector<double> ref = run(Device::cpu(), DType::F32);
    EXPECT_LT(test::rel_error(run(Device::cuda(), DType::F32), ref), 1e-5) << c.r << " " << c.k2 << " " << c.trans;
    // bf16: the operands rounded, the sum in f32 and rounded once, as the CPU's 16-bit path does.
    EXPECT_LT(test::rel_error(run(Device::cuda(), DType::BF16), run(Device::cpu(), DType::BF16)), 4e-3)
        << c.r << " " << c.k2 << " " << c.trans;
    EXPECT_LT(test::rel_error(run(Device::cuda(), DType::BF16), ref), 1e-2) << c.r << " " << c.k2 << " " << c.trans;
  }
}

// A stack quantised on `dev` from host values: every piece through nf4_stack_quantize_piece.
Nf4Stack nf4_stack_on(const Tensor& host, int64_t parts, Device dev) {
  Nf4Stack s;
  s.shape = host.shape();
  s.parts = parts;
  const Nf4StackShapes sh = nf4_stack_shapes(s.shape, parts);
  s.codes = empty(sh.codes, DType::U8, dev);
  s.absmax_codes = empty(sh.absmax_codes, DType::U8, dev);
  s.nested_absmax = empty(sh.nested_absmax, DType::F32, dev);
  const Tensor rows = to_device(reshape(host, {s.pieces(), s.piece_numel()}), dev);
  for (int64_t p = 0; p < s.pieces(); ++p)
    nf4_stack_quantize_piece(contiguous(reshape(select(rows, 0, p), s.piece_shape())), s, p);
  return s;
}

TEST(MoeCuda, Nf4PiecesDequantiseToTheCpusBits) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // Pieces of 64 x 48 (vector stores), 7 x 9 (odd: element path), and 300 pieces (two launches).
  for (const Shape& shape : {Shape{5, 128, 48}, Shape{3, 14, 9}, Shape{150, 8, 64}}) {
    const Tensor w = randn_cpu(shape, 21, 0.05f);
    const Nf4Stack c = nf4_stack_on(w, 2, Device::cpu()), g = nf4_stack_on(w, 2, Device::cuda());
    EXPECT_EQ(to_device(g.codes, Device::cpu()).to_double_vector(), c.codes.to_double_vector()) << shape_str(shape);
    EXPECT_EQ(g.offsets, c.offsets) << shape_str(shape);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      const Tensor want = nf4_stack_dequantize(c, dt);
      const Tensor got = to_device(nf4_stack_dequantize(g, dt), Device::cpu());
      EXPECT_EQ(cast(got, DType::F32).to_double_vector(), cast(want, DType::F32).to_double_vector())
          << shape_str(shape) << " " << dtype_name(dt);
      // A run of experts from the middle.
      const Tensor mid = empty({2, shape[1], shape[2]}, dt, Device::cuda());
      nf4_stack_dequantize_into(g, 1, 2, mid);
      EXPECT_EQ(cast(to_device(mid, Device::cpu()), DType::F32).to_double_vector(),
                cast(slice(want, 0, 1, 3), DType::F32).to_double_vector())
          << shape_str(shape) << " " << dtype_name(dt);
    }
  }
}

TEST(MoeCuda, Nf4GroupedGemmsMatchTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 160, k = 2, e = 8, c = 64, f = 48;
  std::vector<int64_t> ex(size_t(n * k));
  for (size_t i = 0; i < ex.size(); ++i) ex[i] = int64_t((i * 5 + i / 3) % size_t(e - 1));  // expert 7 has no rows
  const Tensor gu_host = randn_cpu({e, 2 * f, c}, 22, 0.1f), dn_host = randn_cpu({e, c, f}, 23, 0.1f);
  auto run = [&](Device dev, DType dt) {
    const Nf4Stack gu = nf4_stack_on(gu_host, 2, dev), dn = nf4_stack_on(dn_host, 1, dev);
    MoeDispatch d = moe_dispatch(to_device(from_ints(ex, {n, k}, DType::I32), dev), e);
    Tensor x = to_device(cast(randn_cpu({n * k, c}, 24), dt), dev).detach();
    x.set_requires_grad(true);
    Tensor y = grouped_swiglu_linear_nf4(grouped_linear_nf4(x, gu, d), dn, d);
    sum_all(mul(cast(y, DType::F32), to_device(randn_cpu(y.shape(), 25), dev))).backward();
    std::vector<double> all;
    for (const Tensor& t : {y, x.grad()})
      for (double v : to_device(cast(t, DType::F32), Device::cpu()).to_double_vector()) all.push_back(v);
    return all;
  };
  const std::vector<double> ref = run(Device::cpu(), DType::F32);
  for (const char* group : {"1", "3", "0"}) {
    ::setenv("LEANTRAIN_NF4_EXPERT_GROUP", group, 1);
    EXPECT_LT(test::rel_error(run(Device::cuda(), DType::F32), ref), 2e-5) << group;
    EXPECT_LT(test::rel_error(run(Device::cuda(), DType::BF16), ref), 3e-2) << group;
  }
  ::unsetenv("LEANTRAIN_NF4_EXPERT_GROUP");
}

}  // namespace
