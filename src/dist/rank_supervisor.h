// A rank's supervisor under `train --devices N` on the CPU. mpirun (run with --quiet) reports a
// rank that a signal killed with nothing but its exit code, so each rank it starts first forks:
// the child is the rank, the parent waits for it and, when a signal it did not pass on killed the
// rank (the kernel's OOM killer, kill -9), prints "rank R was killed by signal S" once for the job.
// Signals the parent receives (mpirun ending the job) go on to the rank.
#pragma once

namespace lt::dist {

// Set by launch_local for the processes mpirun starts.
inline constexpr const char* kSuperviseEnv = "LEANTRAIN_SUPERVISE_RANK";

// In a process started with kSuperviseEnv: forks; the child returns (and runs as the rank), the
// parent never does (it exits with the rank's status). Elsewhere: returns at once.
void supervise_rank_if_asked();

}  // namespace lt::dist
