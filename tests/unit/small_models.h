// The small GPT-2 and ViT configs that several unit tests build (2 layers, width 32, no dropout).
#pragma once
#include "leantrain/models.h"

namespace lt::test {

inline models::GPT2Config small_gpt2(bool tied = true) {
  models::GPT2Config c;
  c.vocab_size = 64;
  c.n_positions = 32;
  c.n_embd = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  c.tie_word_embeddings = tied;
  return c;
}

inline models::ViTConfig small_vit() {
  models::ViTConfig c;
  c.image_size = 8;
  c.patch_size = 4;
  c.num_channels = 2;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 64;
  c.num_labels = 4;
  return c;
}

}  // namespace lt::test
