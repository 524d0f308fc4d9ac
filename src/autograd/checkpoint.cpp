// Checkpointed regions. The forward runs under no-grad and keeps only the inputs (plus the
// generators' offsets); the region's node re-runs it with grad enabled during backward and
// runs a nested backward through the fresh subgraph. Why nested and not grafted: the engine
// counts dependencies once, up front, so a subgraph born mid-backward needs its own pass.
// The inputs' gradients are caught by CaptureNodes standing in for the inputs' producers (not
// leaves with AccumulateGrad: that would retag them as gradients and run leaf hooks); the
// parameters' gradients go to their real AccumulateGrad nodes, hooks included.
#include "leantrain/checkpoint.h"

#include <optional>

#include "autograd/forward_context.h"
#include "autograd/kept_outputs.h"
#include "autograd/unread_output.h"
#include "autograd/routed_params.h"

#include "leantrain/error.h"

namespace lt {

namespace {

thread_local int t_recomputing = 0;  // nesting depth of recomputations on this thread
thread_local const void* t_unread_output_of = nullptr;  // Note [Unread region output]
thread_local long long t_unread_tails = 0;

struct RecomputingScope {
  RecomputingScope() { ++t_recomputing; }
  ~RecomputingScope() { --t_recomputing; }
};

// Stands in for an input's producer during the recomputation; keeps the gradient it receives.
struct CaptureNode final : Node {
  Tensor grad;
  std::vector<Tensor> apply(const Tensor& g) override {
    grad = g;
    return {};
  }
};

// A root for the nested backward that carries the recomputed graph but not the output buffer,
// which nothing in backward reads: it is freed before the backward starts.
Tensor graph_handle(const Tensor& out) {
  Tensor handle = tensor_over(nullptr, 0, out.shape(), out.strides(), out.dtype(), out.device());
  handle.impl()->requires_grad = true;
  handle.impl()->grad_fn = out.grad_fn();
  return handle;
}

thread_local int t_route_param_grads = 0;

// While alive, the recomputation's graph sends the parameters' gradients to capture nodes
// instead of their AccumulateGrad nodes (restored at the end, also on a throw).
class ParamCapture {
 public:
  explicit ParamCapture(const std::vector<Tensor>& params) : params_(params) {
    for (const Tensor& p : params_) {
      auto cap = std::make_shared<CaptureNode>();
      cap->name = "CheckpointParameter";
      cap->sequence_nr = kAccumulateGradSequenceNr;  // taken as soon as complete, as a leaf would be
      saved_.push_back(p.impl()->grad_accumulator);
      p.impl()->grad_accumulator = cap;
      caps_.push_back(std::move(cap));
    }
  }
  ~ParamCapture() { restore(); }
  ParamCapture(const ParamCapture&) = delete;
  ParamCapture& operator=(const ParamCapture&) = delete;
  void restore() {
    for (size_t i = 0; i < saved_.size(); ++i) params_[i].impl()->grad_accumulator = std::move(saved_[i]);
    saved_.clear();
  }
  Tensor take(size_t i) { return std::move(caps_[i]->grad); }

 private:
  const std::vector<Tensor>& params_;
  std::vector<std::shared_ptr<Node>> saved_;
  std::vector<std::shared_ptr<CaptureNode>> caps_;
};

// The recomputation: returns one gradient per input (undefined where none), then one per
// parameter when they are routed (else none: they were accumulated into the parameters).
std::vector<Tensor> recompute_backward(const CheckpointFn& fn, const std::vector<SavedTensor>& saved,
                                       const std::vector<bool>& need, const std::vector<Generator*>& gens,
                                       const std::vector<uint64_t>& forward_offsets, const std::vector<Tensor>* routed,
                                       size_t n_params, detail::KeptOutputs* kept, const ForwardContext& context,
                                       const void* output_of, const Tensor& grad_out) {
  MemoryCategoryScope act(Category::Activation);  // recomputed tensors are activations
  ForwardContextScope forward_state(context);     // the forward's (its MoE loss sums), not the caller's
  std::vector<std::shared_ptr<CaptureNode>> caps(saved.size());
  std::optional<ParamCapture> param_caps;
  if (routed) param_caps.emplace(*routed);
  Tensor handle;
  {
    std::vector<Tensor> xs;
    xs.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      Tensor x = saved[i].defined() ? saved[i].unpack().detach() : Tensor();
      if (need[i]) {
        caps[i] = std::make_shared<CaptureNode>();
        caps[i]->name = "CheckpointInput";
        x.impl()->requires_grad = true;
        x.impl()->grad_fn = caps[i];
      }
      xs.push_back(std::move(x));
    }
    const std::vector<uint64_t> now = generator_offsets(gens);
    set_generator_offsets(gens, forward_offsets);
    Tensor out;
    {
      EnableGradGuard grad_on;
      if (kept) kept->replay = true, kept->next = 0;  // from the start again (a retained graph reruns it)
      detail::KeptOutputsScope scope(kept);
      RecomputingScope recomputing;
      detail::UnreadOutputOfScope unread(output_of);  // nothing reads `out`'s values (graph_handle below)
      try {
        out = fn(xs);
      } catch (...) {
        set_generator_offsets(gens, now);
        throw;
      }
    }
    set_generator_offsets(gens, now);
    if (param_caps) param_caps->restore();  // the recorded graph keeps its edges to the captures
    LT_CHECK(!kept || kept->next == kept->entries.size(),
             "selective checkpointing: the recomputation made " + std::to_string(kept ? kept->next : 0) +
                 " matmul-class calls",
             "the forward made " + std::to_string(kept ? kept->entries.size() : 0) +
                 "; the region's forward is not deterministic",
             "checkpoint with --checkpoint blocks instead, or make the region's forward deterministic");
    LT_CHECK(out.shape() == grad_out.shape(), "checkpoint: the recomputed output has shape " + shape_str(out.shape()),
             "the forward gave " + shape_str(grad_out.shape()) + "; the region is not deterministic",
             "checkpoint only regions whose result depends on their inputs, parameters and generators alone");
    if (out.requires_grad()) handle = graph_handle(out);
  }  // the recomputed output and the input handles go; the subgraph holds what it saved
  if (handle.defined()) {
    std::optional<detail::RefuseLeafAccumulation> only_own;
    if (routed) only_own.emplace();
    run_backward(handle, grad_out, false);
  }
  std::vector<Tensor> grads(saved.size() + n_params);
  for (size_t i = 0; i < saved.size(); ++i)
    if (caps[i]) grads[i] = std::move(caps[i]->grad);
  if (param_caps)
    for (size_t j = 0; j < n_params; ++j) grads[saved.size() + j] = param_caps->take(j);
  return grads;
}

}  // namespace

bool recomputing_checkpoint() { return t_recomputing > 0; }

namespace detail {

UnreadOutputOfScope::UnreadOutputOfScope(const void* module) : prev_(t_unread_output_of) {
  t_unread_output_of = module;
}
UnreadOutputOfScope::~UnreadOutputOfScope() { t_unread_output_of = prev_; }

bool output_unread(const void* module) { return module != nullptr && module == t_unread_output_of; }

long long unread_tails_run() { return t_unread_tails; }
void count_unread_tail() { ++t_unread_tails; }

}  // namespace detail

RouteParamGradsScope::RouteParamGradsScope() { ++t_route_param_grads; }
RouteParamGradsScope::~RouteParamGradsScope() { --t_route_param_grads; }

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs, const CheckpointOptions& opts) {
  std::vector<Tensor> edges = inputs;
  edges.insert(edges.end(), opts.params.begin(), opts.params.end());
  if (!needs_grad(edges)) {
    detail::KeptOutputsScope none(nullptr);  // an enclosing selective region must not see these calls
    return fn(inputs);
  }
  for (const Tensor& t : opts.captured)
    LT_CHECK(!t.defined() || !t.requires_grad(), std::string(opts.name) + ": a captured tensor requires grad",
             "captured tensors (masks) get no gradient from the recomputation",
             "pass it as an input, or detach it");

  const std::vector<uint64_t> offsets = generator_offsets(opts.generators);
  std::vector<Tensor> detached;  // the region's node must not keep the inputs' graphs alive twice
  std::vector<bool> need;
  for (const Tensor& x : inputs) {
    detached.push_back(x.defined() ? x.detach() : Tensor());
    need.push_back(x.defined() && x.requires_grad());
  }
  // The selective policy's kept results live as long as this region's node (released after its
  // backward unless the graph is retained).
  std::shared_ptr<detail::KeptOutputs> kept;
  if (opts.keep_matmul_outputs) kept = std::make_shared<detail::KeptOutputs>();
  Tensor out;
  {
    NoGradGuard no_grad;
    detail::KeptOutputsScope scope(kept.get());
    out = fn(detached);
  }
  // Saved after the forward (pack hooks see the inputs in the order the region got them, after
  // whatever the region's kept matmul results were packed with).
  std::vector<SavedTensor> saved(detached.begin(), detached.end());
  detached.clear();
  // A fresh handle: fn may return one of its inputs (an identity region), whose impl must not
  // gain this node as its grad_fn.
  out = out.detach();
  std::vector<Generator*> gens = opts.generators;
  std::vector<Tensor> captured = opts.captured;
  ForwardContext context = forward_context();
  const size_t n_params = opts.params.size();
  // Routed: the region's node returns its parameters' gradients like an input's, so the outer
  // engine sums them over every use (every micro-batch) before their AccumulateGrad runs once.
  std::shared_ptr<const std::vector<Tensor>> routed;
  if (t_route_param_grads > 0) routed = std::make_shared<const std::vector<Tensor>>(opts.params);
  const void* output_of = opts.output_unread_module;
  record(out, opts.name, edges,
         [fn, saved, need, gens, offsets, routed, n_params, captured, kept, context, output_of](const Tensor& g) {
           return recompute_backward(fn, saved, need, gens, offsets, routed.get(), n_params, kept.get(), context,
                                     output_of, g);
  });
  return out;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x, const CheckpointOptions& opts) {
  return checkpoint([fn](const std::vector<Tensor>& xs) { return fn(xs[0]); }, std::vector<Tensor>{x}, opts);
}

}  // namespace lt
