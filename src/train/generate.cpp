// generate_text: rebuilds the GPT a checkpoint describes (config.json), loads its weights and
// samples in inference mode. Text is byte-tokenized, as in training.
#include <cmath>

#include "leantrain/autograd.h"
#include "leantrain/precision.h"
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

  std::string tokenizer = read_tokenizer_name(cfg.checkpoint);
  if (tokenizer != "bytes")
    fail("cannot generate from " + cfg.checkpoint, "it holds an image classifier, not a language model",
         "pass a checkpoint saved by 'leantrain train --model gpt2-tiny --save DIR'");
  std::shared_ptr<models::Model> model;
  {
    MemoryCategoryScope p(Category::Parameter);
    nn::InitOptions init;
    init.device = device;
    init.dtype = precision_policy(read_checkpoint_config(cfg.checkpoint).precision).param_dtype;  // as saved
    model = models::create_model_from_json(read_model_config(cfg.checkpoint), init);
  }
  auto* gpt = dynamic_cast<models::GPT2*>(model.get());
  if (!gpt)
    fail("cannot generate from " + cfg.checkpoint, "its config.json describes a " + model->model_type() + " model",
         "pass a GPT checkpoint");
  load_weights(cfg.checkpoint, *model);

  // An empty prompt starts a new fortune, as the training text does after each "%" line.
  std::string prompt = cfg.prompt.empty() ? "\n" : cfg.prompt;
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  for (int64_t& id : ids) id = int64_t(uint8_t(id));
  auto piece = [](int64_t id) { return std::string(1, id < 256 ? char(uint8_t(id)) : '?'); };
  InferenceModeGuard inference;
  MemoryCategoryScope act(Category::Activation);
  std::vector<int64_t> out = gpt->generate(ids, cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.seed,
                                           [&](int64_t id) {
                                             if (on_text) on_text(piece(id));
                                           });
  std::string text = cfg.prompt;
  for (size_t i = ids.size(); i < out.size(); ++i) text += piece(out[i]);
  return text;
}

}  // namespace lt
