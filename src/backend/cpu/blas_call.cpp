#include "backend/cpu/blas_call.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace lt::cpu {

namespace {

std::atomic<int> g_calls{0};  // BLAS calls in progress, on any thread

void explain_exit_inside_blas() {
  if (g_calls.load() == 0) return;
  std::fputs("leantrain: error: out of host memory inside a matrix multiply: OpenBLAS could not allocate its work "
             "area and ended the process (lower --batch or --micro-batch, or free host memory)\n",
             stderr);
  std::fflush(stderr);
}

}  // namespace

BlasCall::BlasCall() {
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(explain_exit_inside_blas); });
  g_calls.fetch_add(1);
}

BlasCall::~BlasCall() { g_calls.fetch_sub(1); }

}  // namespace lt::cpu
