// The plan's communicator (dist.h, make_meta_communicator): rank r of a world that is not there.
// The strategies make the same allocations under it as under MPI (buckets, gathered blocks,
// shards), so `leantrain plan --devices N` replays one rank's memory exactly; no data moves.
#include <cstring>

#include "leantrain/dist.h"

namespace lt::dist {

namespace {

class MetaCommunicator final : public Communicator {
 public:
  MetaCommunicator(int size, int rank) : size_(size), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "meta"; }
  void all_reduce(void*, int64_t, DType, ReduceOp, void*) override {}
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dt, ReduceOp, void*) override {
    const int64_t bytes = count * int64_t(dtype_size(dt));
    if (send && recv && bytes > 0) std::memmove(recv, static_cast<const char*>(send) + rank_ * bytes, size_t(bytes));
  }
  void all_gather(const void* send, void* recv, int64_t count, DType dt, void*) override {
    const int64_t bytes = count * int64_t(dtype_size(dt));
    if (!send || !recv || bytes <= 0) return;
    for (int r = 0; r < size_; ++r) std::memcpy(static_cast<char*>(recv) + r * bytes, send, size_t(bytes));
  }
  void reduce(void*, int64_t, DType, ReduceOp, int, void*) override {}
  void broadcast(void*, int64_t, int, void*) override {}
  void barrier() override {}

 private:
  int size_, rank_;
};

}  // namespace

std::unique_ptr<Communicator> make_meta_communicator(int size, int rank) {
  return std::make_unique<MetaCommunicator>(size, rank);
}

}  // namespace lt::dist
