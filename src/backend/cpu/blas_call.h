// OpenBLAS ends the process with exit(1) when it cannot allocate its work area inside a GEMM,
// having printed only "OpenBLAS: malloc failed in gemm_driver". A BlasCall scope marks each call
// into BLAS; an exit during one adds leantrain's line saying what happened and what to change.
#pragma once

namespace lt::cpu {

class BlasCall {
 public:
  BlasCall();
  ~BlasCall();
  BlasCall(const BlasCall&) = delete;
  BlasCall& operator=(const BlasCall&) = delete;
};

}  // namespace lt::cpu
