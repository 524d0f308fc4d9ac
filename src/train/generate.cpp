// generate_text: rebuilds the language model a checkpoint describes (config.json, through the
// model registry), loads its weights and samples in inference mode. Text is byte-tokenized, as
// in training.
#include <cmath>

#include "leantrain/autograd.h"
#include "leantrain/precision.h"
#include "models/registry.h"
#include "train/checkpoint.h"

namespace lt {

namespace {
[[noreturn]] void usage(std::string what, std::string why, std::string fix) {
  throw UsageError(std::move(what), std::move(why), std::move(fix));
}
}  // namespace

std::string generate_text(const GenerateConfig& cfg, const std::function<void(const std::string&)>& on_text) {
  if (cfg.max_new_tokens < 0)
    usage("--max-new-tokens " + std::to_string(cfg.max_new_tokens), "it must not be negative", "pass e.g. --max-new-tokens 200");
  if (!(cfg.temperature >= 0) || !std::isfinite(cfg.temperature))
    usage("--temperature " + std::to_string(cfg.temperature), "it must be 0 (greedy) or positive", "pass e.g. --temperature 0.8");
  if (cfg.top_k < 0) usage("--top-k " + std::to_string(cfg.top_k), "it must not be negative", "pass e.g. --top-k 40, or 0 for all");
  Device device = resolve_device(cfg.device);

  // The model comes from the checkpoint's config.json through the registry: its family must be a
  // causal language model, and its size is checked before anything is built.
  const std::string context = "cannot generate from " + cfg.checkpoint;
  std::unique_ptr<models::ModelConfig> mcfg;
  const std::string config_text = read_model_config(cfg.checkpoint);
  try {
    mcfg = models::config_from_json(config_text);
  } catch (const Error& e) {
    throw Error(context + ": config.json: " + e.what_part(), e.why(), e.fix());
  }
  const models::ModelFamily& family = mcfg->family();
  if (!family.causal() || family.input() != models::InputKind::Tokens)
    fail(context,
         family.input() == models::InputKind::Images
             ? "it holds an image classifier (" + family.display_name() + "), not a language model"
             : "its " + family.display_name() + " model is not a causal language model",
         "pass a checkpoint saved by 'leantrain train --model gpt2-tiny --save DIR'");
  // A plain model directory (save_pretrained's: no trainer_state.json) reads the family's tokenizer.
  const bool plain = is_plain_model_dir(cfg.checkpoint);
  const std::string tokenizer = plain ? family.tokenizer() : read_tokenizer_name(cfg.checkpoint);
  if (tokenizer != family.tokenizer())
    fail(context, "it was trained with the tokenizer '" + tokenizer + "', and " + family.display_name() +
                      " models read '" + family.tokenizer() + "'",
         "pass a checkpoint saved by 'leantrain train --model gpt2-tiny --save DIR'");
  std::shared_ptr<models::Model> model;
  {
    MemoryCategoryScope p(Category::Parameter);
    nn::InitOptions init;
    init.device = device;
    init.dtype = checkpoint_param_dtype(cfg.checkpoint);  // as saved
    init.fill = false;                                     // the checkpoint overwrites every parameter
    model = mcfg->build(init);
  }
  auto* lm = dynamic_cast<models::CausalLM*>(model.get());
  LT_ASSERT(lm);  // a causal token family builds CausalLMs
  load_weights(cfg.checkpoint, *model);

  // An empty prompt starts a new fortune, as the training text does after each "%" line.
  std::string prompt = cfg.prompt.empty() ? "\n" : cfg.prompt;
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  for (int64_t& id : ids) id = int64_t(uint8_t(id));
  auto piece = [](int64_t id) { return std::string(1, id < 256 ? char(uint8_t(id)) : '?'); };
  InferenceModeGuard inference;
  MemoryCategoryScope act(Category::Activation);
  std::vector<int64_t> out = lm->generate(ids, cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.seed,
                                           [&](int64_t id) {
                                             if (on_text) on_text(piece(id));
                                           });
  std::string text = cfg.prompt;
  for (size_t i = ids.size(); i < out.size(); ++i) text += piece(out[i]);
  return text;
}

}  // namespace lt
