// Reverse-mode autograd: a tape of nodes. Each recorded op's output points at a Node whose
// `next` edges point at the nodes of its inputs (never at the input tensors themselves, so an
// activation stays alive only if some node saved it). Leaves get an AccumulateGrad node that
// adds into .grad with += and then runs the parameter's post-accumulate-grad hooks.
//
// What a backward reads is held as SavedTensor, which goes through the innermost pack/unpack
// hooks (SavedTensorHooksScope) when some are active, so that sharding, offload and quantized
// weights can move or drop it between the forward and the backward. Backward runs the ready
// node with the highest sequence number first (the reverse of the order the forward recorded
// them), as PyTorch's engine does; every gradient a node returns must have the shape and dtype
// of its input.
#pragma once
#include <any>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <vector>

#include "leantrain/tensor.h"

namespace lt {

struct Node;

// Called with the node about to run and the gradient it received (undefined for a node run
// without one); may replace the gradient.
using NodePreHook = std::function<void(Node& node, Tensor& grad_out)>;
// Called after the node ran with the gradients it returned for its inputs (one per `next`
// entry; empty for AccumulateGrad); may replace them. They are checked after the hooks.
using NodePostHook = std::function<void(Node& node, std::vector<Tensor>& grad_inputs, const Tensor& grad_out)>;

// Shape and dtype of an input when the op was recorded: its gradient must have both.
struct InputMeta {
  Shape shape;
  DType dtype = DType::F32;
};

// Nodes are numbered in the order they are created on a thread; backward runs the ready node
// with the highest number first. AccumulateGrad nodes take the largest number, so a leaf's
// gradient lands in .grad (and its hooks, a fused optimizer step, run) as soon as it is complete.
uint64_t next_sequence_nr();
inline constexpr uint64_t kAccumulateGradSequenceNr = std::numeric_limits<uint64_t>::max();

struct Node {
  std::vector<std::shared_ptr<Node>> next;  // one per input; nullptr where no gradient flows
  std::vector<InputMeta> input_meta;        // one per input (set by record())
  const char* name = "";
  uint64_t sequence_nr = next_sequence_nr();
  // Applied with an undefined gradient when none arrived (instead of skipped): the node that
  // finishes a two-output op (add_layer_norm) must run when only its other output got one.
  bool apply_without_grad = false;
  // A cast of an f32 tensor to 16 bits (cast(), autocast): past_f32_cast may route a consumer's
  // f32 gradient around it.
  bool casts_from_f32 = false;
  // Run around apply(), in registration order, only when the node runs. They stay with the
  // node (a retained graph runs them again). A pre-hook on the grad_fn of a unit's output runs
  // just before that unit's backward starts: the place to start fetching what the unit before
  // it saved (backward visits units in reverse forward order, see sequence_nr).
  std::vector<NodePreHook> pre_hooks;
  std::vector<NodePostHook> post_hooks;
  virtual ~Node() = default;
  // One gradient per entry of `next` (undefined where none).
  virtual std::vector<Tensor> apply(const Tensor& grad_out) = 0;
  // Drops saved tensors once the node has run (unless the graph is retained).
  virtual void release() {}
  void register_pre_hook(NodePreHook h) { pre_hooks.push_back(std::move(h)); }
  void register_post_hook(NodePostHook h) { post_hooks.push_back(std::move(h)); }
};

// ---- Saved tensors ----
// A pack hook turns a tensor an op saves for its backward into anything (the tensor itself, an
// index into a store, a handle to a host copy or to a shard); the unpack hook turns that back
// into a tensor when the backward needs it. PyTorch's torch.autograd.graph.saved_tensors_hooks.
// The packed value lives exactly as long as the saved tensor would have: it is destroyed when
// its node has run (or when the graph goes), so a resource it stands for (a host copy, a shard
// handle) belongs inside it, e.g. a shared_ptr whose deleter frees it, not in a side table.
using PackedTensor = std::any;
using PackHook = std::function<PackedTensor(const Tensor& saved)>;
using UnpackHook = std::function<Tensor(const PackedTensor& packed)>;

// Pushes (pack, unpack) on this thread's stack until the scope ends. Scopes nest: a tensor
// saved while several are open is packed by the innermost pair only, and unpacked by the
// unpack of that same pair (wherever the backward runs). The hooks themselves run under
// no-grad with no hooks active, so the ops they call save nothing and do not recurse.
class SavedTensorHooksScope {
 public:
  SavedTensorHooksScope(PackHook pack, UnpackHook unpack);
  ~SavedTensorHooksScope();
  SavedTensorHooksScope(const SavedTensorHooksScope&) = delete;
  SavedTensorHooksScope& operator=(const SavedTensorHooksScope&) = delete;
};
// Whether some pack/unpack hooks are active on this thread.
bool saved_tensor_hooks_active();

// What a backward closure keeps instead of a Tensor. Constructing one from a defined tensor is
// "saving" it: pack is called there, once, when hooks are active; otherwise the tensor is kept
// as is. unpack() gives it back (calling the unpack hook, once per call); it checks that the
// hook returned the saved shape, dtype and device (and a contiguous tensor for a contiguous
// one, since kernels read saved tensors as flat rows). Copies share the packed value. Save only
// when the op is recorded (after `needs_grad`), so pack never sees a tensor nobody keeps.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  bool defined() const { return tensor_.defined() || packed_ != nullptr; }
  Tensor unpack() const;
  // Of the saved tensor, without unpacking it.
  const Shape& shape() const;
  DType dtype() const;

 private:
  struct Packed;
  Tensor tensor_;                         // no hooks: the tensor itself
  std::shared_ptr<const Packed> packed_;  // hooks: the packed value and the unpack that goes with it
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

// Records `out` as produced by `fn` from `inputs` (if needs_grad). `fn` captures what it saves
// as SavedTensor; it must return, per input, an undefined tensor or a gradient of that input's
// shape and dtype (checked: a mismatch is an error naming the op, never reshaped or cast).
void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn fn);

// For t the whole output of a recorded cast of an f32 tensor to 16 bits (autocast's casts of
// parameters), a stand-in for that f32 tensor: passed to record() in t's place, it makes the
// recorded op's backward hand its f32 gradient straight to where the cast's would have gone (an
// f32 .grad, with no 16-bit rounding and no cast kernel). The stand-in has t's shape, dtype f32
// and no storage; only record() may use it. Undefined when t is anything else, when the cast's
// node has hooks (they would be skipped), when an op recorded before already consumes t (the
// gradients would meet in f32, the first held at twice its bytes), or when the cast was marked
// to keep its backward (autocast_tied: a parameter another op reads in f32).
Tensor past_f32_cast(const Tensor& t);

// Runs backward from `root` (a scalar unless `grad` is given, which must have root's shape and
// dtype). Nodes run in decreasing sequence_nr among those whose gradient is complete.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);
// One backward from several scalar roots at once, each with gradient 1, as if from their sum but
// without an add node: a leaf reached from several roots gets one accumulation of the sum of its
// gradients (in the order the engine produced them), so its post-accumulate-grad hooks see the
// final gradient once. The graph is not retained.
void run_backward(const std::vector<Tensor>& roots);

// Numbers the nodes of several forwards of the same graph ("lanes": the micro-batches of one
// step) so that one backward over all of them runs breadth-first: the k-th node recorded by every
// lane before the (k-1)-th node of any lane, and lane 0 first among equal k. A parameter used at
// depth k of each lane then has its whole gradient as soon as depth k is done, so a fused step can
// apply and free it there instead of keeping a gradient buffer across micro-batches. Only the
// order changes: the lanes' gradients are the same, summed in lane order as accumulation does.
// Leaves' AccumulateGrad nodes take no number (they run as soon as they are ready anyway).
class InterleavedSequence {
 public:
  explicit InterleavedSequence(int64_t lanes);
  ~InterleavedSequence();  // later nodes are numbered above every number handed out here
  InterleavedSequence(const InterleavedSequence&) = delete;
  InterleavedSequence& operator=(const InterleavedSequence&) = delete;
  void begin_lane(int64_t lane);  // numbers this thread's new nodes as lane `lane` until end_lane
  void end_lane();

 private:
  friend uint64_t next_sequence_nr();
  uint64_t base_;
  int64_t lanes_;
  int64_t lane_ = -1;
  uint64_t depth_ = 0;      // nodes recorded by the current lane so far
  uint64_t max_depth_ = 0;  // over all lanes
};
// True while a backward that keeps its graph (retain_graph) runs on this thread: the nodes'
// saved tensors will be read again, so a backward function must leave them intact. False
// outside backward and in a backward that frees each node's saved tensors after running it.
bool backward_retains_graph();
// True when g is the gradient of ones that backward() made for its root because none was passed
// (loss.backward()), during that backward: a node fed it may skip multiplying by it. The seed is
// held until the backward ends, so no later tensor can take its place.
bool is_backward_seed(const Tensor& g);

// Sets .grad to none (frees it) or to zeros.
void zero_grad(const std::vector<Tensor>& params, bool set_to_none = true);

}  // namespace lt
