// Activation checkpointing (recomputation): a region's forward runs under no-grad, so none of
// its intermediates are saved; only its inputs are kept. One node stands for the region: its
// backward re-runs the forward with grad enabled (random generators rewound, so dropout draws
// the same masks), then backpropagates through that fresh subgraph. Parameter gradients reach
// the parameters' AccumulateGrad nodes as usual, so post-accumulate-grad hooks still fire.
//
// (Not to be confused with the training checkpoints that --save writes.)
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "leantrain/autograd.h"
#include "leantrain/random.h"

namespace lt {

struct CheckpointOptions {
  // Tensors the region reads besides its inputs whose gradients must flow (its parameters).
  // Their gradients are accumulated by the recomputation; they also make the region recorded
  // when no input requires grad (frozen input, trainable weights).
  std::vector<Tensor> params;
  // Generators the region draws from: their offsets are saved at the forward and restored for
  // the recomputation, then put back, so the stream continues as if nothing was recomputed.
  std::vector<Generator*> generators;
  // Other tensors the region reads (attention masks): kept alive until the backward. They get
  // no gradient, so they must not require one.
  std::vector<Tensor> captured;
  // Selective checkpointing: keep the results of the region's matmul-class ops (linear, matmul,
  // attention) from the forward and hand them back to the recomputation, which then redoes only
  // the cheap ops between them (norms, activations, residual adds, dropout).
  bool keep_matmul_outputs = false;
  const char* name = "checkpoint";
  // The module (a Module*) whose forward is the region's function: while the recomputation runs
  // it, nothing reads that module's output, and it may skip what only feeds it (Note [Unread
  // region output], src/autograd/unread_output.h). nullptr: none.
  const void* output_unread_module = nullptr;
};

// True while a checkpointed region's forward is being re-run during backward (on this thread).
// Ops with side effects beyond their outputs (batch norm's running statistics) skip them then:
// the forward already applied them once.
bool recomputing_checkpoint();

// While alive on this thread, regions recorded route their parameters' gradients through the
// region's node instead of accumulating them during the recomputation: the outer backward then
// sums each parameter's gradients over all its uses before its AccumulateGrad (and hooks) run
// once. A breadth-first step over several micro-batches (the trainer's --fused-step with
// --micro-batch) records its forwards so; a recomputation that reaches a parameter outside the
// region's own then fails with a clear error instead of updating from a partial gradient.
class RouteParamGradsScope {
 public:
  RouteParamGradsScope();
  ~RouteParamGradsScope();
  RouteParamGradsScope(const RouteParamGradsScope&) = delete;
  RouteParamGradsScope& operator=(const RouteParamGradsScope&) = delete;
};

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// Runs fn(inputs) keeping only `inputs`; the backward recomputes it. When grad mode is off or
// nothing requires grad this is just fn(inputs). fn must be deterministic given the inputs,
// parameters and generator offsets (all leantrain ops are).
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs, const CheckpointOptions& opts = {});
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  const CheckpointOptions& opts = {});

}  // namespace lt

namespace lt::nn {

class Module;  // leantrain/nn.h

// Every Dropout generator in the subtree of m (m included): what a recomputation must rewind.
std::vector<Generator*> dropout_generators(Module& m);

// Makes m's forward a checkpointed region (its parameters and dropout generators included).
// Composes with a wrapper already installed (it runs inside the region). Throws when m's
// forward does not go through call_forward (a model root, a ModuleList): nothing would run it.
// keep_matmul_outputs: the selective policy (CheckpointOptions::keep_matmul_outputs).
void checkpoint_module(Module& m, bool keep_matmul_outputs = false);
// Whether m's forward goes through its wrapper (so checkpoint_module can act on it).
bool has_wrappable_forward(Module& m);
// Whether m is a transformer block (what `blocks`, `every:K` and `selective` select), whatever
// the model family: the one definition the planner and the profiler use too.
bool is_transformer_block(Module& m);
// The child names of a block's sublayers, its attention and its MLP (its children other than
// its norms), in the block's order.
std::vector<std::string> block_sublayers(Module& block);

// --checkpoint values:
//   none        nothing
//   blocks      every transformer block
//   every:K     blocks 0, K, 2K, ... (K >= 1)
//   selective   every transformer block, keeping its matmul and attention results: only the
//               norms, activations, residual adds and dropout are recomputed
//   REGEX       modules whose path std::regex_match-es it (ECMAScript syntax)
struct CheckpointSpec {
  enum class Mode { None, Blocks, Every, Selective, Regex } mode = Mode::None;
  int64_t every = 1;
  std::string text = "none";  // as given (parse_checkpoint_spec("") keeps "")
  bool on() const { return mode != Mode::None; }
  bool operator==(const CheckpointSpec& o) const { return mode == o.mode && every == o.every && text == o.text; }
  static CheckpointSpec none() { return {}; }
  static CheckpointSpec blocks() { return {Mode::Blocks, 1, "blocks"}; }
  static CheckpointSpec selective() { return {Mode::Selective, 1, "selective"}; }
  // A regex the caller built (a plan's unit list): not checked here.
  static CheckpointSpec regex(std::string re) { return {Mode::Regex, 1, std::move(re)}; }
};
// Checks the syntax (a bad every:K, an invalid regex, "auto"); throws lt::Error.
CheckpointSpec parse_checkpoint_spec(const std::string& spec);
// The module paths the spec selects in root, outermost only (a selected module inside another
// selected one is dropped: the outer recomputation covers it). Throws when a regex or mode
// matches nothing, or a regex matches a module that cannot be wrapped.
std::vector<std::string> select_checkpoint_modules(Module& root, const std::string& spec);
// "transformer.h.3" -> "transformer\.h\.3": the --checkpoint regex that matches exactly that
// text (every regex metacharacter escaped).
std::string checkpoint_regex_for(const std::string& path);
// Selects and installs; returns the selected paths (empty for none).
std::vector<std::string> apply_checkpointing(Module& root, const std::string& spec);

}  // namespace lt::nn
