// Sparse MoE blocks (leantrain/nn_moe.h). The router's linear runs in the compute dtype (its
// logits are what transformers' F.linear gives under the model's dtype); the routing, the sort
// and the combine are the ops of ops/moe.cpp. The forward's load-balancing loss, when the model
// asked for one, is the current ForwardContext's (autograd/forward_context.h).
#include <cmath>

#include "autograd/forward_context.h"
#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/nn_moe.h"

namespace lt::nn {

namespace {

// A plain container module (PEFT's lora_A / lora_B Linears and ParamWrapper levels, by name only).
class Holder : public Module {
 public:
  const char* type_name() const override { return "Module"; }
  Tensor& add_param(const std::string& name, Tensor t) { return register_parameter(name, std::move(t)); }
  void add_module(const std::string& name, std::shared_ptr<Module> m) { register_module(name, std::move(m)); }
};

}  // namespace

MoeRouter::MoeRouter(ParamFactory& pf, const MoeOptions& o) : type_(o.router_type) {
  weight_ = &register_parameter("weight", pf.make({o.experts, o.hidden}, o.init));
}

MoeLoraAdapter::MoeLoraAdapter(ParamFactory& pf, int64_t experts, int64_t d1, int64_t d2, int64_t rank, double alpha)
    : experts_(experts), rank_(rank), alpha_(alpha) {
  LT_CHECK(rank > 0 && rank <= std::min(d1, d2),
           "LoRA rank " + std::to_string(rank) + " on experts of " + std::to_string(d2) + " -> " + std::to_string(d1),
           "the rank must be in [1, min(in, out)]", "pass a smaller --lora-rank");
  LT_CHECK(std::isfinite(alpha) && alpha > 0, "LoRA alpha " + std::to_string(alpha), "it must be positive",
           "pass e.g. --lora-alpha 16");
  // PEFT's ParamWrapper: lora_A = Linear(in_features = d1, r E) under kaiming_uniform_(a = sqrt(5)),
  // i.e. uniform(+-1/sqrt(d1)); lora_B zeros (a fresh adapter changes nothing).
  const double bound = 1.0 / std::sqrt(double(d1));
  a_ = &register_module("lora_A", std::make_shared<Holder>())->add_param("weight", pf.make({experts * rank, d1}, Init::uniform(bound)));
  b_ = &register_module("lora_B", std::make_shared<Holder>())->add_param("weight", pf.make({experts, rank, d2}, Init::zeros()));
}

Tensor MoeLoraAdapter::factor_in() const { return autocast(*b_); }

Tensor MoeLoraAdapter::factor_out() const { return reshape(autocast(*a_), {experts_, rank_, a_->size(1)}); }

Tensor MoeLoraAdapter::delta() const {
  NoGradGuard no_grad;
  const int64_t d1 = a_->size(1);
  Tensor a = reshape(cast(*a_, DType::F32), {experts_, rank_, d1});
  return scale(matmul(a, cast(*b_, DType::F32), /*trans_a=*/true), scaling());  // [E, d1, d2]
}

MoeExperts::MoeExperts(ParamFactory& pf, const MoeOptions& o) : type_(o.experts_type) {
  LT_CHECK(o.experts > 0 && o.intermediate > 0 && o.hidden > 0,
           "MoE experts: " + std::to_string(o.experts) + " experts of " + std::to_string(o.hidden) + " -> " +
               std::to_string(o.intermediate),
           "each count must be positive", "fix num_experts and moe_intermediate_size");
  gate_up_ = &register_parameter("gate_up_proj", pf.make({o.experts, 2 * o.intermediate, o.hidden}, o.init));
  down_ = &register_parameter("down_proj", pf.make({o.experts, o.hidden, o.intermediate}, o.init));
}

MoeExperts::MoeExperts(const char* type, Nf4Stack gate_up, Nf4Stack down) : type_(type) {
  LT_CHECK(gate_up.shape.size() == 3 && down.shape.size() == 3 && gate_up.parts == 2 && down.parts == 1 &&
               gate_up.shape[0] == down.shape[0] && gate_up.shape[1] == 2 * down.shape[2] &&
               gate_up.shape[2] == down.shape[1],
           "NF4 experts: gate_up " + shape_str(gate_up.shape) + " in " + std::to_string(gate_up.parts) + " parts, down " +
               shape_str(down.shape) + " in " + std::to_string(down.parts),
           "expected [E, 2I, C] in 2 parts (gate, up) and [E, C, I] in 1", "quantise the experts' own stacks");
  gate_up_nf4_ = register_nf4("gate_up_proj", std::move(gate_up));
  down_nf4_ = register_nf4("down_proj", std::move(down));
}

MoeExperts::Nf4Slots MoeExperts::register_nf4(const std::string& name, Nf4Stack s) {
  const Nf4StackShapes sh = nf4_stack_shapes(s.shape, s.parts);
  LT_CHECK(s.codes.shape() == sh.codes && s.absmax_codes.shape() == sh.absmax_codes &&
               s.nested_absmax.shape() == sh.nested_absmax,
           "NF4 experts: " + name + "'s state " + shape_str(s.codes.shape()) + ", " + shape_str(s.absmax_codes.shape()) +
               ", " + shape_str(s.nested_absmax.shape()),
           "expected " + shape_str(sh.codes) + ", " + shape_str(sh.absmax_codes) + ", " + shape_str(sh.nested_absmax),
           "size it with nf4_stack_shapes");
  Nf4Slots slots;
  slots.codes = &register_buffer(name, s.codes);
  slots.absmax = &register_buffer(name + "_absmax", s.absmax_codes);
  slots.nested = &register_buffer(name + "_nested_absmax", s.nested_absmax);
  s.codes = s.absmax_codes = s.nested_absmax = Tensor();
  slots.host = std::move(s);
  return slots;
}

Nf4Stack MoeExperts::Nf4Slots::stack() const {
  LT_CHECK(codes != nullptr, "NF4 state of 16-bit experts", "these experts are not quantised", "quantise them first");
  Nf4Stack s = host;
  s.codes = *codes;
  s.absmax_codes = *absmax;
  s.nested_absmax = *nested;
  return s;
}

void MoeExperts::set_nf4_host_state(bool gate_up, std::vector<float> offsets, std::vector<float> nested_map, DType dtype) {
  Nf4Slots& s = gate_up ? gate_up_nf4_ : down_nf4_;
  LT_CHECK(s.codes != nullptr && int64_t(offsets.size()) == s.host.pieces() && nested_map.size() == 256,
           "NF4 experts: " + std::to_string(offsets.size()) + " offsets and a map of " + std::to_string(nested_map.size()),
           "quantised experts take one offset per piece (" + std::to_string(s.host.pieces()) + ") and 256 map entries",
           "set the state of NF4 experts");
  s.host.offsets = std::move(offsets);
  s.host.nested_map = std::move(nested_map);
  s.host.dtype = dtype;
}

Tensor& MoeExperts::gate_up_proj() const {
  LT_CHECK(gate_up_ != nullptr, "gate_up_proj of NF4 experts", "their weights are 4-bit state, not a tensor",
           "read gate_up_nf4()");
  return *gate_up_;
}

Tensor& MoeExperts::down_proj() const {
  LT_CHECK(down_ != nullptr, "down_proj of NF4 experts", "their weights are 4-bit state, not a tensor", "read down_nf4()");
  return *down_;
}

void MoeExperts::add_lora(ParamFactory& pf, int64_t rank, double alpha) {
  LT_CHECK(!gate_up_lora_, "LoRA on experts twice", "the experts already have adapters", "add them once");
  if (gate_up_) gate_up_->set_requires_grad(false);
  if (down_) down_->set_requires_grad(false);
  const int64_t e = num_experts(), c = hidden(), f = intermediate();
  // PEFT wraps gate_up_proj first: its wrapper becomes the inner "base_layer".
  auto inner = register_module("base_layer", std::make_shared<Holder>());
  gate_up_lora_ = std::make_shared<MoeLoraAdapter>(pf, e, 2 * f, c, rank, alpha);
  for (auto& [name, child] : gate_up_lora_->children()) inner->add_module(name, child);
  down_lora_ = std::make_shared<MoeLoraAdapter>(pf, e, c, f, rank, alpha);
  for (auto& [name, child] : down_lora_->children()) register_module(name, child);
}

void MoeExperts::merge_lora() {
  LT_CHECK(!quantized() || !gate_up_lora_, "merging LoRA into NF4 experts",
           "W + s A^T B folded into 4-bit weights would lose the adapter in rounding",
           "merge into the 16-bit experts the NF4 ones were quantised from");
  NoGradGuard no_grad;
  for (auto [w, a] : {std::pair{gate_up_, gate_up_lora_.get()}, std::pair{down_, down_lora_.get()}})
    if (a) copy_(*w, cast(add(cast(*w, DType::F32), a->delta()), w->dtype()));
  gate_up_lora_.reset();
  down_lora_.reset();
}

Tensor MoeExperts::run(const Tensor& xs, const MoeDispatch& d) {
  // With adapters, each projection is one grouped_lora_linear: the adapter's rank-r GEMMs around
  // the base's, its product added in a GEMM's epilogue rather than as a tensor of its own.
  auto project = [&](const Tensor& rows, bool gate_up, const MoeLoraAdapter* lora) {
    if (quantized()) {
      const Nf4Stack w = gate_up ? gate_up_nf4() : down_nf4();
      return lora ? grouped_lora_linear_nf4(rows, w, lora->factor_in(), lora->factor_out(), lora->scaling(), d)
                  : grouped_linear_nf4(rows, w, d);
    }
    const Tensor w = autocast(gate_up ? *gate_up_ : *down_);
    return lora ? grouped_lora_linear(rows, w, lora->factor_in(), lora->factor_out(), lora->scaling(), d)
                : grouped_linear(rows, w, d);
  };
  // The rows' dtype (the compute dtype under autocast) is what NF4 weights dequantise to.
  Tensor gate_up = project(xs, true, gate_up_lora_.get());
  if (!down_lora_) {
    return quantized() ? grouped_swiglu_linear_nf4(gate_up, down_nf4(), d)
                       : grouped_swiglu_linear(gate_up, autocast(*down_), d);
  }
  // The down adapter reads the activation, so it is formed (and kept) here.
  return project(swiglu_packed(gate_up), false, down_lora_.get());
}

SparseMoeBlock::SparseMoeBlock(ParamFactory& pf, const MoeOptions& o) : opts_(o) {
  LT_CHECK(o.top_k >= 1 && o.top_k <= o.experts,
           "MoE: " + std::to_string(o.top_k) + " experts per token of " + std::to_string(o.experts),
           "a token is routed to between 1 and all experts", "fix num_experts_per_tok");
  gate_ = register_module("gate", std::make_shared<MoeRouter>(pf, o));
  experts_ = register_child("experts", std::make_shared<MoeExperts>(pf, o));
}

Tensor SparseMoeBlock::forward(const Tensor& x) {
  LT_CHECK(x.dim() >= 1 && x.size(-1) == opts_.hidden, "MoE block: input " + shape_str(x.shape()),
           "expected [..., " + std::to_string(opts_.hidden) + "]", "pass the normed hidden states");
  const Shape shape = x.shape();
  Tensor h = reshape(autocast(x), {-1, opts_.hidden});
  Tensor logits = linear(h, autocast(gate_->weight()), Tensor());
  const DType wdt = opts_.round_weights ? logits.dtype() : DType::F32;
  MoeRoute r = moe_route(logits, opts_.top_k, opts_.renorm, wdt, forward_context().moe_aux);
  MoeDispatch d = moe_dispatch(r.idx, opts_.experts);
  Tensor ys = experts_->run(moe_gather(h, d), d);
  return reshape(moe_combine(ys, r.weights, r.idx, d), shape);
}

}  // namespace lt::nn
