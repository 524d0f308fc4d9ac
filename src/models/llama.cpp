// The LLaMA-family decoder (models/llama.h): transformers' *Model body under "model", blocks of
// pre-RMSNorm attention and gated MLP, the final norm, and an LM head tied to embed_tokens unless
// tie_word_embeddings is false. Init as transformers' _init_weights: normal(initializer_range) for
// Linear and Embedding weights, zero biases, ones for the norms.
#include <numeric>

#include "autograd/forward_context.h"
#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/nn_moe.h"
#include "models/llama.h"

namespace lt::models {

namespace {

// transformers' *Model: the "model." subtree.
class LlamaBody : public nn::Module {
 public:
  LlamaBody(const LlamaConfig& c, nn::ParamFactory& pf, const std::string& prefix) : type_(prefix + "Model") {
    const nn::Init init = nn::Init::normal(c.initializer_range);
    const int64_t C = c.hidden_size;
    block_type_ = prefix + "DecoderLayer";
    attn_type_ = prefix + "Attention";
    mlp_type_ = prefix + "MLP";
    moe_type_ = prefix + "SparseMoeBlock";
    experts_type_ = prefix + "Experts";
    router_type_ = prefix + "TopKRouter";
    rope_type_ = prefix + "RotaryEmbedding";
    // transformers zeroes the padding row at init, and its lookups add no gradient there.
    const int64_t pad = c.padding_idx();
    embed_tokens = register_module("embed_tokens",
                                   std::make_shared<nn::Embedding>(pf, c.vocab_size, C, init.with_zero_row(pad), pad));
    layers = register_module("layers", std::make_shared<nn::ModuleList>());
    // Shared by every attention layer, as transformers' model.rotary_emb computes cos and sin once.
    rotary_emb = register_module("rotary_emb", std::make_shared<nn::RotaryEmbedding>(
                                                   rope_frequencies(c.head_size(), c.rope_theta, c.rope_scaling),
                                                   rope_type_.c_str()));
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      auto ln_1 = std::make_shared<nn::RMSNorm>(pf, C, c.rms_norm_eps);
      nn::DecoderAttentionOptions ao{.hidden = C,
                                     .heads = c.num_attention_heads,
                                     .kv_heads = c.kv_heads(),
                                     .head_dim = c.head_size(),
                                     .qkv_bias = c.qkv_bias(),
                                     .o_bias = c.o_bias(),
                                     .qk_norm = c.qk_norm(),
                                     .qk_norm_eps = c.rms_norm_eps,
                                     .window = c.window_of(i),
                                     .init = init,
                                     .type = attn_type_.c_str()};
      auto attn = std::make_shared<nn::DecoderSelfAttention>(pf, ao, rotary_emb);
      auto ln_2 = std::make_shared<nn::RMSNorm>(pf, C, c.rms_norm_eps);
      std::shared_ptr<nn::UnaryModule> mlp;
      if (c.sparse_layer(i)) {
        nn::MoeOptions mo{.hidden = C,
                          .intermediate = c.expert_intermediate(),
                          .experts = c.num_experts,
                          .top_k = c.num_experts_per_tok,
                          .renorm = c.renorm_topk(),
                          .round_weights = c.model_type != "mixtral",
                          .init = init,
                          .type = moe_type_.c_str(),
                          .experts_type = experts_type_.c_str(),
                          .router_type = router_type_.c_str()};
        mlp = std::make_shared<nn::SparseMoeBlock>(pf, mo);
      } else {
        nn::GatedMlpOptions mo{.hidden = C, .intermediate = c.intermediate_size, .bias = c.gated_bias(), .init = init,
                               .type = mlp_type_.c_str()};
        mlp = std::make_shared<nn::GatedMlp>(pf, mo);
      }
      layers->append(std::make_shared<nn::PreNormBlock>(
          block_type_.c_str(), ln_1, attn, ln_2, mlp,
          nn::BlockNames{"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"}));
    }
    norm = register_module("norm", std::make_shared<nn::RMSNorm>(pf, C, c.rms_norm_eps));
  }
  const char* type_name() const override { return type_.c_str(); }

  std::shared_ptr<nn::Embedding> embed_tokens;
  std::shared_ptr<nn::ModuleList> layers;
  std::shared_ptr<nn::RMSNorm> norm;
  std::shared_ptr<nn::RotaryEmbedding> rotary_emb;

 private:
  // Type names the modules point at (const char*): they live as long as the body.
  std::string type_, block_type_, attn_type_, mlp_type_, rope_type_, moe_type_, experts_type_, router_type_;
};

}  // namespace

Llama::Llama(const LlamaConfig& cfg, const nn::InitOptions& init)
    : DecoderLM(cfg.hidden_size, cfg.vocab_size, cfg.max_position_embeddings), cfg_(cfg) {
  cfg_.validate();
  type_ = cfg_.class_prefix() + "ForCausalLM";
  nn::ParamFactory pf(init);
  auto body = register_module("model", std::make_shared<LlamaBody>(cfg_, pf, cfg_.class_prefix()));
  set_body(body->embed_tokens, body->layers, body->norm);
  rotary_ = body->rotary_emb;
  add_untied_head(pf, cfg_.tie_word_embeddings, cfg_.initializer_range);
  pf.materialize();  // the parameter store: one flat buffer, filled in registration order
}

Tensor Llama::hidden_states(const Tensor& ids, const nn::TokenMask& mask_in, int64_t pos_offset) {
  const std::string name = cfg_.class_prefix();
  check_decoder_ids(name, ids, pos_offset, cfg_.max_position_embeddings);
  const int64_t B = ids.size(0), T = ids.size(1);
  // A checkpointed block recomputes its forward during backward, after the offset is reset.
  LT_CHECK(pos_offset == 0 || !grad_enabled(), name + " input: position offset " + std::to_string(pos_offset),
           "an offset is for cached decoding, which records no gradients", "run it under no-grad or inference mode");
  const nn::TokenMask mask = decoder_mask(name, mask_in, B, T, pos_offset);
  PositionOffsetScope positions({rotary_.get()}, pos_offset);
  // output_router_logits: the routers add their sums to this forward's load-balancing loss,
  // which loss() adds (moe_add_aux_loss). transformers' load_balancing_loss_func takes the
  // tokens whose attention_mask is 1, so padding is left out: key padding, and a row's tail
  // (mask.text). Padding is still routed (as there): no capacity, so no real token sees it.
  std::shared_ptr<MoeAuxLoss> aux;
  if (aux_loss()) {
    aux = std::make_shared<MoeAuxLoss>();
    aux->coef = cfg_.router_aux_loss_coef;
    aux->experts = cfg_.num_experts;
    Tensor text = mask.text;
    if (mask.key_padding.defined())
      text = text.defined() ? cast(mul(cast(text, DType::F32), cast(mask.key_padding, DType::F32)), DType::U8)
                            : mask.key_padding;
    if (text.defined()) aux->token_mask = reshape(contiguous(text), {-1});
  }
  set_pending_moe_aux(this, aux);
  ForwardContextScope context(ForwardContext{aux});
  return run_layers((*embed_tokens_)(ids), mask);
}

std::vector<CheckpointTensor> Llama::checkpoint_tensors() const {
  std::vector<CheckpointTensor> out = Model::checkpoint_tensors();
  if (!cfg_.moe()) return out;
  // The hub's layout: each expert's projections apart (transformers 5 fuses them at load, and
  // writes them apart again); Mixtral's block keeps its older name and w1 / w3 / w2. The rows of a
  // stacked [E, d1, d2] weight count over it seen as [E d1, d2] (checkpoint_weights.cpp, rows_of).
  const bool mixtral = cfg_.model_type == "mixtral";
  const int64_t E = cfg_.num_experts, F = cfg_.expert_intermediate(), C = cfg_.hidden_size;
  std::vector<CheckpointTensor> hub;
  for (const CheckpointTensor& t : out) {
    if (t.param.find(".mlp.experts.") != std::string::npos && t.param.find(".lora_") != std::string::npos)
      continue;  // expert adapters (merged or not) are an adapter file's, never the model's
    const std::string gate_up = ".mlp.experts.gate_up_proj", down = ".mlp.experts.down_proj", router = ".mlp.gate.weight";
    auto ends = [&](const std::string& suffix) { return t.param.ends_with(suffix); };
    const std::string layer = t.param.substr(0, t.param.rfind(".mlp."));
    const std::string block = layer + (mixtral ? ".block_sparse_moe" : ".mlp");
    // NF4 experts (buffers, nn_moe.h): the codes hold one row per piece (an expert's projection),
    // and a piece is one bitsandbytes state under the hub's name; the absmax buffers go with the
    // codes (quant/nf4_checkpoint.h writes and reads the six tensors of each piece).
    const bool nf4 = t.buffer;
    if (ends(router)) {
      hub.push_back({block + ".gate.weight", t.param});
    } else if (ends(gate_up)) {
      for (int64_t e = 0; e < E; ++e) {
        const std::string ex = block + ".experts." + std::to_string(e);
        hub.push_back({ex + (mixtral ? ".w1.weight" : ".gate_proj.weight"), t.param, nf4 ? 2 * e : e * 2 * F, nf4 ? 1 : F, nf4});
        hub.push_back({ex + (mixtral ? ".w3.weight" : ".up_proj.weight"), t.param, nf4 ? 2 * e + 1 : e * 2 * F + F,
                       nf4 ? 1 : F, nf4});
      }
    } else if (ends(down)) {
      for (int64_t e = 0; e < E; ++e)
        hub.push_back({block + ".experts." + std::to_string(e) + (mixtral ? ".w2.weight" : ".down_proj.weight"),
                       t.param, nf4 ? e : e * C, nf4 ? 1 : C, nf4});
    } else if (ends(gate_up + "_absmax") || ends(gate_up + "_nested_absmax") || ends(down + "_absmax") ||
               ends(down + "_nested_absmax")) {
      continue;
    } else {
      hub.push_back(t);
    }
  }
  return hub;
}

std::string Llama::checkpoint_key_to_name(const std::string& key) const {
  if (key.ends_with("rotary_emb.inv_freq")) return "";  // a buffer older checkpoints saved
  if (key == "lm_head.weight") return lm_head_ ? key : "";  // else tied to model.embed_tokens.weight
  std::string k = key.rfind("model.", 0) == 0 ? key : "model." + key;  // a bare *Model's names
  // transformers 5's fused layout (mlp.experts.gate_up_proj / down_proj, mlp.gate.weight) names
  // the parameters themselves; Mixtral's older block name maps onto them.
  if (cfg_.model_type == "mixtral")
    if (size_t at = k.find(".block_sparse_moe."); at != std::string::npos) k.replace(at, 18, ".mlp.");
  return k;
}

}  // namespace lt::models
