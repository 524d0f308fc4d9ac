// A gradient whose row blocks are several leaves' gradients: a stacked weight's (q | k | v,
// gate | up as one GEMM, src/nn/stacked_rows.cpp). Its backward offers the buffer when it holds it
// alone; AccumulateGrad then takes each leaf's block as that leaf's .grad in place (a view of the
// one buffer) instead of copying it into a buffer of its own. The blocks do not overlap, so each
// leaf still writes only its own gradient; the buffer lives until the last of them is released.
#pragma once

namespace lt {
class Tensor;
}

namespace lt::detail {

// `whole` is the full stacked gradient: when nobody but the caller holds it (one handle, its whole
// buffer), its views may become leaf gradients; otherwise nothing happens. Remembered by its
// storage (weakly: a freed buffer is forgotten).
void offer_gradient_parts(const Tensor& whole);
// Whether `t` views a buffer offered above.
bool is_gradient_part(const Tensor& t);

}  // namespace lt::detail
