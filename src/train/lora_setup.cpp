#include "train/lora_setup.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <regex>
#include <set>

#include "io/peft_adapter.h"
#include "io/text_format.h"
#include "leantrain/autograd.h"
#include "leantrain/nn_moe.h"
#include "leantrain/precision.h"
#include "leantrain/safetensors.h"
#include "train/atomic_dir.h"

namespace lt {

namespace {

bool under(const std::string& path, const std::string& prefix) {
  return path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 && path[prefix.size()] == '.';
}

std::string regex_escape(const std::string& s) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(s, special, R"(\$&)");
}

// The owner's shared pointer to the module at `path` (find_module gives a raw one).
std::shared_ptr<nn::Module> shared_module(nn::Module& root, const std::string& path) {
  const size_t dot = path.rfind('.');
  nn::Module* owner = dot == std::string::npos ? &root : root.find_module(path.substr(0, dot));
  const std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
  if (owner)
    for (auto& [n, child] : owner->children())
      if (n == name) return child;
  return nullptr;
}

// Module and parameter names as the model's Hugging Face checkpoint has them, which the adapter
// file uses too: the ViT keeps torchvision's structure but saves under ViTForImageClassification's
// names (encoder.layers.encoder_layer_0.mlp.0 -> vit.encoder.layer.0.intermediate.dense, heads.head
// -> classifier); GPT-2's and LLaMA's names are the same either way. A ViT adapter names its
// modules as transformers 5 does (vit.layers.0.mlp.fc1; docs/decisions.md): PEFT matches adapters
// against the live modules, and transformers converts only the checkpoint's keys, not an adapter's.
// Reading accepts both those and transformers 4's (the checkpoint's) names.
struct HfNames {
  std::map<std::string, std::string> module_to_hf, module_from_hf, param_to_hf, param_from_hf;
  std::map<std::string, std::string> module_legacy;  // ours -> transformers 4 name, where it differs
  std::set<std::string> hf_modules;  // every module path of the adapter's names, with ancestors
  static std::string get(const std::map<std::string, std::string>& m, const std::string& k) {
    auto it = m.find(k);
    return it == m.end() ? k : it->second;
  }
  std::string module(const std::string& ours) const { return get(module_to_hf, ours); }
  std::string module_ours(const std::string& hf) const { return get(module_from_hf, hf); }
  std::string param(const std::string& ours) const { return get(param_to_hf, ours); }
  std::string param_ours(const std::string& hf) const { return get(param_from_hf, hf); }
  // Every name the module may have in an adapter file: the written one, then the legacy one.
  std::vector<std::string> module_aliases(const std::string& ours) const {
    std::vector<std::string> out{module(ours)};
    auto it = module_legacy.find(ours);
    if (it != module_legacy.end()) out.push_back(it->second);
    return out;
  }
};

// A ViT module path of transformers 4 (the checkpoint's) -> transformers 5's name for it:
// vit.encoder.layer.N.{attention.attention.query|key|value, attention.output.dense,
// intermediate.dense, output.dense} -> vit.layers.N.{attention.q_proj|k_proj|v_proj,
// attention.o_proj, mlp.fc1, mlp.fc2}; other paths under the layer only move to vit.layers.N.
std::string vit_transformers5_module(const std::string& legacy) {
  static const std::regex layer(R"(^vit\.encoder\.layer\.(\d+)(\.(.*))?$)");
  std::smatch m;
  if (!std::regex_match(legacy, m, layer)) return legacy;
  static const std::map<std::string, std::string> renamed = {
      {"attention.attention.query", "attention.q_proj"}, {"attention.attention.key", "attention.k_proj"},
      {"attention.attention.value", "attention.v_proj"}, {"attention.output.dense", "attention.o_proj"},
      {"intermediate.dense", "mlp.fc1"},                  {"output.dense", "mlp.fc2"}};
  const std::string head = "vit.layers." + m[1].str();
  if (!m[2].matched) return head;
  auto it = renamed.find(m[3].str());
  return head + "." + (it == renamed.end() ? m[3].str() : it->second);
}

HfNames hf_names(models::Model& m) {
  HfNames n;
  auto parent = [](const std::string& s) {
    const size_t dot = s.rfind('.');
    return dot == std::string::npos ? std::string() : s.substr(0, dot);
  };
  for (const models::CheckpointTensor& t : m.checkpoint_tensors()) {
    if (t.name.find(".lora_") != std::string::npos) continue;
    for (std::string p = parent(t.name); !p.empty(); p = parent(p)) n.hf_modules.insert(p);
    if (t.rows >= 0 || t.buffer) continue;  // a slice of a fused parameter names no module of ours
    n.param_to_hf[t.param] = t.name;
    n.param_from_hf[t.name] = t.param;
    const std::string leaf = ".weight";
    auto ends = [&](const std::string& s) { return s.size() > leaf.size() && s.compare(s.size() - leaf.size(), leaf.size(), leaf) == 0; };
    if (ends(t.param) && ends(t.name)) {
      n.module_to_hf[parent(t.param)] = parent(t.name);
      n.module_from_hf[parent(t.name)] = parent(t.param);
    }
  }
  if (m.model_type() == "vit") {
    std::set<std::string> modules;
    for (const std::string& p : n.hf_modules) modules.insert(vit_transformers5_module(p));
    n.hf_modules = std::move(modules);
    for (auto& [ours, hf] : n.module_to_hf) {
      const std::string v5 = vit_transformers5_module(hf);
      if (v5 == hf) continue;
      n.module_legacy[ours] = hf;
      n.module_from_hf[v5] = ours;  // the legacy name keeps mapping to ours as well
      hf = v5;
    }
  }
  return n;
}

// The paths of the base model's modules (adapters' own children left out).
std::vector<std::string> base_module_paths(nn::Module& m) {
  std::vector<std::string> out, lora;
  for (auto& [path, mod] : m.named_modules()) {
    bool inside = false;
    for (const std::string& l : lora) inside = inside || under(path, l);
    if (inside || path.empty()) continue;
    out.push_back(path);
    if (dynamic_cast<nn::LoraLinear*>(mod)) lora.push_back(path);
  }
  return out;
}

// PEFT's target_modules for the adapted paths: for each, the shortest dotted suffix that selects
// adapted modules only (by PEFT's rule: equal to the path or after a '.'), so that PEFT adapts
// exactly these modules of the same model.
std::vector<std::string> peft_target_names(const HfNames& hf, const std::vector<std::string>& adapted_paths) {
  std::set<std::string> chosen;
  for (const std::string& p : adapted_paths) chosen.insert(hf.module(p));
  std::vector<std::string> names;
  for (const std::string& ours : adapted_paths) {
    const std::string p = hf.module(ours);
    std::string suffix;
    for (size_t pos = p.size();;) {
      const size_t dot = pos == 0 ? std::string::npos : p.rfind('.', pos - 1);
      suffix = dot == std::string::npos ? p : p.substr(dot + 1);
      io::PeftAdapterConfig probe;
      probe.target_modules = {suffix};
      bool only_adapted = true;
      for (const std::string& q : hf.hf_modules) only_adapted = only_adapted && (!io::peft_targets(probe, q) || chosen.count(q));
      if (only_adapted || dot == std::string::npos) break;
      pos = dot;
    }
    if (std::find(names.begin(), names.end(), suffix) == names.end()) names.push_back(suffix);
  }
  return names;
}

std::string module_list_summary(const std::vector<std::string>& paths) {
  std::vector<std::string> leaves;
  for (const std::string& p : paths) {
    const size_t dot = p.rfind('.');
    std::string leaf = dot == std::string::npos ? p : p.substr(dot + 1);
    if (std::find(leaves.begin(), leaves.end(), leaf) == leaves.end()) leaves.push_back(leaf);
  }
  std::string s;
  for (const std::string& l : leaves) s += (s.empty() ? "" : ", ") + l;
  return s;
}

// Our expert lora_B [E, r, d2] as PEFT's [d2, r E] (column j E + e holds expert e's row j), and back.
Tensor peft_expert_b(const Tensor& b) {
  NoGradGuard no_grad;
  return reshape(contiguous(permute(b, {2, 1, 0})), {b.size(2), b.size(1) * b.size(0)});
}
Tensor ours_expert_b(const Tensor& peft, int64_t experts) {
  NoGradGuard no_grad;
  const int64_t d2 = peft.size(0), r = peft.size(1) / experts;
  return contiguous(permute(reshape(peft, {d2, r, experts}), {2, 1, 0}));
}

// The tensors of an adapter file, under PEFT's keys: every adapter's A and B, then the
// parameters of modules_to_save, whole.
std::vector<std::pair<std::string, Tensor>> adapter_tensors(models::Model& m, const HfNames& hf) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [path, l] : lora_modules(m)) {
    out.emplace_back(io::kPeftKeyPrefix + hf.module(path) + ".lora_A.weight", l->lora_A());
    out.emplace_back(io::kPeftKeyPrefix + hf.module(path) + ".lora_B.weight", l->lora_B());
  }
  for (auto& [path, ex] : lora_experts(m)) {
    // PEFT's ParamWrapper: gate_up_proj's wrapper is the inner one (base_layer), down_proj's the outer.
    for (auto [where, a] : {std::pair{std::string(".base_layer"), ex->gate_up_lora()}, std::pair{std::string(), ex->down_lora()}}) {
      out.emplace_back(io::kPeftKeyPrefix + hf.module(path) + where + ".lora_A.weight", a->lora_A());
      out.emplace_back(io::kPeftKeyPrefix + hf.module(path) + where + ".lora_B.weight", peft_expert_b(a->lora_B()));
    }
  }
  for (const std::string& path : lora_modules_to_save(m))
    for (auto& [name, t] : m.find_module(path)->named_parameters())
      out.emplace_back(io::kPeftKeyPrefix + hf.param(path + "." + name), t);
  return out;
}

// A key of an adapter file (without PEFT's prefix) -> the parameter of ours it fills.
std::string adapter_key_to_param(const HfNames& hf, const std::string& key) {
  for (const char* suffix : {".lora_A.weight", ".lora_B.weight"}) {
    const std::string s = suffix;
    if (key.size() > s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0)
      return hf.module_ours(key.substr(0, key.size() - s.size())) + s;
  }
  return hf.param_ours(key);
}

}  // namespace

std::vector<std::string> default_lora_targets(nn::Module& m) {
  std::vector<std::string> entries, out;
  for (auto& [path, mod] : m.named_modules())
    if (dynamic_cast<nn::ModuleList*>(mod))
      for (auto& [name, child] : mod->children()) entries.push_back(path.empty() ? name : path + "." + name);
  for (auto& [path, mod] : m.named_modules()) {
    if (!nn::linear_shape(*mod)) continue;
    for (const std::string& e : entries)
      if (under(path, e)) {
        out.push_back(path);
        break;
      }
  }
  return out;
}

std::vector<std::string> lora_modules_to_save(models::Model& m) {
  if (m.model_type() == "vit" && m.find_module("heads.head")) return {"heads.head"};
  return {};
}

std::vector<std::pair<std::string, nn::LoraLinear*>> lora_modules(nn::Module& m) {
  std::vector<std::pair<std::string, nn::LoraLinear*>> out;
  for (auto& [path, mod] : m.named_modules())
    if (auto* l = dynamic_cast<nn::LoraLinear*>(mod)) out.emplace_back(path, l);
  return out;
}

std::vector<std::pair<std::string, nn::MoeExperts*>> moe_experts(nn::Module& m) {
  std::vector<std::pair<std::string, nn::MoeExperts*>> out;
  for (auto& [path, mod] : m.named_modules())
    if (auto* e = dynamic_cast<nn::MoeExperts*>(mod)) out.emplace_back(path, e);
  return out;
}

std::vector<std::pair<std::string, nn::MoeExperts*>> lora_experts(nn::Module& m) {
  std::vector<std::pair<std::string, nn::MoeExperts*>> out;
  for (auto& [path, e] : moe_experts(m))
    if (e->gate_up_lora()) out.emplace_back(path, e);
  return out;
}

void install_lora(models::Model& m, const std::vector<std::string>& paths, const nn::LoraOptions& o, uint64_t seed,
                  DType dtype, const std::vector<std::string>& expert_paths) {
  m.set_trainable(".*", false);  // PEFT's default: only the adapters (and modules_to_save) train
  {
    MemoryCategoryScope p(Category::Parameter);
    nn::ParamFactory pf(nn::InitOptions{.device = m.device(), .dtype = dtype, .seed = seed});
    for (const std::string& path : paths) {
      auto base = std::dynamic_pointer_cast<nn::UnaryModule>(shared_module(m, path));
      const auto shape = base ? nn::linear_shape(*base) : std::nullopt;
      if (!shape)
        fail("LoRA on " + path, "it is " + (base ? std::string("a ") + base->type_name() : std::string("not a module")) +
             ", not a linear layer", "target linear layers only");
      if (o.rank > std::min(shape->in, shape->out))
        usage("--lora-rank " + std::to_string(o.rank), path + " maps " + std::to_string(shape->in) + " -> " +
              std::to_string(shape->out) + " features, and the rank must not exceed the smaller",
              "pass --lora-rank " + std::to_string(std::min(shape->in, shape->out)) + " or less, or leave that layer out of --lora-targets");
      auto lora = std::make_shared<nn::LoraLinear>(base, o, pf);
      try {
        m.replace_module(path, lora);
      } catch (const Error& e) {
        fail("LoRA on " + path, e.why(), "leave it out of --lora-targets");
      }
    }
    for (const std::string& path : expert_paths) {
      auto* ex = dynamic_cast<nn::MoeExperts*>(m.find_module(path));
      LT_CHECK(ex != nullptr, "LoRA on the experts at " + path, "no MoE experts module is there",
               "target the experts of an MoE model");
      if (o.dropout > 0)
        usage("--lora-dropout " + short_number(o.dropout) + " with adapters on MoE experts",
              "dropout cannot be factored out of B A around the experts' weights (PEFT refuses it too)",
              "pass --lora-dropout 0, or leave the experts out of --lora-targets");
      ex->add_lora(pf, o.rank, o.alpha);
    }
    pf.materialize();
  }
  for (const std::string& path : lora_modules_to_save(m)) m.set_trainable(regex_escape(path) + "\\..*", true);
}

std::string apply_lora(models::Model& m, const RunConfig& c) {
  if (c.lora_rank == 0) return "";
  std::vector<std::string> paths, experts;
  if (c.lora_targets.empty()) {
    paths = default_lora_targets(m);
    for (auto& [path, e] : moe_experts(m)) experts.push_back(path);  // all-linear, the experts included
    if (paths.empty())
      usage("--lora-rank with this " + m.model_type() + " model", "it has no linear layers inside its blocks",
            "name the layers with --lora-targets");
  } else {
    std::regex re;
    try {
      re = std::regex(c.lora_targets);
    } catch (const std::regex_error& e) {
      usage("--lora-targets '" + c.lora_targets + "'", std::string("it is not a valid regular expression: ") + e.what(),
            "fix the pattern, e.g. '.*\\.(q_proj|v_proj)'");
    }
    for (const std::string& path : base_module_paths(m)) {
      if (!std::regex_match(path, re)) continue;
      nn::Module* mod = m.find_module(path);
      if (dynamic_cast<nn::MoeExperts*>(mod)) {
        experts.push_back(path);
        continue;
      }
      if (!nn::linear_shape(*mod))
        usage("--lora-targets '" + c.lora_targets + "' matches " + path + " (a " + mod->type_name() + ")",
              "LoRA adapts linear layers only, and the regex must match whole module paths",
              "narrow it to linear layers, e.g. '.*\\.(q_proj|v_proj)' or '.*\\.c_attn'");
      paths.push_back(path);
    }
    if (paths.empty() && experts.empty()) {
      const std::vector<std::string> d = default_lora_targets(m);
      const std::string example = d.empty() ? std::string("q_proj") : d.front().substr(d.front().rfind('.') + 1);
      usage("--lora-targets '" + c.lora_targets + "' matches no module",
            "it must match whole module paths" + (d.empty() ? std::string() : ", such as " + d.front()),
            "pass e.g. '.*\\." + example + "'");
    }
  }
  const int64_t before = m.num_parameters();
  // The run's parameter dtype (not the first parameter's: a quantised base keeps u8 weights).
  install_lora(m, paths, nn::LoraOptions{c.lora_rank, c.lora_alpha, c.lora_dropout}, c.seed ^ 0x4c6f5241ull,
               precision_policy(c.precision).param_dtype, experts);
  if (!c.lora_init.empty() && !m.device().is_meta()) {
    const io::PeftAdapterConfig a = io::read_peft_adapter_config(c.lora_init);
    if (a.r != c.lora_rank || a.lora_alpha != c.lora_alpha)
      usage("--lora-init " + c.lora_init, "its adapter has r " + std::to_string(a.r) + ", alpha " + short_number(a.lora_alpha) +
            ", this run --lora-rank " + std::to_string(c.lora_rank) + ", --lora-alpha " + short_number(c.lora_alpha),
            "pass --lora-rank " + std::to_string(a.r) + " --lora-alpha " + short_number(a.lora_alpha));
    load_lora_adapter(c.lora_init, m);
  }
  int64_t trainable = 0;
  for (auto& [n, t] : m.named_trainable_parameters()) trainable += t.numel();
  char line[200];
  std::snprintf(line, sizeof line, "LoRA r %lld, alpha %s (scaling %s) on %zu linear layers (", (long long)c.lora_rank,
                short_number(c.lora_alpha).c_str(), short_number(c.lora_alpha / double(c.lora_rank)).c_str(), paths.size());
  const std::string layers = module_list_summary(paths);
  std::string s = line + layers +
                  (experts.empty() ? ""
                                   : (layers.empty() ? "" : "; ") + std::to_string(experts.size()) +
                                         " MoE experts' gate_up_proj, down_proj") +
                  "): " + std::to_string(trainable) + " trainable of " +
                  std::to_string(m.num_parameters()) + " parameters (" + std::to_string(before) + " frozen base)";
  if (!c.lora_init.empty()) s += "; adapters from " + c.lora_init;
  return s;
}

void write_lora_adapter(const std::string& dir, models::Model& m, const std::string& base_model) {
  const auto mods = lora_modules(m);
  const auto experts = lora_experts(m);
  LT_CHECK(!mods.empty() || !experts.empty(), "writing a LoRA adapter", "the model has no adapters",
           "train with --lora-rank");
  io::PeftAdapterConfig c;
  if (!mods.empty()) {
    const nn::LoraOptions& o = mods.front().second->options();
    c.r = o.rank;
    c.lora_alpha = o.alpha;
    c.lora_dropout = o.dropout;
  } else {
    c.r = experts.front().second->gate_up_lora()->rank();
    c.lora_alpha = experts.front().second->gate_up_lora()->scaling() * double(c.r);
  }
  // PEFT wraps the listed parameters in order: gate_up_proj first (the inner "base_layer").
  if (!experts.empty()) c.target_parameters = {"experts.gate_up_proj", "experts.down_proj"};
  std::vector<std::string> paths;
  for (auto& [path, l] : mods) {
    paths.push_back(path);
    c.fan_in_fan_out = c.fan_in_fan_out || l->shape().layout == nn::WeightLayout::InOut;
  }
  const HfNames hf = hf_names(m);
  if (!paths.empty()) c.target_modules = peft_target_names(hf, paths);
  for (const std::string& p : lora_modules_to_save(m)) c.modules_to_save.push_back(hf.module(p));
  c.task_type = dynamic_cast<models::CausalLM*>(&m) ? "CAUSAL_LM" : "";
  c.base_model_name_or_path = base_model;
  io::save_safetensors(dir + "/" + io::kAdapterWeightsFile, adapter_tensors(m, hf), {{"format", "pt"}});
  write_text_file(dir + "/" + io::kAdapterConfigFile, io::peft_adapter_config_json(c));
}

void load_lora_adapter(const std::string& dir, models::Model& m) {
  const std::string file = dir + "/" + io::kAdapterWeightsFile;
  const HfNames hf = hf_names(m);
  std::map<std::string, std::string> file_key;  // our parameter -> its key in the file
  for (auto& [key, t] : adapter_tensors(m, hf)) {
    const std::string k = key.substr(std::string(io::kPeftKeyPrefix).size());
    file_key[adapter_key_to_param(hf, k)] = key;
  }
  // A module saved whole (the ViT's head) is required only when the adapter says it saved one;
  // without, the model keeps its base values there, as PEFT does.
  const bool saved_modules = !io::read_peft_adapter_config(dir).modules_to_save.empty();
  std::set<std::string> want;
  for (auto& [param, key] : file_key)
    if (saved_modules || param.find(".lora_") != std::string::npos) want.insert(param);
  // Expert lora_B tensors are stored [d2, r E] (PEFT) and kept [E, r, d2] here: read and turned.
  std::map<std::string, nn::MoeLoraAdapter*> expert_b;  // file key -> adapter
  for (auto& [path, ex] : lora_experts(m)) {
    const std::string k = io::kPeftKeyPrefix + hf.module(path);
    expert_b[k + ".base_layer.lora_B.weight"] = ex->gate_up_lora();
    expert_b[k + ".lora_B.weight"] = ex->down_lora();
  }
  io::LoadOptions lo;
  lo.allow_missing = true;  // the base's parameters are not in an adapter file
  lo.allow_cast = true;     // adapters saved in another precision
  lo.rename = [&hf, &expert_b](const std::string& key) {
    const std::string prefix = io::kPeftKeyPrefix;
    if (expert_b.count(key)) return std::string();
    return key.compare(0, prefix.size(), prefix) == 0 ? adapter_key_to_param(hf, key.substr(prefix.size())) : key;
  };
  io::LoadResult r;
  {
    MemoryCategoryScope other(Category::Other);
    NoGradGuard no_grad;
    try {
      r = io::load_module(m, file, lo);
    } catch (const Error& e) {
      throw Error("adapter " + dir + ": " + e.what_part(), e.why(), e.fix());
    }
  }
  for (const std::string& name : r.loaded) want.erase(name);
  if (!expert_b.empty()) {
    io::SafetensorsReader reader(file);
    MemoryCategoryScope other(Category::Other);
    NoGradGuard no_grad;
    for (auto& [key, a] : expert_b) {
      const io::TensorEntry* e = reader.find(key);
      if (!e) continue;  // reported below as missing
      const Tensor& dst = a->lora_B();
      const int64_t experts = dst.size(0), r = dst.size(1), d2 = dst.size(2);
      LT_CHECK(e->shape == Shape({d2, r * experts}), "adapter " + file + ": " + key + " has shape " + shape_str(e->shape),
               "the experts' lora_B is [" + std::to_string(d2) + ", " + std::to_string(r * experts) + "] (PEFT's layout)",
               "pass the adapter trained with the same rank on this model");
      copy_(dst, ours_expert_b(reader.read(key), experts));
      want.erase(adapter_key_to_param(hf, key.substr(std::string(io::kPeftKeyPrefix).size())));
    }
  }
  if (!want.empty())
    fail("adapter " + file + " lacks " + file_key[*want.begin()],
         std::to_string(want.size()) + " of the model's adapter tensors are not in it",
         "pass the adapter trained with the same --lora-targets (and modules_to_save) on this model");
  for (const std::string& name : r.loaded) {
    bool adapter = name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
    for (const std::string& p : lora_modules_to_save(m)) adapter = adapter || under(name, p);
    if (!adapter)
      fail("adapter " + file + " holds " + io::kPeftKeyPrefix + hf.param(name), "it is a base weight, not an adapter's",
           "pass an adapter directory, not a model");
  }
}

void attach_peft_adapter(models::Model& m, const std::string& dir) {
  const io::PeftAdapterConfig c = io::read_peft_adapter_config(dir);
  const HfNames hf = hf_names(m);
  std::vector<std::string> paths;
  for (const std::string& path : base_module_paths(m))
    if (std::ranges::any_of(hf.module_aliases(path), [&c](const std::string& a) { return io::peft_targets(c, a); })) {
      if (!nn::linear_shape(*m.find_module(path)))
        fail("adapter " + dir + ": target_modules selects " + path + " (a " + m.find_module(path)->type_name() + ")",
             "LoRA adapts linear layers only", "pass the adapter trained for this model");
      paths.push_back(path);
    }
  std::vector<std::string> experts;
  for (auto& [path, ex] : moe_experts(m)) {
    const std::string p = hf.module(path);
    const bool gu = io::peft_targets_parameter(c, p + ".gate_up_proj"), down = io::peft_targets_parameter(c, p + ".down_proj");
    if (gu != down)
      fail("adapter " + dir + ": target_parameters adapts " + std::string(gu ? "gate_up_proj" : "down_proj") + " of " + p +
               " but not " + (gu ? "down_proj" : "gate_up_proj"),
           "leantrain adapts an MoE layer's experts as a pair, gate_up_proj wrapped first",
           "train the adapter with target_parameters [\"experts.gate_up_proj\", \"experts.down_proj\"]");
    if (gu) experts.push_back(path);
  }
  if (paths.empty() && experts.empty())
    fail("adapter " + dir + ": target_modules selects no module of this " + m.model_type() + " model",
         "the adapter was trained for another model", "pass the base model the adapter was trained on");
  install_lora(m, paths, nn::LoraOptions{c.r, c.lora_alpha, 0.0}, 0, m.dtype(), experts);
  load_lora_adapter(dir, m);
}

void merge_lora(models::Model& m) {
  NoGradGuard no_grad;
  for (auto& [path, l] : lora_modules(m)) {
    auto* base = dynamic_cast<nn::Linear*>(&l->base());
    LT_CHECK(base != nullptr, "merging the adapter of " + path, std::string("its base is a ") + l->base().type_name(),
             "merge into a 16- or 32-bit model");
    copy_(base->weight(), nn::lora_merged_weight(*l));
    m.replace_module(path, l->base_ptr());
  }
  for (auto& [path, ex] : lora_experts(m)) ex->merge_lora();
}

}  // namespace lt
