// What the budget search knows about checkpointing one model: for every module that can be
// checkpointed inside a transformer block (the block itself, its norms, attention, attention
// core, MLP, their Linears and dropouts), the activation bytes that checkpointing it frees and
// the forward FLOPs that recomputing it costs, both per sample; then the order a careful engineer
// would checkpoint them in (most bytes saved per recompute FLOP first).
//
// Bytes are measured, not derived: the model is built on meta at micro-batch 1 with the run's
// precision, and one forward (as the trainer runs it: train mode, the policy's autocast, the
// activation category) is made with nothing checkpointed and one with each module of one
// representative block checkpointed; the bytes still allocated after the forward are what
// backward will read, so their difference is what the module's checkpoint saves. Blocks with the
// same type, parameter shapes and input shape share the representative's figures (a 32-layer
// GPT has one group). Everything scales linearly with the micro-batch (attention's T^2 included:
// it is per sample), so the order is the same at any micro-batch and the search measures once
// per precision.
//
// FLOPs come from op shapes, recorded by a forward wrapper on every module during the
// uncheckpointed forward: a module's direct 2-D parameters W [a, b] cost 2 N a b for N input rows
// (Linear, Conv1D, MultiheadAttention's in_proj), a 4-D one (patch conv) 2 numel(x) W.size(0),
// attention 4 B T^2 C (half when the model's family is causal: GPT-2), norms 8 and GELU 8 per
// element, dropout 2 per element when active, a sparse MoE block 2 N C (E + 3 k I) (its router and
// the k experts a token meets). What the root computes outside any module (GPT-2's
// tied output head) comes from Model::root_forward_flops.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "leantrain/autocast.h"
#include "leantrain/checkpoint.h"
#include "leantrain/nn.h"
#include "leantrain/nn_moe.h"
#include "leantrain/nn_vision.h"
#include "leantrain/ops.h"
#include "leantrain/plan.h"
#include "leantrain/precision.h"
#include "models/registry.h"
#include "train/assemble.h"

namespace lt {

using nn::Module;

namespace {


bool inside_or_is(const std::string& path, const std::string& outer) {
  return path == outer || (path.size() > outer.size() && path.compare(0, outer.size(), outer) == 0 &&
                           path[outer.size()] == '.');
}

double numel_of(const Shape& s) {
  double n = 1;
  for (int64_t d : s) n *= double(d);
  return n;
}

// Forward FLOPs of one call of `m` itself (children are counted at their own calls).
double own_flops(Module& m, const Shape& in, bool causal) {
  const double n = numel_of(in);
  if (in.empty()) return 0;
  if (dynamic_cast<nn::Embedding*>(&m)) return 0;
  if (dynamic_cast<nn::LayerNorm*>(&m) || dynamic_cast<nn::RMSNorm*>(&m) || dynamic_cast<nn::Gelu*>(&m)) return 8 * n;
  if (auto* d = dynamic_cast<nn::Dropout*>(&m)) return d->is_training() && d->p() > 0 ? 2 * n : 0;
  // qkv [B, T, W]: q k^T and p v, 2 B T^2 C each (C = query heads x head dim; halved when causal)
  if (auto* a = dynamic_cast<nn::AttentionCore*>(&m)) return a->forward_flops(in);
  if (auto* c = dynamic_cast<nn::Conv2d*>(&m)) return c->forward_flops(in);
  if (dynamic_cast<nn::BatchNorm2d*>(&m)) return 8 * n;
  const double rows = n / double(in.back());
  // A sparse MoE block: its router [E, C] and, per token, its k experts' gate | up [2I, C] and
  // down [C, I] (stacked 3-D weights or NF4 stacks, which the loop below would not see).
  if (auto* moe = dynamic_cast<nn::SparseMoeBlock*>(&m)) {
    const nn::MoeOptions& o = moe->options();
    return 2 * rows * double(o.hidden) * (double(o.experts) + 3 * double(o.top_k) * double(o.intermediate));
  }
  double f = 0;
  for (auto& [name, p] : m.named_parameters()) {
    if (name.find('.') != std::string::npos) continue;  // a child's: counted at the child's call
    if (p.dim() == 2) f += 2 * rows * double(p.numel());
    else if (p.dim() == 4) f += 2 * n * double(p.size(0));
  }
  return f;
}

// A block's signature: blocks with equal signatures share one measurement.
std::string signature(Module& block, const Shape& in) {
  std::string s = block.type_name();
  for (auto& [name, p] : block.named_parameters()) {
    s += "|" + name + ":";
    for (int64_t d : p.shape()) s += std::to_string(d) + ",";
  }
  s += "|in:";
  for (int64_t d : in) s += std::to_string(d) + ",";
  return s;
}

struct Kind {  // one checkpointable module of a representative block
  std::string rel;  // path relative to the block ("" = the block)
  std::string type;
  int64_t saved = 0;
  double flops = 0;
};

struct Step {  // one greedy step of a group: a kind, with what it adds to the kinds before it
  std::string rel, type;
  int64_t saved = 0;
  double flops = 0;
  double ratio() const { return double(saved) / std::max(flops, 1.0); }
};

// Greedy within a group: repeatedly the kind with the most marginal bytes per marginal FLOP. A
// kind that encloses kinds already taken adds its own figures less theirs; one inside a kind
// already taken adds nothing and is dropped.
std::vector<Step> greedy(const std::vector<Kind>& kinds) {
  std::vector<Step> steps;
  std::vector<bool> taken(kinds.size(), false), chosen(kinds.size(), false);
  auto enclosed = [](const std::string& inner, const std::string& outer) {  // inner inside or equal outer
    return outer.empty() || inside_or_is(inner, outer);
  };
  for (;;) {
    int best = -1;
    Step bs;
    for (size_t i = 0; i < kinds.size(); ++i) {
      if (taken[i]) continue;
      bool covered = false;
      Step s{kinds[i].rel, kinds[i].type, kinds[i].saved, kinds[i].flops};
      for (size_t j = 0; j < kinds.size(); ++j) {
        if (taken[j] && enclosed(kinds[i].rel, kinds[j].rel)) covered = true;
        else if (chosen[j] && enclosed(kinds[j].rel, kinds[i].rel)) s.saved -= kinds[j].saved, s.flops -= kinds[j].flops;
      }
      if (covered || s.saved <= 0) continue;
      if (best < 0 || s.ratio() > bs.ratio()) best = int(i), bs = s;
    }
    if (best < 0) break;
    for (size_t j = 0; j < kinds.size(); ++j)  // kinds it encloses are now part of it
      if (enclosed(kinds[j].rel, kinds[size_t(best)].rel)) taken[j] = true, chosen[j] = false;
    chosen[size_t(best)] = true;
    steps.push_back(bs);
  }
  return steps;
}

bool has_batch_norm(Module& m) {
  for (auto& [p, mod] : m.named_modules())
    if (dynamic_cast<nn::BatchNorm2d*>(mod)) return true;
  return false;
}

// A profile measured on `probe` samples, as the per-sample figures it stands for.
CheckpointProfile per_sample(CheckpointProfile prof, int64_t probe) {
  if (probe == 1) return prof;
  const double p = double(probe);
  prof.forward_flops /= p, prof.checkpoint_flops /= p;
  for (auto& [path, f] : prof.module_flops) f /= p;
  for (auto& u : prof.order) u.saved_bytes /= probe, u.flops /= p;
  return prof;
}

// The probe runs leantrain's attention kernels, whatever --attention-kernel says: on the plain meta
// it runs on, cudnn would refuse every call (no CUDA there), and the route changes no saved byte
// and no FLOP (only a transient of the backward, which the candidates' own plans include).
class LeantrainAttention {
 public:
  LeantrainAttention() : prev_(attention_kernel()) { set_attention_kernel(AttentionKernel::Leantrain); }
  ~LeantrainAttention() { set_attention_kernel(prev_); }
  LeantrainAttention(const LeantrainAttention&) = delete;
  LeantrainAttention& operator=(const LeantrainAttention&) = delete;

 private:
  AttentionKernel prev_;
};

}  // namespace

CheckpointProfile profile_model(const RunConfig& cfg_in, bool measure_units) {
  LeantrainAttention attention;
  RunConfig cfg = cfg_in;
  cfg.device = "cpu";
  cfg.batch = 1;
  cfg.micro_batch = 0;
  cfg.devices = 1;  // per-sample figures, the same on every rank
  cfg.fused_step = false;
  cfg.checkpoint = nn::CheckpointSpec::none();
  cfg.clip = 0;
  cfg.steps = 1;
  cfg.eval_every = 0;
  cfg.resume.clear();
  cfg.save.clear();
  cfg.metrics.clear();
  cfg.memory_history = false;
  cfg.memory_snapshot.clear();
  cfg.memory_report.clear();
  if (is_eight_bit(cfg.optimizer)) cfg.state_dtype = StateDtype::Auto;

  CheckpointProfile prof;
  prof.precision = cfg.precision;
  Allocator& al = allocator_for(Device::meta());
  // The run's own assembly (train/assemble.h), without checkpointing: the search probes each
  // module's saved bytes itself. Batch norm cannot train on one value per channel (a small
  // ResNet's last stage is 1 x 1), so a model with one is probed with two samples, and its figures
  // are halved into per-sample ones.
  const AssembleOptions probe_only{.checkpointing = false, .strategy = false};
  AssembledRun run = assemble_run(cfg, Device::meta(), probe_only);
  const int64_t probe = has_batch_norm(*run.task->model) ? 2 : 1;
  prof.min_micro_batch = probe;
  if (probe != 1) {
    cfg.batch = probe;
    run.trainer.reset();  // before the task it refers to
    run.task.reset();
    run = assemble_run(cfg, Device::meta(), probe_only);
  }
  Task* task = run.task.get();
  Trainer& trainer = *run.trainer;  // the run's model state: precision hooks (parameter dtypes) applied
  models::Model& model = trainer.model();
  model.train();
  const bool causal = models::family_of_type(model.model_type()).causal();
  prof.parameters = model.num_parameters();
  prof.parameter_tensors = int64_t(model.named_parameters().size());
  prof.parameter_bytes = model.parameter_bytes();
  Batch batch;
  {
    MemoryCategoryScope in(Category::Input);
    batch = task->train->next();
  }
  const auto modules = model.named_modules();
  std::map<Module*, std::string> path_of;
  for (auto& [p, m] : modules) path_of[m] = p;

  // One forward with `extra` installed as wrappers; returns the bytes it leaves allocated.
  auto forward = [&](const std::vector<Module*>& wrapped, const std::function<void(Module&)>& install) {
    std::vector<Module::ForwardWrapper> saved;
    for (Module* m : wrapped) saved.push_back(m->forward_wrapper());
    for (Module* m : wrapped) install(*m);
    int64_t kept = 0;
    {
      AutocastGuard g(precision_policy(cfg.precision).compute_dtype);
      MemoryCategoryScope act(Category::Activation);
      const int64_t before = al.stats().allocated_bytes.current;
      Tensor loss = micro_batch_loss(*task, model, batch);  // a DPO run's objective too (train/task.h)
      kept = al.stats().allocated_bytes.current - before;
    }
    for (size_t i = 0; i < wrapped.size(); ++i) wrapped[i]->set_forward_wrapper(saved[i]);
    ++prof.measurements;
    return kept;
  };

  // The plain forward, recording each wrappable module's input shape.
  std::vector<std::pair<Module*, Shape>> calls;
  std::vector<Module*> wrappable;
  for (auto& [p, m] : modules)
    if (!p.empty() && nn::has_wrappable_forward(*m)) wrappable.push_back(m);
  // Bytes kept with nothing wrapped (a wrapper on ln_2 would turn off the block's fused add+norm).
  const int64_t base_kept = forward({}, [](Module&) {});
  forward(wrappable, [&](Module& m) {
    Module::ForwardWrapper inner = m.forward_wrapper();
    m.set_forward_wrapper([&calls, inner](Module& self, const Tensor& x, const Module::ForwardFn& f) {
      calls.emplace_back(&self, x.shape());
      return inner ? inner(self, x, f) : f(x);
    });
  });
  std::map<std::string, double> flops;  // per module path, its own calls and its descendants'
  std::map<std::string, Shape> first_input;
  for (auto& [m, shape] : calls) {
    const std::string& p = path_of[m];
    first_input.emplace(p, shape);
    const double f = own_flops(*m, shape, causal);
    prof.forward_flops += f;
    for (std::string a = p;; a = a.substr(0, a.rfind('.'))) {
      flops[a] += f;
      if (a.find('.') == std::string::npos) break;
    }
  }
  prof.forward_flops += model.root_forward_flops(batch.inputs.shape());  // e.g. GPT-2's tied head
  prof.module_flops = flops;

  try {
    prof.blocks = nn::select_checkpoint_modules(model, "blocks");
  } catch (const Error&) {  // no transformer blocks: nothing to checkpoint
  }
  if (!prof.blocks.empty() && first_input.count(prof.blocks[0])) {
    const Shape& s = first_input[prof.blocks[0]];
    // A transformer block's [rows, T, C] input: rows / probe sequences per sample (a preference
    // pair is two, a DPO run's [2, T] sample).
    prof.tokens_per_sample = s.size() == 3 ? std::max<int64_t>(1, s[0] / probe) * s[1] : s.size() >= 2 ? s[s.size() - 2] : 1;
  }
  // selective recomputes no matmul (kept_outputs.h), only elementwise work: a share of the blocks'.
  if (cfg_in.checkpoint.mode == nn::CheckpointSpec::Mode::Selective)
    prof.checkpoint_flops = selective_recompute_flops(prof);
  else if (cfg_in.checkpoint.on())
    prof.checkpoint_flops = prof.flops_of(nn::select_checkpoint_modules(model, cfg_in.checkpoint.text));
  prof.module_calls = int64_t(calls.size());
  if (!measure_units || prof.blocks.empty()) return per_sample(prof, probe);

  // Groups of identical blocks, each measured on its first block.
  std::vector<std::string> group_sig;
  std::vector<std::vector<std::string>> group_blocks;
  for (const std::string& b : prof.blocks) {
    const std::string sig = signature(*model.find_module(b), first_input[b]);
    auto it = std::find(group_sig.begin(), group_sig.end(), sig);
    if (it == group_sig.end()) group_sig.push_back(sig), group_blocks.push_back({b});
    else group_blocks[size_t(it - group_sig.begin())].push_back(b);
  }
  std::vector<std::vector<Step>> group_steps;
  for (const auto& blocks : group_blocks) {
    const std::string& rep = blocks[0];
    std::vector<Kind> kinds;
    for (auto& [p, m] : modules) {
      if (!inside_or_is(p, rep) || !nn::has_wrappable_forward(*m) || !first_input.count(p)) continue;
      Kind k;
      k.rel = p == rep ? "" : p.substr(rep.size() + 1);
      k.type = m->type_name();
      k.flops = flops[p];
      k.saved = base_kept - forward({m}, [](Module& mm) { nn::checkpoint_module(mm); });
      kinds.push_back(k);
    }
    group_steps.push_back(greedy(kinds));
  }
  // Merge the groups' steps, each group in its own order, the best next ratio first; a step
  // expands to the same module in every block of its group.
  std::vector<size_t> next(group_steps.size(), 0);
  for (;;) {
    int g = -1;
    for (size_t i = 0; i < group_steps.size(); ++i)
      if (next[i] < group_steps[i].size() &&
          (g < 0 || group_steps[i][next[i]].ratio() > group_steps[size_t(g)][next[size_t(g)]].ratio()))
        g = int(i);
    if (g < 0) break;
    const Step& s = group_steps[size_t(g)][next[size_t(g)]++];
    for (const std::string& b : group_blocks[size_t(g)])
      prof.order.push_back({s.rel.empty() ? b : b + "." + s.rel, b, s.rel, s.type, s.saved, s.flops});
  }
  return per_sample(prof, probe);
}

double CheckpointProfile::recompute_flops(size_t k) const {
  double f = 0;
  for (size_t i = 0; i < k && i < order.size(); ++i) f += order[i].flops;
  return f;
}

int64_t CheckpointProfile::saved_bytes(size_t k) const {
  int64_t s = 0;
  for (size_t i = 0; i < k && i < order.size(); ++i) s += order[i].saved_bytes;
  return s;
}

double CheckpointProfile::flops_of(const std::vector<std::string>& paths) const {
  double f = 0;
  for (const std::string& p : paths) {
    auto it = module_flops.find(p);
    if (it != module_flops.end()) f += it->second;
  }
  return f;
}

// The --checkpoint value for the first k units: "none", "blocks" when they are exactly every
// block, else one alternative per module kind, e.g. transformer\.h\.(?:0|1|2)\.mlp (or
// transformer\.h\.[0-9]+\.mlp when it is in every block of a model whose blocks are numbered).
nn::CheckpointSpec CheckpointProfile::spec(size_t k) const {
  k = std::min(k, order.size());
  if (k == 0) return nn::CheckpointSpec::none();
  std::vector<std::string> rels;
  std::map<std::string, std::vector<std::string>> blocks_of;
  for (size_t i = 0; i < k; ++i) {
    if (!blocks_of.count(order[i].rel)) rels.push_back(order[i].rel);
    blocks_of[order[i].rel].push_back(order[i].block);
  }
  if (rels.size() == 1 && rels[0].empty() && blocks_of[""].size() == blocks.size()) return nn::CheckpointSpec::blocks();
  // Blocks numbered under one prefix ("transformer.h.3", "encoder.layers.encoder_layer_3")?
  std::string prefix = blocks.empty() ? "" : blocks[0];
  while (!prefix.empty() && std::isdigit(static_cast<unsigned char>(prefix.back()))) prefix.pop_back();
  bool numbered = !prefix.empty();
  for (const std::string& b : blocks)
    numbered = numbered && b.size() > prefix.size() && b.compare(0, prefix.size(), prefix) == 0 &&
               std::all_of(b.begin() + long(prefix.size()), b.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  std::string out;
  for (const std::string& rel : rels) {
    std::vector<std::string>& bs = blocks_of[rel];
    const std::string tail = rel.empty() ? "" : "\\." + nn::checkpoint_regex_for(rel);
    std::string alt;
    if (numbered) {
      std::string idx;
      if (bs.size() == blocks.size()) {
        idx = "[0-9]+";
      } else {
        std::sort(bs.begin(), bs.end(), [&](const std::string& a, const std::string& b) {
          return std::stol(a.substr(prefix.size())) < std::stol(b.substr(prefix.size()));
        });
        for (const std::string& b : bs) idx += (idx.empty() ? "" : "|") + b.substr(prefix.size());
        idx = bs.size() == 1 ? idx : "(?:" + idx + ")";
      }
      alt = nn::checkpoint_regex_for(prefix) + idx + tail;
    } else {
      for (const std::string& b : bs) alt += (alt.empty() ? "" : "|") + nn::checkpoint_regex_for(b) + tail;
    }
    out += (out.empty() ? "" : "|") + alt;
  }
  return nn::CheckpointSpec::regex(out);
}

}  // namespace lt
