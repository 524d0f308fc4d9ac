// Activation checkpointing on the module tree: which modules a --checkpoint value selects, and
// the forward wrapper that turns a module into a checkpointed region (lt::checkpoint).
#include <algorithm>
#include <charconv>
#include <regex>

#include "core/knobs.h"
#include "leantrain/autocast.h"
#include "leantrain/checkpoint.h"
#include "leantrain/nn_encoder.h"
#include "leantrain/error.h"
#include "leantrain/nn.h"

namespace lt::nn {

namespace {

const char* kModes = "none, blocks, every:K, selective, or a regular expression over module paths";

bool inside(const std::string& path, const std::string& outer) {
  return outer.empty() || (path.size() > outer.size() && path.compare(0, outer.size(), outer) == 0 &&
                           path[outer.size()] == '.');
}

std::string shown(const std::string& path) { return path.empty() ? "(root)" : path; }

}  // namespace

std::vector<Generator*> dropout_generators(Module& m) {
  std::vector<Generator*> out;
  for (auto& [path, mod] : m.named_modules())
    if (auto* r = dynamic_cast<RandomSource*>(mod)) out.push_back(&r->generator());
  return out;
}

// A family's blocks are PreNormBlocks (GPT2Block, EncoderBlock, LlamaDecoderLayer) or the BERT
// family's PostNormEncoderLayers: norms and attention and MLP are its children, whatever their types.
bool is_transformer_block(Module& m) {
  return dynamic_cast<PreNormBlock*>(&m) != nullptr || dynamic_cast<PostNormEncoderLayer*>(&m) != nullptr;
}

bool has_wrappable_forward(Module& m) {
  return dynamic_cast<UnaryModule*>(&m) || dynamic_cast<SelfAttention*>(&m) || is_transformer_block(m) ||
         dynamic_cast<AttentionCore*>(&m);
}

// The children that are not norms and have a forward of their own (a BERT layer's "attention" and
// "output" are groups without one: none of its children is listed).
std::vector<std::string> block_sublayers(Module& block) {
  std::vector<std::string> out;
  for (auto& [name, child] : block.children())
    if (!dynamic_cast<LayerNorm*>(child.get()) && !dynamic_cast<RMSNorm*>(child.get()) && has_wrappable_forward(*child))
      out.push_back(name);
  return out;
}

void checkpoint_module(Module& m, bool keep_matmul_outputs) {
  LT_CHECK(has_wrappable_forward(m), std::string("cannot checkpoint a ") + m.type_name(),
           "its forward is not a single call that a wrapper can recompute (a model root or a container)",
           "select the modules inside it, e.g. its blocks");
  CheckpointOptions opts;
  opts.generators = dropout_generators(m);
  opts.name = keep_matmul_outputs ? "selective_checkpoint" : "checkpoint";
  opts.keep_matmul_outputs = keep_matmul_outputs;
  // A wrapper already installed (say, one that gathers sharded weights) runs inside the region,
  // so the recomputation repeats it too.
  Module::ForwardWrapper inner = m.forward_wrapper();
  m.set_forward_wrapper([opts, inner](Module& self, const Tensor& x, const Module::ForwardFn& forward) {
    CheckpointOptions o = opts;
    // Now, not at install time: a feature may have swapped or frozen some since. Frozen ones get no grad.
    o.params = self.trainable_parameters();
    // The region is this module's forward: its recomputation may skip what only feeds the output
    // (Note [Unread region output]). Not under the selective policy, which replays kept results.
    if (!o.keep_matmul_outputs && knob_on("LEANTRAIN_RECOMPUTE_TAIL"))
      o.output_unread_module = static_cast<const Module*>(&self);
    // `forward` binds the other arguments (masks) by value; the copy keeps them for the backward.
    Module::ForwardFn fn = forward;
    if (inner) fn = [inner, &self, forward](const Tensor& in) { return inner(self, in, forward); };
    // The recomputation runs under the autocast of this forward, whatever is on during backward.
    const std::optional<DType> cast = autocast_dtype();
    return checkpoint([fn, cast](const Tensor& in) {
      AutocastGuard g(cast);
      return fn(in);
    }, x, o);
  }, /*only_recomputes=*/!inner);
}

CheckpointSpec parse_checkpoint_spec(const std::string& spec) {
  CheckpointSpec s;
  s.text = spec;
  if (spec.empty() || spec == "none") return s;
  if (spec == "blocks") {
    s.mode = CheckpointSpec::Mode::Blocks;
  } else if (spec == "selective") {
    s.mode = CheckpointSpec::Mode::Selective;
  } else if (spec == "auto") {
    fail("--checkpoint auto", "choosing the checkpointed modules from a memory budget needs the planner, not built yet",
         std::string("pass one of ") + kModes);
  } else if (spec.rfind("every:", 0) == 0) {
    const std::string k = spec.substr(6);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(k.data(), k.data() + k.size(), v);
    LT_CHECK(ec == std::errc() && end == k.data() + k.size() && v >= 1, "--checkpoint " + spec,
             "every:K needs a whole number K >= 1 (checkpoint blocks 0, K, 2K, ...)", "pass e.g. --checkpoint every:2");
    s.mode = CheckpointSpec::Mode::Every;
    s.every = v;
  } else {
    try {
      std::regex re(spec);
    } catch (const std::regex_error& e) {
      fail("--checkpoint '" + spec + "' is not a valid regular expression", e.what(),
           std::string("escape dots and brackets, e.g. 'transformer\\.h\\.[0-9]+'; the modes are ") + kModes);
    }
    s.mode = CheckpointSpec::Mode::Regex;
  }
  return s;
}

std::vector<std::string> select_checkpoint_modules(Module& root, const std::string& spec_text) {
  const CheckpointSpec spec = parse_checkpoint_spec(spec_text);
  if (spec.mode == CheckpointSpec::Mode::None) return {};
  auto modules = root.named_modules();
  std::vector<std::string> blocks;
  for (auto& [path, m] : modules)
    if (is_transformer_block(*m)) blocks.push_back(path);

  std::vector<std::string> picked;
  switch (spec.mode) {
    case CheckpointSpec::Mode::Blocks:
      picked = blocks;
      break;
    case CheckpointSpec::Mode::Every:
      for (size_t i = 0; i < blocks.size(); i += size_t(spec.every)) picked.push_back(blocks[i]);
      break;
    case CheckpointSpec::Mode::Selective:  // every block, keeping its matmul results (checkpoint_module)
      picked = blocks;
      break;
    case CheckpointSpec::Mode::Regex: {
      const std::regex re(spec.text);
      for (auto& [path, m] : modules) {
        if (!std::regex_match(path, re)) continue;
        LT_CHECK(has_wrappable_forward(*m),
                 "--checkpoint '" + spec.text + "' matches " + shown(path) + " (a " + m->type_name() + ")",
                 "its forward is not one call that can be recomputed (a model root or a container)",
                 "match the modules inside it instead, e.g. 'transformer\\.h\\.[0-9]+'");
        picked.push_back(path);
      }
      break;
    }
    case CheckpointSpec::Mode::None:
      break;
  }
  if (picked.empty()) {
    std::string examples;
    for (size_t i = 0; i < modules.size() && i < 6; ++i)
      if (!modules[i].first.empty()) examples += (examples.empty() ? "" : ", ") + modules[i].first;
    fail("--checkpoint '" + spec.text + "' selects no module",
         spec.mode == CheckpointSpec::Mode::Regex
             ? "the expression must match a whole module path (std::regex_match), and none does"
             : std::string("this ") + root.type_name() + " has no transformer blocks",
         "module paths look like: " + examples + ", ...");
  }
  // Outermost only: pre-order puts an ancestor before its descendants.
  std::vector<std::string> outer;
  for (const std::string& p : picked)
    if (std::none_of(outer.begin(), outer.end(), [&](const std::string& o) { return inside(p, o); }))
      outer.push_back(p);
  return outer;
}

std::string checkpoint_regex_for(const std::string& path) {
  std::string o;
  for (char c : path) {
    if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) o += '\\';
    o += c;
  }
  return o;
}

std::vector<std::string> apply_checkpointing(Module& root, const std::string& spec) {
  std::vector<std::string> paths = select_checkpoint_modules(root, spec);
  const bool selective = parse_checkpoint_spec(spec).mode == CheckpointSpec::Mode::Selective;
  for (const std::string& p : paths) checkpoint_module(*root.find_module(p), selective);
  return paths;
}

}  // namespace lt::nn
