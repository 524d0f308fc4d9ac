// Token embedding (a row gather) and rotary position embedding. The embedding saves only
// the ids: its backward scatters the gradient rows into a zeroed [V, C] buffer.
// Rotary is a rotation, so its backward is the inverse rotation and saves nothing.
#include <cmath>

#include "ops/op_common.h"

namespace lt {
using namespace detail;

namespace {

struct TableSink {
  std::weak_ptr<TensorImpl> table;
  TableGradSink sink;
  Tensor anchor;  // an empty leaf that requires grad: the lookup's backward hangs on it
};
std::vector<TableSink>& table_sinks() {
  static std::vector<TableSink> sinks;
  return sinks;
}

const TableSink* sink_of(const Tensor& table) {
  for (const TableSink& s : table_sinks())
    if (s.table.lock().get() == table.impl()) return &s;
  return nullptr;
}

}  // namespace

void set_table_grad_sink(const Tensor& table, TableGradSink sink) {
  auto& sinks = table_sinks();
  std::erase_if(sinks, [&](const TableSink& s) { return s.table.expired() || s.table.lock().get() == table.impl(); });
  if (!sink) return;
  Tensor anchor = Tensor::empty({0}, table.dtype(), table.device());
  anchor.set_requires_grad(true);
  sinks.push_back({table.impl_ptr(), std::move(sink), anchor});
}

Tensor embedding(const Tensor& ids_in, const Tensor& weight_in, int64_t padding_idx) {
  OpNameScope op("embedding");
  Device dev = common_device("embedding", {ids_in, weight_in});
  LT_CHECK(ids_in.dtype() == DType::I64 || ids_in.dtype() == DType::I32,
           std::string("embedding: ids are ") + dtype_name(ids_in.dtype()), "token ids must be integers",
           "pass i64 (or i32) ids");
  check_floating("embedding", weight_in);
  check_rank("embedding", weight_in, 2, "weight [V, C]");
  const int64_t V = weight_in.size(0), C = weight_in.size(1);
  LT_CHECK(padding_idx >= -1 && padding_idx < V, "embedding: padding_idx " + std::to_string(padding_idx),
           "the table has " + std::to_string(V) + " rows", "pass a row index, or -1 for none");
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
  SavedTensor saved_ids(ids1);
  if (const TableSink* s = sink_of(weight_in)) {
    TableGradSink sink = s->sink;
    record(out, "embedding", {s->anchor}, [=](const Tensor& g) {
      sink(saved_ids.unpack(), rows_view(contiguous_data(g)), padding_idx);
      return std::vector<Tensor>{};
    });
    return out;
  }
  DType dt = w.dtype();
  record(out, "embedding", {w}, [=](const Tensor& g) {
    Tensor sids = saved_ids.unpack();
    Tensor dw = Tensor::empty({V, C}, dt, g.device());
    backend_of(g).fill(dw, 0.0);
    backend_of(g).embedding_bwd(dw, rows_view(contiguous_data(g)), sids, padding_idx);
    return std::vector<Tensor>{dw};
  });
  return out;
}

std::vector<float> rope_inv_freq(int64_t head_dim, double base) {
  LT_CHECK(head_dim > 0 && head_dim % 2 == 0 && base > 0,
           "rope frequencies: head dim " + std::to_string(head_dim) + ", base " + std::to_string(base),
           "the head dim must be even and positive and the base positive", "fix the model config");
  // transformers' _compute_default_rope_parameters, step by step in f32 as torch computes it:
  // 1.0 / (base ** (arange(0, dim, 2).float() / dim)).
  std::vector<float> inv(size_t(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float e = float(2 * i) / float(head_dim);
    const float p = float(std::pow(double(float(base)), double(e)));
    inv[size_t(i)] = 1.0f / p;
  }
  return inv;
}

static_assert(2 * kRopeMaxHalf == kRopeMaxHeadDim, "the rope kernels and the front-end agree on the head dim limit");

namespace {

// The rope op on x viewed as [R, T, N, D]; its backward is the inverse rotation and saves nothing
// (positions, the caller's i32 [P, T] or undefined, is referenced, not copied).
Tensor rope_op(const Tensor& x, const Shape& view, const std::vector<float>& inv_freq, int64_t pos_offset,
               int64_t rot_heads, const Tensor& positions = Tensor()) {
  Tensor xc = contiguous(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const Shape st = contiguous_strides(view);
  backend_of(x).rope(make_view(out, view, st, 0), make_view(xc, view, st, xc.offset()), inv_freq, pos_offset,
                     positions, rot_heads, false);
  record(out, "rotary_embedding", {xc}, [=](const Tensor& g) {
    Tensor gc = contiguous_data(g);
    Tensor dx = Tensor::empty(g.shape(), g.dtype(), g.device());
    backend_of(g).rope(make_view(dx, view, st, 0), make_view(gc, view, st, gc.offset()), inv_freq, pos_offset,
                       positions, rot_heads, true);
    return std::vector<Tensor>{dx};
  });
  return out;
}

// positions i32 [B, T] on x's device; on the CPU each is also checked >= 0 (a GPU copy would
// cost a synchronisation). Returns it contiguous.
Tensor check_positions(const char* name, const Tensor& x, const Tensor& positions, int64_t B, int64_t T) {
  LT_CHECK(positions.defined(), std::string(name) + ": positions is undefined",
           "this overload takes per-token positions", "pass i32 [B, T] positions or use the pos_offset overload");
  (void)common_device(name, {x, positions});
  LT_CHECK(positions.dtype() == DType::I32 && positions.shape() == Shape({B, T}),
           std::string(name) + ": positions is " + dtype_name(positions.dtype()) + " " + shape_str(positions.shape()),
           "it must be i32 [B, T] = [" + std::to_string(B) + ", " + std::to_string(T) + "]: one position per token",
           "build it as int32 with the batch's shape");
  Tensor p = contiguous_data(positions);
  if (p.device().is_cpu()) {
    const int32_t* v = p.data<int32_t>();
    for (int64_t i = 0; i < p.numel(); ++i)
      LT_CHECK(v[i] >= 0,
               std::string(name) + ": positions[" + std::to_string(i / T) + ", " + std::to_string(i % T) +
                   "] = " + std::to_string(v[i]),
               "positions start at 0", "pass positions >= 0");
  }
  return p;
}

// The head dim of a packed rotary op: 2 * inv_freq.size(), or head_dim when that is larger
// (partial rotary: the first 2 * inv_freq.size() dims of each head rotate).
int64_t partial_head_dim(const char* name, const std::vector<float>& inv_freq, int64_t head_dim) {
  const int64_t r = 2 * int64_t(inv_freq.size());
  LT_CHECK(head_dim == 0 || (head_dim >= r && head_dim % 2 == 0),
           std::string(name) + ": head dim " + std::to_string(head_dim) + " with " + std::to_string(r / 2) +
               " frequencies",
           "partial rotary turns the first 2 * (number of frequencies) dims of an even head dim",
           "pass 0 or an even head dim of at least " + std::to_string(r));
  return head_dim == 0 ? r : head_dim;
}

void check_rope_args(const char* name, const Tensor& x, int64_t head_dim, int64_t pos_offset) {
  check_floating(name, x);
  LT_CHECK(head_dim % 2 == 0 && head_dim > 0, std::string(name) + ": head dim " + std::to_string(head_dim) + " is odd",
           "rotate-half pairs element i with i + D/2", "use an even head dim");
  LT_CHECK(head_dim <= kRopeMaxHeadDim, std::string(name) + ": head dim " + std::to_string(head_dim),
           "the rope kernels take at most " + std::to_string(kRopeMaxHeadDim), "use a smaller head dim");
  LT_CHECK(pos_offset >= 0, std::string(name) + ": position offset " + std::to_string(pos_offset),
           "positions start at 0 or later", "pass an offset >= 0");
}

}  // namespace

Tensor padding_mask(const Tensor& ids_in, int64_t pad_id) {
  OpNameScope op("padding_mask");
  LT_CHECK(ids_in.dtype() == DType::I64 || ids_in.dtype() == DType::I32,
           std::string("padding_mask: ids are ") + dtype_name(ids_in.dtype()), "token ids must be integers",
           "pass i64 (or i32) ids");
  Tensor ids = contiguous_data(ids_in);
  Tensor out = Tensor::empty(ids.shape(), DType::U8, ids.device());
  const int64_t n = ids.numel();
  backend_for(ids.device()).padding_mask(make_view(out, {n}, {1}, 0), make_view(ids, {n}, {1}, ids.offset()), pad_id);
  return out;
}

Tensor rotary_embedding(const Tensor& x, double base, int64_t pos_offset) {
  OpNameScope op("rotary_embedding");
  check_rank("rotary_embedding", x, 4, "x [B, H, T, D]");
  check_rope_args("rotary_embedding", x, x.size(3), pos_offset);
  LT_CHECK(base > 0, "rotary_embedding: base " + std::to_string(base), "the base must be > 0", "fix the arguments");
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  return rope_op(x, {B * H, T, 1, D}, rope_inv_freq(D, base), pos_offset, 1);
}

Tensor rotary_embedding_packed(const Tensor& x, const std::vector<float>& inv_freq, int64_t rotary_heads,
                               int64_t pos_offset, int64_t head_dim) {
  OpNameScope op("rotary_embedding");
  const char* name = "rotary_embedding_packed";
  check_rank(name, x, 3, "x [B, T, heads * D]");
  const int64_t D = partial_head_dim(name, inv_freq, head_dim);
  check_rope_args(name, x, D, pos_offset);
  const int64_t B = x.size(0), T = x.size(1), W = x.size(2);
  LT_CHECK(W % D == 0 && rotary_heads >= 0 && rotary_heads <= W / D,
           std::string(name) + ": x " + shape_str(x.shape()) + " with head dim " + std::to_string(D) + " and " +
               std::to_string(rotary_heads) + " rotated heads",
           "the last dim holds whole heads of D = 2 * (number of frequencies), the rotated ones first",
           "pass a packed projection of heads * head_dim and at most that many rotated heads");
  return rope_op(x, {B, T, W / D, D}, inv_freq, pos_offset, rotary_heads);
}

Tensor rotary_embedding(const Tensor& x, double base, const Tensor& positions) {
  OpNameScope op("rotary_embedding");
  check_rank("rotary_embedding", x, 4, "x [B, H, T, D]");
  check_rope_args("rotary_embedding", x, x.size(3), 0);
  LT_CHECK(base > 0, "rotary_embedding: base " + std::to_string(base), "the base must be > 0", "fix the arguments");
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  const Tensor p = check_positions("rotary_embedding", x, positions, B, T);
  return rope_op(x, {B * H, T, 1, D}, rope_inv_freq(D, base), 0, 1, p);
}

Tensor rotary_embedding_packed(const Tensor& x, const std::vector<float>& inv_freq, int64_t rotary_heads,
                               const Tensor& positions, int64_t head_dim) {
  OpNameScope op("rotary_embedding");
  const char* name = "rotary_embedding_packed";
  check_rank(name, x, 3, "x [B, T, heads * D]");
  const int64_t D = partial_head_dim(name, inv_freq, head_dim);
  check_rope_args(name, x, D, 0);
  const int64_t B = x.size(0), T = x.size(1), W = x.size(2);
  LT_CHECK(W % D == 0 && rotary_heads >= 0 && rotary_heads <= W / D,
           std::string(name) + ": x " + shape_str(x.shape()) + " with head dim " + std::to_string(D) + " and " +
               std::to_string(rotary_heads) + " rotated heads",
           "the last dim holds whole heads of D = 2 * (number of frequencies), the rotated ones first",
           "pass a packed projection of heads * head_dim and at most that many rotated heads");
  const Tensor p = check_positions(name, x, positions, B, T);
  return rope_op(x, {B, T, W / D, D}, inv_freq, 0, rotary_heads, p);
}

}  // namespace lt
