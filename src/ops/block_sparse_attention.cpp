// Block-sparse self-attention (BigBird's ITC pattern) on the fused projection, built from the dense
// attention kernels and two block moves (gather_blocks, scatter_add_blocks):
//   - middle: every query block is one short "sequence" of `block` queries over its listed key
//     blocks, gathered into [B, n, slots, block, k | v]; the dense kernels run on B * n such
//     sequences at once (the global query blocks' rows list nothing there and come out as zeros);
//   - global: the first and last query blocks, gathered into [B, 2 * block, C], attend to all keys;
//     their output rows are added into the zero rows the middle pass left.
// The backward regathers instead of saving the gathered keys, and scatters the key/value gradients
// back (a block listed twice receives both contributions). Saved: qkv, out, both lse and the mask.
#include <cmath>

#include "autograd/kept_outputs.h"
#include "ops/op_common.h"

namespace lt {
using namespace detail;

namespace {

// [B, H, T, D] view of heads that start `col` elements into each row of a [B, T, W] buffer
// (its rows `row_stride` apart) — or, with B = batch * blocks, of blocks of T rows.
Tensor heads_of(const Tensor& x, int64_t B, int64_t H, int64_t T, int64_t D, int64_t batch_stride, int64_t row_stride,
                int64_t col) {
  return make_view(x, {B, H, T, D}, {batch_stride, D, row_stride, 1}, x.offset() + col);
}

// Columns [col, col + w) of every row of a contiguous [B, T, W] tensor, as a [B, T, w] view.
Tensor columns(const Tensor& x, int64_t col, int64_t w) {
  const int64_t B = x.size(0), T = x.size(1), W = x.size(2);
  return make_view(x, {B, T, w}, {T * W, W, 1}, x.offset() + col);
}

// A block table [rows, slots] on the device with its inverse over the `blocks` key blocks (for
// each, the slots i * slots + s that list it, ascending): what gather_blocks and
// scatter_add_blocks read.
struct DeviceTable {
  Tensor table, inv_offsets, inv_entries;
  int64_t rows = 0, slots = 0;
};

DeviceTable upload(const std::vector<int32_t>& t, int64_t rows, int64_t slots, int64_t blocks, Device dev) {
  std::vector<int64_t> table(t.begin(), t.end()), offsets(size_t(blocks + 1), 0), entries;
  for (int32_t k : t)
    if (k >= 0) ++offsets[size_t(k) + 1];
  for (int64_t k = 0; k < blocks; ++k) offsets[size_t(k + 1)] += offsets[size_t(k)];
  entries.resize(size_t(offsets[size_t(blocks)]));
  std::vector<int64_t> next(offsets.begin(), offsets.end() - 1);
  for (int64_t e = 0; e < rows * slots; ++e)
    if (const int32_t k = t[size_t(e)]; k >= 0) entries[size_t(next[size_t(k)]++)] = e;
  DeviceTable d;
  d.rows = rows, d.slots = slots;
  d.table = from_ints(table, {rows, slots}, DType::I32, dev);
  d.inv_offsets = from_ints(offsets, {blocks + 1}, DType::I32, dev);
  d.inv_entries = from_ints(entries, {int64_t(entries.size())}, DType::I32, dev);
  return d;
}

// x [B, T, W] (a view) -> [B, rows, slots, block, W].
Tensor gather(const Tensor& x, const DeviceTable& t, int64_t block) {
  Tensor out = Tensor::empty({x.size(0), t.rows, t.slots, block, x.size(2)}, x.dtype(), x.device());
  backend_of(x).gather_blocks(out, x, t.table, block);
  return out;
}

void scatter_add(const Tensor& dx, const Tensor& blocks, const DeviceTable& t, int64_t block) {
  backend_of(dx).scatter_add_blocks(dx, blocks, t.inv_offsets, t.inv_entries, block);
}

}  // namespace

Tensor block_sparse_attention_packed(const Tensor& qkv_in, int64_t heads, int64_t block,
                                     const std::vector<int32_t>& table, const Tensor& mask_in, double scale) {
  const char* name = "block_sparse_attention_packed";
  OpNameScope op("attention");
  Device dev = common_device(name, {qkv_in, mask_in});
  check_floating(name, qkv_in);
  check_rank(name, qkv_in, 3, "qkv [B, T, 3C]");
  const int64_t B = qkv_in.size(0), T = qkv_in.size(1), W = qkv_in.size(2);
  LT_CHECK(heads > 0 && W > 0 && W % (3 * heads) == 0,
           std::string(name) + ": qkv's last dim " + std::to_string(W) + " does not split into q | k | v of " +
               std::to_string(heads) + " heads",
           "it holds q, k and v, each heads * head_dim wide", "pass the fused projection's output [B, T, 3C]");
  LT_CHECK(block > 0 && T % block == 0 && T / block >= 3,
           std::string(name) + ": " + std::to_string(T) + " positions in blocks of " + std::to_string(block),
           "block-sparse attention needs a whole number of blocks, at least three",
           "pad the sequence to a multiple of the block size");
  const int64_t n = T / block, C = W / 3, H = heads, D = C / H;
  LT_CHECK(table.size() % size_t(n) == 0 && !table.empty(),
           std::string(name) + ": a block table of " + std::to_string(table.size()) + " entries for " +
               std::to_string(n) + " blocks",
           "it lists the same number of key blocks (slots) for every query block", "pass n * slots entries");
  const int64_t L = int64_t(table.size()) / n;
  for (int32_t k : table)
    LT_CHECK(k >= -1 && k < n, std::string(name) + ": block table entry " + std::to_string(k),
             "entries name a key block in [0, " + std::to_string(n) + ") or -1 for none", "fix the table");
  check_key_padding_mask(name, mask_in, B, T);
  const float sc = scale > 0 ? float(scale) : float(1.0 / std::sqrt(double(D)));
  Tensor qkv = contiguous(qkv_in);
  // The gathered key blocks need a mask anyway (empty slots); all ones when nothing is padded.
  Tensor mask = mask_in.defined() ? contiguous_data(mask_in) : ones({B, T}, DType::U8, dev);
  std::vector<int32_t> mid_rows = table;  // the global query blocks list nothing in the middle pass
  for (int64_t s = 0; s < L; ++s) mid_rows[size_t(s)] = mid_rows[size_t((n - 1) * L + s)] = -1;
  const DeviceTable mid = upload(mid_rows, n, L, n, dev), glob = upload({0, int32_t(n - 1)}, 1, 2, n, dev);
  const int64_t Gq = 2 * block;  // rows of the two global query blocks

  // Views of the middle pass over qkv, the gathered blocks, the output and their gradients.
  auto mid_q = [=](const Tensor& x) { return heads_of(x, B * n, H, block, D, block * W, W, 0); };
  auto mid_o = [=](const Tensor& x) { return heads_of(x, B * n, H, block, D, block * C, C, 0); };
  auto mid_k = [=](const Tensor& kv) { return heads_of(kv, B * n, H, L * block, D, L * block * 2 * C, 2 * C, 0); };
  auto mid_v = [=](const Tensor& kv) { return heads_of(kv, B * n, H, L * block, D, L * block * 2 * C, 2 * C, C); };
  auto glob_q = [=](const Tensor& x) { return heads_of(x, B, H, Gq, D, Gq * C, C, 0); };  // [B, 2 block, C]
  auto all_k = [=](const Tensor& x) { return heads_of(x, B, H, T, D, T * W, W, C); };
  auto all_v = [=](const Tensor& x) { return heads_of(x, B, H, T, D, T * W, W, 2 * C); };
  auto gathered_mask = [=](const Tensor& m) {
    return reshape(gather(make_view(m, {B, T, 1}, {T, 1, 1}, m.offset()), mid, block), {B * n, L * block});
  };

  std::vector<Tensor> kept = take_kept_outputs("attention", {{B, T, C}, {B * n, H, block}, {B, H, Gq}},
                                               {qkv.dtype(), aux_dtype(qkv.dtype()), aux_dtype(qkv.dtype())});
  Tensor out, lse_mid, lse_glob;
  if (!kept.empty()) {
    out = kept[0], lse_mid = kept[1], lse_glob = kept[2];
  } else {
    out = Tensor::empty({B, T, C}, qkv.dtype(), dev);
    lse_mid = Tensor::empty({B * n, H, block}, aux_dtype(qkv.dtype()), dev);
    lse_glob = Tensor::empty({B, H, Gq}, aux_dtype(qkv.dtype()), dev);
    Backend& be = backend_for(dev);
    {
      Tensor kv = gather(columns(qkv, C, 2 * C), mid, block);
      be.attention_fwd(mid_o(out), lse_mid, mid_q(qkv), mid_k(kv), mid_v(kv), gathered_mask(mask), false, 0, Tensor(), sc);
    }
    Tensor qg = gather(columns(qkv, 0, C), glob, block);  // [B, 1, 2, block, C]
    Tensor og = Tensor::empty(qg.shape(), qkv.dtype(), dev);
    be.attention_fwd(glob_q(og), lse_glob, glob_q(qg), all_k(qkv), all_v(qkv), mask, false, 0, Tensor(), sc);
    scatter_add(out, og, glob, block);  // into the middle pass's zero rows: exact
    keep_outputs("attention", {out, lse_mid, lse_glob});
  }
  if (!needs_grad({qkv})) return out;
  SavedTensor saved_qkv(qkv), saved_out(out.detach()), saved_lse_mid(lse_mid), saved_lse_glob(lse_glob), saved_mask(mask);
  record(out, "attention", {qkv}, [=](const Tensor& g) {
    Tensor sqkv = saved_qkv.unpack(), so = saved_out.unpack(), smask = saved_mask.unpack();
    Tensor gc = contiguous_data(g);
    Backend& be = backend_of(g);
    Tensor dqkv = Tensor::empty(sqkv.shape(), g.dtype(), g.device());
    // Global query blocks first: their dK and dV cover every key and are written whole.
    Tensor dqg = Tensor::empty({B, 1, 2, block, C}, g.dtype(), g.device());
    {
      Tensor qg = gather(columns(sqkv, 0, C), glob, block), og = gather(so, glob, block), dog = gather(gc, glob, block);
      be.attention_bwd(glob_q(dqg), all_k(dqkv), all_v(dqkv), glob_q(dog), glob_q(qg), all_k(sqkv), all_v(sqkv),
                       glob_q(og), saved_lse_glob.unpack(), smask, false, 0, Tensor(), sc);
    }
    // The middle pass writes dQ of every row (zeros for the global blocks') and the gathered
    // blocks' dK, dV, which are added back to the blocks they came from.
    {
      Tensor kv = gather(columns(sqkv, C, 2 * C), mid, block);
      Tensor dkv = Tensor::empty(kv.shape(), g.dtype(), g.device());
      be.attention_bwd(mid_q(dqkv), mid_k(dkv), mid_v(dkv), mid_o(gc), mid_q(sqkv), mid_k(kv), mid_v(kv), mid_o(so),
                       saved_lse_mid.unpack(), gathered_mask(smask), false, 0, Tensor(), sc);
      scatter_add(columns(dqkv, C, 2 * C), dkv, mid, block);
    }
    scatter_add(columns(dqkv, 0, C), dqg, glob, block);
    return std::vector<Tensor>{dqkv};
  });
  return out;
}

}  // namespace lt
