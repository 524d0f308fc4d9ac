// Checks that only a GPU can answer, kept quick (well under a minute on an H100):
//  1. the caching allocator against cudaMemGetInfo and against its meta simulation
//     (same reserved bytes at every step), OOM as lt::OutOfMemoryError, no sticky error after;
//  2. copy / cast / fill / fill_random / dropout bits against the CPU;
//  3. GEMM (f32 without TF32, bf16, batched with broadcast, bias and GELU epilogues),
//     reductions, sum_squares, AdamW and SGD against the CPU backend;
//  4. timings of GEMM and the fused optimizer kernels.
// Prints one PASS/FAIL line per check and exits non-zero when any check fails.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_gemm.h"
#include "leantrain/autograd.h"
#include "leantrain/cuda_info.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "memory/host_allocators.h"

using namespace lt;

namespace {

constexpr int64_t MiB = 1 << 20;
int g_fail = 0, g_pass = 0;
const Device kGpu = Device::cuda(0), kCpu = Device::cpu();

void check(bool ok, const std::string& what) {
  std::printf("[%s] %s\n", ok ? "PASS" : "FAIL", what.c_str());
  (ok ? g_pass : g_fail)++;
}

// Runs one section; an exception fails it without stopping the others.
void section(const char* name, const std::function<void()>& f) {
  std::printf("== %s\n", name);
  try {
    f();
  } catch (const std::exception& e) {
    check(false, std::string(name) + " threw: " + e.what());
  }
}

std::string mib(int64_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / MiB);
  return buf;
}

int64_t device_used() {
  const CudaMemoryInfo m = cuda_memory_info(0);
  return m.total_bytes - m.free_bytes;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.to(kCpu), y = b.to(kCpu);
  return x.nbytes() == y.nbytes() && std::memcmp(x.raw_data(), y.raw_data(), size_t(x.nbytes())) == 0;
}

// max |a-b| / (atol + rtol*|b|) over elements: <= 1 passes.
double err_ratio(const Tensor& got, const Tensor& ref, double atol, double rtol) {
  std::vector<double> g = got.to(kCpu).to_double_vector(), r = ref.to(kCpu).to_double_vector();
  if (g.size() != r.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double e = std::fabs(g[i] - r[i]) / (atol + rtol * std::fabs(r[i]));
    if (!(e <= worst)) worst = e;  // NaN counts as a failure
  }
  return worst;
}

void check_close(const std::string& what, const Tensor& got, const Tensor& ref, double atol, double rtol) {
  const double e = err_ratio(got, ref, atol, rtol);
  char buf[64];
  std::snprintf(buf, sizeof buf, " (error %.3g of tolerance)", e);
  check(e <= 1.0, what + buf);
}

// ---- 1. allocator ----

void allocator_checks() {
  Allocator& al = allocator_for(kGpu);
  al.empty_cache();
  const MemoryStats s0 = al.stats();
  auto sim = make_simulated_cuda_allocator();
  const int64_t used0 = device_used();
  // The unit test's hand-worked sequence, on the GPU and on the meta simulation side by side.
  const int64_t sizes[] = {100, 600 << 10, 3 * MiB / 2, 8 * MiB, 30 * MiB + 1, 700 << 10, MiB, 11 * MiB};
  std::vector<Block> gpu, meta;
  bool same = true;
  for (int64_t n : sizes) {
    gpu.push_back(al.allocate(n));
    meta.push_back(sim->allocate(n));
    same = same && al.stats().reserved_bytes.current - s0.reserved_bytes.current ==
                       sim->stats().reserved_bytes.current &&
           gpu.back().size == meta.back().size;
  }
  const int64_t reserved = al.stats().reserved_bytes.current - s0.reserved_bytes.current;
  check(same, "reserved bytes equal the meta simulation at every step (" + mib(reserved) + ")");
  check(reserved == 68 * MiB, "reserved for the sequence is the hand-computed 68 MiB, got " + mib(reserved));
  const int64_t grew = device_used() - used0;
  check(std::llabs(grew - reserved) <= 4 * MiB,
        "cudaMemGetInfo grew by " + mib(grew) + " for " + mib(reserved) + " reserved (tolerance 4 MiB)");
  bool written = true;
  for (const Block& b : gpu) written = written && cudaMemset(b.ptr, 0x5a, size_t(b.requested)) == cudaSuccess;
  written = written && cudaDeviceSynchronize() == cudaSuccess;
  check(written, "every block is writable device memory");
  for (size_t i = 0; i < gpu.size(); ++i) {
    al.deallocate(gpu[i]);
    sim->deallocate(meta[i]);
  }
  al.empty_cache();
  sim->empty_cache();
  check(al.stats().reserved_bytes.current == s0.reserved_bytes.current, "empty_cache returns every segment");
  check(std::llabs(device_used() - used0) <= 4 * MiB,
        "device memory back to the start after empty_cache (" + mib(device_used() - used0) + " apart)");

  // OOM: more than the GPU has. One retry, one OOM, an lt::OutOfMemoryError with the breakdown.
  const MemoryStats before = al.stats();
  bool threw = false;
  std::string msg;
  try {
    MemoryCategoryScope cat(Category::Activation);
    Tensor t = Tensor::empty({cuda_memory_info(0).total_bytes * 2}, DType::U8, kGpu);
  } catch (const OutOfMemoryError& e) {
    threw = true;
    msg = e.what();
  }
  check(threw && msg.find("by category") != std::string::npos, "OOM raises lt::OutOfMemoryError: " + msg);
  check(al.stats().num_ooms == before.num_ooms + 1 && al.stats().num_alloc_retries == before.num_alloc_retries + 1,
        "OOM counted once, after one retry");
  Tensor after = full({1000}, 3.0, DType::F32, kGpu);
  check(after.to(kCpu).to_float_vector()[999] == 3.0f, "the GPU works after an OOM (no sticky error)");

  // A cap on reserved bytes acts like a smaller GPU.
  al.set_limit(al.stats().reserved_bytes.current + 30 * MiB);
  bool capped = false;
  try {
    Tensor t = Tensor::empty({40 * MiB}, DType::U8, kGpu);
  } catch (const OutOfMemoryError&) {
    capped = true;
  }
  al.set_limit(-1);
  check(capped, "set_limit caps reserved bytes");
}

// ---- 2. copies and random numbers ----

void copy_random_checks() {
  const int64_t n = 1 << 20;
  {
    Generator gc(1234), gg(1234);
    Tensor c = rand_uniform({n}, gc, -2.f, 3.f, DType::F32, kCpu);
    Tensor g = rand_uniform({n}, gg, -2.f, 3.f, DType::F32, kGpu);
    check(same_bits(g, c), "rand_uniform f32: bit-identical to the CPU");
    Tensor cb = rand_uniform({n}, gc, 0.f, 1.f, DType::BF16, kCpu);
    Tensor gb = rand_uniform({n}, gg, 0.f, 1.f, DType::BF16, kGpu);
    check(same_bits(gb, cb), "rand_uniform bf16: bit-identical to the CPU");
  }
  {
    Generator gc(99), gg(99);
    Tensor c = randn({n}, gc, 0.02f, DType::F32, kCpu);
    Tensor g = randn({n}, gg, 0.02f, DType::F32, kGpu);
    std::vector<float> a = c.to_float_vector(), b = g.to(kCpu).to_float_vector();
    int64_t exact = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      exact += a[size_t(i)] == b[size_t(i)];
      worst = std::max(worst, std::fabs(double(a[size_t(i)]) - b[size_t(i)]) / (1e-30 + std::fabs(double(a[size_t(i)]))));
    }
    char buf[128];
    std::snprintf(buf, sizeof buf, "randn f32: %.4f%% bit-identical, max relative difference %.2g (libm ulps)",
                  100.0 * double(exact) / double(n), worst);
    check(worst < 1e-5, buf);
  }
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8})
    for (double v : {0.0, 1.0, -2.5, 3.14159, 200.7})
      if (!same_bits(full({1027}, v, t, kGpu), full({1027}, v, t, kCpu)))
        check(false, std::string("fill ") + dtype_name(t) + " " + std::to_string(v) + " differs from the CPU");
  check(true, "fill: all dtypes and values checked against the CPU bits");
  {
    std::vector<float> vals;
    for (int i = 0; i < 4096; ++i) vals.push_back(float(i % 601) * 0.37f - 97.3f);
    Tensor src = from_vector(vals, {64, 64}, DType::F32, kCpu);
    Tensor src_g = src.to(kGpu);
    const DType all[] = {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8};
    bool ok = true;
    for (DType a : all) {
      Tensor ca = src.to(a), ga = src_g.to(a);
      ok = ok && same_bits(ga, ca);
      for (DType b : all) ok = ok && same_bits(ga.to(b), ca.to(b));
    }
    check(ok, "casts between all 6 dtypes: bit-identical to the CPU");
    Tensor tc = contiguous(transpose(reshape(src, {4, 16, 64}), 0, 2));
    Tensor tg = contiguous(transpose(reshape(src_g, {4, 16, 64}), 0, 2));
    check(same_bits(tg, tc), "strided (transposed) copy equals the CPU");
    Tensor sc = contiguous(slice(src.to(DType::BF16), 1, 3, 50)).to(DType::F32);
    Tensor sg = contiguous(slice(src_g.to(DType::BF16), 1, 3, 50)).to(DType::F32);
    check(same_bits(sg, sc), "sliced bf16 copy + cast equals the CPU");
  }
  {
    Generator gi(5), gc(77), gg(77);
    Tensor x = randn({3, 1000}, gi, 1.f, DType::F32, kCpu);
    Tensor dc = dropout(x, 0.3, true, gc), dg = dropout(x.to(kGpu), 0.3, true, gg);
    check(same_bits(dg, dc), "dropout: same mask and values as the CPU");
  }
}

// ---- 3. kernels against the CPU backend ----

Tensor rnd(const Shape& s, uint64_t seed, DType t = DType::F32) {
  Generator g(seed);
  return randn(s, g, 1.f, t, kCpu);
}

void gemm_reduce_optim_checks() {
  NoGradGuard ng;
  Backend& cpu = backend_for(kCpu);
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    const bool f32 = t == DType::F32;
    const double atol = f32 ? 2e-5 : 2e-2, rtol = f32 ? 2e-5 : 2e-2;
    const std::string dn = dtype_name(t);
    Tensor a = rnd({96, 200}, 1, t), b = rnd({200, 72}, 2, t), w = rnd({72, 200}, 3, t), bias = rnd({72}, 4, t);
    check_close("gemm " + dn + " 96x200 @ 200x72", matmul(a.to(kGpu), b.to(kGpu)), matmul(a, b), atol, rtol);
    check_close("gemm " + dn + " trans_a/trans_b", matmul(b.to(kGpu), a.to(kGpu), true, true), matmul(b, a, true, true),
                atol, rtol);
    check_close("linear " + dn + " with bias epilogue", linear(a.to(kGpu), w.to(kGpu), bias.to(kGpu)),
                linear(a, w, bias), atol, rtol);
    Tensor x3 = rnd({3, 5, 40, 24}, 5, t), y = rnd({24, 40}, 6, t);
    check_close("matmul " + dn + " batched, a transposed, b broadcast (stride 0)",
                matmul(x3.to(kGpu), y.to(kGpu), true, true), matmul(x3, y, true, true), atol, rtol);
    Tensor bx = rnd({4, 40, 24}, 7, t), by = rnd({4, 24, 16}, 8, t);
    check_close("matmul " + dn + " batched", matmul(bx.to(kGpu), by.to(kGpu)), matmul(bx, by), atol, rtol);
    // Fused GELU epilogue (tanh approximation) with the pre-activation written aside.
    Tensor c = empty({96, 72}, t, kGpu), pre = empty({96, 72}, t, kGpu);
    GemmDesc d;
    d.m = 96, d.n = 72, d.k = 200, d.trans_b = true;
    cuda::gemm_gelu(c, a.to(kGpu), w.to(kGpu), d, bias.to(kGpu), pre);
    Tensor lin = linear(a, w, bias);
    check_close("gemm_gelu " + dn + " output", c, gelu(lin, GeluApprox::Tanh), atol, rtol);
    check_close("gemm_gelu " + dn + " pre-activation", pre, lin, atol, rtol);
  }
  {
    // References in f64: the CPU's own f32 sums carry more rounding than the GPU's tree sums.
    Tensor x = rnd({2048, 768}, 9), y = rnd({6, 33, 5, 70}, 10);
    Tensor x64 = x.to(DType::F64), y64 = y.to(DType::F64);
    check_close("reduce_sum columns (bias grad)", sum(x.to(kGpu), {0}), sum(x64, {0}), 1e-3, 1e-5);
    check_close("reduce_sum rows", sum(x.to(kGpu), {1}), sum(x64, {1}), 1e-3, 1e-5);
    check_close("reduce_sum all", sum_all(x.to(kGpu)), sum_all(x64), 1e-2, 1e-5);
    check_close("reduce_sum dims 0,2", sum(y.to(kGpu), {0, 2}), sum(y64, {0, 2}), 1e-3, 1e-5);
    check_close("reduce_sum dims 1,3", sum(y.to(kGpu), {1, 3}), sum(y64, {1, 3}), 1e-3, 1e-5);
    check_close("reduce_sum bf16 columns", sum(x.to(DType::BF16).to(kGpu), {0}), sum(x.to(DType::BF16), {0}), 0.5, 2e-2);
    Tensor am = argmax(y.to(kGpu));
    check(same_bits(am, argmax(y)), "argmax_lastdim equals the CPU");
    std::vector<Tensor> xs = {x, y, rnd({17}, 11, DType::BF16)}, xg;
    for (const Tensor& t : xs) xg.push_back(t.to(kGpu));
    Tensor oc = zeros({1}, DType::F32, kCpu), og = zeros({1}, DType::F32, kGpu);
    cpu.sum_squares(oc, xs);
    backend_for(kGpu).sum_squares(og, xg);
    check_close("sum_squares over 3 tensors (f32 + bf16)", og, oc, 1e-2, 1e-5);
  }
  for (DType pt : {DType::F32, DType::BF16}) {
    const DType stt = DType::F32;
    std::vector<Shape> shapes = {{300, 17}, {5}, {70000}, {1}};
    std::vector<Tensor> pc, gc, mc, vc, pg, gg, mg, vg;
    for (size_t i = 0; i < shapes.size(); ++i) {
      pc.push_back(rnd(shapes[i], 100 + i, pt));
      gc.push_back(rnd(shapes[i], 200 + i, pt));
      mc.push_back(zeros(shapes[i], stt, kCpu));
      vc.push_back(zeros(shapes[i], stt, kCpu));
      using VP = std::pair<std::vector<Tensor>*, std::vector<Tensor>*>;
      for (VP pr : {VP{&pc, &pg}, VP{&gc, &gg}, VP{&mc, &mg}, VP{&vc, &vg}}) pr.second->push_back(pr.first->back().to(kGpu));
    }
    for (int64_t step = 1; step <= 3; ++step) {
      AdamWArgs args{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, step, 0.5f};
      cpu.adamw_step(pc, gc, mc, vc, args);
      backend_for(kGpu).adamw_step(pg, gg, mg, vg, args);
    }
    const bool f32 = pt == DType::F32;
    bool ok = true;
    for (size_t i = 0; i < pc.size(); ++i)
      ok = ok && err_ratio(pg[i], pc[i], f32 ? 1e-6 : 1e-2, f32 ? 1e-5 : 1e-2) <= 1 &&
           err_ratio(vg[i], vc[i], 1e-9, 1e-5) <= 1;
    check(ok, std::string("AdamW ") + dtype_name(pt) + " params, 3 steps, 4 tensors in one launch: equal to the CPU");
    for (int step = 0; step < 3; ++step) {
      SgdArgs args{0.1f, 0.9f, 0.0f, 0.01f, true, step == 0, 1.0f};
      cpu.sgd_step(pc, gc, mc, args);
      backend_for(kGpu).sgd_step(pg, gg, mg, args);
    }
    ok = true;
    for (size_t i = 0; i < pc.size(); ++i) ok = ok && err_ratio(pg[i], pc[i], f32 ? 1e-6 : 1e-2, f32 ? 1e-5 : 1e-2) <= 1;
    check(ok, std::string("SGD nesterov ") + dtype_name(pt) + " params, 3 steps: equal to the CPU");
  }
}

// ---- 4. timings ----

double time_ms(const std::function<void()>& f, int iters) {
  Backend& gpu = backend_for(kGpu);
  f();
  gpu.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  gpu.synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
}

void timings() {
  NoGradGuard ng;
  struct G { int64_t m, n, k; DType t; bool tf32; };
  for (const G& g : {G{4096, 4096, 4096, DType::BF16, false}, G{16384, 3072, 768, DType::BF16, false},
                     G{2048, 2048, 2048, DType::F32, false}, G{2048, 2048, 2048, DType::F32, true}}) {
    cuda_set_allow_tf32(g.tf32);
    Tensor a = empty({g.m, g.k}, g.t, kGpu), w = empty({g.n, g.k}, g.t, kGpu), bias = zeros({g.n}, g.t, kGpu);
    fill_(a, 0.01);
    fill_(w, 0.02);
    Tensor c = empty({g.m, g.n}, g.t, kGpu);
    GemmDesc d;
    d.m = g.m, d.n = g.n, d.k = g.k, d.trans_b = true;
    const double ms = time_ms([&] { backend_for(kGpu).gemm(c, a, w, d, bias); }, 20);
    std::printf("time gemm %s%s %lldx%lldx%lld +bias: %.3f ms, %.1f TFLOP/s\n", dtype_name(g.t),
                g.tf32 ? " (tf32)" : "", (long long)g.m, (long long)g.n, (long long)g.k, ms,
                2.0 * double(g.m) * double(g.n) * double(g.k) / (ms * 1e9));
  }
  cuda_set_allow_tf32(false);
  {
    // f32 attention forward + backward at ViT-L/16 shape (B = 64, H = 16, T = 197, D = 64):
    // the register-tiled f32 kernels against the warp-per-4-rows SIMT kernels (forced with
    // LEANTRAIN_ATTN_F32_SIMT=1, see use_fast_f32_attention). FLOPs counted as 4 B H T^2 D
    // forward + 10 B H T^2 D backward (the backward's recomputation of S and dP not counted).
    const int64_t B = 64, H = 16, T = 197, D = 64;
    Generator gen(7);
    Tensor q = randn({B, H, T, D}, gen, 1.0f, DType::F32).to(kGpu), k = randn({B, H, T, D}, gen, 1.0f, DType::F32).to(kGpu),
           v = randn({B, H, T, D}, gen, 1.0f, DType::F32).to(kGpu), dout = randn({B, H, T, D}, gen, 1.0f, DType::F32).to(kGpu);
    Backend& gpu = backend_for(kGpu);
    const float sc = 1.0f / std::sqrt(float(D));
    const double fl_f = 4.0 * double(B * H) * double(T) * double(T) * double(D), fl_b = 2.5 * fl_f;
    Tensor outs[2], dqs[2];
    for (int old = 1; old >= 0; --old) {
      if (old) setenv("LEANTRAIN_ATTN_F32_SIMT", "1", 1);
      else unsetenv("LEANTRAIN_ATTN_F32_SIMT");
      Tensor out = empty({B, H, T, D}, DType::F32, kGpu), lse = empty({B, H, T}, DType::F32, kGpu);
      Tensor dq = empty({B, H, T, D}, DType::F32, kGpu), dk = empty({B, H, T, D}, DType::F32, kGpu),
             dv = empty({B, H, T, D}, DType::F32, kGpu);
      const double f = time_ms([&] { gpu.attention_fwd(out, lse, q, k, v, Tensor(), false, 0, Tensor(), sc); }, 5);
      const double b = time_ms([&] { gpu.attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, Tensor(), false, 0, Tensor(), sc); }, 5);
      std::printf("time attention f32 %s B64 H16 T197 D64: fwd %.3f ms (%.1f TFLOP/s), bwd %.3f ms (%.1f TFLOP/s), "
                  "fwd+bwd %.1f TFLOP/s\n",
                  old ? "old SIMT path " : "register-tiled", f, fl_f / (f * 1e9), b, fl_b / (b * 1e9),
                  (fl_f + fl_b) / ((f + b) * 1e9));
      outs[old] = out;
      dqs[old] = dq;
    }
    unsetenv("LEANTRAIN_ATTN_F32_SIMT");
    check_close("attention f32: register-tiled output equals the SIMT path's", outs[0], outs[1], 1e-5, 1e-4);
    check_close("attention f32: register-tiled dq equals the SIMT path's", dqs[0], dqs[1], 1e-5, 1e-4);
  }
  {
    // bf16 causal attention forward + backward at TinyLlama-1.1B's shape (B 4, H 32, T 1024, D 64)
    // and Llama-3-8B's head dim (B 1, D 128): multi-head (Hkv = H: the G = 1 path, to compare
    // with earlier builds) and grouped-query (Hkv = 4 / 8: the dK/dV blocks loop over G = 8 / 4
    // query heads). FLOPs as above, halved for causal.
    struct S { int64_t B, H, Hkv, T, D; };
    for (const S& s : {S{4, 32, 32, 1024, 64}, S{4, 32, 4, 1024, 64}, S{1, 32, 32, 1024, 128}, S{1, 32, 8, 1024, 128}}) {
      Generator gen(9);
      auto rnd = [&](Shape sh) { return randn(sh, gen, 1.0f, DType::BF16).to(kGpu); };
      Tensor q = rnd({s.B, s.H, s.T, s.D}), k = rnd({s.B, s.Hkv, s.T, s.D}), v = rnd({s.B, s.Hkv, s.T, s.D}),
             dout = rnd({s.B, s.H, s.T, s.D});
      Tensor out = empty(q.shape(), DType::BF16, kGpu), lse = empty({s.B, s.H, s.T}, DType::F32, kGpu);
      Tensor dq = empty(q.shape(), DType::BF16, kGpu), dk = empty(k.shape(), DType::BF16, kGpu),
             dv = empty(v.shape(), DType::BF16, kGpu);
      Backend& gpu = backend_for(kGpu);
      const float sc = 1.0f / std::sqrt(float(s.D));
      const double f = time_ms([&] { gpu.attention_fwd(out, lse, q, k, v, Tensor(), true, 0, Tensor(), sc); }, 10);
      const double b = time_ms([&] { gpu.attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, Tensor(), true, 0, Tensor(), sc); }, 10);
      const double fl_f = 2.0 * double(s.B * s.H) * double(s.T) * double(s.T) * double(s.D), fl_b = 2.5 * fl_f;
      std::printf("time attention bf16 causal B%lld H%lld Hkv%lld T%lld D%lld: fwd %.3f ms (%.1f TFLOP/s), "
                  "bwd %.3f ms (%.1f TFLOP/s)\n",
                  (long long)s.B, (long long)s.H, (long long)s.Hkv, (long long)s.T, (long long)s.D, f,
                  fl_f / (f * 1e9), b, fl_b / (b * 1e9));
    }
  }
  // The optimizer over GPT-2-small-sized parameters (124M, 148 tensors like the real model).
  std::vector<Tensor> p, g, m, v;
  const int64_t per = 124'000'000 / 148;
  for (int i = 0; i < 148; ++i) {
    p.push_back(zeros({per}, DType::F32, kGpu));
    g.push_back(full({per}, 1e-3, DType::F32, kGpu));
    m.push_back(zeros({per}, DType::F32, kGpu));
    v.push_back(zeros({per}, DType::F32, kGpu));
  }
  int64_t step = 0;
  const double adam = time_ms(
      [&] { backend_for(kGpu).adamw_step(p, g, m, v, AdamWArgs{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step, 1.f}); }, 10);
  const double adam_gb = double(per) * 148 * 4 * 7 / 1e9;  // 4 reads + 3 writes of f32
  std::printf("time adamw f32 124M params, 148 tensors: %.3f ms per step, %.0f GB/s\n", adam, adam_gb / (adam / 1e3));
  const double sgd =
      time_ms([&] { backend_for(kGpu).sgd_step(p, g, m, SgdArgs{0.1f, 0.9f, 0.f, 0.f, false, false, 1.f}); }, 10);
  std::printf("time sgd+momentum f32 124M params: %.3f ms per step, %.0f GB/s\n", sgd,
              double(per) * 148 * 4 * 5 / 1e9 / (sgd / 1e3));
  Tensor acc = zeros({1}, DType::F32, kGpu);
  const double sq = time_ms([&] { backend_for(kGpu).sum_squares(acc, g); }, 10);
  std::printf("time sum_squares 124M f32: %.3f ms, %.0f GB/s\n", sq, double(per) * 148 * 4 / 1e9 / (sq / 1e3));
  check(true, "timings ran");
}

}  // namespace

int main() {
  if (!cuda_available()) {
    std::printf("gpu_checks: no CUDA device visible; nothing to check\n");
    return 2;
  }
  section("allocator", allocator_checks);
  section("copies and random numbers", copy_random_checks);
  section("gemm, reductions, optimizers", gemm_reduce_optim_checks);
  section("timings", timings);
  std::printf("== memory outside the allocator\n%s\n", cuda_memory_summary(0).c_str());
  std::printf("gpu_checks: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
