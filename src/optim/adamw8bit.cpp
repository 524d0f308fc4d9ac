// AdamW with 8-bit block-wise moments (bitsandbytes' AdamW8bit, block size 256): the signed map
// for exp_avg, the unsigned map for exp_avg_sq. Parameters under min_8bit_size elements keep f32
// moments and go through the ordinary adamw_step; so a group costs at most two backend calls.
#include "backend/backend.h"
#include "leantrain/error.h"
#include "leantrain/optim_lean.h"
#include "optim/q8_state.h"
#include "optim/quant_map.h"

namespace lt {

AdamW8bit::AdamW8bit(std::vector<ParamGroup> groups, const AdamW8bitOptions& o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "adamw8bit"), opt_(o) {
  LT_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1,
           "adamw8bit: betas (" + std::to_string(o.beta1) + ", " + std::to_string(o.beta2) + ") out of range",
           "each beta must be in [0, 1)", "use e.g. 0.9 and 0.999");
  LT_CHECK(o.eps >= 0, "adamw8bit: eps " + std::to_string(o.eps) + " is negative", "eps guards a division",
           "use e.g. 1e-8");
  LT_CHECK(o.min_8bit_size >= 1, "adamw8bit: min_8bit_size " + std::to_string(o.min_8bit_size),
           "it is the element count from which states are quantised", "use e.g. 4096");
}

std::vector<std::string> AdamW8bit::state_names() const {
  return {"exp_avg", "exp_avg_absmax", "exp_avg_sq", "exp_avg_sq_absmax"};
}

std::vector<Tensor> AdamW8bit::make_state(const Tensor& p, Device device) const {
  const bool q = p.numel() >= opt_.min_8bit_size;
  auto [m, m_absmax] = q8_moment(p, q, device);
  auto [v, v_absmax] = q8_moment(p, q, device);
  return {m, m_absmax, v, v_absmax};
}

void AdamW8bit::update(const std::vector<Slot*>& slots, float grad_scale) {
  struct Lists {
    std::vector<Tensor> p, g, m, m_absmax, v, v_absmax;
    std::vector<uint64_t> sr;  // stochastic-rounding streams (empty when off)
  } q8, f32;
  for (Slot* s : slots) {
    Lists& l = q8_is_quantised(s->state[0]) ? q8 : f32;
    l.p.push_back(s->param);
    l.g.push_back(s->param.grad());
    l.m.push_back(s->state[0]);
    l.m_absmax.push_back(s->state[1]);
    l.v.push_back(s->state[2]);
    l.v_absmax.push_back(s->state[3]);
    if (stochastic_rounding()) l.sr.push_back(sr_stream_of(*s));
  }
  const Slot& first = *slots.front();
  AdamWArgs a{float(lr()), float(opt_.beta1), float(opt_.beta2), float(opt_.eps), float(first.weight_decay),
              first.step + 1, grad_scale};
  Backend& be = backend_for(first.param.device());
  a.sr.streams = f32.sr;
  if (!f32.p.empty()) be.adamw_step(f32.p, f32.g, f32.m, f32.v, a);
  a.sr.streams = q8.sr;
  if (!q8.p.empty())
    be.adamw8bit_step(q8.p, q8.g, QuantState{q8.m, q8.m_absmax, dynamic_map_signed()},
                      QuantState{q8.v, q8.v_absmax, dynamic_map_unsigned()}, a);
}

}  // namespace lt
