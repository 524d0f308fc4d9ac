// conv2d, batch_norm and max_pool2d (the ResNet ops): forward against direct loops, f64
// finite-difference gradchecks on odd shapes (stride 2, padding, non-square, channels not a
// multiple of 8), batch norm's running statistics against hand-computed values, train vs eval,
// the update skipped in a checkpoint's recomputation, 16-bit inputs with f32 statistics, the
// channels-last (NHWC) forms against the NCHW ones (the same bits on the CPU, forward and every
// gradient), and the one-line refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "leantrain/checkpoint.h"
#include "leantrain/error.h"
#include "unit/error_of.h"
#include "unit/gradcheck.h"

using namespace lt;
using lt::test::error_of;
using lt::test::gradcheck;
using lt::test::rand64;

namespace {

// y[n, o, i, j] by the definition (f64).
std::vector<double> conv_direct(const Tensor& x, const Tensor& w, const Tensor& b, Size2 s, Size2 p) {
  const std::vector<double> xv = x.to_double_vector(), wv = w.to_double_vector();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), KH = w.size(2), KW = w.size(3);
  const int64_t OH = (H + 2 * p.h - KH) / s.h + 1, OW = (W + 2 * p.w - KW) / s.w + 1;
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = b.defined() ? b.to_double_vector()[size_t(o)] : 0.0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t ki = 0; ki < KH; ++ki)
              for (int64_t kj = 0; kj < KW; ++kj) {
                const int64_t ih = i * s.h - p.h + ki, iw = j * s.w - p.w + kj;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += xv[size_t(((n * C + c) * H + ih) * W + iw)] * wv[size_t(((o * C + c) * KH + ki) * KW + kj)];
              }
          y.push_back(acc);
        }
  return y;
}

void expect_near(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}

TEST(ConvOps, Conv2dForwardMatchesDefinition) {
  Tensor x = rand64({2, 3, 7, 6}, 1), w = rand64({5, 3, 3, 2}, 2), b = rand64({5}, 3);
  NoGradGuard ng;
  for (auto [s, p] : {std::pair{Size2(1), Size2(0)}, {Size2(2), Size2(1)}, {Size2(2, 1), Size2(1, 0)}}) {
    expect_near(conv2d(x, w, b, s, p).to_double_vector(), conv_direct(x, w, b, s, p), 1e-12);
    expect_near(conv2d(x, w, Tensor(), s, p).to_double_vector(), conv_direct(x, w, Tensor(), s, p), 1e-12);
  }
  // f32 and bf16 through the same kernels, within their rounding.
  Tensor y = conv2d(cast(x, DType::F32), cast(w, DType::F32), cast(b, DType::F32), 2, 1);
  expect_near(y.to_double_vector(), conv_direct(x, w, b, 2, 1), 1e-4);
  Tensor yb = conv2d(cast(x, DType::BF16), cast(w, DType::BF16), cast(b, DType::BF16), 2, 1);
  expect_near(yb.to_double_vector(), conv_direct(x, w, b, 2, 1), 0.15);
}

TEST(ConvOps, Conv2dGradcheck) {
  // stride 2, padding 1, non-square images and kernel, 3 -> 5 channels, with a bias
  Tensor x = rand64({2, 3, 7, 6}, 4), w = rand64({5, 3, 3, 2}, 5), b = rand64({5}, 6);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], {2, 1}, {1, 1}); },
                        {x, w, b}));
  // 1x1 stride 2 (a ResNet shortcut), no bias
  Tensor x2 = rand64({3, 6, 5, 5}, 7), w2 = rand64({4, 6, 1, 1}, 8);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], Tensor(), 2, 0); }, {x2, w2}));
  // a frozen weight: only dx and the bias
  Tensor w3 = rand64({2, 3, 3, 3}, 9);
  w3.set_requires_grad(false);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return conv2d(in[0], w3, in[1], 1, 1); },
                        {rand64({1, 3, 4, 5}, 10), rand64({2}, 11)}));
}

Tensor stats_tensor(const std::vector<double>& v) { return from_vector(v, {int64_t(v.size())}, DType::F64); }

TEST(ConvOps, BatchNormGradcheckTrainAndEval) {
  Tensor x = rand64({3, 5, 4, 3}, 12), w = rand64({5}, 13), b = rand64({5}, 14);
  Tensor rm = stats_tensor({0.1, -0.2, 0.3, 0.0, 0.5}), rv = stats_tensor({1.5, 0.7, 1.0, 2.0, 0.9});
  for (bool training : {true, false})
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) { return batch_norm(in[0], in[1], in[2], rm, rv, Tensor(), training); },
        {x, w, b}))
        << (training ? "train" : "eval");
}

TEST(ConvOps, BatchNormRunningStatisticsByHand) {
  // Channel 0 holds 1, 2, 3, 6 and channel 1 holds 0, 0, 4, 4 (N = 2, H = 1, W = 2).
  Tensor x = from_vector(std::vector<float>{1, 2, 0, 0, 3, 6, 4, 4}, {2, 2, 1, 2});
  Tensor w = ones({2}), b = zeros({2}), rm = zeros({2}), rv = ones({2});
  Tensor tracked = zeros({}, DType::I64);
  Tensor y = batch_norm(x, w, b, rm, rv, tracked, true, 0.1, 1e-5);
  // mean 3 and 2; biased variance 3.5 and 4; unbiased 14/3 and 16/3
  const std::vector<double> m = rm.to_double_vector(), v = rv.to_double_vector();
  EXPECT_NEAR(m[0], 0.1 * 3, 1e-6);
  EXPECT_NEAR(m[1], 0.1 * 2, 1e-6);
  EXPECT_NEAR(v[0], 0.9 + 0.1 * 14.0 / 3, 1e-6);
  EXPECT_NEAR(v[1], 0.9 + 0.1 * 16.0 / 3, 1e-6);
  EXPECT_EQ(tracked.to_double_vector()[0], 1.0);
  const std::vector<double> yv = y.to_double_vector();
  EXPECT_NEAR(yv[0], (1 - 3) / std::sqrt(3.5 + 1e-5), 1e-5);
  EXPECT_NEAR(yv[6], (4 - 2) / std::sqrt(4 + 1e-5), 1e-5);
  // Eval normalises with the running statistics and leaves them alone.
  Tensor ye = batch_norm(x, w, b, rm, rv, tracked, false, 0.1, 1e-5);
  EXPECT_NEAR(ye.to_double_vector()[0], (1 - m[0]) / std::sqrt(v[0] + 1e-5), 1e-5);
  EXPECT_EQ(rm.to_double_vector(), m);
  EXPECT_EQ(tracked.to_double_vector()[0], 1.0);
  // A second training call moves them again.
  batch_norm(x, w, b, rm, rv, tracked, true, 0.1, 1e-5);
  EXPECT_NEAR(rm.to_double_vector()[0], 0.9 * 0.3 + 0.3, 1e-6);
  EXPECT_EQ(tracked.to_double_vector()[0], 2.0);
}

TEST(ConvOps, BatchNormUpdatesOnceUnderCheckpointing) {
  Generator gen(3);
  Tensor x = randn({4, 3, 5, 5}, gen), w = ones({3}).set_requires_grad(true), b = zeros({3}).set_requires_grad(true);
  Tensor rm = zeros({3}), rv = ones({3}), tracked = zeros({}, DType::I64);
  x.set_requires_grad(true);
  CheckpointOptions o;
  o.params = {w, b};
  Tensor y = checkpoint([&](const Tensor& in) { return relu(batch_norm(in, w, b, rm, rv, tracked, true)); }, x, o);
  const std::vector<double> after_forward = rm.to_double_vector();
  sum_all(y).backward();
  EXPECT_EQ(rm.to_double_vector(), after_forward) << "the recomputation must not update the running mean again";
  EXPECT_EQ(tracked.to_double_vector()[0], 1.0);
  EXPECT_TRUE(x.grad().defined() && w.grad().defined());
}

TEST(ConvOps, BatchNorm16BitInputsKeepF32Statistics) {
  Generator gen(5);
  Tensor x = randn({4, 3, 3, 5}, gen, 2.0f), w = randn({3}, gen), b = randn({3}, gen);
  Tensor rm32 = zeros({3}), rv32 = ones({3}), rm16 = zeros({3}), rv16 = ones({3});
  Tensor y32 = batch_norm(x, w, b, rm32, rv32, Tensor(), true);
  Tensor y16 = batch_norm(cast(x, DType::BF16), w, b, rm16, rv16, Tensor(), true);
  EXPECT_EQ(y16.dtype(), DType::BF16);
  expect_near(y16.to_double_vector(), y32.to_double_vector(), 0.05);
  expect_near(rm16.to_double_vector(), rm32.to_double_vector(), 0.01);
  // The gradients of f32 parameters stay f32.
  Tensor xb = cast(x, DType::BF16).set_requires_grad(true);
  Tensor wg = ones({3}).set_requires_grad(true), bg = zeros({3}).set_requires_grad(true);
  sum_all(cast(batch_norm(xb, wg, bg, rm16, rv16, Tensor(), true), DType::F32)).backward();
  EXPECT_EQ(wg.grad().dtype(), DType::F32);
  EXPECT_EQ(xb.grad().dtype(), DType::BF16);
}

TEST(ConvOps, MaxPoolForwardAndGradcheck) {
  Tensor x = rand64({2, 3, 7, 6}, 15);
  {
    NoGradGuard ng;
    const std::vector<double> xv = x.to_double_vector(), y = max_pool2d(x, 3, 2, 1).to_double_vector();
    ASSERT_EQ(y.size(), size_t(2 * 3 * 4 * 3));
    // output (0, 0, 1, 2): rows 1..3, cols 3..5 of plane 0
    double best = -1e9;
    for (int i = 1; i <= 3; ++i)
      for (int j = 3; j <= 5; ++j) best = std::max(best, xv[size_t(i * 6 + j)]);
    EXPECT_EQ(y[size_t(1 * 3 + 2)], best);
  }
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return max_pool2d(in[0], 3, 2, 1); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return max_pool2d(in[0], {2, 3}, {2, 1}, {1, 0}); },
                        {rand64({1, 5, 5, 7}, 16)}));
}

Tensor to_nhwc(const Tensor& x) { return contiguous(permute(x, {0, 2, 3, 1})); }
Tensor to_nchw(const Tensor& x) { return contiguous(permute(x, {0, 3, 1, 2})); }

// f(inputs, layout) on NCHW inputs and on their NHWC copies (input 0 is the image): the outputs,
// brought back to NCHW, and every input's gradient must be the same bits.
void expect_layouts_equal(const std::function<Tensor(const std::vector<Tensor>&, ImageLayout)>& f,
                          const std::vector<Tensor>& in, bool image_out = true) {
  auto run = [&](ImageLayout layout, std::vector<Tensor>* grads) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : in) leaves.push_back(contiguous(t).detach().set_requires_grad(true));
    std::vector<Tensor> args = leaves;
    if (layout == ImageLayout::NHWC) args[0] = to_nhwc(leaves[0]);
    Tensor y = f(args, layout);
    if (layout == ImageLayout::NHWC && image_out) y = to_nchw(y);
    // A weighted sum, so every gradient element differs.
    std::vector<double> wv(size_t(y.numel()));
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = double(i % 13 + 1) / 8;
    Tensor wts = cast(from_vector(wv, y.shape(), DType::F64), y.dtype());
    sum_all(mul(y, wts)).backward();
    for (const Tensor& l : leaves) grads->push_back(l.grad());
    return y;
  };
  std::vector<Tensor> g_nchw, g_nhwc;
  const Tensor y_nchw = run(ImageLayout::NCHW, &g_nchw), y_nhwc = run(ImageLayout::NHWC, &g_nhwc);
  EXPECT_EQ(y_nhwc.to_double_vector(), y_nchw.to_double_vector()) << "forward";
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_TRUE(g_nchw[i].defined() && g_nhwc[i].defined()) << "input " << i;
    EXPECT_EQ(g_nhwc[i].to_double_vector(), g_nchw[i].to_double_vector()) << "gradient of input " << i;
  }
}

TEST(ConvOps, ChannelsLastGivesTheSameBitsAsNchw) {
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    auto c = [dt](Shape s, uint64_t seed) { return cast(rand64(s, seed), dt); };
    expect_layouts_equal(
        [](const std::vector<Tensor>& x, ImageLayout l) { return conv2d(x[0], x[1], x[2], {2, 1}, {1, 0}, l); },
        {c({2, 3, 7, 6}, 21), c({5, 3, 3, 2}, 22), c({5}, 23)});
    expect_layouts_equal([](const std::vector<Tensor>& x, ImageLayout l) { return conv2d(x[0], x[1], Tensor(), 2, 0, l); },
                         {c({2, 6, 5, 5}, 24), c({4, 6, 1, 1}, 25)});
    expect_layouts_equal([](const std::vector<Tensor>& x, ImageLayout l) { return max_pool2d(x[0], 3, 2, 1, l); },
                         {c({2, 3, 7, 6}, 26)});
    for (bool training : {true, false})
      expect_layouts_equal(
          [training](const std::vector<Tensor>& x, ImageLayout l) {
            Tensor rm = full({5}, 0.25), rv = full({5}, 1.5);
            return batch_norm(x[0], x[1], x[2], rm, rv, Tensor(), training, 0.1, 1e-5, l);
          },
          {c({3, 5, 4, 3}, 27), rand64({5}, 28).to(DType::F32), rand64({5}, 29).to(DType::F32)});
  }
}

TEST(ConvOps, ChannelsLastRunningStatisticsAndRefusals) {
  Tensor x = rand64({2, 3, 4, 5}, 30).to(DType::F32);
  Tensor rm1 = zeros({3}), rv1 = ones({3}), rm2 = zeros({3}), rv2 = ones({3});
  Tensor t1 = zeros({}, DType::I64), t2 = zeros({}, DType::I64);
  batch_norm(x, ones({3}), zeros({3}), rm1, rv1, t1, true);
  batch_norm(to_nhwc(x), ones({3}), zeros({3}), rm2, rv2, t2, true, 0.1, 1e-5, ImageLayout::NHWC);
  EXPECT_EQ(rm2.to_double_vector(), rm1.to_double_vector());
  EXPECT_EQ(rv2.to_double_vector(), rv1.to_double_vector());
  EXPECT_EQ(t2.to_double_vector(), t1.to_double_vector());
  // An NCHW batch passed as NHWC: its last dim (8) is not the weight's 3 channels.
  Tensor nchw = zeros({2, 3, 8, 8});
  for (const std::string& e :
       {error_of([&] { conv2d(nchw, zeros({4, 3, 3, 3}), Tensor(), 1, 1, ImageLayout::NHWC); }),
        error_of([&] { batch_norm(nchw, ones({3}), zeros({3}), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5,
                                  ImageLayout::NHWC); }),
        error_of([&] { max_pool2d(zeros({2, 3, 8}), 3, 2, 1, ImageLayout::NHWC); })}) {
    EXPECT_NE(e, "");
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { conv2d(nchw, zeros({4, 3, 3, 3}), Tensor(), 1, 1, ImageLayout::NHWC); }).find("NHWC"),
            std::string::npos);
}

TEST(ConvOps, RefusalsAreOneLine) {
  Tensor x = zeros({2, 3, 8, 8}), w = zeros({4, 1, 3, 3});
  const std::string e = error_of([&] { conv2d(x, w); });
  EXPECT_NE(e.find("3 channels"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_NE(error_of([&] { conv2d(x, zeros({4, 3, 9, 9})); }), "");
  EXPECT_NE(error_of([&] { conv2d(x, zeros({4, 3, 3, 3}), Tensor(), 0); }), "");
  EXPECT_NE(error_of([&] { conv2d(zeros({3, 8, 8}), w); }), "");
  EXPECT_NE(error_of([&] { conv2d(x, zeros({4, 3, 3, 3}, DType::F64)); }), "");
  EXPECT_NE(error_of([&] { max_pool2d(x, 3, 2, 2); }), "");   // padding over half the kernel
  EXPECT_NE(error_of([&] { max_pool2d(x, 17, 1, 0); }), "");  // window over 256 pixels
  EXPECT_NE(error_of([&] { batch_norm(x, ones({4}), zeros({4}), Tensor(), Tensor(), Tensor(), true); }), "");
  EXPECT_NE(error_of([&] { batch_norm(x, ones({3}), zeros({3}), Tensor(), Tensor(), Tensor(), false); }), "");
  EXPECT_NE(error_of([&] { batch_norm(zeros({1, 3, 1, 1}), ones({3}), zeros({3}), Tensor(), Tensor(), Tensor(), true); }),
            "");
  for (const std::string& m : {error_of([&] { max_pool2d(x, 3, 2, 2); }),
                               error_of([&] { batch_norm(x, ones({4}), zeros({4}), Tensor(), Tensor(), Tensor(), true); })})
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

}  // namespace
