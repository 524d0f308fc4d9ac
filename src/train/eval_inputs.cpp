#include "train/eval_inputs.h"

#include <filesystem>
#include <map>

#include "leantrain/autograd.h"
#include "leantrain/safetensors.h"
#include "leantrain/train.h"
#include "models/registry.h"
#include "train/checkpoint.h"
#include "train/checkpoint_weights.h"
#include "train/quantize_setup.h"
#include "train/lora_setup.h"

namespace lt {

namespace {

DType parse_dtype(const std::string& s) {
  if (s == "f32") return DType::F32;
  if (s == "bf16") return DType::BF16;
  if (s == "f16") return DType::F16;
  usage("--dtype " + s, "the parameters' dtype is f32, bf16 or f16", "pass --dtype f32");
}

// The inputs file's tensor `name`, checked: `ranks` dims, one of the dtypes. lt::Error otherwise.
const Tensor* input(const std::map<std::string, Tensor>& in, const std::string& file, const std::string& name,
                    int64_t rank, bool floating, bool required) {
  auto it = in.find(name);
  if (it == in.end()) {
    if (!required) return nullptr;
    fail("'" + file + "' has no tensor '" + name + "'", "the model reads " + name, "add it to the inputs file");
  }
  const Tensor& t = it->second;
  const bool dtype_ok = floating ? is_floating(t.dtype()) : (t.dtype() == DType::I64 || t.dtype() == DType::I32);
  LT_CHECK(t.dim() == rank && dtype_ok, "tensor '" + name + "' in '" + file + "' is " +
               dtype_safetensors_name(t.dtype()) + " " + shape_str(t.shape()),
           "it should be " + std::string(floating ? "floating" : "I64 or I32") + " with " + std::to_string(rank) + " dims",
           "write it as the inputs of `leantrain eval` say (docs/user-guide.md)");
  return &t;
}

}  // namespace

EvalResult eval_inputs(const EvalConfig& cfg) {
  const DType dtype = parse_dtype(cfg.dtype);
  const Device device = resolve_device(cfg.device);
  std::unique_ptr<models::ModelConfig> mcfg;
  std::error_code ec;
  const bool dir = !models::family_of_preset(cfg.model) && std::filesystem::is_directory(cfg.model, ec);
  if (dir) {
    const std::string text = read_model_config(cfg.model);
    try {
      mcfg = models::config_from_json(text);
    } catch (const Error& e) {
      throw Error("--model " + cfg.model + ": config.json: " + e.what_part(), e.why(), e.fix());
    }
  } else if (models::family_of_preset(cfg.model)) {
    mcfg = models::config_from_preset(cfg.model);
  } else {
    usage("unknown model '" + cfg.model + "'", "it is neither a preset nor a model directory",
          "pass a directory holding config.json and model.safetensors");
  }
  nn::InitOptions init{.device = device, .dtype = dtype, .seed = cfg.seed};
  init.fill = !dir;
  std::shared_ptr<models::Model> model;
  // A bitsandbytes 4-bit directory (or a quantised leantrain save): its NF4 layers read as they are.
  const bool quantized = dir && model_dir_quantization(cfg.model).has_value();
  LoadedWeights loaded;
  {
    MemoryCategoryScope p(Category::Parameter);
    if (quantized) {
      QuantizedModel q = build_nf4_model(*mcfg, init, cfg.model);
      model = q.model;
      loaded = q.weights;
    } else {
      model = mcfg->build(init);
    }
  }
  EvalResult r;
  r.description = "model " + cfg.model + ": " + mcfg->family().display_name() + ", " +
                  std::to_string(model->num_parameters()) + " parameters in " + dtype_name(dtype) +
                  (quantized ? " (block linears in NF4)" : "");
  if (dir) {
    const LoadedWeights w = quantized ? loaded : load_model_weights(cfg.model, *model);
    r.description += ", weights from " + cfg.model + " (" + std::to_string(w.tensors) + " tensors in " +
                     std::to_string(w.files) + (w.files == 1 ? " file)" : " files)");
  }

  if (!cfg.adapter.empty()) {
    attach_peft_adapter(*model, cfg.adapter);
    r.description += ", LoRA adapter from " + cfg.adapter + " (" + std::to_string(lora_modules(*model).size()) + " layers)";
  }
  std::map<std::string, Tensor> in;
  {
    MemoryCategoryScope c(Category::Input);
    in = io::load_safetensors(cfg.inputs, device);
  }
  const bool tokens = mcfg->family().input() == models::InputKind::Tokens;
  const bool sequences = mcfg->family().input() == models::InputKind::Sequences;  // one label per text
  const Tensor* x = tokens || sequences ? input(in, cfg.inputs, "input_ids", 2, false, true)
                                        : input(in, cfg.inputs, "pixel_values", 4, true, true);
  const Tensor* labels = input(in, cfg.inputs, "labels", tokens ? 2 : 1, false, false);
  if (sequences) {
    const models::SequenceInput q = mcfg->sequences();
    LT_CHECK(x->size(1) <= q.context, "input_ids in '" + cfg.inputs + "' has " + std::to_string(x->size(1)) + " positions",
             "the model has " + std::to_string(q.context), "pass at most that many tokens per row");
  }
  if (tokens) {
    const models::TokenInput t = mcfg->tokens();
    LT_CHECK(x->size(1) <= t.context, "input_ids in '" + cfg.inputs + "' has " + std::to_string(x->size(1)) + " positions",
             "the model has " + std::to_string(t.context), "pass at most that many tokens per row");
  }
  if (labels)
    LT_CHECK(labels->size(0) == x->size(0) && (!tokens || labels->size(1) == x->size(1)),
             "labels in '" + cfg.inputs + "' are " + shape_str(labels->shape()),
             "they should be one per " + std::string(tokens ? "token: " : sequences ? "text: " : "image: ") +
                 shape_str(tokens ? x->shape() : Shape{x->size(0)}),
             "write labels of that shape");

  model->eval();
  InferenceModeGuard inference;
  MemoryCategoryScope act(Category::Activation);
  Tensor logits = model->forward(*x);
  Tensor loss;
  if (tokens && x->size(1) >= 2) {  // transformers' causal LM loss: logits at t predict labels at t + 1
    const int64_t T = x->size(1), V = logits.size(-1);
    Tensor target = labels ? *labels : *x;
    if (target.dtype() != DType::I64) target = target.to(DType::I64);
    loss = cross_entropy(reshape(slice(logits, 1, 0, T - 1).contiguous(), {-1, V}),
                         reshape(slice(target, 1, 1, T).contiguous(), {-1}));
  } else if (!tokens && labels) {
    loss = cross_entropy(logits, labels->dtype() == DType::I64 ? *labels : labels->to(DType::I64));
  }
  r.logits = logits.shape();
  if (loss.defined()) r.loss = loss.item();
  if (!cfg.out.empty()) {
    std::vector<std::pair<std::string, Tensor>> out{{"logits", logits.dtype() == DType::F32 ? logits : logits.to(DType::F32)}};
    if (loss.defined()) out.emplace_back("loss", loss.dtype() == DType::F32 ? loss : loss.to(DType::F32));
    io::save_safetensors(cfg.out, out, {{"format", "pt"}});
  }
  return r;
}

}  // namespace lt
