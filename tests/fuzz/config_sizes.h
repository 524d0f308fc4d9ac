// The parameter sizes building a model computes (element counts, f32 bytes, the total), checked
// to fit in int64 without allocating anything: what the config harnesses require of a config
// that from_json accepted. Each harness lists its model's parameter shapes the way the model's
// constructor creates them (src/models/*.cpp).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "fuzz_input.h"

namespace lt::fuzz {

class ParameterSizes {
 public:
  explicit ParameterSizes(std::string model) : model_(std::move(model)) {}

  // `copies` parameters of this shape (e.g. a norm's weight and bias).
  void add(const std::string& name, std::initializer_list<int64_t> shape, int64_t copies = 1) {
    const std::string what = model_ + " parameter " + name;
    int64_t n = 1;
    for (int64_t d : shape) {
      require(d > 0, what + " has positive dimensions (got " + std::to_string(d) + ")");
      n = fuzz::mul(n, d, what + "'s element count");
    }
    fuzz::mul(n, 4, what + "'s f32 bytes");
    count(fuzz::mul(n, copies, what + " x " + std::to_string(copies)));
  }
  // `times` copies of a block (the transformer layers).
  void add_repeated(const std::string& name, const ParameterSizes& block, int64_t times) {
    count(fuzz::mul(block.elements_, times, model_ + " parameters of " + name));
  }
  int64_t elements() const { return elements_; }

 private:
  void count(int64_t n) {
    elements_ = fuzz::add(elements_, n, model_ + " parameter count");
    fuzz::mul(elements_, 4, model_ + " parameter bytes (f32)");
  }
  std::string model_;
  int64_t elements_ = 0;
};

}  // namespace lt::fuzz
