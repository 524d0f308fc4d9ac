// The 1-rank communicator: a process alone in its world. Every collective is the identity, so the
// strategies run unchanged in one process (and their tests need no MPI).
#include <cstring>

#include "leantrain/dist.h"

namespace lt::dist {

namespace {

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return "single"; }
  void all_reduce(void*, int64_t, DType, ReduceOp, void*) override {}
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dt, ReduceOp, void*) override {
    copy(send, recv, count * int64_t(dtype_size(dt)));
  }
  void all_gather(const void* send, void* recv, int64_t count, DType dt, void*) override {
    copy(send, recv, count * int64_t(dtype_size(dt)));
  }
  void reduce(void*, int64_t, DType, ReduceOp, int, void*) override {}
  void broadcast(void*, int64_t, int, void*) override {}
  void barrier() override {}

 private:
  static void copy(const void* from, void* to, int64_t bytes) {
    if (from != to && bytes > 0) std::memmove(to, from, size_t(bytes));
  }
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator() { return std::make_unique<SingleCommunicator>(); }

namespace {
std::unique_ptr<Communicator>& world_slot() {
  static std::unique_ptr<Communicator> w = make_single_communicator();
  return w;
}
}  // namespace

Communicator& world() { return *world_slot(); }
void set_world(std::unique_ptr<Communicator> c) { world_slot() = c ? std::move(c) : make_single_communicator(); }

}  // namespace lt::dist
