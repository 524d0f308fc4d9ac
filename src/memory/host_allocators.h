// The CPU allocator (aligned malloc, reserved == allocated) and the simple meta allocator
// (no memory, fake addresses, same rounding): a step on meta yields the CPU's allocation trace.
#pragma once
#include "leantrain/memory.h"

namespace lt {

class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() : Allocator(Device::cpu()) {}

 protected:
  bool do_allocate(Block& b) override;
  void do_free(const Block& b) override;
};

class MetaAllocator final : public Allocator {
 public:
  MetaAllocator() : Allocator(Device::meta()) {}

 protected:
  bool do_allocate(Block& b) override;
  void do_free(const Block& b) override;

 private:
  uint64_t next_addr_ = 0x10000000000ull;
};

}  // namespace lt
