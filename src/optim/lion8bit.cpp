// Lion with an 8-bit block-wise momentum (bitsandbytes' Lion8bit, block size 256, signed map).
// Parameters under min_8bit_size elements keep an f32 momentum and go through lion_step.
#include "backend/backend.h"
#include "leantrain/error.h"
#include "leantrain/optim_lean.h"
#include "optim/q8_state.h"
#include "optim/quant_map.h"

namespace lt {

Lion8bit::Lion8bit(std::vector<ParamGroup> groups, const Lion8bitOptions& o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "lion8bit"), opt_(o) {
  LT_CHECK(o.beta1 >= 0 && o.beta1 <= 1 && o.beta2 >= 0 && o.beta2 < 1,
           "lion8bit: betas (" + std::to_string(o.beta1) + ", " + std::to_string(o.beta2) + ") out of range",
           "beta1 must be in [0, 1] and beta2 in [0, 1)", "use e.g. 0.9 and 0.99");
  LT_CHECK(o.min_8bit_size >= 1, "lion8bit: min_8bit_size " + std::to_string(o.min_8bit_size),
           "it is the element count from which states are quantised", "use e.g. 4096");
}

std::vector<std::string> Lion8bit::state_names() const { return {"exp_avg", "exp_avg_absmax"}; }

std::vector<Tensor> Lion8bit::make_state(const Tensor& p, Device device) const {
  auto [m, m_absmax] = q8_moment(p, p.numel() >= opt_.min_8bit_size, device);
  return {m, m_absmax};
}

void Lion8bit::update(const std::vector<Slot*>& slots, float grad_scale) {
  struct Lists {
    std::vector<Tensor> p, g, m, m_absmax;
    std::vector<uint64_t> sr;  // stochastic-rounding streams (empty when off)
  } q8, f32;
  for (Slot* s : slots) {
    Lists& l = q8_is_quantised(s->state[0]) ? q8 : f32;
    l.p.push_back(s->param);
    l.g.push_back(s->param.grad());
    l.m.push_back(s->state[0]);
    l.m_absmax.push_back(s->state[1]);
    if (stochastic_rounding()) l.sr.push_back(sr_stream_of(*s));
  }
  const Slot& first = *slots.front();
  LionArgs a{float(lr()), float(opt_.beta1), float(opt_.beta2), float(first.weight_decay), grad_scale};
  Backend& be = backend_for(first.param.device());
  a.sr.streams = f32.sr;
  if (!f32.p.empty()) be.lion_step(f32.p, f32.g, f32.m, a);
  a.sr.streams = q8.sr;
  if (!q8.p.empty()) be.lion8bit_step(q8.p, q8.g, QuantState{q8.m, q8.m_absmax, dynamic_map_signed()}, a);
}

}  // namespace lt
