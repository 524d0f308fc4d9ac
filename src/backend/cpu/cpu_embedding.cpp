// Embedding gather/scatter and rotary position embedding on the CPU.
// The scatter groups positions by token id (a stable sort), so each weight row is summed in
// the accumulation type and rounded once, in position order: deterministic, and no [V, C]
// f32 scratch for 16-bit tables. dweight arrives zeroed (the front-end fills it); only rows
// that some id touches are written.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace lt {
using namespace cpu;

void CpuBackend::embedding_fwd(const Tensor& out, const Tensor& ids, const Tensor& weight) {
  const int64_t n = ids.numel(), c = weight.size(1);
  const size_t row_bytes = size_t(c) * dtype_size(weight.dtype());
  const char* w = static_cast<const char*>(weight.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = load_index(ids, i);
    LT_ASSERT(id >= 0 && id < weight.size(0));
    std::memcpy(o + size_t(i) * row_bytes, w + size_t(id) * row_bytes, row_bytes);
  }
}

void CpuBackend::embedding_bwd(const Tensor& dweight, const Tensor& dout, const Tensor& ids, int64_t skip_id) {
  const int64_t n = ids.numel(), c = dweight.size(1);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return load_index(ids, a) < load_index(ids, b); });
  dispatch_float(dweight.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    T* dw = dweight.data<T>();
    const T* g = dout.data<T>();
    std::vector<A> acc(static_cast<size_t>(c));
    for (size_t s = 0; s < order.size();) {
      const int64_t id = load_index(ids, order[s]);
      LT_ASSERT(id >= 0 && id < dweight.size(0));
      if (id == skip_id) {
        while (s < order.size() && load_index(ids, order[s]) == id) ++s;
        continue;
      }
      std::fill(acc.begin(), acc.end(), A(0));
      for (; s < order.size() && load_index(ids, order[s]) == id; ++s)
        for (int64_t j = 0; j < c; ++j) acc[size_t(j)] += ld(g, order[s] * c + j);
      for (int64_t j = 0; j < c; ++j) st(dw, id * c + j, ld(dw, id * c + j) + acc[size_t(j)]);
    }
  });
}

void CpuBackend::padding_mask(const Tensor& out, const Tensor& ids, int64_t pad_id) {
  uint8_t* o = out.data<uint8_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) o[i] = load_index(ids, i) != pad_id;
}

// Rotate-half as transformers' apply_rotary_pos_emb: pairs (j, j + r/2) of the first rot_heads
// heads (r = 2 * inv_freq.size() <= D; partial rotary copies dims r..) turn by angle = f32(inv_freq[j] * f32(pos_offset + t)) (its freqs, one f32 product), with
// cos and sin rounded to f32 as torch's f32 cos/sin return them; the rotation itself runs in the
// accumulation type and is rounded once. The other heads are copied.
void CpuBackend::rope(const Tensor& out, const Tensor& x, std::span<const float> inv_freq, int64_t pos_offset,
                      const Tensor& positions, int64_t rot_heads, bool inverse) {
  // half: the rotated pairs of a head (d / 2, or fewer under partial rotary: dims 2 * half.. are copied)
  const int64_t rows = x.size(0), t_len = x.size(1), heads = x.size(2), d = x.size(3), half = int64_t(inv_freq.size());
  LT_ASSERT(2 * half <= d && rot_heads >= 0 && rot_heads <= heads);
  // P position rows (1 without per-token positions); row r of x takes position row r / per.
  const int64_t P = positions.defined() ? positions.size(0) : 1, per = P > 0 ? rows / P : 1;
  LT_ASSERT(!positions.defined() || (positions.dtype() == DType::I32 && positions.is_contiguous() &&
                                     positions.numel() == P * t_len && P * per == rows));
  const int32_t* pos = positions.defined() ? positions.data<int32_t>() : nullptr;
  std::vector<float> cs(size_t(P * t_len * half)), sn(size_t(P * t_len * half));
  for (int64_t t = 0; t < P * t_len; ++t)
    for (int64_t j = 0; j < half; ++j) {
      const int64_t at = pos ? int64_t(pos[t]) : pos_offset + t;
      const float angle = inv_freq[size_t(j)] * float(at);
      cs[size_t(t * half + j)] = float(std::cos(double(angle)));
      sn[size_t(t * half + j)] = inverse ? -float(std::sin(double(angle))) : float(std::sin(double(angle)));
    }
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t r = 0; r < rows * t_len; ++r) {
      const int64_t t = (r / t_len / per) * t_len + r % t_len;  // row of the cos/sin tables
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t row = (r * heads + h) * d;
        if (h >= rot_heads) {
          if (po != px)
            for (int64_t j = 0; j < d; ++j) po[row + j] = px[row + j];
          continue;
        }
        for (int64_t j = 0; j < half; ++j) {
          const A c = A(cs[size_t(t * half + j)]), s = A(sn[size_t(t * half + j)]);
          const A x1 = ld(px, row + j), x2 = ld(px, row + j + half);
          st(po, row + j, x1 * c - x2 * s);
          st(po, row + j + half, x2 * c + x1 * s);
        }
        if (po != px)
          for (int64_t j = 2 * half; j < d; ++j) po[row + j] = px[row + j];
      }
    }
  });
}

}  // namespace lt
