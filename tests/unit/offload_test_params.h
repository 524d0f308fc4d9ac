// Named parameters and gradients of deterministic values (optim_test_values.h) for the offload
// optimizer tests: the host tier (test_offload_optimizer.cpp) and the disk tier
// (test_offload_disk.cpp) step the same kind of parameters.
#pragma once
#include <cstring>
#include <string>
#include <vector>

#include "leantrain/ops.h"
#include "leantrain/optim.h"
#include "optim_test_values.h"

namespace optim_test {

inline std::vector<lt::NamedTensor> make_params(const std::vector<lt::Shape>& shapes, lt::DType dt, int seed) {
  std::vector<lt::NamedTensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    lt::Tensor t = lt::from_vector(values(lt::numel(shapes[i]), seed + int(i), 0), shapes[i], lt::DType::F32).to(dt);
    t.set_requires_grad(true);
    out.push_back({"p" + std::to_string(i), t});
  }
  return out;
}

// Step t's gradient of every parameter.
inline void set_grads(const std::vector<lt::NamedTensor>& ps, int t) {
  for (size_t i = 0; i < ps.size(); ++i) {
    lt::Tensor p = ps[i].second;
    p.set_grad(lt::from_vector(values(p.numel(), 10 + int(i), t), p.shape(), lt::DType::F32).to(p.dtype()));
  }
}

// Matrices in a group with weight decay, vectors in one without (as the trainer groups them).
inline std::vector<lt::ParamGroup> two_groups(const std::vector<lt::NamedTensor>& ps) {
  lt::ParamGroup decay, none;
  none.weight_decay = 0.0;
  for (const auto& p : ps) (p.second.dim() >= 2 ? decay : none).params.push_back(p);
  return {decay, none};
}

// The same dtype, shape and bytes.
inline bool same_bits(const lt::Tensor& a, const lt::Tensor& b) {
  lt::Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.raw_data(), y.raw_data(), size_t(x.nbytes())) == 0;
}

}  // namespace optim_test
