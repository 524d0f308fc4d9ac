// The backward engine: counts dependencies from the root, then runs nodes in an order where
// every node's incoming gradient is complete: among the ready ones, the highest sequence number
// first (the reverse of the forward's recording order, so the order depends only on the graph).
// Saved tensors are released as each node runs and intermediate gradients are dropped as soon
// as they are consumed, so memory falls during backward.
#include <algorithm>
#include <queue>
#include <unordered_map>

#include "leantrain/autograd.h"
#include "autograd/gradient_parts.h"
#include "autograd/routed_params.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"

namespace lt {

namespace detail {
namespace {
thread_local int t_refuse_leaf_accumulation = 0;
}  // namespace
bool leaf_accumulation_refused() { return t_refuse_leaf_accumulation > 0; }
RefuseLeafAccumulation::RefuseLeafAccumulation() { ++t_refuse_leaf_accumulation; }
RefuseLeafAccumulation::~RefuseLeafAccumulation() { --t_refuse_leaf_accumulation; }
}  // namespace detail

namespace {

thread_local bool t_unnumbered = false;
struct UnnumberedScope {
  bool prev = t_unnumbered;
  UnnumberedScope() { t_unnumbered = true; }
  ~UnnumberedScope() { t_unnumbered = prev; }
};

// Whether `t` is held by at most `handles` handles (the caller's own included) and owns its whole
// buffer alone, so taking it over or adding into it in place changes nothing else.
bool sole_owner(const Tensor& t, long handles = 1) {
  return t.impl_ptr().use_count() <= handles && t.storage().use_count() == 1 && t.is_contiguous() &&
         t.offset() == 0 && t.storage()->nbytes() == t.nbytes();
}

thread_local std::vector<std::weak_ptr<Storage>> t_gradient_parts;

}  // namespace

namespace detail {
void offer_gradient_parts(const Tensor& whole) {
  if (!sole_owner(whole)) return;  // someone else holds it: its parts are copied, as any shared gradient
  auto& v = t_gradient_parts;
  v.erase(std::remove_if(v.begin(), v.end(), [](const std::weak_ptr<Storage>& w) { return w.expired(); }), v.end());
  v.push_back(whole.storage());
}
bool is_gradient_part(const Tensor& t) {
  const std::shared_ptr<Storage>& s = t.storage();
  if (!s) return false;
  for (const std::weak_ptr<Storage>& w : t_gradient_parts)
    if (!w.owner_before(s) && !s.owner_before(w)) return true;
  return false;
}
}  // namespace detail

namespace {

std::string describe(const Tensor& t) { return std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()); }
std::string describe(const InputMeta& m) { return std::string(dtype_name(m.dtype)) + " " + shape_str(m.shape); }

struct LambdaNode final : Node {
  BackwardFn fn;
  std::vector<Tensor> apply(const Tensor& g) override {
    LT_CHECK(fn, std::string("backward through '") + name + "' a second time",
             "its saved tensors were freed by the first backward", "pass retain_graph=true to the first backward");
    return fn(g);
  }
  void release() override { fn = nullptr; }
};

// Adds an incoming gradient into a leaf's .grad (+=), then runs its hooks.
struct AccumulateGrad final : Node {
  std::weak_ptr<TensorImpl> leaf;
  std::vector<Tensor> apply(const Tensor& g) override {
    auto impl = leaf.lock();
    if (!impl) return {};
    Tensor param(impl);
    LT_CHECK(!detail::leaf_accumulation_refused(),
             "a checkpointed region read a parameter that is not among its own",
             "a breadth-first step (--fused-step with --micro-batch) hands a region's parameter gradients to the "
             "engine whole, and a parameter from outside the region would be updated from one micro-batch",
             "checkpoint a module that holds every parameter its forward uses, or drop --micro-batch");
    Tensor grad = g;
    // The producer's edge was checked; this catches a pre-hook that replaced the gradient.
    LT_CHECK(grad.shape() == param.shape() && grad.dtype() == param.dtype(),
             "backward: a gradient of " + describe(grad) + " reached a leaf of " + describe(param),
             "a gradient must have its input's shape and dtype (the engine neither sums nor casts it)",
             "fix the node hook that replaced the gradient");
    if (!impl->grad) {
      // Steal the incoming buffer when nobody else holds it; it changes owner, not place.
      // `grad` and the engine's `g`; or a block of a stacked weight's gradient (gradient_parts.h),
      // kept where it is.
      if (sole_owner(grad, 2) || (grad.is_contiguous() && detail::is_gradient_part(grad))) {
        if (grad.storage()->allocator) grad.storage()->allocator->retag(grad.storage()->block, Category::Gradient);
        impl->grad = grad.detach().impl_ptr();
      } else {
        MemoryCategoryScope s(Category::Gradient);
        impl->grad = grad.clone().impl_ptr();
      }
    } else {
      add_(Tensor(impl->grad), grad);
    }
    for (auto& h : impl->post_accumulate_grad_hooks) h(param);
    return {};
  }
};

std::shared_ptr<Node> edge_for(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  TensorImpl* impl = t.impl();
  if (impl->grad_fn) return impl->grad_fn;
  if (!impl->grad_accumulator) {
    std::shared_ptr<AccumulateGrad> acc;
    {
      UnnumberedScope unnumbered;  // an interleaved forward must not count it (it exists from lane 0 on)
      acc = std::make_shared<AccumulateGrad>();
    }
    acc->name = "AccumulateGrad";
    acc->sequence_nr = kAccumulateGradSequenceNr;
    acc->leaf = t.impl_ptr();
    impl->grad_accumulator = acc;
  }
  return impl->grad_accumulator;
}

// A gradient is never reshaped or cast on its way: a mismatch is a bug in the node (or in a
// hook that replaced its gradients), reported where it happens.
void check_gradients(const Node& n, const std::vector<Tensor>& grads) {
  LT_CHECK(grads.size() <= n.next.size(),
           std::string("backward of '") + n.name + "' returned " + std::to_string(grads.size()) + " gradients",
           "it has " + std::to_string(n.next.size()) + " inputs", "return one gradient (or none) per input");
  LT_ASSERT(grads.empty() || n.input_meta.size() == n.next.size());  // a node made by hand must fill both
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined() || !n.next[i]) continue;
    const InputMeta& m = n.input_meta[i];
    LT_CHECK(grads[i].shape() == m.shape && grads[i].dtype() == m.dtype,
             std::string("backward of '") + n.name + "' returned a gradient of " + describe(grads[i]) + " for input " +
                 std::to_string(i) + ", which is " + describe(m),
             "a gradient must have its input's shape and dtype (the engine neither sums nor casts it)",
             "fix the op's backward (or the node hook that replaced the gradient)");
  }
}

// The ready set: the highest sequence number first; among equals (AccumulateGrad nodes), the
// one made ready last, as a stack would.
struct ReadyNode {
  std::shared_ptr<Node> node;
  uint64_t order;
};
struct RunsLater {
  bool operator()(const ReadyNode& a, const ReadyNode& b) const {
    if (a.node->sequence_nr != b.node->sequence_nr) return a.node->sequence_nr < b.node->sequence_nr;
    return a.order < b.order;
  }
};

}  // namespace

namespace {
thread_local uint64_t t_next_sequence_nr = 0;
thread_local InterleavedSequence* t_interleaved = nullptr;
}  // namespace

uint64_t next_sequence_nr() {
  if (t_unnumbered) return 0;
  if (InterleavedSequence* s = t_interleaved) {
    // Depth-major, lane 0 highest among equals: backward runs lane 0's node k first.
    const uint64_t n = s->base_ + s->depth_ * uint64_t(s->lanes_) + uint64_t(s->lanes_ - 1 - s->lane_);
    s->max_depth_ = std::max(s->max_depth_, ++s->depth_);
    return n;
  }
  return t_next_sequence_nr++;
}

InterleavedSequence::InterleavedSequence(int64_t lanes) : base_(t_next_sequence_nr), lanes_(lanes) {
  LT_ASSERT(lanes >= 1 && t_interleaved == nullptr);
}

InterleavedSequence::~InterleavedSequence() {
  if (t_interleaved == this) t_interleaved = nullptr;
  t_next_sequence_nr = base_ + max_depth_ * uint64_t(lanes_);
}

void InterleavedSequence::begin_lane(int64_t lane) {
  LT_ASSERT(lane >= 0 && lane < lanes_ && t_interleaved == nullptr);
  lane_ = lane;
  depth_ = 0;
  t_interleaved = this;
}

void InterleavedSequence::end_lane() { t_interleaved = nullptr; }

bool needs_grad(std::initializer_list<Tensor> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn fn) {
  if (!needs_grad(inputs)) return;
  auto node = std::make_shared<LambdaNode>();
  node->name = name;
  node->fn = std::move(fn);
  node->next.reserve(inputs.size());
  node->input_meta.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    node->next.push_back(edge_for(t));
    node->input_meta.push_back(t.defined() ? InputMeta{t.shape(), t.dtype()} : InputMeta{});
  }
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
}

Tensor past_f32_cast(const Tensor& t) {
  if (!t.defined() || !t.impl()->grad_fn || (t.dtype() != DType::BF16 && t.dtype() != DType::F16)) return Tensor();
  const Node& cast = *t.impl()->grad_fn;
  if (!cast.casts_from_f32 || cast.next.size() != 1 || !cast.next[0] || cast.input_meta[0].dtype != DType::F32 ||
      cast.input_meta[0].shape != t.shape() || !cast.pre_hooks.empty() || !cast.post_hooks.empty())
    return Tensor();
  // An op recorded before already consumes the cast (its node holds the cast's): their
  // gradients would meet at the parameter in f32, the first held until the last arrives at
  // twice its 16-bit bytes; this consumer keeps the cast then.
  if (t.impl()->grad_fn.use_count() > 1) return Tensor();
  // record() takes a tensor's edge from its grad_fn: the stand-in's is the cast's own edge.
  Tensor stand_in = tensor_over(nullptr, 0, t.shape(), t.strides(), DType::F32, t.device());
  stand_in.impl()->requires_grad = true;
  stand_in.impl()->grad_fn = cast.next[0];
  return stand_in;
}

namespace {
thread_local bool t_retains_graph = false;

class RetainScope {
 public:
  explicit RetainScope(bool on) : prev_(t_retains_graph) { t_retains_graph = on; }
  ~RetainScope() { t_retains_graph = prev_; }
  RetainScope(const RetainScope&) = delete;
  RetainScope& operator=(const RetainScope&) = delete;

 private:
  bool prev_;
};
}  // namespace

bool backward_retains_graph() { return t_retains_graph; }

namespace {
thread_local std::vector<Tensor> t_seeds;  // the ones backward() made, while it runs

// Marks the seeds for is_backward_seed until the scope ends (nested backwards add theirs).
class SeedScope {
 public:
  explicit SeedScope(std::vector<Tensor> seeds) : n_(seeds.size()) {
    for (Tensor& t : seeds) t_seeds.push_back(std::move(t));
  }
  ~SeedScope() { t_seeds.resize(t_seeds.size() - n_); }
  SeedScope(const SeedScope&) = delete;
  SeedScope& operator=(const SeedScope&) = delete;

 private:
  size_t n_;
};
}  // namespace

bool is_backward_seed(const Tensor& g) {
  if (!g.defined()) return false;
  for (const Tensor& s : t_seeds)
    if (s.impl() == g.impl()) return true;
  return false;
}

namespace {

// A root standing for several: hands each of them its gradient (ones).
struct RootsNode final : Node {
  std::vector<Tensor> grads;
  std::vector<Tensor> apply(const Tensor&) override { return std::move(grads); }
};

void run_graph(std::shared_ptr<Node> start, Tensor g, bool retain_graph) {
  NoGradGuard no_grad;  // backward itself is not differentiated
  MemoryCategoryScope scope(Category::Activation);
  RetainScope retains(retain_graph);  // nested (a checkpoint's recomputation) restores the outer one

  // Dependency counts: how many edges point at each node.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{start.get()};
  deps[start.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& nx : n->next) {
      if (!nx) continue;
      auto [it, inserted] = deps.try_emplace(nx.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(nx.get());
    }
  }

  std::unordered_map<Node*, Tensor> pending;
  if (g.defined()) pending[start.get()] = std::move(g);
  std::priority_queue<ReadyNode, std::vector<ReadyNode>, RunsLater> ready;
  uint64_t made_ready = 0;
  ready.push({start, made_ready++});
  while (!ready.empty()) {
    std::shared_ptr<Node> n = ready.top().node;
    ready.pop();
    std::vector<Tensor> outs;
    auto it = pending.find(n.get());
    const bool has_grad = it != pending.end();
    if (has_grad || n->apply_without_grad) {
      Tensor gin;
      if (has_grad) {
        gin = std::move(it->second);
        pending.erase(it);
      }
      OpNameScope op(n->name);
      for (auto& h : n->pre_hooks) h(*n, gin);
      outs = n->apply(gin);
      for (auto& h : n->post_hooks) h(*n, outs, gin);
      check_gradients(*n, outs);
    }
    // A node that received no gradient still releases its children's dependency counts.
    if (!retain_graph) n->release();
    for (size_t i = 0; i < n->next.size(); ++i) {
      const auto& nx = n->next[i];
      if (!nx) continue;
      if (i < outs.size() && outs[i].defined()) {
        auto [slot, fresh] = pending.try_emplace(nx.get(), std::move(outs[i]));
        if (!fresh) {
          // In place when nothing else holds the sum so far: no third buffer while adding.
          if (sole_owner(slot->second)) add_(slot->second, outs[i]);
          else slot->second = add(slot->second, outs[i]);
        }
        outs[i] = Tensor();
      }
      if (--deps[nx.get()] == 0) ready.push({nx, made_ready++});
    }
  }
}

void check_root(const Tensor& root) {
  LT_CHECK(root.requires_grad(), "backward() on a tensor that does not require grad",
           "no input of the computation requires grad, or it ran under no-grad/inference mode",
           "set requires_grad on the parameters and run the forward with grad enabled");
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  check_root(root);
  Tensor g = grad;
  if (!g.defined()) {
    LT_CHECK(root.numel() == 1, "backward() without a gradient needs a scalar",
             "the root has shape " + shape_str(root.shape()), "reduce it to a scalar or pass a gradient");
    MemoryCategoryScope s(Category::Activation);
    g = ones(root.shape(), root.dtype(), root.device());
    SeedScope seed({g});
    run_graph(edge_for(root), std::move(g), retain_graph);
    return;
  }
  LT_CHECK(g.shape() == root.shape() && g.dtype() == root.dtype(),
           "backward(): the gradient is " + describe(g) + " but the root is " + describe(root),
           "the gradient of a tensor has its shape and dtype", "pass a gradient shaped and typed like the root");
  run_graph(edge_for(root), std::move(g), retain_graph);
}

void run_backward(const std::vector<Tensor>& roots) {
  LT_CHECK(!roots.empty(), "backward() over no roots", "there is nothing to differentiate", "pass at least one loss");
  auto start = std::make_shared<RootsNode>();
  start->name = "Roots";
  start->apply_without_grad = true;  // it has no incoming gradient: it makes them
  for (const Tensor& r : roots) {
    check_root(r);
    LT_CHECK(r.numel() == 1, "backward() over several roots needs scalars",
             "a root has shape " + shape_str(r.shape()), "reduce each to a scalar");
    start->next.push_back(edge_for(r));
    start->input_meta.push_back(InputMeta{r.shape(), r.dtype()});
    MemoryCategoryScope s(Category::Activation);
    start->grads.push_back(ones(r.shape(), r.dtype(), r.device()));
  }
  SeedScope seeds(start->grads);
  run_graph(std::move(start), Tensor(), false);
}

void zero_grad(const std::vector<Tensor>& params, bool set_to_none) {
  for (const Tensor& p : params) {
    if (!p.impl()->grad) continue;
    if (set_to_none) p.impl()->grad.reset();
    else fill_(Tensor(p.impl()->grad), 0.0);
  }
}

}  // namespace lt
