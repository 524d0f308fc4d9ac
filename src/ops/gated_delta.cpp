// The gated delta rule (Gated DeltaNet, Qwen3.5's linear attention) by chunks, forward and
// backward, composed of batched GEMMs (the gemm op) and the small kernels of the "delta" group.
//
// Per value head, with q and k l2-normalised and q scaled by Dk^-1/2, the recurrence is
//   S_t = exp(g_t) S_{t-1} + k_t delta_t^T,  delta_t = beta_t (v_t - exp(g_t) S_{t-1}^T k_t),  o_t = S_t^T q_t.
// Within a chunk of C steps it is a few matrix products (the WY form transformers' and FLA's
// chunked kernels use): with gam the cumulative log decay inside the chunk and S the state at
// its start,
//   M = strictly-lower(diag(beta) exp(gam_t - gam_s) K K^T),  T = (I + M)^-1,
//   U = T diag(beta) V,  W = T diag(beta exp(gam)) K,  delta = U - W S,
//   O = strictly-causal-decayed(Q K^T) delta + diag(exp(gam)) Q S,
//   S' = exp(gam_last) S + (diag(exp(gam_last - gam)) K)^T delta.
// Only the pass from S to S' is sequential over chunks (gdn_state_fwd); everything else runs for
// all chunks at once as batched GEMMs. The forward keeps the state at each chunk's start
// (states [B * Hv, NC, Dk, Dv] in f32: memory grows with T / C, never T^2) besides its inputs;
// the backward recomputes the chunk matrices from them, runs the sequential pass backwards for
// the state gradients (gdn_state_bwd), then every other gradient by chunk in parallel. All in
// the accumulation type (f32, f64 for f64 inputs), rounded to the inputs' dtype at the end.
// docs/decisions.md ("Gated DeltaNet by chunks") says why this form and C = 64.
//
// Packed documents (doc_pos): the chunks stay where they are and the documents are masked inside
// them (backend/delta_docs.h): gam restarts at each document's start, the decayed products of rows
// in different documents are 0, and the state carried into a chunk reaches only the rows of the
// document that began before it; the state passed on is that of the chunk's last document. So
// every shape, and the memory, is the same with and without documents ("Packed documents in the
// Gated DeltaNet" in docs/decisions.md).
#include <cmath>

#include "ops/op_common.h"

namespace lt {
using namespace detail;

namespace {

constexpr int64_t kMaxChunk = 64, kMaxHeadDim = 256;

// c[n] = alpha op(a[n]) op(b[n]) + beta c[n] for n < batch, every operand a packed run of
// `batch` matrices (a: m x k, or k x m when ta; b: k x n, or n x k when tb; c: m x n).
void bgemm(const Tensor& c, const Tensor& a, const Tensor& b, int64_t batch, int64_t m, int64_t n, int64_t k,
           bool ta, bool tb, float alpha = 1.0f, float beta = 0.0f) {
  GemmDesc d;
  d.batch = batch;
  d.m = m;
  d.n = n;
  d.k = k;
  d.trans_a = ta;
  d.trans_b = tb;
  d.stride_a = m * k;
  d.stride_b = k * n;
  d.stride_c = m * n;
  d.alpha = alpha;
  d.beta = beta;
  backend_of(c).gemm(c, a, b, d, Tensor());
}

struct Dims {
  int64_t B, T, Hk, Dk, Hv, Dv, C, NC, Tp, BH, N;
};

// The chunk layout of q, k, v, beta, g and the matrices the forward and backward both build.
struct Chunks {
  Tensor qn, kn, vf, bf, gam, kk, tb, tk;
};

// [B, T, h, dim] view of the heads that start `col` into each row of a packed [B, T, W] tensor.
Tensor head_view(const Tensor& base, const Dims& d, int64_t col, int64_t h, int64_t dim) {
  const int64_t W = base.size(2);
  return make_view(base, {d.B, d.T, h, dim}, {d.T * W, W, dim, 1}, base.offset() + col);
}

Chunks prepare(const Dims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& g,
               const Tensor& doc_pos, DType acc, Device dev, float scale) {
  Chunks c;
  c.qn = Tensor::empty({d.BH, d.Tp, d.Dk}, acc, dev);
  c.kn = Tensor::empty({d.BH, d.Tp, d.Dk}, acc, dev);
  c.vf = Tensor::empty({d.BH, d.Tp, d.Dv}, acc, dev);
  c.bf = Tensor::empty({d.BH, d.Tp}, acc, dev);
  c.gam = Tensor::empty({d.BH, d.Tp}, acc, dev);
  Backend& be = backend_for(dev);
  be.gdn_prepare(c.qn, c.kn, c.vf, c.bf, c.gam, q, k, v, beta, g, doc_pos, d.C, scale);
  c.kk = Tensor::empty({d.N, d.C, d.C}, acc, dev);
  bgemm(c.kk, c.kn, c.kn, d.N, d.C, d.C, d.Dk, false, true);  // K K^T per chunk
  c.tb = Tensor::empty({d.N, d.C, d.C}, acc, dev);
  c.tk = Tensor::empty({d.N, d.C, d.C}, acc, dev);
  be.gdn_tri_fwd(Tensor(), c.tb, c.tk, c.kk, c.bf, c.gam, doc_pos);
  return c;
}

// The decayed causal Q K^T of each chunk.
Tensor decayed_qk(const Dims& d, const Chunks& c, const Tensor& doc_pos, DType acc, Device dev) {
  Tensor p = Tensor::empty({d.N, d.C, d.C}, acc, dev);
  bgemm(p, c.qn, c.kn, d.N, d.C, d.C, d.Dk, false, true);
  backend_for(dev).gdn_decay_mask(p, c.gam, doc_pos);
  return p;
}

void check_args(const char* name, const Tensor& qkv, int64_t hk, int64_t dk, int64_t hv, int64_t dv, const Tensor& g,
                const Tensor& beta, const Tensor& doc_pos, int64_t chunk) {
  check_floating(name, qkv);
  check_rank(name, qkv, 3, "qkv [B, T, 2 Hk Dk + Hv Dv]");
  LT_CHECK(hk > 0 && dk > 0 && hv > 0 && dv > 0 && hv % hk == 0 && qkv.size(2) == 2 * hk * dk + hv * dv,
           std::string(name) + ": qkv " + shape_str(qkv.shape()) + " with " + std::to_string(hk) + " key heads of " +
               std::to_string(dk) + " and " + std::to_string(hv) + " value heads of " + std::to_string(dv),
           "the last dim holds q and k (key heads x key dim each), then v, and the key heads divide the value heads",
           "pass the convolved q | k | v projection and its head counts");
  LT_CHECK(dk <= kMaxHeadDim && dv <= kMaxHeadDim,
           std::string(name) + ": key dim " + std::to_string(dk) + ", value dim " + std::to_string(dv),
           "the kernels take head dims of at most " + std::to_string(kMaxHeadDim), "use smaller heads");
  LT_CHECK(chunk >= 1 && chunk <= kMaxChunk, std::string(name) + ": chunk " + std::to_string(chunk),
           "the chunk kernels hold a chunk's C x C matrices in shared memory: 1 <= C <= " + std::to_string(kMaxChunk),
           "use chunk 64");
  const int64_t B = qkv.size(0), T = qkv.size(1);
  LT_CHECK(T >= 1, std::string(name) + ": an empty sequence", "the recurrence needs at least one step",
           "pass T >= 1");
  const DType acc = aux_dtype(qkv.dtype());
  LT_CHECK(g.defined() && g.dtype() == acc && g.shape() == Shape({B, T, hv}),
           std::string(name) + ": g is " + (g.defined() ? std::string(dtype_name(g.dtype())) + " " + shape_str(g.shape()) : "undefined"),
           std::string("the log decay is ") + dtype_name(acc) + " [B, T, value heads] = " + shape_str({B, T, hv}),
           "pass gated_delta_decay's output");
  LT_CHECK(beta.defined() && beta.dtype() == qkv.dtype() && beta.shape() == Shape({B, T, hv}),
           std::string(name) + ": beta is " +
               (beta.defined() ? std::string(dtype_name(beta.dtype())) + " " + shape_str(beta.shape()) : "undefined"),
           std::string("beta is ") + dtype_name(qkv.dtype()) + " [B, T, value heads] = " + shape_str({B, T, hv}),
           "pass sigmoid(b) in the projection's dtype");
  LT_CHECK(!doc_pos.defined() || (doc_pos.dtype() == DType::I32 && doc_pos.shape() == Shape({B, T})),
           std::string(name) + ": doc_pos is " + std::string(dtype_name(doc_pos.dtype())) + " " +
               shape_str(doc_pos.shape()),
           "it must be i32 [B, T] = " + shape_str({B, T}) + ": each token's position inside its document",
           "pass the batch's document positions (nn::TokenMask::doc_pos)");
}

}  // namespace

Tensor gated_delta_rule_packed(const Tensor& qkv_in, int64_t hk, int64_t dk, int64_t hv, int64_t dv, const Tensor& g_in,
                               const Tensor& beta_in, int64_t chunk, const Tensor& doc_pos_in) {
  const char* name = "gated_delta_rule";
  OpNameScope op(name);
  const Device dev = common_device(name, {qkv_in, g_in, beta_in, doc_pos_in});
  check_args(name, qkv_in, hk, dk, hv, dv, g_in, beta_in, doc_pos_in, chunk);
  const Tensor qkv = contiguous(qkv_in), g = contiguous(g_in), beta = contiguous(beta_in);
  const Tensor doc_pos = doc_pos_in.defined() ? contiguous_data(doc_pos_in) : Tensor();
  if (doc_pos.defined()) check_doc_pos_values(name, doc_pos);
  Dims d;
  d.B = qkv.size(0), d.T = qkv.size(1), d.Hk = hk, d.Dk = dk, d.Hv = hv, d.Dv = dv, d.C = std::min(chunk, d.T);
  d.NC = (d.T + d.C - 1) / d.C, d.Tp = d.NC * d.C, d.BH = d.B * hv, d.N = d.BH * d.NC;
  const DType acc = aux_dtype(qkv.dtype());
  const float scale = float(1.0 / std::sqrt(double(dk)));
  // q, k, v read in place: [B, T, H, D] views of the packed rows.
  const Tensor q = head_view(qkv, d, 0, hk, dk), k = head_view(qkv, d, hk * dk, hk, dk);
  const Tensor v = head_view(qkv, d, 2 * hk * dk, hv, dv);

  Tensor out = Tensor::empty({d.B, d.T, hv, dv}, qkv.dtype(), dev);
  Tensor states = Tensor::empty({d.BH, d.NC, dk, dv}, acc, dev);
  {
    Backend& be = backend_for(dev);
    Chunks c = prepare(d, q, k, v, beta, g, doc_pos, acc, dev, scale);
    c.kk = Tensor();
    Tensor u = Tensor::empty({d.BH, d.Tp, dv}, acc, dev), w = Tensor::empty({d.BH, d.Tp, dk}, acc, dev);
    bgemm(u, c.tb, c.vf, d.N, d.C, dv, d.C, false, false);
    bgemm(w, c.tk, c.kn, d.N, d.C, dk, d.C, false, false);
    c.tb = c.tk = c.vf = Tensor();
    Tensor delta = Tensor::empty({d.BH, d.Tp, dv}, acc, dev);
    be.gdn_state_fwd(states, delta, u, w, c.kn, c.gam, doc_pos);
    u = w = Tensor();
    Tensor p = decayed_qk(d, c, doc_pos, acc, dev);
    Tensor o = Tensor::empty({d.BH, d.Tp, dv}, acc, dev);
    bgemm(o, p, delta, d.N, d.C, dv, d.C, false, false);
    p = delta = Tensor();
    Tensor y = Tensor::empty({d.BH, d.Tp, dv}, acc, dev);
    bgemm(y, c.qn, states, d.N, d.C, dv, dk, false, false);  // Q S per chunk (states: one Dk x Dv a chunk)
    be.gdn_output(out, o, y, c.gam, doc_pos, d.C);
  }
  if (!needs_grad({qkv, g, beta})) return out;

  SavedTensor saved_qkv(qkv), saved_g(g), saved_beta(beta), saved_states(states), saved_doc(doc_pos);
  record(out, name, {qkv, g, beta}, [=](const Tensor& gout) {
    const Tensor sqkv = saved_qkv.unpack(), sg = saved_g.unpack(), sbeta = saved_beta.unpack();
    const Tensor st = saved_states.unpack(), sdoc = saved_doc.unpack();
    const Device gd = gout.device();
    Backend& be = backend_for(gd);
    const Tensor q = head_view(sqkv, d, 0, hk, dk), k = head_view(sqkv, d, hk * dk, hk, dk);
    const Tensor v = head_view(sqkv, d, 2 * hk * dk, hv, dv);
    Chunks c = prepare(d, q, k, v, sbeta, sg, sdoc, acc, gd, scale);
    // delta = U - W S, for every chunk at once from the saved states.
    Tensor delta = Tensor::empty({d.BH, d.Tp, dv}, acc, gd), w = Tensor::empty({d.BH, d.Tp, dk}, acc, gd);
    bgemm(delta, c.tb, c.vf, d.N, d.C, dv, d.C, false, false);
    bgemm(w, c.tk, c.kn, d.N, d.C, dk, d.C, false, false);
    bgemm(delta, w, st, d.N, d.C, dv, dk, false, false, -1.0f, 1.0f);
    Tensor p = decayed_qk(d, c, sdoc, acc, gd);
    Tensor dout = Tensor::empty({d.BH, d.Tp, dv}, acc, gd);
    be.gdn_pack(dout, contiguous_data(gout));
    // The states' gradients, chunks in reverse; then delta's.
    Tensor dsend = Tensor::empty({d.BH, d.NC, dk, dv}, acc, gd), ddelta = Tensor::empty({d.BH, d.Tp, dv}, acc, gd);
    be.gdn_state_bwd(dsend, ddelta, dout, p, w, c.qn, c.kn, c.gam, sdoc);
    Tensor dqg = Tensor::empty({d.BH, d.Tp, dk}, acc, gd), dp = Tensor::empty({d.N, d.C, d.C}, acc, gd);
    bgemm(dqg, dout, st, d.N, d.C, dk, dv, false, true);     // dO S^T
    bgemm(dp, dout, delta, d.N, d.C, d.C, dv, false, true);  // dO delta^T
    dout = Tensor();
    Tensor dkt = Tensor::empty({d.BH, d.Tp, dk}, acc, gd), dw = Tensor::empty({d.BH, d.Tp, dk}, acc, gd);
    bgemm(dkt, delta, dsend, d.N, d.C, dk, dv, false, true);            // delta dS'^T
    bgemm(dw, ddelta, st, d.N, d.C, dk, dv, false, true, -1.0f, 0.0f);  // -ddelta S^T
    delta = w = Tensor();
    Tensor dtb = Tensor::empty({d.N, d.C, d.C}, acc, gd), dvf = Tensor::empty({d.BH, d.Tp, dv}, acc, gd);
    bgemm(dtb, ddelta, c.vf, d.N, d.C, d.C, dv, false, true);  // dU V^T
    bgemm(dvf, c.tb, ddelta, d.N, d.C, dv, d.C, true, false);  // Tb^T dU
    ddelta = Tensor();
    Tensor dtk = Tensor::empty({d.N, d.C, d.C}, acc, gd), dkn = Tensor::empty({d.BH, d.Tp, dk}, acc, gd);
    bgemm(dtk, dw, c.kn, d.N, d.C, d.C, dk, false, true);  // dW K^T
    bgemm(dkn, c.tk, dw, d.N, d.C, dk, d.C, true, false);  // Tk^T dW
    dw = Tensor();
    // Through T = (I + M)^-1 and M's K K^T, decays and betas.
    Tensor dkk = Tensor::empty({d.N, d.C, d.C}, acc, gd), dbf = Tensor::empty({d.BH, d.Tp}, acc, gd);
    Tensor dgam = Tensor::empty({d.BH, d.Tp}, acc, gd);
    be.gdn_tri_bwd(dkk, dbf, dgam, dtb, dtk, c.kk, c.bf, c.gam, sdoc);
    dtb = dtk = Tensor();
    bgemm(dkn, dkk, c.kn, d.N, d.C, dk, d.C, false, false, 1.0f, 1.0f);  // (dKK + dKK^T) K
    dkk = Tensor();
    // Through the decayed causal Q K^T.
    be.gdn_decay_mask_bwd(dp, dgam, p, c.gam, sdoc);
    p = Tensor();
    Tensor dqn = Tensor::empty({d.BH, d.Tp, dk}, acc, gd);
    bgemm(dqn, dp, c.kn, d.N, d.C, dk, d.C, false, false);                 // dQK K
    bgemm(dkn, dp, c.qn, d.N, d.C, dk, d.C, true, false, 1.0f, 1.0f);      // dQK^T Q
    dp = Tensor();
    be.gdn_rows_bwd(dqn, dkn, dgam, dqg, dkt, c.qn, c.kn, c.gam, st, dsend, sdoc);
    dqg = dkt = dsend = Tensor();
    Tensor dqkv = Tensor::empty(sqkv.shape(), sqkv.dtype(), gd);
    Tensor dg = Tensor::empty(sg.shape(), sg.dtype(), gd), dbeta = Tensor::empty(sbeta.shape(), sbeta.dtype(), gd);
    be.gdn_finish(head_view(dqkv, d, 0, hk, dk), head_view(dqkv, d, hk * dk, hk, dk),
                  head_view(dqkv, d, 2 * hk * dk, hv, dv), dbeta, dg, dqn, dkn, dvf, dbf, dgam, q, k, sdoc, d.C, scale);
    return std::vector<Tensor>{dqkv, dg, dbeta};
  });
  return out;
}

Tensor gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        int64_t chunk, const Tensor& doc_pos) {
  const char* name = "gated_delta_rule";
  check_rank(name, q, 4, "q [B, T, Hk, Dk]");
  check_rank(name, k, 4, "k [B, T, Hk, Dk]");
  check_rank(name, v, 4, "v [B, T, Hv, Dv]");
  LT_CHECK(q.shape() == k.shape() && v.size(0) == q.size(0) && v.size(1) == q.size(1),
           std::string(name) + ": q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape()),
           "q and k have one shape [B, T, Hk, Dk] and v is [B, T, Hv, Dv]", "pass the heads of one batch");
  check_same_dtype(name, q, k);
  check_same_dtype(name, q, v);
  const int64_t B = q.size(0), T = q.size(1);
  Tensor qkv = concat({reshape(q, {B, T, -1}), reshape(k, {B, T, -1}), reshape(v, {B, T, -1})}, 2);
  return reshape(gated_delta_rule_packed(qkv, q.size(2), q.size(3), v.size(2), v.size(3), g, beta, chunk, doc_pos),
                 {B, T, v.size(2), v.size(3)});
}

Tensor gated_delta_decay(const Tensor& a_in, const Tensor& a_log, const Tensor& dt_bias) {
  const char* name = "gated_delta_decay";
  OpNameScope op(name);
  const Device dev = common_device(name, {a_in, a_log, dt_bias});
  check_floating(name, a_in);
  check_floating(name, a_log);
  check_floating(name, dt_bias);
  LT_CHECK(a_in.dim() >= 1 && a_log.dim() == 1 && dt_bias.dim() == 1 && a_log.size(0) == a_in.size(-1) &&
               dt_bias.size(0) == a_in.size(-1),
           std::string(name) + ": a " + shape_str(a_in.shape()) + ", A_log " + shape_str(a_log.shape()) + ", dt_bias " +
               shape_str(dt_bias.shape()),
           "A_log and dt_bias hold one value per head, the last dim of a", "pass [..., H] and two [H] vectors");
  const int64_t H = a_in.size(-1), N = H == 0 ? 0 : a_in.numel() / H;
  // [N, H] rows of a, read in place when its leading dims are one run of rows (a column slice of
  // a wider projection, or contiguous), else copied.
  Tensor a = a_in;
  const int64_t r = a.dim();
  bool rows_ok = a.strides()[size_t(r - 1)] == 1;
  for (int64_t i = 0; i + 2 < r && rows_ok; ++i)
    rows_ok = a.size(i) == 1 || a.strides()[size_t(i)] == a.strides()[size_t(i + 1)] * a.size(i + 1);
  if (!rows_ok || (r >= 2 && a.size(r - 2) == 1 && N > 1)) a = contiguous(a_in);
  const int64_t rs = r >= 2 ? a.strides()[size_t(r - 2)] : H;
  const Tensor a2 = make_view(a, {N, H}, {rs, 1}, a.offset());
  const Tensor al = contiguous(a_log), dt = contiguous(dt_bias);
  const DType acc = aux_dtype(a.dtype());
  Tensor g = Tensor::empty(a_in.shape(), acc, dev);
  backend_for(dev).gdn_decay_fwd(make_view(g, {N, H}, {H, 1}, 0), a2, al, dt);
  if (!needs_grad({a, al, dt})) return g;
  SavedTensor saved_a(a), saved_al(al), saved_dt(dt);
  const DType a_dt = a.dtype();
  record(g, name, {a, al, dt}, [=](const Tensor& gg) {
    const Tensor sa = saved_a.unpack(), sal = saved_al.unpack(), sdt = saved_dt.unpack();
    const Device gd = gg.device();
    Backend& be = backend_for(gd);
    Tensor da32 = Tensor::empty({N, H}, acc, gd), dal = Tensor::empty({N, H}, acc, gd);
    const Tensor gc = contiguous_data(gg);  // may be a view past its buffer's start (concat's backward)
    be.gdn_decay_bwd(da32, dal, make_view(gc, {N, H}, {H, 1}, gc.offset()),
                     make_view(sa, {N, H}, {rs, 1}, sa.offset()), sal, sdt);
    Tensor da = Tensor::empty(sa.shape(), a_dt, gd);
    be.copy(make_view(da, {N, H}, contiguous_strides({N, H}), 0), da32);
    auto summed = [&](const Tensor& rows, DType dt_out) {
      Tensor s = Tensor::empty({1, H}, acc, gd);
      be.reduce_sum(s, rows);
      Tensor out = Tensor::empty({H}, dt_out, gd);
      be.copy(out, make_view(s, {H}, {1}, 0));
      return out;
    };
    Tensor ddt = summed(da32, sdt.dtype()), dalog = summed(dal, sal.dtype());
    return std::vector<Tensor>{da, dalog, ddt};
  });
  return g;
}

}  // namespace lt
