// The backward engine: counts dependencies from the root, then runs nodes in an order where
// every node's incoming gradient is complete. Saved tensors are released as each node runs and
// intermediate gradients are dropped as soon as they are consumed, so memory falls during backward.
#include <unordered_map>

#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"

namespace lt {

namespace {

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
    Tensor grad = g;
    if (grad.dtype() != param.dtype() || grad.shape() != param.shape()) {
      MemoryCategoryScope s(Category::Gradient);
      grad = cast(sum_to(grad, param.shape()), param.dtype());
    }
    if (!impl->grad) {
      // Steal the incoming buffer when nobody else holds it; it changes owner, not place.
      bool sole = grad.impl_ptr().use_count() <= 2 && grad.storage().use_count() == 1 && grad.is_contiguous() &&
                  grad.offset() == 0 && grad.storage()->nbytes() == grad.nbytes();
      if (sole) {
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
    auto acc = std::make_shared<AccumulateGrad>();
    acc->name = "AccumulateGrad";
    acc->leaf = t.impl_ptr();
    impl->grad_accumulator = acc;
  }
  return impl->grad_accumulator;
}

}  // namespace

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
  for (const Tensor& t : inputs) node->next.push_back(edge_for(t));
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
}

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  LT_CHECK(root.requires_grad(), "backward() on a tensor that does not require grad",
           "no input of the computation requires grad, or it ran under no-grad/inference mode",
           "set requires_grad on the parameters and run the forward with grad enabled");
  Tensor g = grad;
  if (!g.defined()) {
    LT_CHECK(root.numel() == 1, "backward() without a gradient needs a scalar",
             "the root has shape " + shape_str(root.shape()), "reduce it to a scalar or pass a gradient");
    MemoryCategoryScope s(Category::Activation);
    g = ones(root.shape(), root.dtype(), root.device());
  }
  std::shared_ptr<Node> start = edge_for(root);
  NoGradGuard no_grad;  // backward itself is not differentiated
  MemoryCategoryScope scope(Category::Activation);

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
  pending[start.get()] = g;
  g = Tensor();
  std::vector<std::shared_ptr<Node>> ready{start};
  while (!ready.empty()) {
    std::shared_ptr<Node> n = std::move(ready.back());
    ready.pop_back();
    std::vector<Tensor> outs;
    auto it = pending.find(n.get());
    if (it != pending.end()) {
      Tensor gin = std::move(it->second);
      pending.erase(it);
      OpNameScope op(n->name);
      outs = n->apply(gin);
    } else if (n->apply_without_grad) {
      OpNameScope op(n->name);
      outs = n->apply(Tensor());
    }
    // A node that received no gradient still releases its children's dependency counts.
    if (!retain_graph) n->release();
    for (size_t i = 0; i < n->next.size(); ++i) {
      const auto& nx = n->next[i];
      if (!nx) continue;
      if (i < outs.size() && outs[i].defined()) {
        auto [slot, fresh] = pending.try_emplace(nx.get(), std::move(outs[i]));
        if (!fresh) slot->second = add(slot->second, outs[i]);
        outs[i] = Tensor();
      }
      if (--deps[nx.get()] == 0) ready.push_back(nx);
    }
  }
}

void zero_grad(const std::vector<Tensor>& params, bool set_to_none) {
  for (const Tensor& p : params) {
    if (!p.impl()->grad) continue;
    if (set_to_none) p.impl()->grad.reset();
    else fill_(Tensor(p.impl()->grad), 0.0);
  }
}

}  // namespace lt
