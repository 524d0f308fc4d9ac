// Packed documents in Gated DeltaNet's kernels (backend_ops.def, "delta"), shared by the CPU and
// CUDA kernels so that both read the same boundaries.
//
// doc_pos i32 [B, T] (the batch's nn::TokenMask::doc_pos: each token's position inside its
// document, 0 at a document's start) or undefined (one sequence a row). The chunked delta rule keeps
// its chunks where they are (rows c C .. c C + C - 1 of each sequence, whatever the documents) and
// masks instead: row t of a chunk reads the rows s <= t of its own document only, and the state
// carried into the chunk only when its document began before the chunk (docs/decisions.md,
// "Packed documents in the Gated DeltaNet"). Both follow from one number per row: start(), the
// chunk-local index of the first row of its document inside the chunk, or -1 when the document
// began in an earlier chunk (always -1 without documents, so that path computes exactly what it
// did before documents existed). Padding rows t >= T continue row T - 1's document.
#pragma once
#include <cstdint>

#include "leantrain/tensor.h"

#if defined(__CUDACC__)
#define LT_DELTA_HD __host__ __device__ __forceinline__
#else
#define LT_DELTA_HD inline
#endif

namespace lt {

struct GdnDocs {
  const int32_t* dp = nullptr;  // doc_pos [B, T] on the kernel's device, or null
  int64_t T = 1, C = 1, NC = 1, Hv = 1;

  // Row i of chunk n, n = (b Hv + h) NC + c of the chunk layout.
  LT_DELTA_HD int start(int64_t n, int64_t i) const {
    if (!dp) return -1;
    const int64_t c = n % NC, b = n / NC / Hv, t = c * C + i, u = t < T ? t : T - 1;
    const int64_t s = u - int64_t(dp[b * T + u]) - c * C;
    return s >= 0 ? int(s) : -1;
  }
  // Row t (0 <= t < NC C) of sequence bh = b Hv + h.
  LT_DELTA_HD int start_of_row(int64_t bh, int64_t t) const { return start(bh * NC + t / C, t % C); }
};

// The documents of doc_pos (undefined: none) for the chunk layout of BH = B Hv sequences of Tp rows
// in chunks of C.
inline GdnDocs gdn_docs(const Tensor& doc_pos, int64_t BH, int64_t Tp, int64_t C) {
  GdnDocs d;
  d.C = C;
  d.NC = Tp / C;
  if (!doc_pos.defined()) return d;
  d.dp = doc_pos.data<int32_t>();
  d.T = doc_pos.size(1);
  d.Hv = BH / doc_pos.size(0);
  return d;
}

// The causal convolution's tap that reads x[t - m] for out[t] (m = K - 1 - j for tap j): inside
// the row, and inside t's document when doc_pos is given (m <= doc_pos[b, t]).
LT_DELTA_HD bool conv_tap_in_document(const int32_t* dp, int64_t b, int64_t T, int64_t t, int64_t m) {
  return t - m >= 0 && (!dp || m <= int64_t(dp[b * T + t]));
}

}  // namespace lt
