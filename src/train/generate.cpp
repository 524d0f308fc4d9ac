// generate_text: rebuilds the language model a checkpoint describes (config.json, through the
// model registry), loads its weights and samples in inference mode. Text goes through the
// checkpoint's tokenizer (its tokenizer.json, or the byte tokenizer of byte-level runs): the
// prompt is encoded as training encoded a document's start, sampled ids are decoded as they come
// (train/decode_stream.h), and sampling ends at the tokenizer's EOS. With --chat the prompt is a
// conversation rendered by the checkpoint's chat template, and the reply ends at its end of turn.
#include <algorithm>
#include <cmath>
#include <optional>

#include "leantrain/autograd.h"
#include "leantrain/precision.h"
#include "models/registry.h"
#include "train/checkpoint.h"
#include "train/decode_stream.h"
#include "train/run_tokenizer.h"
#include "train/quantize_setup.h"
#include "io/input_file.h"
#include "text/chat_data.h"

namespace lt {

namespace {

// generate --chat's conversation: the --messages file (a data line's {"messages", "tools"}, or
// the list alone), else one user message.
text::ChatExample chat_conversation(const GenerateConfig& cfg) {
  if (cfg.messages.empty()) {
    if (cfg.prompt.empty())
      usage("--chat without a message", "--prompt is the user's message, and it is empty",
            "pass --prompt TEXT, or --messages FILE with a conversation");
    text::ChatExample ex;
    ex.messages = text::OrderedJson::array({{{"role", "user"}, {"content", cfg.prompt}}});
    return ex;
  }
  if (!cfg.prompt.empty())
    usage("--prompt with --messages " + cfg.messages, "the file holds the whole conversation", "drop --prompt, or put it in the file");
  std::string body = io::read_input_file(cfg.messages, io::kMaxConfigBytes, "as a conversation",
                                         "pass a JSON file {\"messages\": [...]}");
  const size_t first = body.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && body[first] == '[') body = "{\"messages\": " + body + "}";
  return text::parse_chat_example(body, cfg.messages);
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
  RunTokenizer rt = checkpoint_tokenizer(cfg.checkpoint);
  const text::Tokenizer& tok = *rt.tokenizer;
  if (rt.json_path.empty() && tok.kind() != family.tokenizer())
    fail(context, "it was trained with the tokenizer '" + tok.kind() + "', and " + family.display_name() +
                      " models read '" + family.tokenizer() + "'",
         "pass a checkpoint saved by 'leantrain train --model gpt2-tiny --save DIR'");
  // What to condition on, before the model is built: a bad conversation costs no weights read.
  std::vector<int32_t> prompt;
  std::vector<int64_t> stops;
  std::string text;
  const bool chat = cfg.chat || !cfg.messages.empty();
  if (chat) {
    // The conversation rendered as apply_chat_template(add_generation_prompt=True) renders it and
    // tokenized without added specials (the template writes BOS); sampling stops at the end of
    // the assistant's turn. Only the reply is handed out.
    std::optional<text::ChatTemplate> loaded;
    try {
      loaded.emplace(run_chat_template(rt));
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      throw Error(context + ": " + e.what_part(), e.why(), e.fix());
    }
    const text::ChatTemplate& tmpl = *loaded;
    const text::ChatExample ex = chat_conversation(cfg);
    text::ChatOptions opt;
    opt.tools = ex.tools;
    prompt = tok.encode(tmpl.generation_prompt(ex.messages, opt), false);
    for (int32_t id : text::stop_ids(tok, tmpl)) stops.push_back(id);
    LT_CHECK(!stops.empty(), context + ": chat template " + tmpl.name(),
             "no end-of-turn token of it is one token of the tokenizer, and the tokenizer has no EOS, so a reply would never end",
             "use the chat template the model was trained with");
  } else {
    // The prompt with the tokenizer's special tokens (BOS when it adds one). An empty one starts a
    // new document: after EOS when the tokenizer has one, else after a newline (a new fortune, as
    // the byte-level training text has after each "%" line).
    prompt = tok.encode(cfg.prompt, true);
    if (prompt.empty()) prompt = tok.eos_id() ? std::vector<int32_t>{*tok.eos_id()} : tok.encode("\n", true);
    if (tok.eos_id()) stops.push_back(*tok.eos_id());
    text = cfg.prompt;
  }
  std::shared_ptr<models::Model> model;
  {
    MemoryCategoryScope p(Category::Parameter);
    nn::InitOptions init;
    init.device = device;
    init.dtype = checkpoint_param_dtype(cfg.checkpoint);  // as saved
    init.fill = false;                                     // the checkpoint overwrites every parameter
    // A quantised checkpoint (config.json's quantization_config) rebuilds its NF4 layers.
    model = model_dir_quantization(cfg.checkpoint) ? build_nf4_model(*mcfg, init, "").model : mcfg->build(init);
  }
  auto* lm = dynamic_cast<models::CausalLM*>(model.get());
  LT_ASSERT(lm);  // a causal token family builds CausalLMs
  if (tok.vocab_size() > lm->vocab_size())
    fail(context, "its tokenizer has " + std::to_string(tok.vocab_size()) + " ids and its model embeds only " +
                      std::to_string(lm->vocab_size()),
         "pass a checkpoint saved by 'leantrain train --save'");
  load_weights(cfg.checkpoint, *model);

  const std::vector<int64_t> ids(prompt.begin(), prompt.end());
  DecodeStream stream(tok, prompt);
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    text += piece;
    if (on_text) on_text(piece);
  };
  InferenceModeGuard inference;
  MemoryCategoryScope act(Category::Activation);
  lm->generate(ids, cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.seed,
               [&](int64_t id) {
                 // A chat's end-of-turn token ends the reply; it is not part of it.
                 if (chat && std::find(stops.begin(), stops.end(), id) != stops.end()) return;
                 emit(stream.push(int32_t(id)));
               },
               stops, tok.vocab_size());
  emit(stream.finish());
  return text;
}

}  // namespace lt
