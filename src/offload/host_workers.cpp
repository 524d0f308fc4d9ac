// Kept worker threads for run_host_tasks (host_workers.h): each waits for a new generation of
// work, runs its task if it has one, and reports back; the caller runs task 0 meanwhile.
#include "offload/host_workers.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace lt::offload {

namespace {

class Workers {
 public:
  ~Workers() {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
      ++generation_;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void run(int tasks, const std::function<void(int)>& task) {
    std::lock_guard<std::mutex> turn(turn_);  // one call at a time
    {
      std::unique_lock<std::mutex> l(m_);
      while (int(threads_.size()) < tasks - 1) {
        const int id = int(threads_.size()) + 1;
        threads_.emplace_back([this, id] { loop(id); });
      }
      task_ = &task;
      tasks_ = tasks;
      pending_ = tasks - 1;
      ++generation_;
    }
    wake_.notify_all();
    task(0);
    std::unique_lock<std::mutex> l(m_);
    done_.wait(l, [&] { return pending_ == 0; });
    task_ = nullptr;
  }

 private:
  void loop(int id) {
    uint64_t seen = 0;
    {
      std::lock_guard<std::mutex> l(m_);
      seen = generation_ - (task_ && id < tasks_ ? 1 : 0);  // started for the current call: take part
    }
    for (;;) {
      const std::function<void(int)>* task = nullptr;
      {
        std::unique_lock<std::mutex> l(m_);
        wake_.wait(l, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        if (id < tasks_) task = task_;
      }
      if (!task) continue;
      (*task)(id);
      std::lock_guard<std::mutex> l(m_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex turn_, m_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* task_ = nullptr;
  int tasks_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace

void run_host_tasks(int tasks, const std::function<void(int)>& task) {
  if (tasks <= 1) {
    if (tasks == 1) task(0);
    return;
  }
  static Workers workers;
  workers.run(tasks, task);
}

}  // namespace lt::offload
