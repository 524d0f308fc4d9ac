// `--data synthetic`: random samples of the model's own input shape, for benchmarks and plans
// on machines without the data sets. Values are a pure hash of (seed, index), so get() is
// thread-safe and a run is reproducible; memory depends only on the shapes.
#pragma once
#include <cstdint>

#include "leantrain/data.h"

namespace lt {

inline constexpr const char* kSyntheticData = "synthetic";

// Images [channels, size, size], roughly N(0, 1); labels in [0, classes).
class SyntheticImages final : public Dataset {
 public:
  SyntheticImages(int64_t count, int64_t channels, int64_t size, int64_t classes, uint64_t seed)
      : count_(count), channels_(channels), size_(size), classes_(classes), seed_(seed) {}
  int64_t size() const override { return count_; }
  Shape input_shape() const override { return {channels_, size_, size_}; }
  DType input_dtype() const override { return DType::F32; }
  Shape target_shape() const override { return {}; }
  void get(int64_t i, void* input, int64_t* target) const override;

 private:
  int64_t count_, channels_, size_, classes_;
  uint64_t seed_;
};

// Token windows [seq_len] of ids in [0, vocab); the target is the next random id.
class SyntheticTokens final : public Dataset {
 public:
  SyntheticTokens(int64_t count, int64_t seq_len, int64_t vocab, uint64_t seed)
      : count_(count), seq_(seq_len), vocab_(vocab), seed_(seed) {}
  int64_t size() const override { return count_; }
  Shape input_shape() const override { return {seq_}; }
  DType input_dtype() const override { return DType::I64; }
  Shape target_shape() const override { return {seq_}; }
  void get(int64_t i, void* input, int64_t* target) const override;

 private:
  int64_t count_, seq_, vocab_;
  uint64_t seed_;
};

// Whole sequences [seq_len] of ids in [0, vocab) other than pad_id (no padding: a plan sizes
// for full rows), each with a label in [0, classes).
class SyntheticSequences final : public Dataset {
 public:
  SyntheticSequences(int64_t count, int64_t seq_len, int64_t vocab, int64_t pad_id, int64_t classes, uint64_t seed)
      : count_(count), seq_(seq_len), vocab_(vocab), pad_(pad_id), classes_(classes), seed_(seed) {}
  int64_t size() const override { return count_; }
  Shape input_shape() const override { return {seq_}; }
  DType input_dtype() const override { return DType::I64; }
  Shape target_shape() const override { return {}; }
  void get(int64_t i, void* input, int64_t* target) const override;

 private:
  int64_t count_, seq_, vocab_, pad_, classes_;
  uint64_t seed_;
};

}  // namespace lt
