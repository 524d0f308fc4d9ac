// JobSession and launch_local (job_session.h).
#include "train/job_session.h"

#include "dist/rank_supervisor.h"
#include "dist/tcp_listen.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "leantrain/cuda_info.h"
#include "leantrain/device.h"

namespace lt {

using namespace dist;  // launch_info, world(), the communicators

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Every rank must train the same thing: a mismatch (another --lr on one rank) would silently
// average different models. The hash of the saved form of the config is compared at start.
void check_same_config(Communicator& comm, const RunConfig& cfg) {
  const uint64_t mine = fnv1a(config_to_json(cfg));
  std::vector<uint64_t> all(size_t(comm.size()));
  comm.all_gather(&mine, all.data(), 1, DType::I64);
  for (int r = 0; r < comm.size(); ++r)
    if (all[size_t(r)] != all[0])
      throw UsageError("rank " + std::to_string(r) + "'s configuration differs from rank 0's",
                       "every rank must run the same flags (the hash of the run's config differs)",
                       "launch the same command on every rank");
}

void check_world_fits(const RunConfig& cfg, int w) {
  const int64_t mb = cfg.micro_batch ? cfg.micro_batch : cfg.batch;
  if (mb % w != 0)
    throw UsageError((cfg.micro_batch ? "--micro-batch " : "--batch ") + std::to_string(mb) + " over " +
                         std::to_string(w) + " ranks",
                     "each rank trains on an equal share of every (micro-)batch",
                     "make it a multiple of " + std::to_string(w));
  if (cfg.devices != 1 && cfg.devices != w)
    throw UsageError("--devices " + std::to_string(cfg.devices) + " in a job of " + std::to_string(w) + " ranks",
                     "the launcher already started the ranks", "drop --devices");
}


// What each rank writes. Ranks > 0 write no metrics and no HTML report (rank 0's say it all);
// each writes its own memory snapshot (PATH.rankR.json beside rank 0's PATH.json: the ranks'
// timelines differ under the sharded strategies). Every rank keeps --save: saving is collective
// (rank 0 writes the files).
void per_rank_outputs(RunConfig& cfg, int rank) {
  if (rank == 0) return;
  cfg.metrics.clear();
  cfg.memory_report.clear();
  if (cfg.memory_snapshot.empty()) return;
  std::string& p = cfg.memory_snapshot;
  const std::string tag = ".rank" + std::to_string(rank);
  const size_t slash = p.find_last_of('/');
  const size_t dot = p.rfind('.');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash + 1)) p.insert(dot, tag);
  else p += tag;
}

}  // namespace

JobSession::JobSession(RunConfig& cfg) : info_(launch_info()) {
  set_timeout_seconds(cfg.dist_timeout);
  if (info_.world_size == 1) return;
  check_world_fits(cfg, info_.world_size);
  const Device d = resolve_device(cfg.device);
  if (d.is_cuda()) {
    // One GPU per rank: the LOCAL_RANK-th of this host's. NCCL moves the gradients (device
    // buffers); the trainer's host numbers go through a scratch device buffer (nccl_communicator.cpp).
    if (info_.local_rank >= cuda_device_count())
      throw UsageError("local rank " + std::to_string(info_.local_rank) + " on a host with " +
                           std::to_string(cuda_device_count()) + " GPUs",
                       "each rank trains on a GPU of its own", "start at most one rank per GPU");
    if (info_.master_addr.empty())
      throw UsageError("CUDA ranks started by " + info_.launcher, "NCCL's ranks meet at MASTER_ADDR:MASTER_PORT, which is not set",
                       "launch with torchrun or leantrain train --devices N, or set MASTER_ADDR and MASTER_PORT");
    // The device's context and streams first, so that the run's "context" figure is theirs alone
    // and NCCL's buffers show as memory outside the allocator (--metrics-json).
    (void)cuda_memory_info(info_.local_rank);
    set_world(make_nccl_communicator(info_, info_.local_rank));  // without NCCL in the build: its one line
    check_same_config(world(), cfg);  // before the device index, which differs by rank
    cfg.device = "cuda:" + std::to_string(info_.local_rank);
    per_rank_outputs(cfg, info_.rank);
    return;
  }
  if (info_.launcher != "mpirun" && info_.launcher != "slurm")
    throw UsageError("a CPU job of " + std::to_string(info_.world_size) + " ranks started by " + info_.launcher,
                     "ranks on the CPU talk through MPI", "start them with mpirun -np N (or leantrain train --devices N)");
  std::unique_ptr<Communicator> c = make_mpi_communicator();
  if (c->size() != info_.world_size)
    throw UsageError("MPI's world of " + std::to_string(c->size()) + " ranks",
                     "the launcher's variables say " + std::to_string(info_.world_size), "launch through mpirun alone");
  set_world(std::move(c));
  check_same_config(world(), cfg);
  per_rank_outputs(cfg, info_.rank);
}

JobSession::~JobSession() { set_world(nullptr); }

namespace {

// A listening socket on a free port, for rank 0's store. It stays open from here to rank 0 (which
// inherits it: LEANTRAIN_STORE_FD), so nothing can take the port in between: a port found free
// and closed again was once taken by a rank's own connection attempts to it (a TCP self-connect
// on a port of the ephemeral range) before rank 0 could listen.
int listening_socket(int& port) {
  const int s = tcp_listen(0);
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (s < 0 || ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    fail("--devices", std::string("cannot listen on a free port: ") + std::strerror(errno), "");
  port = ntohs(a.sin_port);
  return s;
}

std::vector<std::string> args_without_devices(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--devices") {
      ++i;
      continue;
    }
    if (a.rfind("--devices=", 0) == 0) continue;
    out.push_back(a);
  }
  return out;
}

std::vector<char*> c_args(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

int launch_local(int devices, const std::string& device, int argc, char** argv) {
  std::vector<std::string> rest = args_without_devices(argc, argv);
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) fail("--devices", "cannot find this program's path (/proc/self/exe)", "launch with mpirun or torchrun");
  self[n] = 0;
  const bool cpu = !resolve_device(device).is_cuda();
  if (cpu) {
    // The CPU ranks talk through MPI: hand the job to mpirun (root in containers must say so).
    std::vector<std::string> cmd = {"mpirun", "-np", std::to_string(devices), "--oversubscribe", "--quiet",
                                    "-x", std::string(kSuperviseEnv) + "=1", self};
    cmd.insert(cmd.end(), rest.begin(), rest.end());
    ::setenv("LEANTRAIN_STDOUT_IS_TERMINAL", ::isatty(1) == 1 ? "1" : "0", 1);  // train/progress.cpp
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    std::vector<char*> args = c_args(cmd);
    ::execvp("mpirun", args.data());
    fail("--devices " + std::to_string(devices) + " on the CPU", std::string("cannot start mpirun: ") + std::strerror(errno),
         "install openmpi-bin (scripts/deps.sh)");
  }
  int port_number = 0;
  const int store = listening_socket(port_number);
  const std::string port = std::to_string(port_number);
  std::vector<pid_t> kids;
  for (int r = 0; r < devices; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) fail("--devices", std::string("fork failed: ") + std::strerror(errno), "");
    if (pid == 0) {
      if (r == 0) ::setenv("LEANTRAIN_STORE_FD", std::to_string(store).c_str(), 1);
      else ::close(store);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(devices).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      std::vector<std::string> cmd = {self};
      cmd.insert(cmd.end(), rest.begin(), rest.end());
      std::vector<char*> args = c_args(cmd);
      ::execv(self, args.data());
      _exit(127);
    }
    kids.push_back(pid);
  }
  ::close(store);  // rank 0 holds it now
  // The job's code is the first failure's; the others are ended then (TERM, KILL after 10 s).
  int rc = 0;
  size_t alive = kids.size();
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (alive > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      --alive;
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 0 && rc == 0) {
        rc = code;
        // A rank's own error is already printed; a rank ended from outside says nothing itself.
        if (WIFSIGNALED(status)) {
          const long r = std::find(kids.begin(), kids.end(), pid) - kids.begin();
          std::fprintf(stderr, "leantrain: error: rank %ld was killed by signal %d (%s); ending the other ranks\n", r,
                       WTERMSIG(status), strsignal(WTERMSIG(status)));
        }
        for (pid_t k : kids) ::kill(k, SIGTERM);
        deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline)
      for (pid_t k : kids) ::kill(k, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return rc;
}

}  // namespace lt
