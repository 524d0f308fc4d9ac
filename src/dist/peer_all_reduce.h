// All-reduce over the GPUs of one host through their copy engines (issue 13): the NCCL
// communicator hands ddp's gradient buckets here when every rank can map every other rank's
// memory. NCCL's all-reduce kernels hold SMs for as long as a bucket is in flight, beside the
// backward GEMMs that want all of them; here the bytes move by DMA (cudaMemcpyAsync into the peer's
// memory, mapped with CUDA IPC) and the only kernel is a short sum of each rank's own chunk.
//
// One piece of at most W x chunk bytes at a time, in three phases on the caller's stream:
//   1. rank r copies chunk j of the piece into rank j's inbox A (slot r), for every j != r, and
//      raises its flag there (a 64-bit sequence number written by the stream itself);
//   2. once every peer's flag A is up, rank r sums chunk r over the ranks in rank order (its own
//      copy in place, the others from inbox A), scaled by 1/W for an average: each element is
//      summed by one rank, so every rank ends with the same bits, run after run;
//   3. rank r copies the summed chunk r into every peer's inbox B (slot r) and raises flag B; once
//      every peer's flag B is up, it copies the peers' chunks from inbox B into place.
// A rank copies into a peer's inbox only after it saw that peer's flag B of the previous piece,
// which the peer raised after it had read both inboxes: one slot per peer is enough.
//
// Waits are stream memory operations (cuStreamWaitValue64 / cuStreamWriteValue64): no SM spins,
// and a dead peer leaves the stream waiting, which the communicator's watchdog turns into one line.
#pragma once

#include <cstdint>
#include <memory>

#include "leantrain/dist.h"

namespace lt::dist {

class PeerAllReduce {
 public:
  virtual ~PeerAllReduce() = default;
  // buf[0, count) summed (or averaged) over the ranks in place, enqueued on `stream`.
  virtual void run(void* buf, int64_t count, DType dt, ReduceOp op, void* stream) = 0;
};

// Collective over `comm` (every rank calls it at the same point): nullptr on every rank when any
// rank cannot take part (ranks on other hosts, no peer access between two GPUs, no 64-bit stream
// memory operations) or when LEANTRAIN_PEER_REDUCE=0.
std::unique_ptr<PeerAllReduce> make_peer_all_reduce(Communicator& comm, int device);

// Whether an all-reduce of `bytes` of `dt` goes this way (large f32/bf16/f16 buffers only; the
// per-step numbers and small buckets stay on NCCL). The same answer on every rank.
bool peer_reduce_takes(int64_t bytes, DType dt);

// Device bytes a world of `size` ranks allocates for it outside the caching allocator (inboxes
// and flags), for the plan's "NCCL buffers" line; 0 when it is switched off.
int64_t peer_reduce_bytes(int size);

// Off with LEANTRAIN_PEER_REDUCE=0 (then NCCL reduces every bucket).
bool peer_reduce_on();
// Bytes of one rank's chunk of a piece: LEANTRAIN_PEER_CHUNK_MB, default 16 MiB.
int64_t peer_chunk_bytes();
// Offset of the flags in a rank's region: its two inboxes of `size` chunks each come first.
inline int64_t peer_flags_offset(int size) { return 2 * int64_t(size) * peer_chunk_bytes(); }
// Bytes of a rank's region: the two inboxes, then 2 `size` 64-bit flags.
inline int64_t peer_region_bytes(int size) { return peer_flags_offset(size) + 2 * int64_t(size) * 8; }

}  // namespace lt::dist
