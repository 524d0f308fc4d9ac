// run_host_tasks (src/offload/host_workers.*): every task runs exactly once per call, with task
// counts growing and shrinking between calls (kept workers idle or started), and calls from two
// threads at once take turns without losing a task.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "offload/host_workers.h"

using namespace lt::offload;

TEST(OffloadHostWorkers, EveryTaskRunsOncePerCall) {
  for (int tasks : {1, 4, 2, 8, 3, 8, 1, 6}) {
    std::vector<std::atomic<int>> ran(static_cast<size_t>(tasks));
    for (auto& r : ran) r = 0;
    run_host_tasks(tasks, [&](int i) { ran[size_t(i)]++; });
    for (int i = 0; i < tasks; ++i) EXPECT_EQ(ran[size_t(i)].load(), 1) << "task " << i << " of " << tasks;
  }
}

TEST(OffloadHostWorkers, CallsFromTwoThreadsTakeTurns) {
  std::atomic<int64_t> sum{0};
  auto caller = [&](int tasks) {
    for (int k = 0; k < 200; ++k) run_host_tasks(tasks, [&](int i) { sum += i + 1; });
  };
  std::thread a(caller, 5), b(caller, 3);
  a.join();
  b.join();
  EXPECT_EQ(sum.load(), 200 * (5 * 6 / 2) + 200 * (3 * 4 / 2));
}
