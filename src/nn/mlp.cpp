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

// fc1 and a tanh GELU run as one op (linear_gelu: on the GPU the GELU rides in the GEMM's
// epilogue, with the same saved tensors and graph) unless either module has a forward wrapper
// (checkpointing, offload, the profiler's call recording), which must see its own call.
Tensor Mlp::forward(const Tensor& x) {
  auto* fc1 = dynamic_cast<Linear*>(fc1_.get());
  auto* act = dynamic_cast<Gelu*>(act_.get());
  if (fc1 && act && act->approx() == GeluApprox::Tanh && !fc1->forward_wrapper() && !act->forward_wrapper())
    return (*drop_)((*fc2_)(fc1->forward_gelu_tanh(x)));
  return (*drop_)((*fc2_)((*act_)((*fc1_)(x))));
}

}  // namespace lt::nn
