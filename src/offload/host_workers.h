// The CPU threads of the offloaded optimizer steps: started once and kept, so a step over many
// parameters does not start threads per parameter (a thread start costs about as much as
// updating ten thousand elements).
#pragma once
#include <functional>

namespace lt::offload {

// Runs task(0) .. task(tasks - 1) at once, task 0 on the calling thread and the others on kept
// worker threads (started on first need, more when a call needs more), and returns when all are
// done. Calls from several threads take turns. A task must not throw.
void run_host_tasks(int tasks, const std::function<void(int)>& task);

}  // namespace lt::offload
