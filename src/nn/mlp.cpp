#include <typeinfo>

#include "leantrain/autocast.h"
#include "leantrain/nn.h"

namespace lt::nn {

Mlp::Mlp(ParamFactory& pf, const MlpOptions& o) {
  LinearOptions l1{.bias = true, .layout = o.layout, .weight_init = o.fc1_init};
  LinearOptions l2{.bias = true, .layout = o.layout, .weight_init = o.fc2_init};
  fc1_ = register_child<UnaryModule>(o.fc1_name, std::make_shared<Linear>(pf, o.dim, o.hidden, l1));
  fc2_ = register_child<UnaryModule>(o.fc2_name, std::make_shared<Linear>(pf, o.hidden, o.dim, l2));
  act_ = register_child<UnaryModule>(o.act_name, std::make_shared<Gelu>(o.approx));
  drop_ = register_child<UnaryModule>(o.dropout_name, std::make_shared<Dropout>(o.dropout, pf.next_seed()));
}

// fc1 -> GELU -> fc2 as linear_gelu_parts then gelu_linear (docs/memory-model.md, "What a
// block keeps"): fc2 saves fc1's output, which the GELU's backward reads anyway, instead of the
// GELU's output, and recomputes the GELU for its weight gradient. The tanh GELU rides in fc1's
// GEMM epilogue on the GPU. A forward wrapper on fc1 or fc2 (checkpointing, offload, the
// profiler's call recording), one on the GELU that does more than recompute it, or a replaced
// module sends it through the modules one by one.
bool Mlp::dropout_idle() const {
  const auto* d = dynamic_cast<const Dropout*>(drop_.get());
  return d && typeid(*d) == typeid(Dropout) && !d->forward_wrapper() && (d->p() == 0.0 || !d->is_training());
}

Tensor Mlp::forward(const Tensor& x) { return forward_impl(x, false); }

Tensor Mlp::forward_impl(const Tensor& x, bool output_unread) {
  Linear *fc1 = plain_linear(fc1_.get()), *fc2 = plain_linear(fc2_.get());
  auto* act = dynamic_cast<Gelu*>(act_.get());
  const bool unread = output_unread && dropout_idle();
  // Module by module; fc2's product dry when nothing reads it.
  auto through_modules = [&] {
    Tensor h = (*act_)((*fc1_)(x));
    return (*drop_)(unread && fc2 ? fc2->forward_unread_output(h) : (*fc2_)(h));
  };
  if (!lean_saves_) {
    // The GELU's output kept for fc2's weight gradient, and its input for its derivative, which
    // rides in the epilogue of fc2's input-gradient GEMM (gelu_linear with keep_act): no GELU
    // kernel either way. The tanh GELU's forward rides in fc1's GEMM epilogue.
    if (fc1 && fc2 && act && typeid(*act) == typeid(Gelu) && act->approx() == GeluApprox::Tanh &&
        !act->forward_wrapper()) {
      LinearGelu h = fc1->forward_gelu_parts(x, act->approx());
      return (*drop_)(fc2->forward_after_gelu(h.pre, h.act, act->approx(), /*keep_act=*/true, unread));
    }
    if (fc1 && act && act->approx() == GeluApprox::Tanh && !fc1->forward_wrapper() && !act->forward_wrapper())
      return (*drop_)((*fc2_)(fc1->forward_gelu_tanh(x)));
    return through_modules();
  }
  if (fc1 && fc2 && act && typeid(*act) == typeid(Gelu) && act->recomputed_or_unwrapped()) {
    LinearGelu h = fc1->forward_gelu_parts(x, act->approx());
    return (*drop_)(fc2->forward_after_gelu(h.pre, h.act, act->approx(), false, unread));
  }
  return through_modules();
}

Tensor Mlp::forward_normed(const Tensor& x, LayerNorm& ln, bool output_unread) {
  if (!lean_saves_) return Tensor();
  Linear *fc1 = plain_linear(fc1_.get()), *fc2 = plain_linear(fc2_.get());
  auto* act = dynamic_cast<Gelu*>(act_.get());
  if (!fc1 || !fc2 || !act || typeid(*act) != typeid(Gelu) || !act->recomputed_or_unwrapped()) return Tensor();
  if (compute_dtype_of(fc1->weight()) != x.dtype()) return Tensor();
  const bool unread = output_unread && dropout_idle();
  if (act->approx() == GeluApprox::Tanh) {  // the GELU rides in fc1's GEMM epilogue
    LinearGelu h = ln.forward_linear_gelu(x, autocast(fc1->weight()), autocast(fc1->bias()), fc1->weight_in_out());
    return (*drop_)(fc2->forward_after_gelu(h.pre, h.act, act->approx(), false, unread));
  }
  Tensor pre = ln.forward_linear(x, autocast(fc1->weight()), autocast(fc1->bias()), fc1->weight_in_out());
  return (*drop_)(fc2->forward_after_gelu(pre, Tensor(), act->approx(), false, unread));
}

}  // namespace lt::nn
