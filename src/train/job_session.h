// Joining the job a `leantrain train` process belongs to (issue #13). A JobSession reads how the
// process was launched (launch_info), installs the world's communicator (MPI for an mpirun job on
// the CPU, NCCL for CUDA ranks), checks that every rank runs the same configuration, and makes
// every rank but 0 quiet (no progress lines or metrics files; checkpoints are collective and
// rank 0 writes them).
// It lives in train/, not dist/: it is the run's glue (its RunConfig, resolve_device, the saved
// config's hash), and dist stays below train (src/layers.txt).
#pragma once
#include "leantrain/dist.h"
#include "leantrain/train.h"

namespace lt {

class JobSession {
 public:
  // `cfg` is adjusted for this rank (outputs of ranks > 0 cleared, the CUDA device picked).
  explicit JobSession(RunConfig& cfg);
  ~JobSession();
  JobSession(const JobSession&) = delete;
  JobSession& operator=(const JobSession&) = delete;
  int rank() const { return info_.rank; }
  int size() const { return info_.world_size; }

 private:
  dist::LaunchInfo info_;
};

// `leantrain train --devices N` in a process no launcher started: runs N copies of this command
// (argv without --devices) as the ranks of one job and returns the job's exit code. On the CPU
// they run under mpirun; on CUDA this process forks them with RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR and MASTER_PORT set, and ends them all as soon as one fails.
int launch_local(int devices, const std::string& device, int argc, char** argv);

}  // namespace lt
