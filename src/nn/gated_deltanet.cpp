// Gated DeltaNet (leantrain/nn_deltanet.h). The big projections (q | k | v and z) are separate
// GEMMs, so their outputs are whole tensors that the convolution and the gated norm read (column
// slices of one fused output would each give the backward a zero-filled gradient of the fused
// width); b | a (two columns a value head) run as one GEMM and are read as column slices.
// Init as transformers' _init_weights: normal(initializer_range) for the Linears and the
// convolution, ones for dt_bias and the gated norm, and A_log = log(A) with A spread over
// [1/16, 16] (transformers draws A uniform in [0.01, 16]; ParamFactory draws symmetric uniforms).
//
// The batch's TokenMask: doc_pos (packed documents) reaches the convolution and the delta rule,
// which restart at each document's start; key padding is honoured by zeroing the padded inputs
// (transformers' apply_mask_to_padding_states) where that is exact, and refused where it is not
// (check_padding).
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "leantrain/autocast.h"
#include "leantrain/error.h"
#include "leantrain/nn_deltanet.h"
#include "leantrain/nn_llama.h"

namespace lt::nn {

namespace {

// A parameter an op reads in f32 (torch's autocast leaves the decay's A_log and dt_bias f32): the
// parameter itself, or under autocast the 16-bit copy fsdp gathered for this rank when the f32
// one has no memory here.
Tensor param_as_is(const Tensor& p) {
  if (const std::optional<DType> dt = autocast_dtype())
    if (const Tensor* c = detail::precast_of(p, *dt)) return *c;
  return p;
}

// The mask's values on the host: a CPU tensor's own, a loader batch's kept bytes, else a copy (a
// synchronisation: only models given a key-padding mask by their caller pay it, once a forward).
template <class T> std::vector<T> host_values(const Tensor& x) {
  std::vector<T> v(size_t(x.numel()));
  if (v.empty()) return v;
  if (x.device().is_cpu()) {
    std::copy(x.data<T>(), x.data<T>() + x.numel(), v.begin());
  } else if (const auto& host = x.storage()->host_copy) {
    const int64_t at = x.offset() * int64_t(sizeof(T));
    LT_ASSERT(at >= 0 && at + int64_t(v.size() * sizeof(T)) <= int64_t(host->size()));
    std::copy_n(reinterpret_cast<const T*>(host->data() + at), v.size(), v.begin());
  } else {
    backend_for(x.device()).copy_to_host(v.data(), x);
  }
  return v;
}

}  // namespace

void GatedDeltaNet::check_padding(const TokenMask& mask) {
  const Tensor& kp = mask.key_padding;
  if (!kp.defined() || kp.device().is_meta()) return;
  LT_CHECK(kp.dim() == 2, "Gated DeltaNet: key padding mask of shape " + shape_str(kp.shape()),
           "expected [B, T] (1 = a real token)", "pass the model's padding mask");
  const Tensor kc = contiguous(kp.dtype() == DType::U8 ? kp : cast(kp, DType::U8));
  const std::vector<uint8_t> m = host_values<uint8_t>(kc);
  std::vector<int32_t> dp;
  if (mask.doc_pos.defined() && !mask.doc_pos.device().is_meta())
    dp = host_values<int32_t>(mask.doc_pos.is_contiguous() ? mask.doc_pos : contiguous(mask.doc_pos));
  const int64_t B = kp.size(0), T = kp.size(1);
  for (int64_t b = 0; b < B; ++b) {
    int state = 0;  // 0: no real token yet in this document, 1: in its real run, 2: padding after it
    for (int64_t t = 0; t < T; ++t) {
      if (!dp.empty() && dp[size_t(b * T + t)] == 0) state = 0;
      const bool real = m[size_t(b * T + t)] != 0;
      if (real && state == 2)
        fail("Gated DeltaNet: key padding mask row " + std::to_string(b) + " has a padded token before the real token at " +
                 std::to_string(t) + ", after real ones",
             "zeroed padding between real tokens would still decay the recurrent state and fill the convolution's "
             "window, so the tokens after it would not compute what they would without it",
             "pad only before or after each sequence (or document), or pack documents with doc_pos");
      if (real) state = 1;
      else if (state == 1) state = 2;
    }
  }
}

CausalConv1d::CausalConv1d(ParamFactory& pf, int64_t channels, int64_t kernel, const Init& init) {
  LT_CHECK(channels > 0 && kernel > 0, "Conv1d: " + std::to_string(channels) + " channels, kernel " + std::to_string(kernel),
           "a depthwise convolution needs channels and taps", "check linear_conv_kernel_dim");
  weight_ = &register_parameter("weight", pf.make({channels, 1, kernel}, init));
}

Tensor CausalConv1d::forward(const Tensor& x) { return forward(x, Tensor()); }

Tensor CausalConv1d::forward(const Tensor& x, const Tensor& doc_pos) {
  const Tensor w = autocast(*weight_);
  return causal_conv1d(x, reshape(w, {w.size(0), w.size(2)}), true, doc_pos);
}

GatedRMSNorm::GatedRMSNorm(ParamFactory& pf, int64_t dim, double eps) : eps_(eps) {
  weight_ = &register_parameter("weight", pf.make({dim}, Init::ones()));
}

Tensor GatedRMSNorm::operator()(const Tensor& x, const Tensor& z) {
  return rms_norm_gated(x, z, autocast_like(*weight_, x), eps_);
}

GatedDeltaNet::GatedDeltaNet(ParamFactory& pf, const GatedDeltaNetOptions& o)
    : SelfAttention(o.value_heads * o.value_dim, o.value_heads, true), o_(o), type_(o.type) {
  LT_CHECK(o.hidden > 0 && o.key_heads > 0 && o.key_dim > 0 && o.value_heads > 0 && o.value_dim > 0 &&
               o.value_heads % o.key_heads == 0,
           "Gated DeltaNet: " + std::to_string(o.key_heads) + " key heads of " + std::to_string(o.key_dim) + ", " +
               std::to_string(o.value_heads) + " value heads of " + std::to_string(o.value_dim),
           "each key head serves an equal group of value heads", "use linear_num_value_heads divisible by linear_num_key_heads");
  const int64_t key = o.key_heads * o.key_dim, value = o.value_heads * o.value_dim, conv = 2 * key + value;
  const LinearOptions lin{.bias = false, .weight_init = o.init};
  in_proj_qkv_ = register_child<UnaryModule>("in_proj_qkv", std::make_shared<Linear>(pf, o.hidden, conv, lin));
  in_proj_z_ = register_child<UnaryModule>("in_proj_z", std::make_shared<Linear>(pf, o.hidden, value, lin));
  // b then a, one after another: one GEMM over both (stacked_rows).
  Tensor bw = pf.make({o.value_heads, o.hidden}, o.init), aw = pf.make({o.value_heads, o.hidden}, o.init);
  in_proj_b_ = register_child<UnaryModule>("in_proj_b", std::make_shared<Linear>(bw, Tensor()));
  in_proj_a_ = register_child<UnaryModule>("in_proj_a", std::make_shared<Linear>(aw, Tensor()));
  conv1d_ = register_child<CausalConv1d>("conv1d", std::make_shared<CausalConv1d>(pf, conv, o.conv_kernel, o.init));
  dt_bias_ = &register_parameter("dt_bias", pf.make({o.value_heads}, Init::ones()));
  a_log_ = &register_parameter("A_log", pf.make({o.value_heads}, Init::uniform(std::log(16.0))));
  norm_ = register_module("norm", std::make_shared<GatedRMSNorm>(pf, o.value_dim, o.norm_eps));
  out_proj_ = register_child<UnaryModule>("out_proj", std::make_shared<Linear>(pf, value, o.hidden, lin));
}

Tensor GatedDeltaNet::forward(const Tensor& x_in, const TokenMask& token_mask) {
  LT_CHECK(x_in.dim() == 3, "Gated DeltaNet: input shape " + shape_str(x_in.shape()), "expected [B, T, hidden]",
           "pass a batch of sequences");
  const int64_t B = x_in.size(0), T = x_in.size(1), Hv = o_.value_heads;
  const Tensor& mask = token_mask.key_padding;
  const Tensor& doc_pos = token_mask.doc_pos;
  LT_CHECK(!doc_pos.defined() || (doc_pos.dtype() == DType::I32 && doc_pos.shape() == Shape({B, T})),
           "Gated DeltaNet: document positions are " + std::string(dtype_name(doc_pos.dtype())) + " " +
               shape_str(doc_pos.shape()),
           "expected i32 " + shape_str({B, T}) + " like the input: each token's position inside its document",
           "pass one int32 position per token");
  // On the CPU each layer checks the padding (a pass over B T bytes); a GPU model checks it once a
  // forward (models/qwen3_5.cpp) rather than wait for the device in every layer.
  if (mask.defined() && mask.device().is_cpu()) check_padding(token_mask);
  Tensor x = x_in;
  if (mask.defined())  // transformers' apply_mask_to_padding_states: padded positions enter as zeros
    x = mul(x, reshape(cast(mask, x.dtype()), {B, T, 1}));
  Tensor qkv = (*in_proj_qkv_)(x);
  Tensor z = (*in_proj_z_)(x);
  Tensor ba = fused_linear(x, {&in_proj_b_, &in_proj_a_});
  if (!ba.defined()) ba = concat({(*in_proj_b_)(x), (*in_proj_a_)(x)}, -1);
  const Tensor b = slice(ba, 2, 0, Hv), a = slice(ba, 2, Hv, 2 * Hv);
  // Packed documents: the convolution's taps and the delta rule's state restart at each start.
  const Tensor conv = (*conv1d_)(qkv, doc_pos);
  qkv = Tensor();
  const Tensor beta = sigmoid(b);
  const Tensor g = gated_delta_decay(a, param_as_is(*a_log_), param_as_is(*dt_bias_));
  Tensor o = gated_delta_rule_packed(conv, o_.key_heads, o_.key_dim, Hv, o_.value_dim, g, beta, o_.chunk, doc_pos);
  Tensor y = (*norm_)(reshape(o, {B, T, Hv * o_.value_dim}), z);
  return (*out_proj_)(y);
}

}  // namespace lt::nn
