// The copy-engine all-reduce of peer_all_reduce.h.
#include "dist/peer_all_reduce.h"

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.cuh"
#include "leantrain/error.h"

namespace lt::dist {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string("CUDA ") + what + " (peer all-reduce)", cudaGetErrorString(e), "");
}

using StreamValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
using DeviceAttrFn = CUresult (*)(int*, CUdevice_attribute, CUdevice);

template <class F> F driver_fn(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess || q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<F>(p);
}

// own[i] = scale * (slot 0 + slot 1 + ... + slot W-1)[i], in rank order, where slot `rank` is
// `own` itself and slot s is inbox + s * slot_elems. 16 bytes per thread where the chunk allows.
template <class T>
__global__ void sum_slots_kernel(T* own, const T* inbox, int64_t slot_elems, int world, int rank, int64_t n, float scale) {
  constexpr int V = 16 / sizeof(T);
  const int64_t nv = n / V;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const bool vec = (reinterpret_cast<uintptr_t>(own) % 16 == 0) && (slot_elems % V == 0) &&
                   (reinterpret_cast<uintptr_t>(inbox) % 16 == 0);
  const int64_t done = vec ? nv * V : 0;
  if (vec) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nv; i += stride) {
      float acc[V];
      for (int s = 0; s < world; ++s) {
        const T* src = s == rank ? own : inbox + int64_t(s) * slot_elems;
        const uint4 raw = reinterpret_cast<const uint4*>(src)[i];
        const T* x = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = s == 0 ? cuda::to_f32(x[e]) : acc[e] + cuda::to_f32(x[e]);
      }
      uint4 out;
      T* o = reinterpret_cast<T*>(&out);
#pragma unroll
      for (int e = 0; e < V; ++e) o[e] = cuda::from_f32<T>(acc[e] * scale);
      reinterpret_cast<uint4*>(own)[i] = out;
    }
  }
  for (int64_t i = done + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float acc = 0.0f;
    for (int s = 0; s < world; ++s) {
      const float x = cuda::to_f32(s == rank ? own[i] : inbox[int64_t(s) * slot_elems + i]);
      acc = s == 0 ? x : acc + x;
    }
    own[i] = cuda::from_f32<T>(acc * scale);
  }
}

struct Card {
  uint64_t host = 0;
  char bus[32] = {};
  int32_t ok = 0, pad = 0;
};

class CopyEngineAllReduce final : public PeerAllReduce {
 public:
  CopyEngineAllReduce(int rank, int size, char* region, std::vector<char*> peers, StreamValueFn wait, StreamValueFn write)
      : rank_(rank), size_(size), chunk_(peer_chunk_bytes()), mine_(region), peers_(std::move(peers)), wait_(wait), write_(write) {}
  ~CopyEngineAllReduce() override {
    for (int j = 0; j < size_; ++j)
      if (j != rank_ && peers_[size_t(j)]) (void)cudaIpcCloseMemHandle(peers_[size_t(j)]);
    (void)cudaFree(mine_);
  }

  void run(void* buf, int64_t count, DType dt, ReduceOp op, void* stream) override {
    const int64_t es = int64_t(dtype_size(dt));
    const int64_t slot_elems = chunk_ / es;
    const int64_t piece = slot_elems * size_;
    const float scale = op == ReduceOp::Avg ? float(1.0 / double(size_)) : 1.0f;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    for (int64_t at = 0; at < count; at += piece) {
      const int64_t n = std::min(piece, count - at);
      // Chunk j of the piece: [j c, min(n, (j + 1) c)), c a multiple of 16 bytes.
      const int64_t per = std::max<int64_t>(16 / es, ((n + size_ - 1) / size_ + 16 / es - 1) / (16 / es) * (16 / es));
      auto lo = [&](int j) { return std::min(n, int64_t(j) * per); };
      auto len = [&](int j) { return std::min(n, int64_t(j + 1) * per) - lo(j); };
      char* base = static_cast<char*>(buf) + at * es;
      ++seq_;
      for (int k = 1; k < size_; ++k) {  // 1. my chunk j into rank j's inbox A
        const int j = (rank_ + k) % size_;
        if (len(j) > 0)
          check(cudaMemcpyAsync(inbox_a(peers_[size_t(j)]) + int64_t(rank_) * chunk_, base + lo(j) * es, size_t(len(j) * es),
                                cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
        signal(s, flag(peers_[size_t(j)], 0, rank_));
      }
      for (int k = 1; k < size_; ++k) await(s, flag(mine_, 0, (rank_ + k) % size_));
      if (len(rank_) > 0) {  // 2. the sum of my chunk
        const int threads = 256;
        const int64_t vecs = (len(rank_) * es + 15) / 16;
        const int blocks = int(std::clamp<int64_t>((vecs + threads - 1) / threads, 1, 264));
        char* own = base + lo(rank_) * es;
        cuda::dispatch_float(dt, [&](auto tag) {
          using T = decltype(tag);
          sum_slots_kernel<T><<<blocks, threads, 0, s>>>(reinterpret_cast<T*>(own), reinterpret_cast<const T*>(inbox_a(mine_)),
                                                        slot_elems, size_, rank_, len(rank_), scale);
        });
        check(cudaGetLastError(), "sum_slots_kernel");
      }
      for (int k = 1; k < size_; ++k) {  // 3. the sum into every peer's inbox B, theirs into place
        const int j = (rank_ + k) % size_;
        if (len(rank_) > 0)
          check(cudaMemcpyAsync(inbox_b(peers_[size_t(j)]) + int64_t(rank_) * chunk_, base + lo(rank_) * es,
                                size_t(len(rank_) * es), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
        signal(s, flag(peers_[size_t(j)], 1, rank_));
      }
      for (int k = 1; k < size_; ++k) {
        const int i = (rank_ + k) % size_;
        await(s, flag(mine_, 1, i));
        if (len(i) > 0)
          check(cudaMemcpyAsync(base + lo(i) * es, inbox_b(mine_) + int64_t(i) * chunk_, size_t(len(i) * es), cudaMemcpyDeviceToDevice, s),
                "cudaMemcpyAsync");
      }
    }
  }

 private:
  char* inbox_a(char* region) const { return region; }
  char* inbox_b(char* region) const { return region + int64_t(size_) * chunk_; }
  // Flag of phase `phase` (0: A, 1: B) raised by rank `from` in `region`.
  char* flag(char* region, int phase, int from) const {
    return region + peer_flags_offset(size_) + (int64_t(phase) * size_ + from) * 8;
  }
  void signal(cudaStream_t s, char* at) {
    if (write_(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(at), seq_, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS)
      fail("cuStreamWriteValue64 (peer all-reduce)", "the driver refused it", "set LEANTRAIN_PEER_REDUCE=0 to reduce through NCCL");
  }
  void await(cudaStream_t s, char* at) {
    if (wait_(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(at), seq_, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS)
      fail("cuStreamWaitValue64 (peer all-reduce)", "the driver refused it", "set LEANTRAIN_PEER_REDUCE=0 to reduce through NCCL");
  }

  int rank_, size_;
  int64_t chunk_;
  char* mine_;
  std::vector<char*> peers_;  // peers_[j]: rank j's region mapped here (nullptr for this rank)
  StreamValueFn wait_, write_;
  uint64_t seq_ = 0;  // pieces so far: the same count on every rank
};

// Every rank's `ok`, all ranks agreeing: false on all of them if it is false on one.
bool everyone(Communicator& comm, bool ok) {
  std::vector<int32_t> all(size_t(comm.size()), 0);
  int32_t mine = ok ? 1 : 0;
  comm.all_gather(&mine, all.data(), 1, DType::I32);
  return std::all_of(all.begin(), all.end(), [](int32_t v) { return v == 1; });
}

}  // namespace

std::unique_ptr<PeerAllReduce> make_peer_all_reduce(Communicator& comm, int device) {
  const int W = comm.size(), r = comm.rank();
  if (W < 2 || !peer_reduce_on()) return nullptr;
  // Who can take part: same host, 64-bit stream memory operations, and a peer mapping to every GPU.
  Card me;
  char host[256] = {};
  (void)gethostname(host, sizeof host - 1);
  me.host = std::hash<std::string>{}(host);
  auto wait = driver_fn<StreamValueFn>("cuStreamWaitValue64");
  auto write = driver_fn<StreamValueFn>("cuStreamWriteValue64");
  auto attr = driver_fn<DeviceAttrFn>("cuDeviceGetAttribute");
  int mem_ops = 0;
  if (attr && attr(&mem_ops, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, device) != CUDA_SUCCESS) mem_ops = 0;
  me.ok = wait && write && mem_ops ? 1 : 0;
  if (cudaDeviceGetPCIBusId(me.bus, sizeof me.bus - 1, device) != cudaSuccess) (void)cudaGetLastError(), me.ok = 0;
  std::vector<Card> cards(static_cast<size_t>(W));
  comm.all_gather(&me, cards.data(), int64_t(sizeof(Card)), DType::U8);
  bool ok = true;
  for (int j = 0; j < W; ++j) {
    const Card& c = cards[size_t(j)];
    if (!c.ok || c.host != me.host) ok = false;
    if (!ok || j == r) continue;
    int peer = -1, can = 0;
    if (cudaDeviceGetByPCIBusId(&peer, c.bus) != cudaSuccess || cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess || !can) {
      (void)cudaGetLastError();
      ok = false;
    }
  }
  if (!everyone(comm, ok)) return nullptr;

  // The region (inboxes, then flags at 0), its IPC handle to every rank, theirs mapped here.
  char* region = nullptr;
  check(cudaMalloc(&region, size_t(peer_region_bytes(W))), "cudaMalloc");
  check(cudaMemset(region, 0, size_t(peer_region_bytes(W))), "cudaMemset");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // flags are 0 before any peer can see them
  cudaIpcMemHandle_t h{};
  check(cudaIpcGetMemHandle(&h, region), "cudaIpcGetMemHandle");
  std::vector<cudaIpcMemHandle_t> handles(static_cast<size_t>(W));
  comm.all_gather(&h, handles.data(), int64_t(sizeof h), DType::U8);
  std::vector<char*> peers(size_t(W), nullptr);
  bool opened = true;
  for (int j = 0; j < W; ++j) {
    if (j == r) continue;
    void* p = nullptr;
    if (cudaIpcOpenMemHandle(&p, handles[size_t(j)], cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
      (void)cudaGetLastError();
      opened = false;
      break;
    }
    peers[size_t(j)] = static_cast<char*>(p);
  }
  if (!everyone(comm, opened)) {
    for (char* p : peers)
      if (p) (void)cudaIpcCloseMemHandle(p);
    (void)cudaFree(region);
    return nullptr;
  }
  return std::make_unique<CopyEngineAllReduce>(r, W, region, std::move(peers), wait, write);
}

}  // namespace lt::dist
