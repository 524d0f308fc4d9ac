// What a binary built without MPI or NCCL answers when asked for them: one line saying how to
// get them (CMake finds MPI when libopenmpi-dev is installed; NCCL needs -DLEANTRAIN_NCCL=ON).
#include "leantrain/dist.h"
#include "leantrain/error.h"

namespace lt::dist {

#ifndef LEANTRAIN_HAVE_MPI
bool mpi_built() { return false; }
std::unique_ptr<Communicator> make_mpi_communicator() {
  fail("an MPI job (launched by mpirun)", "this leantrain was built without MPI",
       "install libopenmpi-dev (scripts/deps.sh) and rebuild");
}
void mpi_abort(int) {}
#endif

#ifndef LEANTRAIN_HAVE_NCCL
bool nccl_built() { return false; }
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchInfo&, int) {
  fail("several CUDA ranks", "this leantrain was built without NCCL",
       "build with -DLEANTRAIN_CUDA=ON -DLEANTRAIN_NCCL=ON");
}
#endif

}  // namespace lt::dist
