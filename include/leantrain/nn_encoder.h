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
