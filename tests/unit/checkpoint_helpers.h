// Shared by the activation-checkpointing tests: small models with dropout on, fixed inputs,
// and gradients read back as raw bits (equality must be bitwise on the CPU in f32).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "leantrain/checkpoint.h"
#include "leantrain/models.h"

namespace ckpt_test {

using namespace lt;

// gpt2-tiny (4 blocks, width 128, 4 heads, 256 byte tokens) with dropout on.
inline models::GPT2Config gpt2_tiny_dropout() {
  models::GPT2Config c = models::GPT2Config::preset("gpt2-tiny");
  c.resid_pdrop = c.embd_pdrop = 0.1;
  return c;
}

// vit-tiny (4 blocks, width 64, 28x28 images in 16 patches) with dropout on.
inline models::ViTConfig vit_tiny_dropout() {
  models::ViTConfig c = models::ViTConfig::preset("vit-tiny");
  c.dropout = 0.1;
  return c;
}

// torchvision starts the classifier at zero, which zeroes every gradient below it at the first
// step: give it values so that the comparisons see real gradients.
inline void randomize_vit_head(models::ViT& m) {
  NoGradGuard ng;
  Tensor w = m.parameter("heads.head.weight");
  Generator g(99);
  copy_(w, randn(w.shape(), g, 0.2f, w.dtype(), w.device()));
}

inline Tensor ids(int64_t B, int64_t T, int64_t V, uint64_t seed, Device d = Device::cpu()) {
  std::vector<int64_t> v(size_t(B * T));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(rng_mix64(seed * 1000 + i) % uint64_t(V));
  return from_ints(v, {B, T}, DType::I64, d);
}

inline Tensor images(int64_t B, const models::ViTConfig& c, uint64_t seed, Device d = Device::cpu()) {
  Generator g(seed);
  return randn({B, c.num_channels, c.image_size, c.image_size}, g, 1.0f, DType::F32, d);
}

inline Tensor labels(int64_t B, int64_t classes, uint64_t seed, Device d = Device::cpu()) {
  std::vector<int64_t> v(static_cast<size_t>(B));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(rng_mix64(seed + 77 * i) % uint64_t(classes));
  return from_ints(v, {B}, DType::I64, d);
}

inline std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<float> f = t.to_float_vector();
  std::vector<uint32_t> b(f.size());
  std::memcpy(b.data(), f.data(), f.size() * sizeof(float));
  return b;
}

// Every parameter's gradient, as bits, by name.
inline std::vector<std::pair<std::string, std::vector<uint32_t>>> grad_bits(nn::Module& m) {
  std::vector<std::pair<std::string, std::vector<uint32_t>>> out;
  for (auto& [name, p] : m.named_parameters()) out.emplace_back(name, p.grad().defined() ? bits(p.grad()) : std::vector<uint32_t>{});
  return out;
}

}  // namespace ckpt_test
