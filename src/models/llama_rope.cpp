// RoPE inverse frequencies exactly as transformers computes them (modeling_rope_utils.py): torch
// ops on f32 tensors with Python floats, each op rounded to f32 on its own (a Python scalar
// becomes an f32 operand; `s / t` is t.reciprocal() * s, `s - t` is rsub). Every step below is one
// of those ops, and f32() keeps the compiler from fusing two of them into one FMA rounding.
#include <cmath>

#include "leantrain/error.h"
#include "models/llama.h"

namespace lt::models {

namespace {

// One rounding to f32, never contracted with the next operation.
float f32(float v) {
  volatile float r = v;
  return r;
}

// transformers' _compute_llama3_parameters on the default frequencies.
std::vector<float> llama3_frequencies(std::vector<float> inv, const RopeScaling& s) {
  const float factor = float(s.factor);
  const float old_len = float(s.original_max_position_embeddings);
  const float low_freq_wavelen = float(double(s.original_max_position_embeddings) / s.low_freq_factor);
  const float high_freq_wavelen = float(double(s.original_max_position_embeddings) / s.high_freq_factor);
  const float two_pi = float(2 * M_PI), span = float(s.high_freq_factor - s.low_freq_factor);
  for (float& f : inv) {
    const float wavelen = f32(f32(1.0f / f) * two_pi);                          // 2 * math.pi / inv_freq
    float scaled = wavelen > low_freq_wavelen ? f32(f / factor) : f;           // torch.where(...)
    const float smooth = f32(f32(f32(f32(1.0f / wavelen) * old_len) - float(s.low_freq_factor)) / span);
    const float smoothed = f32(f32(f32(f32(1.0f - smooth) * scaled) / factor) + f32(smooth * scaled));
    if (!(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)) scaled = smoothed;  // medium band
    f = scaled;
  }
  return inv;
}

}  // namespace

std::vector<float> rope_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling) {
  std::vector<float> inv = rope_inv_freq(head_dim, theta);  // _compute_default_rope_parameters
  if (scaling.type == "linear") {
    for (float& f : inv) f = f32(f / float(scaling.factor));  // inv_freq /= factor
  } else if (scaling.type == "llama3") {
    inv = llama3_frequencies(std::move(inv), scaling);
  } else {
    LT_ASSERT(scaling.type.empty());  // validate() admits no other type
  }
  return inv;
}

}  // namespace lt::models
