// The CPU allocator (aligned malloc, reserved == allocated) and the simple meta allocator
// (no memory, fake addresses, same rounding): a step on meta yields the CPU's allocation trace.
// The simulated CUDA allocator is the meta variant the planner uses to predict a GPU run.
#pragma once
#include "leantrain/memory.h"
#include "memory/caching_policy.h"

namespace lt {

// For tests: while on, every new CPU block is filled with 0xFF bytes (NaN in every float format),
// so that a read of memory nothing wrote (say, a dry-run op's output read for real) shows up as
// NaN rather than as the values a freed block happened to hold. Off by default.
void set_cpu_fill_new_blocks(bool on);

class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() : Allocator(Device::cpu()) {}

 protected:
  bool do_allocate(Block& b) override;
  void do_free(const Block& b) override;
};

// An account with no memory behind it: each block gets the next address from `first` on (never
// reused), and reserved == allocated. The meta device's allocator and the disk account.
class AddressOnlyAllocator : public Allocator {
 public:
  AddressOnlyAllocator(Device d, MemoryKind kind, uint64_t first) : Allocator(d, kind), next_addr_(first) {}

 protected:
  bool do_allocate(Block& b) override;
  void do_free(const Block& b) override;

 private:
  uint64_t next_addr_;
};

class MetaAllocator final : public AddressOnlyAllocator {
 public:
  MetaAllocator() : AddressOnlyAllocator(Device::meta(), MemoryKind::Device, 0x10000000000ull) {}
};

// Meta allocator running the CUDA caching policy over fake segments: a dry-run with it predicts
// a GPU run's reserved bytes (segments, splits, cache) and, given the GPU memory free to the run
// as `capacity` (<0: unlimited), its retries and OOMs.
class SimulatedCudaAllocator final : public CachingAllocator {
 public:
  explicit SimulatedCudaAllocator(int64_t capacity = -1)
      : CachingAllocator(Device::meta(), std::make_unique<FakeSegmentSource>(capacity)) {}
  ~SimulatedCudaAllocator() override { release_gemm_workspace(); }

  // The CUDA backend takes kCublasWorkspaceBytes (category workspace) from its allocator at the
  // first GEMM and keeps it; the meta backend's gemm calls this so a dry-run holds the same
  // bytes from the same point. Released only by the planner, before it swaps allocators back.
  void ensure_gemm_workspace();
  void release_gemm_workspace();
  bool has_gemm_workspace() const { return has_workspace_; }

 private:
  Block workspace_;
  bool has_workspace_ = false;
  int64_t workspace_bytes_ = 0;
};

// A pinned-host account (pinned_host_allocator in leantrain/memory.h): every buffer is its own
// mapping from `source`, returned when freed, so reserved == allocated and the peak is what the
// process held pinned at once. `served` names the device whose transfers use it.
class PinnedHostAllocator final : public Allocator {
 public:
  PinnedHostAllocator(Device served, std::unique_ptr<SegmentSource> source)
      : Allocator(served, MemoryKind::PinnedHost), source_(std::move(source)) {}

 protected:
  bool do_allocate(Block& b) override;
  void do_free(const Block& b) override;

 private:
  std::unique_ptr<SegmentSource> source_;
};

// Ordinary 64-byte-aligned host memory: what cpu "pins". Meta's pinned account has no memory
// (a FakeSegmentSource): a dry run counts the bytes and moves none, and the data loader fills no
// batch on meta.
class HostMemorySource final : public SegmentSource {
 public:
  bool map(int64_t bytes, void*& ptr, uint64_t& addr) override;
  void unmap(void* ptr, uint64_t addr, int64_t bytes) override;
};

std::unique_ptr<Allocator> make_host_pinned_allocator(Device served);  // cpu (host memory) and meta (none)

// A disk account (disk_allocator in leantrain/memory.h): bytes only. Addresses are file offsets,
// handed out in order from 0 and never reused, so a run's layout is a dry run's.
class DiskAccountAllocator final : public AddressOnlyAllocator {
 public:
  explicit DiskAccountAllocator(Device served) : AddressOnlyAllocator(served, MemoryKind::Disk, 0) {}
};

// Called by the meta backend at every GEMM: the workspace mirror when meta simulates CUDA.
void simulate_gemm_workspace();
// Whether meta currently stands for a CUDA device (a plan for a GPU run: the simulated caching
// allocator), not for the CPU. A front-end whose choice depends on the device kind (cuDNN
// attention) asks this on meta.
bool meta_simulates_cuda();

// For the planner: set_allocator(Device::meta(), make_simulated_cuda_allocator(free_bytes)).
// The default meta allocator stays the simple MetaAllocator.
std::unique_ptr<Allocator> make_simulated_cuda_allocator(int64_t capacity = -1);

// Points meta at the planner's allocator (the simulated CUDA one, or the plain MetaAllocator) for
// a dry run, and back at a plain MetaAllocator after, also when the dry run throws; meta's
// pinned-host account is fresh for the dry run too. Meta must hold nothing when swapped
// (set_allocator checks); if something still does, the allocator is kept.
class MetaAllocatorScope {
 public:
  explicit MetaAllocatorScope(bool simulate_cuda);
  ~MetaAllocatorScope();
  MetaAllocatorScope(const MetaAllocatorScope&) = delete;
  MetaAllocatorScope& operator=(const MetaAllocatorScope&) = delete;
};

}  // namespace lt
