// SHA-256 (FIPS 180-4), for digests that identify files a checkpoint depends on (its tokenizer).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace lt::io {

class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  std::string hex();  // the digest as 64 lowercase hex digits; the object is spent afterwards

 private:
  void block(const unsigned char* p);
  std::array<uint32_t, 8> h_;
  unsigned char buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;  // bytes
};

std::string sha256_hex(std::string_view bytes);

}  // namespace lt::io
