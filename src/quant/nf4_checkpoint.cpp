// NF4 layers in Hugging Face checkpoints: the module keeps three buffers (nn_quant.h), the files
// hold bitsandbytes' six tensors; this maps between the two at save and load.
#include "quant/nf4_checkpoint.h"

#include "leantrain/error.h"
#include "leantrain/memory.h"
#include "leantrain/ops.h"
#include "quant/nf4_bnb_format.h"

namespace lt {

namespace {

constexpr const char* kSmall[] = {".quant_map", ".nested_quant_map", ".quant_state.bitsandbytes__nf4",
                                  ".quant_state.bitsandbytes__fp4"};

const char* checkpoint_dtype_word(DType t) {
  switch (t) {
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    default: return "float32";
  }
}

}  // namespace

std::vector<std::pair<std::string, nn::Nf4Linear*>> nf4_layers(nn::Module& m) {
  std::vector<std::pair<std::string, nn::Nf4Linear*>> out;
  for (auto& [path, mod] : m.named_modules())
    if (auto* q = dynamic_cast<nn::Nf4Linear*>(mod)) out.emplace_back(path, q);
  return out;
}

std::vector<std::pair<std::string, nn::MoeExperts*>> nf4_experts(nn::Module& m) {
  std::vector<std::pair<std::string, nn::MoeExperts*>> out;
  for (auto& [path, mod] : m.named_modules())
    if (auto* e = dynamic_cast<nn::MoeExperts*>(mod); e && e->quantized()) out.emplace_back(path, e);
  return out;
}

bool has_nf4(nn::Module& m) { return !nf4_layers(m).empty() || !nf4_experts(m).empty(); }

std::map<std::string, Nf4Stack> nf4_expert_stacks(nn::Module& m) {
  std::map<std::string, Nf4Stack> out;
  for (auto& [path, e] : nf4_experts(m)) {
    out[path + ".gate_up_proj"] = e->gate_up_nf4();
    out[path + ".down_proj"] = e->down_nf4();
  }
  return out;
}

std::string nf4_piece_key(const std::string& param, int64_t piece) { return param + "#" + std::to_string(piece); }

std::vector<std::pair<std::string, Tensor>> nf4_save_layout(nn::Module& m,
                                                            std::vector<std::pair<std::string, Tensor>> tensors) {
  const auto layers = nf4_layers(m);
  if (layers.empty()) return tensors;
  std::map<std::string, nn::Nf4Linear*> by_weight;  // "P.weight" -> layer
  std::set<std::string> dropped;
  for (auto& [path, q] : layers) {
    by_weight[path + ".weight"] = q;
    dropped.insert(path + ".weight_absmax");
    dropped.insert(path + ".weight_nested_absmax");
  }
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, t] : tensors) {
    if (dropped.count(name)) continue;
    auto it = by_weight.find(name);
    if (it == by_weight.end()) {
      out.emplace_back(name, t);
      continue;
    }
    for (auto& e : nf4_to_bnb(it->second->state(), name)) out.push_back(std::move(e));
  }
  return out;
}

namespace {

// The module name a file key holds (the model's own name for it), its bitsandbytes suffix split off.
std::string split_bnb_key(const std::string& key, std::string& suffix,
                          const std::function<std::string(const std::string&)>& key_to_name) {
  suffix.clear();
  for (const char* s : {".absmax", ".nested_absmax", ".quant_map", ".nested_quant_map",
                        ".quant_state.bitsandbytes__nf4", ".quant_state.bitsandbytes__fp4"})
    if (key.ends_with(std::string(".weight") + s)) {
      suffix = s;
      return key_to_name(key.substr(0, key.size() - suffix.size()));
    }
  return key_to_name(key);
}

// nf4_prepare_load's part for NF4 experts: each stack's pieces under their layout names.
void prepare_expert_load(const io::WeightFiles& files, nn::Module& m, io::WeightLoadSpec& spec,
                         const std::function<std::string(const std::string&)>& key_to_name,
                         const std::set<std::string>& from_float, const std::vector<models::CheckpointTensor>& layout,
                         std::map<std::string, std::string>& float_keys, std::set<std::string>& ignored) {
  const auto experts = nf4_experts(m);
  if (experts.empty()) return;
  const std::string where = files.dir() + "/" + files.describe();
  struct Piece {
    int64_t index;
    std::string name;  // the layout's (hub) name of this piece's weight
  };
  std::map<std::string, std::vector<Piece>> pieces;  // codes buffer -> its pieces
  std::set<std::string> buffers;                     // every buffer of the stacks
  std::map<std::string, std::string> wanted;         // model's name for a piece's weight -> codes buffer
  for (auto& [path, e] : experts)
    for (const char* w : {".gate_up_proj", ".down_proj"})
      for (const char* b : {"", "_absmax", "_nested_absmax"}) buffers.insert(path + w + b);
  for (const models::CheckpointTensor& c : layout)
    if (buffers.count(c.param)) {
      pieces[c.param].push_back({c.row, c.name});
      wanted[key_to_name(c.name)] = c.param;
    }
  std::erase_if(spec.targets, [&](const io::WeightTarget& t) { return buffers.count(t.param) > 0; });
  // File keys by the model's name of the weight they belong to, and the fused stacks' keys.
  std::map<std::string, std::map<std::string, std::string>> keys;  // weight name -> suffix -> key
  std::map<std::string, std::string> fused;                        // codes buffer -> key
  for (const std::string& key : files.names()) {
    std::string suffix;
    const std::string name = split_bnb_key(key, suffix, key_to_name);
    if (wanted.count(name)) keys[name][suffix] = key;
    else if (suffix.empty() && pieces.count(name)) fused[name] = key;
  }
  for (auto& [path, e] : experts) {
    for (bool gate_up : {true, false}) {
      const std::string param = path + (gate_up ? ".gate_up_proj" : ".down_proj");
      const Nf4Stack cur = gate_up ? e->gate_up_nf4() : e->down_nf4();
      const std::vector<Piece>& ps = pieces[param];
      LT_ASSERT(int64_t(ps.size()) == cur.pieces());  // Llama::checkpoint_tensors names every piece
      if (from_float.count(path)) {
        const auto f = fused.find(param);
        for (const Piece& pc : ps) {
          const auto& k = keys[key_to_name(pc.name)];
          const bool has_state = k.count(".quant_state.bitsandbytes__nf4") || k.count(".quant_state.bitsandbytes__fp4");
          const auto it = k.find("");
          if (has_state || (it == k.end() && f == fused.end()))
            fail("tensor '" + pc.name + "' in " + where,
                 has_state ? "it is a bitsandbytes 4-bit state, and this load quantises floating weights"
                           : "missing (and no fused " + param + " either), and the model's NF4 experts are quantised from it",
                 "pass the model's unquantised weights, or a directory whose config.json has its quantization_config");
          const std::string& key = it != k.end() ? it->second : f->second;
          ignored.insert(key);
          float_keys[nf4_piece_key(param, pc.index)] = key;
        }
        continue;
      }
      if (fused.count(param))
        fail("tensor '" + fused.at(param) + "' in " + where, "a floating stack of experts, and the model's experts are NF4",
             "pass a checkpoint saved from this quantised model (or by bitsandbytes with load_in_4bit)");
      std::vector<float> offsets(size_t(cur.pieces()), 0.0f), map;
      DType dtype = cur.dtype;
      for (const Piece& pc : ps) {
        const auto& k = keys[key_to_name(pc.name)];
        if (!k.count(".quant_state.bitsandbytes__nf4") && !k.count(".quant_state.bitsandbytes__fp4"))
          fail("tensor '" + pc.name + "' in " + where,
               k.count("") ? std::string("a floating weight without a bitsandbytes 4-bit state, and the model's experts are NF4")
                           : std::string("missing (the model's NF4 experts need its bitsandbytes state)"),
               "pass a checkpoint saved from this quantised model (or by bitsandbytes with load_in_4bit)");
        for (const char* big : {"", ".absmax", ".nested_absmax"})
          if (!k.count(big))
            fail("tensor '" + pc.name + big + "' in " + where, "missing (a bitsandbytes 4-bit state has it)",
                 "pass a checkpoint saved by bitsandbytes with bnb_4bit_use_double_quant=True");
        const Nf4Weight q = cur.piece(pc.index);
        std::map<std::string, Tensor> state{{pc.name, reshape(q.codes, {q.codes.numel(), 1})},
                                            {pc.name + ".absmax", q.absmax_codes},
                                            {pc.name + ".nested_absmax", q.nested_absmax}};
        for (const char* small : kSmall)
          if (auto it = k.find(small); it != k.end()) {
            MemoryCategoryScope host(Category::Other);
            state[pc.name + small] = files.find(it->second).file->read(it->second, Device::cpu());
            ignored.insert(it->second);
          }
        const Nf4Weight read = nf4_from_bnb(state, pc.name, where);
        if (read.shape != q.shape)
          fail("tensor '" + pc.name + ".quant_state.bitsandbytes__nf4' in " + where,
               "it holds a weight of shape " + shape_str(read.shape) + ", the model's expert piece is " + shape_str(q.shape),
               "pass a checkpoint of this model: its config.json must describe these weights");
        if (!map.empty() && read.nested_map != map)
          fail("tensor '" + pc.name + ".nested_quant_map' in " + where,
               "it differs from the other experts' of " + path + ", and NF4 experts share one nested map",
               "pass a checkpoint quantised with bitsandbytes' one dynamic map (what quantize_4bit writes)");
        map = read.nested_map;
        dtype = read.dtype;
        offsets[size_t(pc.index)] = read.offset;
        spec.targets.push_back({k.at(""), param, reshape(q.codes, {q.codes.numel(), 1}), true});
        spec.targets.push_back({k.at(".absmax"), param + "_absmax", q.absmax_codes, true});
        spec.targets.push_back({k.at(".nested_absmax"), param + "_nested_absmax", q.nested_absmax, true});
      }
      e->set_nf4_host_state(gate_up, std::move(offsets), std::move(map), dtype);
    }
  }
}

}  // namespace

std::map<std::string, std::string> nf4_prepare_load(const io::WeightFiles& files, nn::Module& m,
                                                    io::WeightLoadSpec& spec,
                                                    const std::function<std::string(const std::string&)>& key_to_name,
                                                    const std::set<std::string>& from_float,
                                                    const std::vector<models::CheckpointTensor>& layout) {
  std::map<std::string, std::string> float_keys;
  std::set<std::string> ignored;
  prepare_expert_load(files, m, spec, key_to_name, from_float, layout, float_keys, ignored);
  const auto layers = nf4_layers(m);
  auto ignore = [&spec, &ignored] {
    if (ignored.empty()) return;
    auto prev = spec.rename;
    spec.rename = [ignored, prev](const std::string& key) -> std::string {
      if (ignored.count(key)) return "";
      return prev ? prev(key) : key;
    };
  };
  if (layers.empty()) {
    ignore();
    return float_keys;
  }
  const std::string where = files.dir() + "/" + files.describe();
  auto split = [&](const std::string& key, std::string& suffix) { return split_bnb_key(key, suffix, key_to_name); };
  std::map<std::string, nn::Nf4Linear*> by_weight;  // "P.weight" -> layer
  for (auto& [path, q] : layers) by_weight[path + ".weight"] = q;
  // name -> file key, for the layers' tensors.
  std::map<std::string, std::map<std::string, std::string>> keys;  // "P.weight" -> suffix -> key
  for (const std::string& key : files.names()) {
    std::string suffix;
    const std::string name = split(key, suffix);
    if (by_weight.count(name)) keys[name][suffix] = key;
  }
  // The generic loader fills no NF4 buffer by itself: targets come from here.
  std::set<std::string> buffers;
  for (auto& [w, q] : by_weight) {
    const std::string path = w.substr(0, w.size() - 7);
    buffers.insert(w);
    buffers.insert(path + ".weight_absmax");
    buffers.insert(path + ".weight_nested_absmax");
  }
  std::erase_if(spec.targets, [&](const io::WeightTarget& t) { return buffers.count(t.param) > 0; });
  for (auto& [w, q] : by_weight) {
    const std::string path = w.substr(0, w.size() - 7);
    const auto& k = keys[w];
    const bool has_state = k.count(".quant_state.bitsandbytes__nf4") || k.count(".quant_state.bitsandbytes__fp4");
    if (from_float.count(path)) {
      const auto it = k.find("");
      if (has_state || it == k.end())
        fail("tensor '" + w + "' in " + where,
             has_state ? "it is a bitsandbytes 4-bit state, and this load quantises floating weights"
                       : "missing, and the model's NF4 layer is quantised from it",
             "pass the model's unquantised weights, or a directory whose config.json has its quantization_config");
      ignored.insert(it->second);
      float_keys[path] = it->second;
      continue;
    }
    if (!has_state) {
      const auto it = k.find("");
      fail("tensor '" + w + "' in " + where,
           it == k.end() ? std::string("missing (the model's NF4 layer needs its bitsandbytes state)")
                         : "a floating weight without a bitsandbytes 4-bit state, and the model's layer is NF4",
           "pass a checkpoint saved from this quantised model (or by bitsandbytes with load_in_4bit)");
    }
    for (const char* big : {"", ".absmax", ".nested_absmax"})
      if (!k.count(big))
        fail("tensor '" + w + big + "' in " + where, "missing (a bitsandbytes 4-bit state has it)",
             "pass a checkpoint saved by bitsandbytes with bnb_4bit_use_double_quant=True");
    // The small tensors to the host; the buffers stand in for the large ones (the loader checks
    // the files' shapes and dtypes against them), so the format reader checks everything at once.
    const Nf4Weight cur = q->state();
    std::map<std::string, Tensor> state{{w, reshape(cur.codes, {cur.codes.numel(), 1})},
                                        {w + ".absmax", cur.absmax_codes},
                                        {w + ".nested_absmax", cur.nested_absmax}};
    for (const char* small : kSmall)
      if (auto it = k.find(small); it != k.end()) {
        MemoryCategoryScope host(Category::Other);
        state[w + small] = files.find(it->second).file->read(it->second, Device::cpu());
        ignored.insert(it->second);
      }
    const Nf4Weight read = nf4_from_bnb(state, w, where);
    if (read.shape != cur.shape)
      fail("tensor '" + w + ".quant_state.bitsandbytes__nf4' in " + where,
           "it holds a weight of shape " + shape_str(read.shape) + ", the model's layer is " + shape_str(cur.shape),
           "pass a checkpoint of this model: its config.json must describe these weights");
    q->set_host_state(read.offset, read.nested_map, read.dtype);
    spec.targets.push_back({k.at(""), w, reshape(cur.codes, {cur.codes.numel(), 1}), true});
    spec.targets.push_back({k.at(".absmax"), path + ".weight_absmax", cur.absmax_codes, true});
    spec.targets.push_back({k.at(".nested_absmax"), path + ".weight_nested_absmax", cur.nested_absmax, true});
  }
  ignore();
  return float_keys;
}

std::string nf4_config_json(nn::Module& m, const std::string& config_json) {
  const auto layers = nf4_layers(m);
  const auto experts = nf4_experts(m);
  if (layers.empty() && experts.empty()) return config_json;
  nlohmann::json j = nlohmann::json::parse(config_json);
  j["quantization_config"] = bnb_quantization_config(layers.empty() ? experts.front().second->gate_up_nf4().dtype
                                                                     : layers.front().second->state().dtype);
  return j.dump(2) + "\n";
}

nlohmann::json bnb_quantization_config(DType compute) {
  // BitsAndBytesConfig.to_dict(), keys sorted as config.json is written (json.dumps(sort_keys=True)).
  return nlohmann::json{{"_load_in_4bit", true},
                        {"_load_in_8bit", false},
                        {"bnb_4bit_compute_dtype", checkpoint_dtype_word(compute)},
                        {"bnb_4bit_quant_storage", "uint8"},
                        {"bnb_4bit_quant_type", "nf4"},
                        {"bnb_4bit_use_double_quant", true},
                        {"llm_int8_enable_fp32_cpu_offload", false},
                        {"llm_int8_has_fp16_weight", false},
                        {"llm_int8_skip_modules", nullptr},
                        {"llm_int8_threshold", 6.0},
                        {"load_in_4bit", true},
                        {"load_in_8bit", false},
                        {"quant_method", "bitsandbytes"}};
}

}  // namespace lt
