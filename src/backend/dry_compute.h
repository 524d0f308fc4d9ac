// Note [Dry compute]
// While a DryCompute(true) scope is open on a thread, backend_for() answers the meta backend for
// every device: op front-ends still validate and allocate their outputs through the device's
// allocator, but no kernel runs and no data moves. A skipped step (a loss-scale overflow) runs its
// optimizer update this way (Optimizer::dry_step), so it makes exactly the allocations an applied
// step makes, and the caching allocator's layout, hence reserved bytes, does not depend on whether
// the data overflowed: the plan, which cannot know, stays exact. DryCompute(false) opens a scope
// that computes again (the state a skipped step creates must still be zeroed for real).
#pragma once

namespace lt {

class DryCompute {
 public:
  explicit DryCompute(bool dry);
  ~DryCompute();
  DryCompute(const DryCompute&) = delete;
  DryCompute& operator=(const DryCompute&) = delete;
  static bool active();  // on this thread

 private:
  bool prev_;
};

}  // namespace lt
