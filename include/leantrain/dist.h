// Several processes training one model (issue #13): the communicator seam, how a process learns
// its rank, and the process's world.
//
// A Communicator moves raw buffers (host pointers on the CPU, device pointers on CUDA) between the
// ranks of one job. Three implementations: a 1-rank one (no library, every collective a copy), MPI
// on the CPU (tests and CI) and NCCL on CUDA (enqueued on the stream given; the caller records an
// event after it). Every reduction is deterministic run to run: MPI's are computed here in rank
// order (0, 1, ..., W-1) rather than left to the library's timing-dependent algorithms; NCCL's
// rings give the same order for a fixed topology.
//
// A collective that does not finish within timeout_seconds() (a rank that died or hangs) ends the
// process with one line; mpirun / the launcher then ends the others.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "leantrain/dtype.h"

namespace lt::dist {

enum class ReduceOp { Sum, Avg };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;  // "single", "mpi", "nccl"

  // `stream` is a cudaStream_t for NCCL (the operation is enqueued there and returns at once);
  // the CPU implementations ignore it and return when the result is in place.
  // Reductions take f32, bf16 or f16 (16-bit values are summed in f32, rounded once at the end).

  // buf[count] becomes the element-wise sum (or mean) over the ranks.
  virtual void all_reduce(void* buf, int64_t count, DType dt, ReduceOp op, void* stream = nullptr) = 0;
  // all_reduce of a buffer whose reduction runs beside computation (ddp's buckets during
  // backward): a communicator may take a slower path that leaves the SMs to that computation (the
  // NCCL one: copy engines, src/dist/peer_all_reduce.h). all_reduce is for reductions the next
  // computation waits for.
  virtual void all_reduce_beside_compute(void* buf, int64_t count, DType dt, ReduceOp op, void* stream = nullptr) {
    all_reduce(buf, count, dt, op, stream);
  }
  // send[size() * count] -> recv[count]: rank r receives the reduction of every rank's chunk r.
  virtual void reduce_scatter(const void* send, void* recv, int64_t count, DType dt, ReduceOp op,
                              void* stream = nullptr) = 0;
  // send[count] -> recv[size() * count], rank r's contribution at r * count.
  virtual void all_gather(const void* send, void* recv, int64_t count, DType dt, void* stream = nullptr) = 0;
  // buf[count] on `root` is summed (or averaged) over the ranks; the others' buf is left as it was.
  virtual void reduce(void* buf, int64_t count, DType dt, ReduceOp op, int root, void* stream = nullptr) = 0;
  // bytes of buf on `root` copied to every rank.
  virtual void broadcast(void* buf, int64_t bytes, int root, void* stream = nullptr) = 0;
  virtual void barrier() = 0;
  // Collectives between group_start() and group_end() are launched together (NCCL's group
  // calls: one launch for a unit's broadcasts); their buffers must be device memory. The CPU
  // implementations run each call at once.
  virtual void group_start() {}
  virtual void group_end() {}
};

// The 1-rank communicator: every collective is the identity (a copy where send != recv).
std::unique_ptr<Communicator> make_single_communicator();

// A plan's stand-in for rank `rank` of `size` (leantrain plan --devices N): moves no data (the
// buffers are meta), but all_gather / reduce_scatter of host values hand back this rank's own
// value in every slot, so averages of host numbers stay this rank's.
std::unique_ptr<Communicator> make_meta_communicator(int size, int rank);

// How this process was launched: torchrun / `leantrain train --devices N` (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT), mpirun (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK, PMI_RANK/SIZE)
// or SLURM (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID). world_size 1 when none is set.
struct LaunchInfo {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string launcher = "none";  // none | env | mpirun | slurm
  std::string master_addr;        // env / slurm: where rank 0's store listens
  int master_port = 0;
};
// Reads `env` (the process environment when empty is passed as nullptr). Throws UsageError on a
// variable that is not a number or a rank outside [0, world size).
LaunchInfo launch_info(const std::map<std::string, std::string>* env = nullptr);

// Seconds a collective may take before the process is ended (--dist-timeout, default 600).
double timeout_seconds();
// --dist-timeout: set by dist::Session from the run's config before any rank waits (default 600).
void set_timeout_seconds(double seconds);

bool mpi_built();   // this binary has the MPI communicator
bool nccl_built();  // this binary has the NCCL communicator

// MPI_Init (for mpirun jobs) and its communicator; only when mpi_built(). Throws lt::Error otherwise.
std::unique_ptr<Communicator> make_mpi_communicator();
// Ends every rank of an MPI job with `code` (after this rank printed its line).
void mpi_abort(int code);
// NCCL on `device_index`: rank 0 makes the unique id and serves it at master_addr:master_port.
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchInfo& info, int device_index);

// The process's world: the 1-rank communicator until a run installs another (train's dist session).
Communicator& world();
void set_world(std::unique_ptr<Communicator> c);  // nullptr: back to the 1-rank one

// Rank 0 serves `payload` to world_size - 1 clients at port; the others fetch it from addr:port.
// Bounded by timeout_seconds(); a failure is one lt::Error naming the address.
std::string tcp_store_exchange(const LaunchInfo& info, const std::string& payload);

}  // namespace lt::dist
