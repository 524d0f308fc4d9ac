#include "train/quantize_setup.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "backend/nf4.h"
#include "io/weight_files.h"
#include "leantrain/autograd.h"
#include "leantrain/error.h"
#include "leantrain/nn_moe.h"
#include "leantrain/nn_quant.h"
#include "leantrain/train.h"
#include "quant/bnb_dynamic_map.h"
#include "quant/nf4_checkpoint.h"

namespace lt {

namespace {

bool skipped(const std::string& path, const std::vector<std::string>& skip) {
  for (const std::string& s : skip) {
    if (s.empty()) continue;
    if (path == s || (path.size() > s.size() && path.compare(path.size() - s.size() - 1, s.size() + 1, "." + s) == 0))
      return true;
    if (path.rfind(s + ".", 0) == 0 || path.find("." + s + ".") != std::string::npos) return true;
  }
  return false;
}

// A buffer of the NF4 store, without memory until the store is materialised.
Tensor nf4_slot(nn::ParamFactory& pf, const Shape& shape, DType dtype) {
  return pf.make_buffer(shape, nn::Init::zeros(), dtype);
}

}  // namespace

std::optional<BnbQuantConfig> model_dir_quantization(const std::string& dir) {
  const std::filesystem::path p = std::filesystem::path(dir) / "config.json";
  std::ifstream f(p);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!j.is_object() || !j.contains("quantization_config")) return std::nullopt;
  return parse_bnb_quant_config(j.at("quantization_config"), p.string());
}

std::vector<std::string> nf4_target_paths(nn::Module& m, const std::vector<std::string>& skip) {
  std::vector<std::string> lists, out;
  for (auto& [path, mod] : m.named_modules()) {
    if (dynamic_cast<nn::ModuleList*>(mod)) lists.push_back(path + ".");
    if (!dynamic_cast<nn::Linear*>(mod) || skipped(path, skip)) continue;
    // Inside an entry of the list (a block), not an entry itself (ViT's heads.head).
    for (const std::string& l : lists)
      if (path.rfind(l, 0) == 0 && path.find('.', l.size()) != std::string::npos) {
        out.push_back(path);
        break;
      }
  }
  return out;
}

std::vector<std::string> nf4_expert_target_paths(nn::Module& m, const std::vector<std::string>& skip) {
  std::vector<std::string> out;
  for (auto& [path, mod] : m.named_modules())
    if (auto* e = dynamic_cast<nn::MoeExperts*>(mod); e && !e->quantized() && !skipped(path, skip)) out.push_back(path);
  return out;
}

QuantizedModel build_nf4_model(const models::ModelConfig& cfg, nn::InitOptions init, const std::string& weights_dir) {
  QuantizedModel r;
  std::optional<BnbQuantConfig> bnb;
  if (!weights_dir.empty()) bnb = model_dir_quantization(weights_dir);
  r.prequantized = bnb.has_value();
  MemoryCategoryScope category(Category::Parameter);
  NoGradGuard no_grad;

  // 1. The layout: every parameter a slot without memory.
  std::vector<nn::DeferredSlot> slots;
  init.flat = true;
  init.deferred = &slots;
  r.model = cfg.build(init);
  models::Model& m = *r.model;
  const std::vector<std::string> skip = bnb ? bnb->skip_modules : std::vector<std::string>{};
  const std::vector<std::string> paths = nf4_target_paths(m, skip);
  const std::vector<std::string> expert_paths = nf4_expert_target_paths(m, skip);
  r.layers = int64_t(paths.size());
  r.expert_layers = int64_t(expert_paths.size());

  // 2. The store of everything that stays as it is.
  struct Layer {
    std::string path;
    nn::DeferredSlot weight;
    Tensor bias;
    bool in_out = false;  // Conv1D: the slot is [in, out]
    Nf4Weight q;
  };
  std::vector<Layer> layers;
  std::map<const TensorImpl*, size_t> weight_of;
  for (const std::string& p : paths) {
    auto* lin = dynamic_cast<nn::Linear*>(m.find_module(p));
    layers.push_back(Layer{p, {}, lin->bias(), std::string(lin->type_name()) == "Conv1D", {}});
    weight_of[lin->weight().impl()] = layers.size() - 1;
  }
  // Each experts module's two stacks: gate_up_proj [E, 2I, C] in two pieces an expert (gate_proj,
  // up_proj), down_proj [E, C, I] in one.
  struct Stack {
    nn::DeferredSlot weight;
    Nf4Stack q;
  };
  struct Experts {
    std::string path;
    const char* type;
    Stack gate_up, down;
  };
  std::vector<Experts> experts;
  std::map<const TensorImpl*, Stack*> stack_of;
  experts.reserve(expert_paths.size());
  for (const std::string& p : expert_paths) {
    auto* e = dynamic_cast<nn::MoeExperts*>(m.find_module(p));
    experts.push_back(Experts{p, e->type_name(), {}, {}});
    experts.back().gate_up.q.parts = 2;
    experts.back().down.q.parts = 1;
    stack_of[e->gate_up_proj().impl()] = &experts.back().gate_up;
    stack_of[e->down_proj().impl()] = &experts.back().down;
  }
  std::vector<nn::DeferredSlot> rest;
  for (const nn::DeferredSlot& s : slots) {
    if (auto it = weight_of.find(s.tensor.impl()); it != weight_of.end()) layers[it->second].weight = s;
    else if (auto st = stack_of.find(s.tensor.impl()); st != stack_of.end()) st->second->weight = s;
    else rest.push_back(s);
  }
  nn::materialize_slots(rest, init.fill);

  // 3. The NF4 store (codes and absmax codes u8, nested absmax f32), unfilled: quantising or
  //    loading writes every byte.
  std::vector<nn::DeferredSlot> nf4_slots;
  {
    nn::InitOptions o;
    o.device = init.device;
    o.dtype = init.dtype;
    o.deferred = &nf4_slots;
    nn::ParamFactory pf(o);
    for (Layer& l : layers) {
      const Shape& s = l.weight.tensor.shape();
      const int64_t n = s[0] * s[1], blocks = nf4_blocks(n);
      l.q.shape = l.in_out ? Shape{s[1], s[0]} : s;
      l.q.dtype = l.weight.tensor.dtype();
      const auto map = bnb_dynamic_map_signed();
      l.q.nested_map.assign(map.begin(), map.end());
      l.q.codes = nf4_slot(pf, {nf4_bytes(n)}, DType::U8);
      l.q.absmax_codes = nf4_slot(pf, {blocks}, DType::U8);
      l.q.nested_absmax = nf4_slot(pf, {nf4_nested_blocks(blocks)}, DType::F32);
    }
    for (Experts& e : experts)
      for (Stack* st : {&e.gate_up, &e.down}) {
        Nf4Stack& q = st->q;
        q.shape = st->weight.tensor.shape();
        q.dtype = st->weight.tensor.dtype();
        const Nf4StackShapes sh = nf4_stack_shapes(q.shape, q.parts);
        const auto map = bnb_dynamic_map_signed();
        q.nested_map.assign(map.begin(), map.end());
        q.offsets.assign(size_t(q.pieces()), 0.0f);
        q.codes = nf4_slot(pf, sh.codes, DType::U8);
        q.absmax_codes = nf4_slot(pf, sh.absmax_codes, DType::U8);
        q.nested_absmax = nf4_slot(pf, sh.nested_absmax, DType::F32);
      }
    pf.materialize();
  }
  for (nn::DeferredSlot& s : nf4_slots) s.buffer = false;
  nn::materialize_slots(nf4_slots, false);
  for (Layer& l : layers) m.replace_module(l.path, std::make_shared<nn::Nf4Linear>(l.q, l.bias));
  for (Experts& e : experts) m.replace_module(e.path, std::make_shared<nn::MoeExperts>(e.type, e.gate_up.q, e.down.q));

  // 4. Values: a bitsandbytes checkpoint fills everything as it is; otherwise the other weights
  //    load and each NF4 layer is quantised from a temporary 16-bit weight, one at a time.
  std::map<std::string, std::string> float_keys;
  std::unique_ptr<io::WeightFiles> files;
  if (!weights_dir.empty()) {
    if (bnb) {
      r.weights = load_model_weights(weights_dir, m);
      return r;
    }
    std::set<std::string> from_float(paths.begin(), paths.end());
    from_float.insert(expert_paths.begin(), expert_paths.end());
    r.weights = load_model_weights_nf4(weights_dir, m, from_float, float_keys);
    files = std::make_unique<io::WeightFiles>(weights_dir);
  } else if (!init.fill) {
    return r;  // a checkpoint (--resume) overwrites the state anyway
  }
  // The experts, one piece (one expert's projection) at a time from a temporary 16-bit weight:
  // drawn as a plain build draws that part of the stack (its counters), or read from the file's
  // tensor of that projection; a file holding the fused stack is read once per stack.
  for (Experts& e : experts) {
    auto* mod = dynamic_cast<nn::MoeExperts*>(m.find_module(e.path));
    for (bool gate_up : {true, false}) {
      const Stack& st = gate_up ? e.gate_up : e.down;
      Nf4Stack q = gate_up ? mod->gate_up_nf4() : mod->down_nf4();
      const std::string param = e.path + (gate_up ? ".gate_up_proj" : ".down_proj");
      Tensor fused;  // the whole stack from a fused file tensor, when the file has one
      for (int64_t p = 0; p < q.pieces(); ++p) {
        auto piece_tensor = [&] { return Tensor::empty(q.piece_shape(), st.weight.tensor.dtype(), init.device); };
        Tensor tmp;
        if (files) {
          const std::string& key = float_keys.at(nf4_piece_key(param, p));
          const io::WeightFiles::Located at = files->find(key);
          if (at.entry->shape == q.shape) {
            if (!fused.defined()) {
              fused = Tensor::empty(q.shape, st.weight.tensor.dtype(), init.device);
              at.file->read_into(key, fused, /*allow_cast=*/true);
            }
            tmp = make_view(fused, q.piece_shape(), {q.shape[2], 1}, fused.offset() + p * q.piece_numel());
          } else {
            tmp = piece_tensor();
            at.file->read_into(key, tmp, /*allow_cast=*/true);
          }
        } else {
          tmp = piece_tensor();
          nn::DeferredSlot piece = st.weight;
          piece.tensor = tmp;
          piece.counter += uint64_t(p * q.piece_numel());
          nn::fill_slot(tmp, piece);
        }
        nf4_stack_quantize_piece(tmp, q, p);
      }
      mod->set_nf4_host_state(gate_up, q.offsets, q.nested_map, q.dtype);
    }
  }
  for (Layer& l : layers) {
    Tensor w;
    {
      Tensor tmp = Tensor::empty(l.weight.tensor.shape(), l.weight.tensor.dtype(), init.device);
      if (files) {
        const std::string& key = float_keys.at(l.path);
        files->find(key).file->read_into(key, tmp, /*allow_cast=*/true);
      } else {
        nn::fill_slot(tmp, l.weight);
      }
      // bitsandbytes holds a Conv1D's weight as the [out, in] Linear4bit it converts it to.
      w = l.in_out ? contiguous(transpose(tmp, 0, 1)) : tmp;
    }
    auto* q = dynamic_cast<nn::Nf4Linear*>(m.find_module(l.path));
    Nf4Weight state = q->state();
    nf4_quantize_into(w, state);
    q->set_host_state(state.offset, state.nested_map, state.dtype);
  }
  return r;
}

}  // namespace lt
