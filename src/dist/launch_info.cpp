// Which rank this process is, read from the variables its launcher set: torchrun and
// `leantrain train --devices N` (RANK ...), mpirun (OMPI_COMM_WORLD_*, or PMI_* of MPICH/Hydra),
// SLURM's srun (SLURM_PROCID ...). The first family present wins, in that order.
#include <charconv>
#include <cstdlib>

#include "leantrain/dist.h"
#include "leantrain/usage_error.h"
#include "core/knobs.h"

extern char** environ;

namespace lt::dist {

namespace {

using Env = std::map<std::string, std::string>;

Env process_env() {
  Env e;
  for (char** p = environ; p && *p; ++p) {
    std::string s = *p;
    size_t eq = s.find('=');
    if (eq != std::string::npos) e[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return e;
}

const std::string* get(const Env& e, const char* k) {
  auto it = e.find(k);
  return it == e.end() ? nullptr : &it->second;
}

int number(const Env& e, const char* k, int fallback) {
  const std::string* v = get(e, k);
  if (!v) return fallback;
  int n = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || end != v->data() + v->size() || n < 0)
    throw UsageError(std::string("environment variable ") + k + "='" + *v + "'", "not a non-negative integer",
                     "fix or unset it (the launcher sets it)");
  return n;
}

}  // namespace

LaunchInfo launch_info(const Env* env) {
  Env own;
  if (!env) own = process_env(), env = &own;
  const Env& e = *env;
  LaunchInfo li;
  if (get(e, "RANK") && get(e, "WORLD_SIZE")) {
    li.launcher = "env";
    li.rank = number(e, "RANK", 0);
    li.world_size = number(e, "WORLD_SIZE", 1);
    li.local_rank = number(e, "LOCAL_RANK", li.rank);
  } else if (get(e, "OMPI_COMM_WORLD_SIZE")) {
    li.launcher = "mpirun";
    li.rank = number(e, "OMPI_COMM_WORLD_RANK", 0);
    li.world_size = number(e, "OMPI_COMM_WORLD_SIZE", 1);
    li.local_rank = number(e, "OMPI_COMM_WORLD_LOCAL_RANK", li.rank);
  } else if (get(e, "PMI_SIZE")) {
    li.launcher = "mpirun";
    li.rank = number(e, "PMI_RANK", 0);
    li.world_size = number(e, "PMI_SIZE", 1);
    li.local_rank = number(e, "MPI_LOCALRANKID", li.rank);
  } else if (get(e, "SLURM_PROCID") && get(e, "SLURM_NTASKS")) {
    li.launcher = "slurm";
    li.rank = number(e, "SLURM_PROCID", 0);
    li.world_size = number(e, "SLURM_NTASKS", 1);
    li.local_rank = number(e, "SLURM_LOCALID", 0);
  }
  if (li.world_size < 1)
    throw UsageError("a world size of 0", "the launcher's variables say no process takes part", "launch 1 or more");
  if (li.rank >= li.world_size)
    throw UsageError("rank " + std::to_string(li.rank) + " of a world of " + std::to_string(li.world_size),
                     "ranks run from 0 to the world size - 1", "check the launcher's RANK / WORLD_SIZE");
  if (const std::string* a = get(e, "MASTER_ADDR")) li.master_addr = *a;
  li.master_port = number(e, "MASTER_PORT", 0);
  if (li.master_port > 65535)
    throw UsageError("MASTER_PORT=" + std::to_string(li.master_port), "not a TCP port", "use a port below 65536");
  return li;
}

namespace {
double g_timeout_seconds = 600;
}  // namespace

double timeout_seconds() { return g_timeout_seconds; }
void set_timeout_seconds(double seconds) { g_timeout_seconds = seconds; }

}  // namespace lt::dist
