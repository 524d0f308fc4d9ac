// Parameters are drawn directly on the target device in the target dtype: no fp32 host copy
// exists at any point, so load-time peak equals parameter bytes.
#include <cmath>

#include "leantrain/autograd.h"
#include "leantrain/nn.h"

namespace lt::nn {

Init Init::xavier_uniform(int64_t fan_in, int64_t fan_out) {
  return uniform(std::sqrt(6.0 / double(fan_in + fan_out)));
}

Tensor ParamFactory::make(const Shape& shape, const Init& init) {
  MemoryCategoryScope scope(Category::Parameter);
  NoGradGuard no_grad;
  Tensor t;
  switch (init.kind) {
    case Init::Kind::Normal: t = randn(shape, gen_, float(init.a), opts_.dtype, opts_.device); break;
    case Init::Kind::Uniform:
      t = rand_uniform(shape, gen_, float(-init.a), float(init.a), opts_.dtype, opts_.device);
      break;
    case Init::Kind::Zeros: t = zeros(shape, opts_.dtype, opts_.device); break;
    case Init::Kind::Ones: t = ones(shape, opts_.dtype, opts_.device); break;
  }
  t.set_requires_grad(true);
  return t;
}

uint64_t ParamFactory::next_seed() {
  // Mixed with a tag so dropout streams never coincide with the parameter stream.
  return rng_mix64(opts_.seed ^ rng_mix64(0x64726f706f7574ull + ++seeds_));
}

}  // namespace lt::nn
