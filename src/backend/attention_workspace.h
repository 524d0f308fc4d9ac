// The layout of the cuDNN attention backward's workspace, shared by the front-end, which allocates
// it (attention_cudnn_workspace_bytes in leantrain/ops.h, so a plan on meta sees its bytes), and
// the CUDA backend, which lays cuDNN's buffers in it (cudnn_attention.cpp):
//   [0, 4·B·H·Tq·D)            dQ in f32 (cuDNN's accumulator)
//   [.., + 4·B·H·Tq)            one f32 per query row (rowsum(dO * O))
//   [next 256-byte boundary, end)  with grouped-query heads (Hkv < H) only: the engine's scratch,
//                               dK and dV over every query head in 16 bits (4·B·H·Tk·D bytes) and
//                               4 KiB more. cuDNN asked 33,554,688 bytes for TinyLlama's B4 H32 Hkv4
//                               T1024 D64 backward (H100, cuDNN 9.14): 4·B·H·Tk·D + 256, above the
//                               32 MiB cuBLASLt workspace the engine otherwise borrows.
#pragma once

#include <cstdint>

namespace lt::attention_ws {

inline int64_t scratch_offset(int64_t B, int64_t H, int64_t Tq, int64_t D) {
  return (4 * B * H * Tq * (D + 1) + 255) / 256 * 256;
}

inline int64_t bytes(int64_t B, int64_t H, int64_t Hkv, int64_t Tq, int64_t Tk, int64_t D) {
  if (Hkv == H) return 4 * B * H * Tq * (D + 1);
  return scratch_offset(B, H, Tq, D) + 4 * B * H * Tk * D + 4096;
}

}  // namespace lt::attention_ws
