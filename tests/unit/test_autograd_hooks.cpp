// The autograd seams sharding, offload and 4-bit weights build on: saved tensors go through
// pack/unpack hooks (once each, pack in forward order, unpack in backward order, innermost scope
// only), hooks that move every saved tensor elsewhere change no gradient bit, nodes run in
// decreasing sequence number, node hooks run around apply, and a gradient of the wrong shape or
// dtype is an error naming the op.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "checkpoint_helpers.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"

using namespace lt;
using namespace ckpt_test;

namespace {

Tensor leaf(std::vector<float> v) {
  Tensor t = from_vector(v, {int64_t(v.size())});
  t.set_requires_grad(true);
  return t;
}

// Pack keeps a clone in this store (another "place") and returns its index; unpack hands the
// clone back. Both log the indices, so tests see the order and count of calls.
struct CloneStore {
  std::vector<Tensor> kept;
  std::vector<size_t> packed, unpacked;
  PackHook pack() {
    return [this](const Tensor& t) -> PackedTensor {
      kept.push_back(t.clone());
      packed.push_back(kept.size() - 1);
      return kept.size() - 1;
    };
  }
  UnpackHook unpack() {
    return [this](const PackedTensor& p) {
      const size_t i = std::any_cast<size_t>(p);
      unpacked.push_back(i);
      return kept.at(i);
    };
  }
};

// Pack copies the values into host vectors, outside every allocator (so the saved tensor's
// block is freed, as an offload to pinned memory would); unpack allocates a fresh tensor.
struct HostStore {
  struct Entry {
    std::vector<double> values;
    std::vector<int64_t> ints;
    Shape shape;
    DType dtype;
  };
  std::vector<Entry> kept;
  size_t unpacks = 0;
  PackHook pack() {
    return [this](const Tensor& t) -> PackedTensor {
      Entry e{{}, {}, t.shape(), t.dtype()};
      if (is_floating(t.dtype())) e.values = t.to_double_vector();
      else e.ints = t.to_int_vector();
      kept.push_back(std::move(e));
      return kept.size() - 1;
    };
  }
  UnpackHook unpack() {
    return [this](const PackedTensor& p) {
      const Entry& e = kept.at(std::any_cast<size_t>(p));
      ++unpacks;
      return is_floating(e.dtype) ? from_vector(e.values, e.shape, e.dtype) : from_ints(e.ints, e.shape, e.dtype);
    };
  }
};

using Grads = std::vector<std::pair<std::string, std::vector<uint32_t>>>;

Grads gpt_grads(const std::string& spec, CloneStore* store) {
  models::GPT2 m(gpt2_tiny_dropout(), {.seed = 3});
  nn::apply_checkpointing(m, spec);
  Tensor loss;
  {
    std::optional<SavedTensorHooksScope> hooks;
    if (store) hooks.emplace(store->pack(), store->unpack());
    loss = m.loss(ids(2, 16, 256, 10), ids(2, 16, 256, 20));
  }
  loss.backward();  // outside the scope: each saved tensor is unpacked by the pair that packed it
  return grad_bits(m);
}

Grads vit_grads(const std::string& spec, CloneStore* store) {
  models::ViTConfig c = vit_tiny_dropout();
  models::ViT m(c, {.seed = 4});
  randomize_vit_head(m);
  nn::apply_checkpointing(m, spec);
  Tensor loss;
  {
    std::optional<SavedTensorHooksScope> hooks;
    if (store) hooks.emplace(store->pack(), store->unpack());
    loss = m.loss(images(3, c, 30), labels(3, 10, 40));
  }
  loss.backward();
  return grad_bits(m);
}

void expect_same(const Grads& ref, const Grads& got, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(ref[i].first, got[i].first);
    ASSERT_FALSE(ref[i].second.empty()) << ref[i].first << " has no gradient";
    ASSERT_TRUE(std::any_of(ref[i].second.begin(), ref[i].second.end(), [](uint32_t b) { return (b << 1) != 0; }))
        << ref[i].first << ": an all-zero gradient would make the comparison vacuous";
    EXPECT_TRUE(ref[i].second == got[i].second) << what << ": gradient of " << ref[i].first << " differs";
  }
}

// Each saved tensor packed once and unpacked once (no index twice, none left out).
void expect_each_once(const CloneStore& s, const std::string& what) {
  ASSERT_GT(s.packed.size(), 0u) << what << ": the hooks were never called";
  std::vector<size_t> u = s.unpacked;
  std::sort(u.begin(), u.end());
  EXPECT_EQ(u, s.packed) << what << ": " << s.packed.size() << " packs, " << s.unpacked.size() << " unpacks";
}

// Every node reachable from t's grad_fn, each once.
std::vector<Node*> graph_nodes(const Tensor& t) {
  std::vector<Node*> out, stack{t.grad_fn().get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (std::find(out.begin(), out.end(), n) != out.end()) continue;
    out.push_back(n);
    for (auto& nx : n->next)
      if (nx) stack.push_back(nx.get());
  }
  return out;
}

// The names of the nodes of t's graph in the order backward runs them.
std::vector<std::string> run_order(const Tensor& t) {
  std::vector<std::string> order;
  for (Node* n : graph_nodes(t)) n->register_pre_hook([&order](Node& node, Tensor&) { order.push_back(node.name); });
  t.backward();
  return order;
}

}  // namespace

TEST(AutogradHooks, PackInForwardOrderUnpackInBackwardOrder) {
  Tensor x = leaf({0.1f, 0.2f, 0.3f});
  CloneStore s;
  Tensor y;
  {
    SavedTensorHooksScope hooks(s.pack(), s.unpack());
    y = sum_all(sigmoid(tanh(exp(x))));  // each unary op saves its input; sum saves nothing
  }
  ASSERT_EQ(s.packed, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(s.kept[0].to_float_vector(), x.to_float_vector());  // exp saved x
  EXPECT_TRUE(s.unpacked.empty()) << "unpack runs only when the backward needs the tensor";
  y.backward();
  EXPECT_EQ(s.unpacked, (std::vector<size_t>{2, 1, 0}));
}

// A packed value is destroyed as soon as its node has run (the memory behaviour of a saved
// tensor), not when the graph goes: when node k unpacks, node k+1's packed value is gone.
TEST(AutogradHooks, PackedValuesGoAsSoonAsTheirNodeHasRun) {
  struct Tracked {
    size_t index;
    std::vector<size_t>* destroyed;
    Tensor t;
    ~Tracked() { destroyed->push_back(index); }
  };
  std::vector<size_t> destroyed, gone_at_unpack;
  size_t packs = 0;
  Tensor x = leaf({0.1f, 0.2f});
  Tensor y;
  {
    SavedTensorHooksScope hooks(
        [&](const Tensor& t) -> PackedTensor { return std::shared_ptr<Tracked>(new Tracked{packs++, &destroyed, t}); },
        [&](const PackedTensor& p) {
          gone_at_unpack.push_back(destroyed.size());
          return std::any_cast<std::shared_ptr<Tracked>>(p)->t;
        });
    y = sum_all(sigmoid(tanh(exp(x))));
  }
  EXPECT_TRUE(destroyed.empty());
  y.backward();
  EXPECT_EQ(destroyed, (std::vector<size_t>{2, 1, 0}));
  EXPECT_EQ(gone_at_unpack, (std::vector<size_t>{0, 1, 2}));
}

TEST(AutogradHooks, LinearPacksItsOperandsOnceEach) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6});
  Tensor x2 = reshape(x, {2, 3});
  Tensor w = from_vector(std::vector<float>{1, 0, -1, 2, 1, 0.5f}, {2, 3});
  w.set_requires_grad(true);
  CloneStore s;
  Tensor y;
  {
    SavedTensorHooksScope hooks(s.pack(), s.unpack());
    y = sum_all(gelu(linear(x2, w, Tensor())));
  }
  // linear saves x (for dW) then W (for dx); gelu saves its input.
  ASSERT_EQ(s.packed, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(s.kept[1].to_float_vector(), w.to_float_vector());
  y.backward();
  EXPECT_EQ(s.unpacked, (std::vector<size_t>{2, 0, 1}));  // gelu's node first, then linear's (x, W)
}

TEST(AutogradHooks, NothingIsPackedWhenNothingIsRecorded) {
  Tensor x = leaf({1, 2, 3});
  Tensor frozen = from_vector(std::vector<float>{1, 2, 3}, {3});
  CloneStore s;
  SavedTensorHooksScope hooks(s.pack(), s.unpack());
  {
    NoGradGuard ng;
    sigmoid(mul(x, x));
  }
  sigmoid(mul(frozen, frozen));  // grad mode on, but no input requires grad
  EXPECT_TRUE(s.packed.empty());
  sigmoid(x);
  EXPECT_EQ(s.packed.size(), 1u);
}

TEST(AutogradHooks, NestedScopesUseTheInnermostPairOnly) {
  Tensor x = leaf({0.5f, -0.5f});
  CloneStore outer, inner;
  Tensor y;
  {
    SavedTensorHooksScope a(outer.pack(), outer.unpack());
    Tensor e = exp(x);
    Tensor t;
    {
      SavedTensorHooksScope b(inner.pack(), inner.unpack());
      t = tanh(e);
    }
    y = sum_all(sigmoid(t));
  }
  EXPECT_EQ(outer.packed.size(), 2u);  // exp's x and sigmoid's t
  EXPECT_EQ(inner.packed.size(), 1u);  // tanh's e
  {
    // Scopes open at backward time do not matter: unpack is the one paired with the pack.
    CloneStore other;
    SavedTensorHooksScope c(other.pack(), other.unpack());
    y.backward();
    EXPECT_TRUE(other.unpacked.empty());
  }
  EXPECT_EQ(outer.unpacked, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(inner.unpacked, (std::vector<size_t>{0}));
  std::vector<float> with_hooks = x.grad().to_float_vector();
  zero_grad({x});
  sum_all(sigmoid(tanh(exp(x)))).backward();
  EXPECT_EQ(with_hooks, x.grad().to_float_vector());
}

TEST(AutogradHooks, HooksRunWithoutGradAndWithoutHooks) {
  Tensor x = leaf({1, 2});
  int packs = 0;
  SavedTensorHooksScope hooks(
      [&](const Tensor& t) -> PackedTensor {
        ++packs;
        EXPECT_FALSE(grad_enabled());
        EXPECT_FALSE(saved_tensor_hooks_active());
        return mul(t, t).requires_grad() ? Tensor() : t;  // would save (and recurse) if recorded
      },
      [](const PackedTensor& p) { return std::any_cast<Tensor>(p); });
  Tensor y = sum_all(exp(x));
  EXPECT_EQ(packs, 1);
  EXPECT_TRUE(saved_tensor_hooks_active());
  y.backward();
  EXPECT_EQ(x.grad().to_float_vector(), exp(x).to_float_vector());
}

TEST(AutogradHooks, RetainedGraphUnpacksAgain) {
  Tensor x = leaf({0.3f});
  CloneStore s;
  Tensor y;
  {
    SavedTensorHooksScope hooks(s.pack(), s.unpack());
    y = sum_all(tanh(x));
  }
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(s.packed, (std::vector<size_t>{0}));
  EXPECT_EQ(s.unpacked, (std::vector<size_t>{0, 0}));
}

TEST(AutogradHooks, UnpackMustGiveBackTheSavedShapeAndDtype) {
  Tensor x = leaf({1, 2, 3, 4});
  for (int wrong = 0; wrong < 3; ++wrong) {
    Tensor y;
    {
      SavedTensorHooksScope hooks([](const Tensor& t) -> PackedTensor { return t; },
                                  [wrong](const PackedTensor& p) {
                                    Tensor t = std::any_cast<Tensor>(p);
                                    if (wrong == 0) return reshape(t, {2, 2});
                                    if (wrong == 1) return cast(t, DType::F64);
                                    return Tensor();
                                  });
      y = sum_all(exp(x));
    }
    try {
      y.backward();
      ADD_FAILURE() << "a wrong unpack was accepted (" << wrong << ")";
    } catch (const Error& e) {
      const std::string msg = e.what_part();
      EXPECT_NE(msg.find("saved tensor hooks"), std::string::npos) << msg;
      EXPECT_NE(msg.find("f32 [4]"), std::string::npos) << msg;  // the saved tensor
      if (wrong == 0) EXPECT_NE(msg.find("f32 [2, 2]"), std::string::npos) << msg;
      if (wrong == 1) EXPECT_NE(msg.find("f64 [4]"), std::string::npos) << msg;
    }
  }
}

TEST(AutogradHooks, MovedSavedTensorsGiveBitwiseEqualGradientsGpt2) {
  const Grads ref = gpt_grads("none", nullptr);
  for (const char* spec : {"none", "blocks", "selective"}) {
    CloneStore s;
    expect_same(ref, gpt_grads(spec, &s), std::string("gpt2-tiny, hooks, checkpoint ") + spec);
    expect_each_once(s, spec);
  }
}

TEST(AutogradHooks, MovedSavedTensorsGiveBitwiseEqualGradientsVit) {
  const Grads ref = vit_grads("none", nullptr);
  for (const char* spec : {"none", "blocks", "selective"}) {
    CloneStore s;
    expect_same(ref, vit_grads(spec, &s), std::string("vit-tiny, hooks, checkpoint ") + spec);
    expect_each_once(s, spec);
  }
}

// Every tensor a closure keeps goes through the hooks: with hooks that copy saved tensors out
// of the allocator, nothing but the loss stays allocated between the forward and the backward
// (without hooks, every block's activations do). And the gradients do not change.
TEST(AutogradHooks, OffloadingHooksLeaveNoActivationAllocated) {
  Allocator& a = allocator_for(Device::cpu());
  auto act = [&] { return a.stats().category[int(Category::Activation)].current; };
  for (const char* spec : {"none", "selective"}) {
    models::GPT2 ref_model(gpt2_tiny_dropout(), {.seed = 3});
    models::GPT2 m(gpt2_tiny_dropout(), {.seed = 3});
    nn::apply_checkpointing(ref_model, spec);
    nn::apply_checkpointing(m, spec);
    Tensor x = ids(2, 16, 256, 10), y = ids(2, 16, 256, 20);
    MemoryCategoryScope scope(Category::Activation);
    const int64_t before = act();
    Tensor ref_loss = ref_model.loss(x, y);
    const int64_t kept_without = act() - before;
    HostStore store;
    Tensor loss;
    {
      SavedTensorHooksScope hooks(store.pack(), store.unpack());
      loss = m.loss(x, y);
    }
    const int64_t kept_with = act() - before - kept_without;
    EXPECT_GT(kept_without, 100 * round_allocation(1)) << spec;
    EXPECT_EQ(kept_with, round_allocation(loss.nbytes())) << spec << ": only the loss (one block) should stay";
    ref_loss.backward();
    loss.backward();
    EXPECT_EQ(store.unpacks, store.kept.size()) << spec;
    expect_same(grad_bits(ref_model), grad_bits(m), std::string("offloaded, checkpoint ") + spec);
  }
}

// Diamond: a = exp(x); b = tanh(a); c = sigmoid(a); d = c + b. After add, both b's and c's nodes
// are ready: c's was recorded last, so it runs first, whatever order add lists its inputs in.
TEST(AutogradHooks, BackwardRunsInDecreasingSequenceNumber) {
  for (bool c_first : {true, false}) {
    Tensor x = leaf({0.2f, 0.4f});
    Tensor a = exp(x);
    Tensor b = tanh(a);
    Tensor c = sigmoid(a);
    ASSERT_LT(a.grad_fn()->sequence_nr, b.grad_fn()->sequence_nr);
    ASSERT_LT(b.grad_fn()->sequence_nr, c.grad_fn()->sequence_nr);
    Tensor d = sum_all(c_first ? add(c, b) : add(b, c));
    std::vector<std::string> order = run_order(d);
    ASSERT_GE(order.size(), 5u);
    const std::vector<std::string> tail(order.end() - 5, order.end());
    EXPECT_EQ(tail, (std::vector<std::string>{"add", "sigmoid", "tanh", "exp", "AccumulateGrad"})) << c_first;
  }
}

// A leaf's AccumulateGrad runs as soon as its gradient is complete, before older nodes.
TEST(AutogradHooks, AccumulateGradRunsAsSoonAsReady) {
  Tensor x = leaf({0.2f, 0.4f});
  Tensor w = leaf({3, 4});
  Tensor h = tanh(exp(x));
  Tensor y = sum_all(mul(w, h));  // w's edge first: a stack would run tanh's node before it
  std::vector<std::string> order = run_order(y);
  auto at = std::find(order.begin(), order.end(), "mul");
  ASSERT_NE(at, order.end());
  ASSERT_GE(order.end() - at, 5);
  EXPECT_EQ(std::vector<std::string>(at, at + 5),
            (std::vector<std::string>{"mul", "AccumulateGrad", "tanh", "exp", "AccumulateGrad"}));
}

TEST(AutogradHooks, NodeHooksRunAroundApplyAndMayReplaceGradients) {
  Tensor x = leaf({1, 2});
  Tensor y = scale(x, 3.0);
  std::vector<std::string> events;
  y.grad_fn()->register_pre_hook([&](Node& n, Tensor& g) {
    events.push_back(std::string("pre ") + n.name);
    g = scale(g, 2.0);  // the node sees the doubled gradient
  });
  y.grad_fn()->register_post_hook([&](Node& n, std::vector<Tensor>& grads, const Tensor& g) {
    events.push_back(std::string("post ") + n.name);
    ASSERT_EQ(grads.size(), 1u);
    EXPECT_EQ(g.to_float_vector(), (std::vector<float>{2, 2}));
    EXPECT_EQ(grads[0].to_float_vector(), (std::vector<float>{6, 6}));
    grads[0] = add_scalar(grads[0], 1.0);
  });
  sum_all(y).backward();
  EXPECT_EQ(events, (std::vector<std::string>{"pre scale", "post scale"}));
  EXPECT_EQ(x.grad().to_float_vector(), (std::vector<float>{7, 7}));
}

TEST(AutogradHooks, AGradientOfTheWrongShapeOrDtypeIsAnError) {
  Tensor x = leaf({1, 2, 3, 4});
  auto expect_error = [](const Tensor& root, const std::vector<std::string>& parts) {
    try {
      root.backward();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string msg = e.what_part();
      for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
  };
  for (int wrong = 0; wrong < 2; ++wrong) {
    Tensor out = x.detach().clone();
    record(out, "bad_op", {x}, [wrong](const Tensor& g) {
      return std::vector<Tensor>{wrong == 0 ? reshape(g, {2, 2}) : cast(g, DType::F64)};
    });
    expect_error(sum_all(out), {"bad_op", wrong == 0 ? "f32 [2, 2]" : "f64 [4]", "f32 [4]"});
    EXPECT_FALSE(x.grad().defined()) << "nothing was accumulated";
  }
  // A hook that replaces a gradient is checked the same way.
  Tensor y = exp(x);
  y.grad_fn()->register_post_hook([](Node&, std::vector<Tensor>& grads, const Tensor&) { grads[0] = sum_all(grads[0]); });
  expect_error(sum_all(y), {"exp", "f32 []", "f32 [4]"});
  // And the root's gradient.
  try {
    exp(x).backward(from_vector(std::vector<float>{1, 1}, {2}));
    ADD_FAILURE() << "a root gradient of the wrong shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what_part()).find("f32 [2]"), std::string::npos) << e.what_part();
  }
}

// Two lanes (micro-batches) of the same chain, numbered by InterleavedSequence: one backward over
// both runs depth by depth, lane 0 first at each depth, and the shared weight's AccumulateGrad runs
// once, with the sum of both lanes' gradients (lane 0's first), as accumulation would give it.
TEST(AutogradHooks, InterleavedLanesRunDepthByDepth) {
  Tensor w = leaf({0.5f, -1.5f});
  Tensor xs[2] = {from_vector(std::vector<float>{0.1f, 0.2f}, {2}), from_vector(std::vector<float>{0.3f, -0.4f}, {2})};
  std::vector<Tensor> roots;
  {
    InterleavedSequence lanes(2);
    for (int i = 0; i < 2; ++i) {
      lanes.begin_lane(i);
      roots.push_back(sum_all(sigmoid(tanh(mul(w, xs[i])))));
      lanes.end_lane();
    }
  }
  Tensor after = exp(w);  // numbered above every lane's node
  EXPECT_GT(after.grad_fn()->sequence_nr, roots[1].grad_fn()->sequence_nr);
  EXPECT_GT(roots[0].grad_fn()->sequence_nr, roots[1].grad_fn()->sequence_nr);  // lane 0 first at equal depth
  std::vector<std::string> order;
  int accumulations = 0;
  w.register_post_accumulate_grad_hook([&](Tensor&) { ++accumulations; });
  for (int i = 0; i < 2; ++i)
    for (Node* n : graph_nodes(roots[size_t(i)])) {
      const bool acc = n->name == std::string("AccumulateGrad");
      if (acc && i == 1) continue;  // shared by both lanes: one hook
      n->register_pre_hook([&order, acc, i](Node& node, Tensor&) {
        order.push_back(std::string(node.name) + (acc ? "" : "@" + std::to_string(i)));
      });
    }
  run_backward(roots);
  // sum_all records a sum_to and a reshape.
  EXPECT_EQ(order, (std::vector<std::string>{"reshape@0", "reshape@1", "sum_to@0", "sum_to@1", "sigmoid@0", "sigmoid@1", "tanh@0", "tanh@1",
                                             "mul@0", "mul@1", "AccumulateGrad"}));
  EXPECT_EQ(accumulations, 1);

  // The same two lanes one backward after the other: the gradient bits are the same.
  Tensor w2 = leaf({0.5f, -1.5f});
  for (int i = 0; i < 2; ++i) sum_all(sigmoid(tanh(mul(w2, xs[i])))).backward();
  EXPECT_EQ(bits(w.grad()), bits(w2.grad()));
}

TEST(AutogradHooks, BackwardOverRootsChecksThem) {
  Tensor w = leaf({1, 2});
  Tensor v = mul(w, w);  // not a scalar
  EXPECT_THROW(run_backward(std::vector<Tensor>{v}), Error);
  EXPECT_THROW(run_backward(std::vector<Tensor>{}), Error);
  EXPECT_THROW(run_backward(std::vector<Tensor>{from_vector(std::vector<float>{1}, {1})}), Error);
}
