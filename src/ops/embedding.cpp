// Token embedding (a row gather) and rotary position embedding. The embedding saves only
// the ids: its backward scatters the gradient rows into a zeroed [V, C] buffer.
// Rotary is a rotation, so its backward is the inverse rotation and saves nothing.
#include "ops/op_common.h"

namespace lt {
using namespace detail;

Tensor embedding(const Tensor& ids_in, const Tensor& weight_in) {
  OpNameScope op("embedding");
  Device dev = common_device("embedding", {ids_in, weight_in});
  LT_CHECK(ids_in.dtype() == DType::I64 || ids_in.dtype() == DType::I32,
           std::string("embedding: ids are ") + dtype_name(ids_in.dtype()), "token ids must be integers",
           "pass i64 (or i32) ids");
  check_floating("embedding", weight_in);
  check_rank("embedding", weight_in, 2, "weight [V, C]");
  const int64_t V = weight_in.size(0), C = weight_in.size(1);
  Tensor ids = contiguous_data(ids_in);
  for (int64_t id : read_indices(ids))
    LT_CHECK(id >= 0 && id < V, "embedding: token id " + std::to_string(id) + " is out of range",
             "the table has " + std::to_string(V) + " rows", "check the tokenizer's vocabulary against the model's");
  Tensor w = contiguous(weight_in);
  Shape out_shape = ids.shape();
  out_shape.push_back(C);
  const int64_t N = ids.numel();
  Tensor out = Tensor::empty(out_shape, w.dtype(), dev);
  Tensor ids1 = make_view(ids, {N}, {1}, ids.offset());
  backend_for(dev).embedding_fwd(make_view(out, {N, C}, {C, 1}, 0), ids1, w);
  if (!needs_grad({w})) return out;
  DType dt = w.dtype();
  SavedTensor saved_ids(ids1);
  record(out, "embedding", {w}, [=](const Tensor& g) {
    Tensor sids = saved_ids.unpack();
    Tensor dw = Tensor::empty({V, C}, dt, g.device());
    backend_of(g).fill(dw, 0.0);
    backend_of(g).embedding_bwd(dw, rows_view(contiguous_data(g)), sids);
    return std::vector<Tensor>{dw};
  });
  return out;
}

Tensor rotary_embedding(const Tensor& x, double base, int64_t pos_offset) {
  OpNameScope op("rotary_embedding");
  check_floating("rotary_embedding", x);
  check_rank("rotary_embedding", x, 4, "x [B, H, T, D]");
  LT_CHECK(x.size(3) % 2 == 0, "rotary_embedding: head dim " + std::to_string(x.size(3)) + " is odd",
           "rotate-half pairs element i with i + D/2", "use an even head dim");
  LT_CHECK(base > 0 && pos_offset >= 0, "rotary_embedding: base " + std::to_string(base) + ", offset " +
               std::to_string(pos_offset), "the base must be > 0 and the position offset >= 0", "fix the arguments");
  Tensor xc = contiguous(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_of(x).rope(out, xc, float(base), pos_offset, false);
  record(out, "rotary_embedding", {xc}, [=](const Tensor& g) {
    Tensor dx = Tensor::empty(g.shape(), g.dtype(), g.device());
    backend_of(g).rope(dx, contiguous_data(g), float(base), pos_offset, true);
    return std::vector<Tensor>{dx};
  });
  return out;
}

}  // namespace lt
