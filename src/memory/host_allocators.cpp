#include "memory/host_allocators.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "leantrain/cuda_info.h"

namespace lt {

namespace {
std::atomic<bool> g_fill_new_blocks{false};
}  // namespace

void set_cpu_fill_new_blocks(bool on) { g_fill_new_blocks = on; }

bool CpuAllocator::do_allocate(Block& b) {
  if (limit_ >= 0 && stats_.reserved_bytes.current + b.size > limit_) return false;
  void* p = std::aligned_alloc(64, size_t(b.size));
  if (!p) return false;
  if (g_fill_new_blocks) std::memset(p, 0xFF, size_t(b.size));
  b.ptr = p;
  b.addr = reinterpret_cast<uint64_t>(p);
  note_segment_alloc(b.addr, b.size);
  return true;
}

void CpuAllocator::do_free(const Block& b) {
  note_segment_free(b.addr, b.size);
  std::free(b.ptr);
}

bool AddressOnlyAllocator::do_allocate(Block& b) {
  if (limit_ >= 0 && stats_.reserved_bytes.current + b.size > limit_) return false;
  b.ptr = nullptr;
  b.addr = next_addr_;
  next_addr_ += uint64_t(b.size);
  note_segment_alloc(b.addr, b.size);
  return true;
}

void AddressOnlyAllocator::do_free(const Block& b) { note_segment_free(b.addr, b.size); }


bool PinnedHostAllocator::do_allocate(Block& b) {
  if (limit_ >= 0 && stats_.reserved_bytes.current + b.size > limit_) return false;
  void* p = nullptr;
  uint64_t addr = 0;
  if (!source_->map(b.size, p, addr)) return false;
  b.ptr = p;
  b.addr = addr;
  note_segment_alloc(b.addr, b.size);
  return true;
}

void PinnedHostAllocator::do_free(const Block& b) {
  note_segment_free(b.addr, b.size);
  source_->unmap(b.ptr, b.addr, b.size);
}

bool HostMemorySource::map(int64_t bytes, void*& ptr, uint64_t& addr) {
  ptr = ::operator new(size_t(bytes), std::align_val_t{64}, std::nothrow);
  addr = reinterpret_cast<uint64_t>(ptr);
  return ptr != nullptr;
}

void HostMemorySource::unmap(void* ptr, uint64_t, int64_t) { ::operator delete(ptr, std::align_val_t{64}); }

std::unique_ptr<Allocator> make_host_pinned_allocator(Device served) {
  // A dry run holds no host memory: meta's account has addresses and sizes only (issue 47: a plan
  // of --offload optimizer pinned 32 GB for llama3-8b's gradients, one of a large ViT batch 24 GB).
  if (served.is_meta()) return std::make_unique<PinnedHostAllocator>(served, std::make_unique<FakeSegmentSource>());
  return std::make_unique<PinnedHostAllocator>(served, std::make_unique<HostMemorySource>());
}

namespace {
int64_t g_gemm_workspace_bytes = kCublasWorkspaceBytes;
}  // namespace

void set_gemm_workspace_bytes(int64_t bytes) { g_gemm_workspace_bytes = bytes; }
int64_t gemm_workspace_bytes() { return g_gemm_workspace_bytes; }

void SimulatedCudaAllocator::ensure_gemm_workspace() {
  if (has_workspace_) return;
  has_workspace_ = true;
  workspace_bytes_ = gemm_workspace_bytes();
  if (workspace_bytes_ == 0) return;  // --gemm-workspace 0: the backend allocates none
  MemoryCategoryScope cat(Category::Workspace);
  OpNameScope name("cublaslt_workspace");  // the op name the CUDA backend records
  workspace_ = allocate(workspace_bytes_);
}

void SimulatedCudaAllocator::release_gemm_workspace() {
  if (!has_workspace_) return;
  has_workspace_ = false;
  if (workspace_bytes_ > 0) deallocate(workspace_);
}

void simulate_gemm_workspace() {
  if (auto* s = dynamic_cast<SimulatedCudaAllocator*>(&allocator_for(Device::meta()))) s->ensure_gemm_workspace();
}

bool meta_simulates_cuda() {
  return dynamic_cast<SimulatedCudaAllocator*>(&allocator_for(Device::meta())) != nullptr;
}

std::unique_ptr<Allocator> make_simulated_cuda_allocator(int64_t capacity) {
  return std::make_unique<SimulatedCudaAllocator>(capacity);
}

MetaAllocatorScope::MetaAllocatorScope(bool simulate_cuda) {
  if (simulate_cuda) set_allocator(Device::meta(), make_simulated_cuda_allocator());
  else set_allocator(Device::meta(), std::make_unique<MetaAllocator>());
  set_pinned_host_allocator(Device::meta(), make_host_pinned_allocator(Device::meta()));
  set_disk_allocator(Device::meta(), std::make_unique<DiskAccountAllocator>(Device::meta()));
}

MetaAllocatorScope::~MetaAllocatorScope() {
  if (auto* s = dynamic_cast<SimulatedCudaAllocator*>(&allocator_for(Device::meta()))) s->release_gemm_workspace();
  try {
    set_allocator(Device::meta(), std::make_unique<MetaAllocator>());
  } catch (...) {  // something outside the dry run still holds meta tensors: keep the allocator
  }
  try {
    set_pinned_host_allocator(Device::meta(), make_host_pinned_allocator(Device::meta()));
  } catch (...) {
  }
  try {
    set_disk_allocator(Device::meta(), std::make_unique<DiskAccountAllocator>(Device::meta()));
  } catch (...) {
  }
}

}  // namespace lt
