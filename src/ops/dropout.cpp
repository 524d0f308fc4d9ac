// Dropout keeps no mask: keep/drop of element i is a pure function of (seed, offset + i)
// (leantrain/random.h), so the backward regenerates it and applies it to the gradient.
#include "ops/op_common.h"

namespace lt {
using namespace detail;

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  LT_CHECK(p >= 0.0 && p <= 1.0, "dropout: p = " + std::to_string(p), "the drop probability must lie in [0, 1]",
           "pass a probability such as 0.1");
  if (!training || p == 0.0) return x;
  OpNameScope op("dropout");
  check_floating("dropout", x);
  Tensor xc = contiguous(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const uint64_t seed = gen.seed, offset = gen.take(uint64_t(x.numel()));
  backend_of(x).dropout(out, xc, float(p), seed, offset);
  record(out, "dropout", {xc}, [=](const Tensor& g) {
    Tensor dx = Tensor::empty(g.shape(), g.dtype(), g.device());
    backend_of(g).dropout(dx, contiguous_data(g), float(p), seed, offset);
    return std::vector<Tensor>{dx};
  });
  return out;
}

}  // namespace lt
