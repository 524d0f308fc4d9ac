#pragma once
// What the decoder language models (the LLaMA family, Gemma 3, Qwen3.5) share around their body:
// transformers' *ForCausalLM layout, model.{embed_tokens, layers, norm} and an lm_head that exists
// only when the head is not tied to embed_tokens. The subclass builds its body (registered as
// "model"), hands its three parts to set_body(), calls add_untied_head() and implements
// hidden_states(); forward, sampling, the fused loss's inputs, fsdp's standalone modules, the tied
// table and the head's FLOPs are this class's.
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "leantrain/models.h"
#include "leantrain/nn_llama.h"

namespace lt::models {

class DecoderLM : public CausalLM {
 public:
  // Final hidden states [B, T, C] (after the final norm). pos_offset: position of ids[:, 0], for a
  // cached decoding step; only without autograd (a recomputed forward would not see it).
  virtual Tensor hidden_states(const Tensor& ids, const nn::TokenMask& mask = {}, int64_t pos_offset = 0) = 0;
  Tensor forward(const Tensor& ids, const nn::TokenMask& mask = {}) override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t context_length() const override { return context_length_; }
  Tensor next_token_logits(const Tensor& ids) override;
  // Untied, the embedding table is read by its lookup alone, and the head by its own call unless a
  // chunked loss reads its weight directly; tied, both GEMMs read the table.
  std::vector<nn::Module*> standalone_modules() override;
  Tensor tied_table() const override;
  double root_forward_flops(const Shape& input) const override;

 protected:
  DecoderLM(int64_t hidden_size, int64_t vocab_size, int64_t context_length)
      : hidden_size_(hidden_size), vocab_size_(vocab_size), context_length_(context_length) {}
  void set_body(std::shared_ptr<nn::Embedding> embed_tokens, std::shared_ptr<nn::ModuleList> layers,
                std::shared_ptr<nn::RMSNorm> norm);
  // lm_head [V, C], bias-free, normal(init_std), registered after the body: only when not tied.
  void add_untied_head(nn::ParamFactory& pf, bool tied, double init_std);
  // [..., C] -> logits [..., V]: lm_head, or tied, hidden @ table^T with the table cast for this GEMM
  // alone under autocast.
  virtual Tensor head(const Tensor& hidden);
  // head()'s operands when it is one bias-free [V, C] GEMM (tied, or a plain untied lm_head): the
  // hidden rows and the weight, as the GEMM reads them; else none (the model does not run then).
  HeadInputs loss_head_inputs(const Tensor& ids, const nn::TokenMask& mask) override;
  // The layers' outputs one after another over embedded x, then the final norm.
  Tensor run_layers(Tensor x, const nn::TokenMask& mask);
  // A checkpoint key as this model names it, for the text tower of a multimodal checkpoint too:
  // model.language_model.* and language_model.model.* read as model.*, keys under any of
  // `skipped` (towers leantrain does not build) and rotary inv_freq buffers as "" (skipped), a
  // tied lm_head.weight as "", a bare *TextModel's keys gain "model.".
  std::string text_tower_key(const std::string& key, std::initializer_list<const char*> skipped) const;
  // Token ids [B, T] checked: 2-D, integer, and pos_offset + T within max_positions. `name` is the model's.
  static void check_decoder_ids(const std::string& name, const Tensor& ids, int64_t pos_offset, int64_t max_positions);

  // The rotary position offset of a cached decoding step, set for the scope of a forward on
  // every rotary table of the model (a model may keep one for local and one for global layers).
  class PositionOffsetScope {
   public:
    PositionOffsetScope(std::initializer_list<nn::RotaryEmbedding*> tables, int64_t offset);
    ~PositionOffsetScope();
    PositionOffsetScope(const PositionOffsetScope&) = delete;
    PositionOffsetScope& operator=(const PositionOffsetScope&) = delete;

   private:
    std::vector<nn::RotaryEmbedding*> tables_;
  };

  std::shared_ptr<nn::Embedding> embed_tokens_;
  std::shared_ptr<nn::ModuleList> layers_;
  std::shared_ptr<nn::RMSNorm> norm_;
  std::shared_ptr<nn::Linear> lm_head_;  // only when untied

 private:
  int64_t hidden_size_, vocab_size_, context_length_;
};

}  // namespace lt::models
