// The post-norm encoder layer of BERT-family models (transformers' BertLayer, RobertaLayer and
// DistilBERT's TransformerBlock), with transformers' module tree and parameter names:
//
//   BERT / RoBERTa: attention.self.{query, key, value}, attention.output.{dense, LayerNorm},
//                   intermediate.dense, output.{dense, LayerNorm}
//   DistilBERT:     attention.{q_lin, k_lin, v_lin, out_lin}, sa_layer_norm,
//                   ffn.{lin1, lin2}, output_layer_norm
//
// forward: h = LN1(x + drop(out(attend(x W_qkv)))); y = LN2(h + drop(fc2(gelu(fc1(h))))).
// q | k | v run as one GEMM over their stacked weights (made one after another), the residual
// adds ride in the norms (add_layer_norm), and the MLP keeps fc1's output only (gelu_linear),
// as the decoder blocks do; a wrapped or replaced projection (checkpointing, LoRA) is called as
// a module instead.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "leantrain/nn.h"

namespace lt::nn {

// A level of a reference model's module tree that has no forward of its own (BERT's
// "attention", "attention.self", "intermediate"): it only holds children under their names.
class ModuleGroup : public Module {
 public:
  explicit ModuleGroup(std::string type) : type_(std::move(type)) {}
  const char* type_name() const override { return type_.c_str(); }
  // A child its owner calls through the returned handle (replace_module may swap it).
  template <class M>
  Child<M> add(const std::string& name, std::shared_ptr<M> m) {
    return register_child<M>(name, std::move(m));
  }
  // A child its owner keeps a pointer to and calls itself.
  template <class M>
  std::shared_ptr<M> hold(const std::string& name, std::shared_ptr<M> m) {
    return register_module(name, std::move(m));
  }
  std::shared_ptr<ModuleGroup> add_group(const std::string& name, std::string type) {
    return hold(name, std::make_shared<ModuleGroup>(std::move(type)));
  }

 private:
  std::string type_;
};

// BigBird's block-sparse self-attention (transformers' BigBirdBlockSparseAttention, the ITC
// pattern): the sequence is cut into blocks of block_size; the first and the last query block
// attend to every key, every other query block i to the first and last key blocks, its window
// (i-1, i, i+1) and random_blocks random blocks. In eval mode the random blocks are all block 0, as
// transformers has them (deterministic inference); in training they are drawn per call from this
// module's generator (rewound by checkpointing, so a recomputation draws the same blocks), one
// draw shared by the heads (transformers draws per head; see docs/decisions.md). A sequence of at
// most (5 + 2 random_blocks) blocks is attended in full, as transformers switches to original_full.
struct BlockSparseOptions {
  int64_t block_size = 64, random_blocks = 3;
};

class BlockSparseAttentionCore : public AttentionCore, public RandomSource {
 public:
  BlockSparseAttentionCore(int64_t dim, int64_t heads, const BlockSparseOptions& o, uint64_t seed);
  const char* type_name() const override { return "BlockSparseAttention"; }
  Tensor forward(const Tensor& qkv, const TokenMask& mask) const override;
  double forward_flops(const Shape& qkv) const override;
  Generator& generator() override { return gen_; }
  // Whether a sequence of T positions (a multiple of block_size) is attended block-sparsely.
  bool sparse_at(int64_t T) const { return T > (5 + 2 * o_.random_blocks) * o_.block_size; }
  // The key blocks of each of the n query blocks, [n, 5 + random_blocks] (-1: an empty slot);
  // `draw` true picks the random blocks from the generator.
  std::vector<int32_t> block_table(int64_t n, bool draw) const;

 private:
  BlockSparseOptions o_;
  mutable Generator gen_;
};

enum class EncoderNaming { Bert, DistilBert };

struct EncoderLayerOptions {
  int64_t hidden = 0, heads = 0, intermediate = 0;
  double eps = 1e-12;
  double dropout = 0.0;  // after the attention's output projection (BERT) and after fc2 (both)
  GeluApprox approx = GeluApprox::Erf;
  Init init = Init::normal(0.02);
  EncoderNaming naming = EncoderNaming::Bert;
  // transformers' class names: "BertLayer" and its parts' prefix "Bert"; "TransformerBlock".
  const char* type = "BertLayer";
  const char* prefix = "Bert";
  // BigBird's block_sparse attention_type; unset: full attention.
  std::optional<BlockSparseOptions> block_sparse;
};

class PostNormEncoderLayer : public Module {
 public:
  PostNormEncoderLayer(ParamFactory& pf, const EncoderLayerOptions& o);
  const char* type_name() const override { return type_; }
  // key_padding_mask: u8 [B, T], 1 = a real token, or undefined (every token attends).
  Tensor operator()(const Tensor& x, const Tensor& key_padding_mask = Tensor()) {
    return call_forward(x, [this, key_padding_mask](const Tensor& in) { return forward(in, key_padding_mask); });
  }
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask);

 private:
  Tensor mlp(const Tensor& h);
  const char* type_;
  Child<UnaryModule> q_, k_, v_, out_, drop1_, ln1_, fc1_, act_, fc2_, drop2_, ln2_;
  Child<AttentionCore> core_;
};

}  // namespace lt::nn
