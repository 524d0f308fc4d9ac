// The sizes and switches of the copy-engine all-reduce (peer_all_reduce.h), built into every
// binary: a plan made without NCCL still counts its buffers.
#include <cstdlib>

#include "core/knobs.h"
#include "dist/peer_all_reduce.h"

namespace lt::dist {

namespace {
// Below this an all-reduce stays on NCCL: a piece's three phases cost a few round trips of
// latency, which only large buffers hide.
constexpr int64_t kMinBytes = int64_t(1) << 20;
}  // namespace

// Read at every call, not kept: tests switch it within one process.
bool peer_reduce_on() { return knob_on("LEANTRAIN_PEER_REDUCE"); }

int64_t peer_chunk_bytes() {
  return knob_int("LEANTRAIN_PEER_CHUNK_MB") << 20;
}

bool peer_reduce_takes(int64_t bytes, DType dt) {
  return peer_reduce_on() && bytes >= kMinBytes && (dt == DType::F32 || dt == DType::BF16 || dt == DType::F16);
}

int64_t peer_reduce_bytes(int size) {
  return peer_reduce_on() && size > 1 ? peer_region_bytes(size) : 0;
}

}  // namespace lt::dist
