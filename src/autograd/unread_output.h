// Note [Unread region output]
// During a checkpointed region's recomputation nothing reads the region's output: checkpoint.cpp
// hands the nested backward a graph handle without the buffer, and the backward nodes of the ops
// that produced it read their inputs, never their result. So the region's module may run the ops
// whose result only flows into that output dry (DryCompute: the same allocations, no kernels):
// a LLaMA-family block's down_proj product and its last residual add (nn/block.cpp). The module is
// named by the checkpoint wrapper (CheckpointOptions::output_unread_module) and set for the
// recomputation's call (UnreadOutputOfScope), so a module inside the region, whose output the
// region does read, never matches. Opt-in until a GPU times it: LEANTRAIN_RECOMPUTE_TAIL=1.
#pragma once

namespace lt::detail {

// `module` (a Module*, or nullptr) is, for the scope, the one whose output nothing reads.
class UnreadOutputOfScope {
 public:
  explicit UnreadOutputOfScope(const void* module);
  ~UnreadOutputOfScope();
  UnreadOutputOfScope(const UnreadOutputOfScope&) = delete;
  UnreadOutputOfScope& operator=(const UnreadOutputOfScope&) = delete;

 private:
  const void* prev_;
};

// Whether nothing reads `module`'s output in this call (the pointer as a Module*).
bool output_unread(const void* module);

// How many block tails ran dry on this thread (a count for the tests).
long long unread_tails_run();
void count_unread_tail();

}  // namespace lt::detail
