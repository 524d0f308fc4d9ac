// On/off switches read from the environment: kernel and fusion choices kept for measuring
// (LEANTRAIN_GEMM_BGRAD_EPILOGUE=0, LEANTRAIN_REDUCE_COLS_SPLIT=1, ...). One rule for all of them,
// so the user guide can state it once: unset or empty keeps the default, a value that begins with
// '0' turns the switch off, any other value turns it on. Callers keep the result in a function
// static, so a switch is read once per process and never changes inside a run (a plan and the run
// it predicts see the same kernels).
#pragma once
#include <cstdlib>

namespace lt {

inline bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  return v[0] != '0';
}

}  // namespace lt
