// Reverse-mode autograd: a tape of nodes. Each recorded op's output points at a Node whose
// `next` edges point at the nodes of its inputs (never at the input tensors themselves, so an
// activation stays alive only if some node saved it). Leaves get an AccumulateGrad node that
// adds into .grad with += and then runs the parameter's post-accumulate-grad hooks.
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "leantrain/tensor.h"

namespace lt {

struct Node {
  std::vector<std::shared_ptr<Node>> next;  // one per input; nullptr where no gradient flows
  const char* name = "";
  // Applied with an undefined gradient when none arrived (instead of skipped): the node that
  // finishes a two-output op (add_layer_norm) must run when only its other output got one.
  bool apply_without_grad = false;
  virtual ~Node() = default;
  // One gradient per entry of `next` (undefined where none).
  virtual std::vector<Tensor> apply(const Tensor& grad_out) = 0;
  // Drops saved tensors once the node has run (unless the graph is retained).
  virtual void release() {}
};

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_out)>;

// Grad modes (thread-local). In no-grad and inference mode nothing is recorded, so nothing is saved.
bool grad_enabled();
bool inference_mode();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();

 private:
  bool prev_;
};
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();

 private:
  bool prev_;
};
class InferenceModeGuard {
 public:
  InferenceModeGuard();
  ~InferenceModeGuard();

 private:
  bool prev_grad_, prev_inf_;
};

// True when an op over these inputs must be recorded.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Records `out` as produced by `fn` from `inputs` (if needs_grad). `fn` captures what it saves.
void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn fn);

// Runs backward from `root` (a scalar unless `grad` is given).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// Sets .grad to none (frees it) or to zeros.
void zero_grad(const std::vector<Tensor>& params, bool set_to_none = true);

}  // namespace lt
