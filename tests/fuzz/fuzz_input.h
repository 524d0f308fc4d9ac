// What every fuzz harness shares (tests/fuzz/README.md, docs/testing.md):
//  - the input as a file, for readers that take a path: one scratch directory per process under
//    $TMPDIR (scripts/fuzz.sh points it at tmpfs), rewritten on every run;
//  - the project's rule for bad input: a reader may reject it only with lt::Error (the one-line
//    message). Any other exception escapes the harness, terminate() aborts, and libFuzzer reports
//    it as a crash, as it does for the sanitizers' findings;
//  - require(): an invariant a harness checks after the reader accepted the input.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "leantrain/error.h"

namespace lt::fuzz {

inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("leantrain-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch_dir(), ec); });
    return d;
  }();
  return dir;
}

// Writes the input to scratch_dir()/name (replacing the previous run's) and returns its path.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::filesystem::path p = scratch_dir() / name;
  std::filesystem::create_directories(p.parent_path());
  const std::string path = p.string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs a reader on the input: rejecting it with lt::Error is a correct outcome.
template <class F>
void rejects_only_with_error(F&& read) {
  try {
    read();
  } catch (const lt::Error&) {
  }
}

// A harness's own check on what a reader accepted; a broken one is a finding.
inline void require(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz: the reader accepted an input that breaks: %s\n", what.c_str());
  std::abort();
}

// Size arithmetic in a harness's checks: an overflow is a finding too.
inline int64_t mul(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  require(!__builtin_mul_overflow(a, b, &r), what + " fits in int64 (" + std::to_string(a) + " * " + std::to_string(b) + ")");
  return r;
}

inline int64_t add(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  require(!__builtin_add_overflow(a, b, &r), what + " fits in int64 (" + std::to_string(a) + " + " + std::to_string(b) + ")");
  return r;
}

}  // namespace lt::fuzz
