// make_task: resolves --model/--config into a model config through the registry (models/registry.h),
// applies the size overrides, fits it to the data (image size, channels, classes), picks the
// tokenizer of a text model (train/run_tokenizer.h), builds the model on the device and the loaders. Mistakes in the flags are
// UsageErrors; bad files are lt::Errors.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "leantrain/precision.h"
#include "data/synthetic.h"
#include "dist/fsdp_build.h"
#include "models/registry.h"
#include "train/checkpoint.h"
#include "train/checkpoint_weights.h"
#include "text/chat_template.h"
#include "train/dpo.h"
#include "io/text_format.h"
#include "train/lora_setup.h"
#include "io/input_file.h"
#include "train/quantize_setup.h"
#include "train/recipe_table.h"
#include "train/task.h"

namespace lt {

namespace {

struct ModelSpec {
  std::string name;  // preset name or config path
  std::unique_ptr<models::ModelConfig> cfg;
  std::string weights_dir;  // --model DIR: the weights to load (the config is DIR's config.json)
};

std::string read_config_file(const std::string& flag, const std::string& path) {
  std::filesystem::path p = path;
  if (std::filesystem::is_directory(p)) p /= "config.json";
  io::check_input_file_if_exists(p.string(), io::kMaxConfigBytes, "as a config",
                                 "pass the path of a Hugging Face config.json");
  std::ifstream f(p);
  if (!f) fail(flag + " " + path + ": cannot read the config", "no such file", "pass the path of a Hugging Face config.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The error of `f`, with `context` before its first part (which file was at fault).
template <class F>
auto in_context(const std::string& context, F&& f) {
  try {
    return f();
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw Error(context + ": " + e.what_part(), e.why(), e.fix());
  }
}

ModelSpec spec_from_file(const std::string& flag, const std::string& path) {
  const std::string text = read_config_file(flag, path);
  return {path, in_context(flag + " " + path, [&] { return models::config_from_json(text); }), ""};
}

// --model: a preset name always means the preset; anything else must be a model directory
// (config.json + weights), whose weights are then loaded. A directory named like a preset is
// reached as ./NAME. A config.json alone goes to --config (random weights).
ModelSpec resolve_model(const RunConfig& c) {
  if (!c.model_config.empty()) {
    // --model's default is a preset, which --config replaces; a directory given with it would
    // have its weights silently dropped.
    if (!models::family_of_preset(c.model))
      usage("--model " + c.model + " with --config " + c.model_config,
            "--model DIR starts from the directory's weights and --config from random ones, so the two contradict",
            "drop --config to start from the weights, or --model to train the configured model from scratch");
    return spec_from_file("--config", c.model_config);
  }
  if (models::family_of_preset(c.model)) return {c.model, models::config_from_preset(c.model), ""};
  // Resuming a run that started from a model directory: the checkpoint has the architecture and
  // the weights, so the directory it started from need not exist any more.
  // A LoRA checkpoint holds the adapters only: its base comes from --model again.
  if (!c.resume.empty() && c.lora_rank == 0) return spec_from_file("--resume", c.resume);
  std::error_code ec;
  if (!c.resume.empty() && !std::filesystem::exists(c.model, ec))
    fail("cannot resume from " + c.resume + ": its base model " + c.model + " is gone",
         "a LoRA checkpoint holds the adapters only, and the run reads the base from the directory it started from",
         "pass --model with the base model's directory where it is now");
  if (std::filesystem::is_directory(c.model, ec)) {
    ModelSpec s = spec_from_file("--model", c.model);
    if (!has_model_weights(c.model))
      fail("--model " + c.model + ": no weights in the directory",
           "it has a config.json but neither model.safetensors nor model.safetensors.index.json",
           "add the weights, or pass --config " + (std::filesystem::path(c.model) / "config.json").string() +
               " to train that architecture from random weights");
    s.weights_dir = c.model;
    return s;
  }
  std::string known;
  for (auto& n : models::preset_names()) known += (known.empty() ? "" : ", ") + n;
  if (std::filesystem::exists(c.model, ec))
    usage("--model " + c.model + " is a file", "--model takes a preset (" + known + ") or a model directory",
          "pass --config " + c.model + " to build the model it describes with random weights");
  usage("unknown model '" + c.model + "'", "it is neither a preset (" + known + ") nor a model directory",
        "pass a preset or a directory holding config.json and model.safetensors to --model, or a config.json to --config");
}

// --dim, --depth, ...: the family maps them to its fields; the result is validated at once (the
// size limit included), before any data is read or any module built. Mistakes are the flags'.
void apply_overrides(ModelSpec& s, const RunConfig& c) {
  const models::SizeOverrides o{c.dim, c.depth, c.heads, c.patch, c.mlp_dim};
  if (!o.any()) return;
  if (!s.weights_dir.empty())
    usage("size flags (--dim, --depth, --heads, --patch, --mlp-dim) with --model " + s.weights_dir,
          "the directory's weights fix the model's sizes",
          "drop them, or pass --config " + (std::filesystem::path(s.weights_dir) / "config.json").string() +
              " to train a resized model from random weights");
  try {
    s.cfg->apply_overrides(o);
    s.cfg->validate();
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what_part(), e.why(), e.fix());
  }
}

// --resume: the checkpoint's config.json, read through the registry (so a damaged one is refused
// before anything is built), must describe the model this run builds.
void check_resume_config(const RunConfig& c, const models::ModelConfig& cfg) {
  if (c.resume.empty()) return;
  const std::string context = "cannot resume from " + c.resume + ": config.json";
  const std::string text = read_model_config(c.resume);
  const auto saved_cfg = in_context(context, [&] { return models::config_from_json(text); });
  if (&saved_cfg->family() != &cfg.family())
    fail(context + " describes a " + saved_cfg->family().display_name() + " model",
         "this run builds a " + cfg.family().display_name() + " model",
         "resume with the model and size flags that saved the checkpoint");
  const nlohmann::json saved = nlohmann::json::parse(saved_cfg->to_json());
  const nlohmann::json mine = nlohmann::json::parse(cfg.to_json());
  for (auto& [key, value] : mine.items()) {
    auto it = saved.find(key);
    const std::string had = it == saved.end() ? "nothing" : it->dump();
    if (it == saved.end() || *it != value)
      fail(context + " has " + key + " = " + had, "this run builds " + key + " = " + value.dump(),
           "resume with the model and size flags that saved the checkpoint");
  }
}

// Validates the fitted config and builds the model (parameters under Category::Parameter). With
// --model DIR the parameters are created unfilled and DIR's weights streamed into them (unless
// --resume restores other weights anyway): the same bytes on the device as a random init, no draws.
void build_model(Task& t, const ModelSpec& s, const RunConfig& c, nn::InitOptions init) {
  s.cfg->validate();
  check_resume_config(c, *s.cfg);
  const bool load = !s.weights_dir.empty() && (c.resume.empty() || c.lora_rank > 0);
  init.fill = !load;
  // --quantize nf4, or a bitsandbytes 4-bit model directory (train/quantize_setup.h).
  const std::string saved = !c.resume.empty() ? c.resume : s.weights_dir;
  const bool prequantized = !saved.empty() && model_dir_quantization(saved).has_value();
  if (c.quantize == QuantizeKind::Nf4 || prequantized) {
    const QuantizedModel q = in_context("--model " + (s.weights_dir.empty() ? s.name : s.weights_dir), [&] {
      return build_nf4_model(*s.cfg, init, load ? s.weights_dir : "");
    });
    t.model = q.model;
    t.weights_note = "; " + std::to_string(q.layers) + " linear layers in NF4" +
                     (q.prequantized ? " as saved by bitsandbytes" : "");
    if (load)
      t.weights_note += "; weights loaded from " + s.weights_dir + " (" + std::to_string(q.weights.tensors) + " tensors" +
                        (q.weights.files > 1 ? " in " + std::to_string(q.weights.files) + " shards" : "") + ")";
  } else if (dist::builds_sharded(c)) {  // fsdp: this rank's share only (dist/fsdp_build.h)
    MemoryCategoryScope p(Category::Parameter);
    std::vector<nn::DeferredSlot> slots;
    init.flat = true;
    init.deferred = &slots;
    t.model = s.cfg->build(init);
    t.model->set_loss_chunk(c.loss_chunk);  // which modules are fsdp units depends on it
    dist::materialize_rank_share(c, *t.model, slots, init.fill);
  } else {
    MemoryCategoryScope p(Category::Parameter);
    t.model = s.cfg->build(init);
  }
  if (load && t.weights_note.empty()) {
    const LoadedWeights w =
        in_context("--model " + s.weights_dir, [&] { return load_model_weights(s.weights_dir, *t.model); });
    t.weights_note = "; weights loaded from " + s.weights_dir + " (" + std::to_string(w.tensors) + " tensors" +
                     (w.files > 1 ? " in " + std::to_string(w.files) + " shards" : "") + ")";
  }
  nn::set_lean_saves(*t.model, c.lean_saves);
  t.lora_note = apply_lora(*t.model, c);  // --lora-rank: adapters on the loaded base, the rest frozen
}

// A loaded image model reads the images it was trained on: the data must fit it, not it the data.
void check_images_fit(const ModelSpec& s, int64_t size, int64_t channels, int64_t classes, const std::string& data) {
  const models::ImageInput in = s.cfg->images();
  if (in.size == size && in.channels == channels && in.classes == classes) return;
  usage("--data " + data + " does not fit the model in " + s.weights_dir,
        "the model reads " + std::to_string(in.size) + "x" + std::to_string(in.size) + "x" + std::to_string(in.channels) +
            " images into " + std::to_string(in.classes) + " classes, the data has " + std::to_string(size) + "x" +
            std::to_string(size) + "x" + std::to_string(channels) + " images in " + std::to_string(classes) + " classes",
        "pass --data synthetic (images of the model's own size) or data of that shape");
}

// --workers, or min(8, hardware threads - 1) when not given.
int loader_workers(const RunConfig& c) {
  if (c.workers < 0)
    usage("--workers " + std::to_string(c.workers), "it counts the threads that build batches",
          "pass --workers 1 or more");
  return c.workers > 0 ? int(std::min<int64_t>(c.workers, 1024)) : default_loader_workers();
}

// The training batches' loader: micro-batches of the run, shuffled by its seed, the last partial
// one dropped, on the run's device.
LoaderOptions training_loader(const RunConfig& c, Device device) {
  LoaderOptions lo;
  lo.batch_size = c.micro_batch ? c.micro_batch : c.batch;
  lo.seed = c.seed;
  lo.drop_last = true;
  lo.device = device;
  lo.workers = loader_workers(c);
  return lo;
}

std::string millions(int64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fM", double(n) / 1e6);
  return buf;
}

// --chat-template, --train-on and --packing shape a language model's text; elsewhere they are a mistake.
// (A resumed run is let be: a checkpoint saved before --packing existed reads it as concat.)
void refuse_text_flags(const RunConfig& c, const std::string& what, const std::string& why,
                       std::initializer_list<const char*> flags = {"--chat-template", "--train-on", "--packing"}) {
  if (!c.resume.empty()) return;
  for (const char* flag : flags) {
    const RecipeField* f = recipe_field(flag);
    if (!field_is_default(*f, c))
      usage(std::string(flag) + " " + field_text(*f, c) + " with " + what, why, std::string("drop ") + flag);
  }
}

// --data synthetic: the preset's own image size and channels, 10 classes (the memory ladder's),
// 8 steps' worth of training samples and 2 micro-batches of held-out ones.
void make_synthetic_image_task(Task& t, ModelSpec& s, const RunConfig& c, nn::InitOptions init) {
  models::ImageInput in = s.cfg->images();
  if (s.weights_dir.empty()) s.cfg->fit_images(in.size, in.channels, 10);  // a loaded model keeps its classes
  in = s.cfg->images();
  build_model(t, s, c, init);
  const int64_t mb = c.micro_batch ? c.micro_batch : c.batch;
  t.classifier = true;
  t.unit = "img/s";
  t.held_out = std::make_shared<SyntheticImages>(2 * mb, in.channels, in.size, in.classes, c.seed + 1);
  const LoaderOptions lo = training_loader(c, init.device);
  auto train = std::make_shared<SyntheticImages>(8 * c.batch, in.channels, in.size, in.classes, c.seed);
  t.train = std::make_unique<DataLoader>(train, lo);
  t.description = "model " + s.name + ": " + s.cfg->family().display_name() + ", " +
                  millions(t.model->num_parameters()) + " parameters (" + std::to_string(in.size) + "x" +
                  std::to_string(in.size) + "x" + std::to_string(in.channels) + " images); data synthetic";
}

void make_image_task(Task& t, ModelSpec& s, const RunConfig& c, nn::InitOptions init) {
  if (c.data == "fortunes")
    usage("--data fortunes is text", s.name + " is an image classifier", "pass --data fashion-mnist, or a GPT model");
  if (c.seq_len) usage("--seq-len " + std::to_string(c.seq_len), "it applies to GPT models", "drop --seq-len");
  if (!c.tokenizer.empty()) usage("--tokenizer " + c.tokenizer, "it applies to language models", "drop --tokenizer");
  refuse_text_flags(c, "model " + s.name, "it is an image classifier; these flags shape a language model's text");
  if (c.data == kSyntheticData) return make_synthetic_image_task(t, s, c, init);
  std::string dir = c.data.empty() || c.data == "fashion-mnist" ? kFashionMnistDir : c.data;
  auto train = std::make_shared<const ImageSet>(load_fashion_mnist(Split::Train, dir));
  auto test = std::make_shared<const ImageSet>(load_fashion_mnist(Split::Test, dir));
  LT_CHECK(train->rows == train->cols, "images in " + dir + " are " + std::to_string(train->rows) + "x" +
           std::to_string(train->cols), "the " + s.cfg->family().display_name() + " needs square images",
           "use square images");
  if (!s.weights_dir.empty()) check_images_fit(s, train->rows, 1, 10, dir);
  s.cfg->fit_images(train->rows, 1, 10);  // the data decides the input and the classes
  const models::ImageInput in = s.cfg->images();
  if (in.size % in.patch)
    usage("patch size " + std::to_string(in.patch) + " does not divide the " + std::to_string(in.size) +
              "-pixel images",
          "a " + s.cfg->family().display_name() + " cuts images into whole patches", "pass e.g. --patch 7 or --patch 4");
  build_model(t, s, c, init);
  t.classifier = true;
  t.unit = "img/s";
  t.held_out = std::make_shared<ImageDataset>(test);
  const LoaderOptions lo = training_loader(c, init.device);
  t.train = std::make_unique<DataLoader>(std::make_shared<ImageDataset>(train), lo);
  t.description = "model " + s.name + ": " + s.cfg->family().display_name() + ", " +
                  millions(t.model->num_parameters()) + " parameters (" + std::to_string(in.size) + "x" +
                  std::to_string(in.size) + " images, " + s.cfg->size_summary() + "); data " + dir + ": " +
                  std::to_string(train->count) + " train / " + std::to_string(test->count) + " test images";
}

// The directory the model's config.json was read from (--model DIR, --config DIR): its
// tokenizer.json is the run's default. "" for a preset or a config file.
std::string model_directory(const RunConfig& c) {
  const std::string p = !c.model_config.empty() ? c.model_config : models::family_of_preset(c.model) ? "" : c.model;
  std::error_code ec;
  return !p.empty() && std::filesystem::is_directory(p, ec) ? p : "";
}

// The run's tokenizer. A resumed run reads the checkpoint's copy; --tokenizer given again must
// name the same tokenizer.json. `required`: false for synthetic data, which needs none (one is
// still loaded, and saved, when given or found beside the model).
RunTokenizer choose_tokenizer(const RunConfig& c, const ModelSpec& s, bool required) {
  if (!c.resume.empty()) {
    // A synthetic-data run saved without a tokenizer resumes without one (random ids need none).
    std::error_code ec;
    if (!required && c.tokenizer.empty() && !std::filesystem::exists(std::filesystem::path(c.resume) / "tokenizer.json", ec))
      return {};
    RunTokenizer saved = checkpoint_tokenizer(c.resume);
    if (!c.tokenizer.empty() && !same_tokenizer_json(saved, resolve_tokenizer_json(c.tokenizer, "")))
      throw UsageError("--tokenizer " + c.tokenizer + " with --resume " + c.resume,
                       "the checkpoint was trained with another tokenizer (its copy is " + c.resume + "/tokenizer.json)",
                       "drop --tokenizer: a resumed run reads the checkpoint's");
    return saved;
  }
  const std::string json = resolve_tokenizer_json(c.tokenizer, model_directory(c));
  if (json.empty() && !required) return {};
  return load_run_tokenizer(json, s.cfg->family(), s.name);
}

// --chat-template FILE becomes the run's chat_template.jinja. A resumed run has the checkpoint's
// (saved with its tokenizer files): the flag may only name that same template.
void use_chat_template(RunTokenizer& rt, const RunConfig& c) {
  if (c.resume.empty()) return set_chat_template(rt, c.chat_template);
  std::string saved;
  for (const auto& [name, bytes] : rt.files)
    if (name == "chat_template.jinja") saved = bytes;
  if (saved != text::ChatTemplate::template_of_file(c.chat_template))
    usage("--chat-template " + c.chat_template + " with --resume " + c.resume,
          "the checkpoint trained with another template (" +
              (saved.empty() ? "its tokenizer_config.json's" : c.resume + "/chat_template.jinja") + ")",
          "drop --chat-template: a resumed run reads the checkpoint's");
}

// Random preference pairs over the whole vocabulary (--data synthetic with --objective dpo):
// every row full, a prompt of a quarter of the context; 8 steps' worth of training pairs and 2
// micro-batches of held-out ones. For memory and speed measurements.
PreferencePairs synthetic_pairs(int64_t train, int64_t val, int64_t seq, int64_t vocab, uint64_t seed) {
  PreferencePairs p;
  Generator gen(seed);
  const int64_t np = std::max<int64_t>(1, seq / 4), nc = seq + 1 - np;
  for (int64_t i = 0; i < train + val; ++i) {
    std::vector<float> r = rand_uniform({np + 2 * nc}, gen, 0.f, float(vocab)).to_float_vector();
    std::vector<int32_t> ids;
    for (float x : r) ids.push_back(std::min<int32_t>(int32_t(x), int32_t(vocab - 1)));
    const std::span<const int32_t> all(ids);
    (i < train ? p.train : p.val).add(all.first(size_t(np)), all.subspan(size_t(np), size_t(nc)), all.last(size_t(nc)));
  }
  return p;
}

// --objective dpo: preference pairs, two rows of --seq-len each per sample (data.h, PairDataset).
void make_pair_task(Task& t, ModelSpec& s, const RunConfig& c, nn::InitOptions init, int64_t seq,
                    const std::string& tokenizer_line) {
  const std::string family = s.cfg->family().display_name();
  if (!s.cfg->family().causal())
    usage("--objective dpo with " + s.name, "a " + family + " does not predict the next token",
          "train a causal language model (GPT-2 or LLaMA family) with --objective dpo");
  const bool synthetic = c.data == kSyntheticData;
  if (c.data.empty() || c.data == "fortunes")
    usage("--objective dpo with --data " + (c.data.empty() ? std::string("fortunes (the default)") : c.data),
          "a preference loss needs pairs of completions, and fortunes are plain text",
          "pass --data pairs.jsonl with {\"prompt\", \"chosen\", \"rejected\"} lines");
  const int64_t mb = c.micro_batch ? c.micro_batch : c.batch;
  auto pairs = std::make_shared<PreferencePairs>();
  if (synthetic) {
    *pairs = synthetic_pairs(8 * c.batch, 2 * mb, seq, s.cfg->tokens().vocab_size, c.seed);
  } else {
    PairOptions po;
    po.prompt_field = c.prompt_field;
    po.chosen_field = c.chosen_field;
    po.rejected_field = c.rejected_field;
    po.seq_len = seq;
    po.workers = loader_workers(c);
    // Conversational pairs: the run's chat template (--chat-template, else the tokenizer files'
    // chat_template.jinja, else their tokenizer_config.json's, as for conversations in SFT data),
    // read at the first such line (a string-only file never needs one).
    std::optional<text::ChatTemplate> chat;
    const RunTokenizer& rt = t.text_tokenizer;
    po.chat_template = [&chat, &rt]() -> const text::ChatTemplate& {
      if (!chat) chat.emplace(run_chat_template(rt));
      return *chat;
    };
    *pairs = load_preference_pairs(c.data, *t.text_tokenizer.tokenizer, po);
  }
  build_model(t, s, c, init);
  auto train = std::make_shared<PairDataset>(pairs, /*validation=*/false, seq);
  auto val = std::make_shared<PairDataset>(pairs, /*validation=*/true, seq);
  t.masked_targets = true;
  t.held_out = val;
  t.objective = std::make_shared<PreferenceObjective>(c, train, val);
  const LoaderOptions lo = training_loader(c, init.device);
  t.train = std::make_unique<DataLoader>(train, lo);
  const char* ref = t.objective->reference() == PreferenceObjective::Reference::AdaptersOff ? "the base with the adapters off"
                    : t.objective->reference() == PreferenceObjective::Reference::Precomputed
                        ? "the starting weights, computed in a first pass"
                        : "none (SimPO)";
  t.description = "model " + s.name + ": " + family + ", " + millions(t.model->num_parameters()) + " parameters (" +
                  s.cfg->size_summary() + ", context " + std::to_string(seq) + ")" + tokenizer_line + "; data " +
                  (synthetic ? std::string("synthetic") : c.data) + ": " + std::to_string(train->size()) + " train / " +
                  std::to_string(val->size()) + " validation preference pairs" +
                  (pairs->truncated ? " (" + std::to_string(pairs->truncated) + " cut to the context)" : "") +
                  "; " + name_of(c.dpo_loss) + " loss, beta " + short_number(c.beta) + ", reference: " + ref;
}

void make_text_task(Task& t, ModelSpec& s, const RunConfig& c, nn::InitOptions init) {
  if (c.data == "fashion-mnist")
    usage("--data fashion-mnist is images", s.name + " is a language model", "pass --data fortunes or a text file");
  const models::TokenInput in = s.cfg->tokens();
  int64_t seq = c.seq_len ? c.seq_len : std::min<int64_t>(128, in.context);
  if (seq > in.context)
    usage("--seq-len " + std::to_string(seq), "the model has " + std::to_string(in.context) + " positions",
          "pass --seq-len " + std::to_string(in.context) + " or less");
  const std::string family = s.cfg->family().display_name();
  t.classifier = false;
  t.unit = "tok/s";
  t.tokenizer = s.cfg->family().tokenizer();
  const bool synthetic = c.data == kSyntheticData;
  t.text_tokenizer = choose_tokenizer(c, s, !synthetic);
  std::string tokenizer_line;
  if (const text::Tokenizer* tok = t.text_tokenizer.tokenizer.get()) {
    check_tokenizer_fits(*tok, in.vocab_size, s.name);
    t.tokenizer = tok->kind();
    tokenizer_line = "; " + t.text_tokenizer.describe();
  }
  if (synthetic) refuse_text_flags(c, "--data synthetic", "random ids have no documents");
  else if (!c.chat_template.empty()) use_chat_template(t.text_tokenizer, c);
  if (c.objective == Objective::Dpo) {
    refuse_text_flags(c, "--objective dpo", "a preference pair is two padded rows, its loss on the completions",
                      {"--train-on", "--packing"});
    return make_pair_task(t, s, c, init, seq, tokenizer_line);
  }
  if (synthetic) {  // random ids over the model's whole vocabulary
    build_model(t, s, c, init);
    const int64_t mb = c.micro_batch ? c.micro_batch : c.batch;
    t.held_out = std::make_shared<SyntheticTokens>(2 * mb, seq, in.vocab_size, c.seed + 1);
    const LoaderOptions lo = training_loader(c, init.device);
    t.train = std::make_unique<DataLoader>(std::make_shared<SyntheticTokens>(8 * c.batch, seq, in.vocab_size, c.seed), lo);
    t.description = "model " + s.name + ": " + family + ", " + millions(t.model->num_parameters()) +
                    " parameters (context " + std::to_string(seq) + ")" + tokenizer_line + "; data synthetic";
    return;
  }
  const text::Tokenizer& tok = *t.text_tokenizer.tokenizer;
  std::string source = c.data.empty() || c.data == "fortunes" ? kFortunesDir : c.data;
  TextOptions topt;
  topt.prompt_field = c.prompt_field;
  topt.response_field = c.response_field;
  topt.workers = loader_workers(c);
  topt.train_on = c.train_on;
  const RunTokenizer* rt = &t.text_tokenizer;  // the task outlives the corpus it loads
  topt.chat_template = [rt] { return std::make_shared<const text::ChatTemplate>(run_chat_template(*rt)); };
  TokenCorpus corpus = source == kFortunesDir ? load_fortunes(tok, topt, source) : load_text(source, tok, topt);
  build_model(t, s, c, init);
  auto train_tokens = std::make_shared<const TokenStream>(std::move(corpus.train));
  auto val_tokens = std::make_shared<const TokenStream>(std::move(corpus.val));
  const LoaderOptions lo = training_loader(c, init.device);
  std::string rows_line;
  if (c.packing == Packing::Concat) {
    t.masked_targets = train_tokens->any_masked() || val_tokens->any_masked();
    t.held_out = std::make_shared<TokenWindows>(val_tokens, seq);
    auto windows = std::make_shared<TokenWindows>(train_tokens, seq);
    rows_line = std::to_string(windows->size()) + " windows (documents concatenated, attending across)";
    t.train = std::make_unique<DataLoader>(windows, lo);
  } else {
    t.masked_targets = true;  // the padding's targets are -100
    auto train = std::make_shared<DocumentRows>(train_tokens, seq, c.packing);
    auto val = std::make_shared<DocumentRows>(val_tokens, seq, c.packing);
    const std::string fix = "use more text, or --packing concat";
    LT_CHECK(train->size() > 0, "no training document in " + source, "none has two tokens (an input and its target)", fix);
    LT_CHECK(val->size() > 0, "no validation document in " + source,
             "the held-out split (every 10th document, or the last 10% of a text file) has none with two tokens", fix);
    char fill[32];
    std::snprintf(fill, sizeof fill, "%.1f%%", 100.0 * double(train->text_tokens()) / double(train->size() * seq));
    rows_line = std::to_string(train->documents()) + " training documents in " + std::to_string(train->size()) + " rows (" +
                (c.packing == Packing::Docs ? "packed, each attending to itself" : "one a row") + "; text fills " + fill + ")";
    t.held_out = val;
    t.train = std::make_unique<DataLoader>(train, lo);
  }
  if (train_tokens->any_masked()) {  // prompts, or a conversation's other turns
    int64_t targets = 0;
    for (int64_t i = 0; i < train_tokens->size(); ++i) targets += train_tokens->is_target(i);
    rows_line += "; the loss on " + std::to_string(targets) + " of the " + std::to_string(train_tokens->size()) +
                 " training tokens (--train-on " + name_of(c.train_on) + ")";
  }
  t.description = "model " + s.name + ": " + family + ", " + millions(t.model->num_parameters()) + " parameters (" +
                  s.cfg->size_summary() + ", context " + std::to_string(seq) + " of " + std::to_string(in.context) +
                  ")" + tokenizer_line + "; data " + source + ": " + std::to_string(corpus.documents) +
                  (corpus.documents == 1 ? " document, " : " documents, ") + std::to_string(train_tokens->size()) + " train / " +
                  std::to_string(val_tokens->size()) + " validation tokens, " + rows_line;
}

// A text classifier (BERT family): labelled texts, padded to --seq-len (default min(128,
// positions)); the data decides the classes (a loaded model must already have that many).
void make_sequence_task(Task& t, ModelSpec& s, const RunConfig& c, nn::InitOptions init) {
  if (c.data == "fashion-mnist")
    usage("--data fashion-mnist is images", s.name + " is a text classifier", "pass --data fortunes, a .jsonl file or a directory");
  models::SequenceInput in = s.cfg->sequences();
  const int64_t seq = c.seq_len ? c.seq_len : std::min<int64_t>(128, in.context);
  if (seq > in.context)
    usage("--seq-len " + std::to_string(seq), "the model has " + std::to_string(in.context) + " positions",
          "pass --seq-len " + std::to_string(in.context) + " or less");
  const std::string family = s.cfg->family().display_name();
  refuse_text_flags(c, "model " + s.name, "it is a text classifier (one text a row, its label the target)");
  t.classifier = true;
  t.unit = "seq/s";
  t.tokenizer = s.cfg->family().tokenizer();
  const bool synthetic = c.data == kSyntheticData;
  t.text_tokenizer = choose_tokenizer(c, s, !synthetic);
  const text::Tokenizer* tok = t.text_tokenizer.tokenizer.get();
  std::string tokenizer_line;
  if (tok) {
    check_tokenizer_fits(*tok, in.vocab_size, s.name);
    t.tokenizer = tok->kind();
    tokenizer_line = "; " + t.text_tokenizer.describe();
  }
  const LoaderOptions lo = training_loader(c, init.device);
  if (synthetic) {  // whole rows of random ids, random labels; a loaded model keeps its classes
    if (s.weights_dir.empty() && c.resume.empty()) {
      std::vector<std::string> names;
      for (int64_t i = 0; i < 2; ++i) names.push_back("LABEL_" + std::to_string(i));
      s.cfg->fit_classes(names);
    }
    in = s.cfg->sequences();
    LT_CHECK(in.vocab_size >= 2, "--data synthetic with vocab_size 1", "the one id is the padding", "use a larger vocabulary");
    build_model(t, s, c, init);
    t.held_out = std::make_shared<SyntheticSequences>(2 * lo.batch_size, seq, in.vocab_size, in.pad_id, in.classes, c.seed + 1);
    t.train = std::make_unique<DataLoader>(
        std::make_shared<SyntheticSequences>(8 * c.batch, seq, in.vocab_size, in.pad_id, in.classes, c.seed), lo);
    t.description = "model " + s.name + ": " + family + ", " + millions(t.model->num_parameters()) + " parameters (" +
                    s.cfg->size_summary() + ", " + std::to_string(seq) + " positions)" + tokenizer_line + "; data synthetic";
    return;
  }
  TextOptions topt;
  topt.workers = loader_workers(c);
  const std::string source = c.data.empty() || c.data == "fortunes" ? kFortunesDir : c.data;
  auto data = std::make_shared<const TextClasses>(source == kFortunesDir ? load_fortune_classes(*tok, seq, topt, source)
                                                                         : load_text_classes(source, *tok, seq, topt));
  if (!s.weights_dir.empty() || !c.resume.empty()) {  // a trained classifier keeps its classes
    if (int64_t(data->classes.size()) != in.classes)
      usage("--data " + source + " has " + std::to_string(data->classes.size()) + " classes",
            "the model in " + (s.weights_dir.empty() ? c.resume : s.weights_dir) + " has " + std::to_string(in.classes),
            "pass data with that many classes");
  } else {
    s.cfg->fit_classes(data->classes);
  }
  in = s.cfg->sequences();
  build_model(t, s, c, init);
  t.held_out = std::make_shared<SequenceDataset>(data, /*validation=*/true, seq, in.pad_id);
  auto train = std::make_shared<SequenceDataset>(data, /*validation=*/false, seq, in.pad_id);
  t.train = std::make_unique<DataLoader>(train, lo);
  t.description = "model " + s.name + ": " + family + ", " + millions(t.model->num_parameters()) + " parameters (" +
                  s.cfg->size_summary() + ", " + std::to_string(seq) + " positions)" + tokenizer_line + "; data " +
                  source + ": " + std::to_string(data->train.size()) + " train / " + std::to_string(data->val.size()) +
                  " validation texts in " + std::to_string(data->classes.size()) + " classes" +
                  (data->truncated ? ", " + std::to_string(data->truncated) + " cut to " + std::to_string(seq) + " tokens" : "");
}

}  // namespace

std::unique_ptr<Task> make_task(const RunConfig& c, Device device) {
  ModelSpec s = resolve_model(c);
  apply_overrides(s, c);
  auto t = std::make_unique<Task>();
  t->device = device;
  t->loader_workers = loader_workers(c);
  nn::InitOptions init;
  init.device = device;
  init.seed = c.seed;
  init.dtype = precision_policy(c.precision).param_dtype;  // built in the target dtype, no f32 copy
  const models::InputKind kind = s.cfg->family().input();
  const bool text = kind == models::InputKind::Tokens;
  if (c.loss_chunk > 0 && !text)
    usage("--loss-chunk " + std::to_string(c.loss_chunk), "model " + s.name + " is a classifier; its logits are one row per " +
          std::string(kind == models::InputKind::Images ? "image" : "text"),
          "drop --loss-chunk (it is for causal language models' vocabulary-wide logits)");
  if (c.objective == Objective::Dpo && !text)
    usage("--objective dpo with " + s.name, "a preference loss compares log-probabilities of completions, and " + s.name +
          " is a classifier", "train a causal language model (GPT-2 or LLaMA family) with --objective dpo");
  if (text) make_text_task(*t, s, c, init);
  else if (kind == models::InputKind::Sequences) make_sequence_task(*t, s, c, init);
  else make_image_task(*t, s, c, init);
  t->model->set_loss_chunk(c.loss_chunk);  // Model::loss (training) and evaluation's chunked_loss_sum
  t->description += t->weights_note;
  int64_t mb = c.micro_batch ? c.micro_batch : c.batch;
  if (t->train->batches_per_epoch() * mb < c.batch)
    usage("--batch " + std::to_string(c.batch), "the training data has only " +
          std::to_string(t->train->dataset().size()) + " samples", "pass a smaller --batch");
  return t;
}

Tensor micro_batch_loss(Task& t, models::Model& m, const Batch& b) {
  if (t.objective) return t.objective->loss(m, b);
  return m.loss(b.inputs, b.targets, nn::TokenMask::documents(b.doc_pos));
}

EvalInfo evaluate_task(Task& t, int64_t batch_size, int64_t max_batches, const std::function<bool(Batch&)>& prepare,
                       const std::function<void(EvalSums&)>& combine) {
  if (t.objective) return t.objective->evaluate(t, batch_size, max_batches, prepare, combine);
  LoaderOptions lo;
  lo.batch_size = batch_size;
  lo.shuffle = false;
  lo.device = t.device;
  lo.workers = t.loader_workers;
  DataLoader loader(t.held_out, lo);
  int64_t n = loader.batches_per_epoch();
  if (max_batches > 0) n = std::min(n, max_batches);
  double loss_sum = 0;
  int64_t count = 0, correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    Batch b = loader.next();
    const bool counts = !prepare || prepare(b);
    Tensor targets = reshape(b.targets, {-1});
    // A causal LM with --loss-chunk evaluates as it trains, a chunk of logits at a time (the
    // whole [T, V] logits of a long context would be the run's peak); a classifier needs them.
    Tensor flat, batch_loss;
    const nn::TokenMask mask = nn::TokenMask::documents(b.doc_pos);
    if (!t.classifier) batch_loss = t.model->chunked_loss_sum(b.inputs, b.targets, mask);
    if (!batch_loss.defined()) {
      Tensor logits = t.model->forward(b.inputs, mask);
      flat = reshape(logits, {-1, logits.size(logits.dim() - 1)});
      batch_loss = cross_entropy(flat, targets, kIgnoreTarget, Reduction::Sum);
    }
    if (!counts) {  // another rank counts this batch; the forward ran for the collectives in it
    } else if (t.masked_targets && !t.device.is_meta()) {  // the mean is over the tokens the loss sees
      for (int64_t y : targets.to_int_vector()) count += y != kIgnoreTarget;
    } else {
      count += targets.numel();
    }
    if (t.device.is_meta()) {  // a plan's dry-run: the same allocations, no values to read
      Tensor pred = t.classifier ? argmax(flat) : Tensor();
      continue;
    }
    if (!counts) continue;
    loss_sum += batch_loss.item();
    if (t.classifier) {
      std::vector<int64_t> pred = argmax(flat).to_int_vector(), want = targets.to_int_vector();
      for (size_t k = 0; k < pred.size(); ++k) correct += pred[k] == want[k];
    }
  }
  EvalSums sums{loss_sum, double(count), double(correct)};
  if (combine) combine(sums);
  EvalInfo e;
  e.loss = sums.count > 0 ? sums.loss / sums.count : 0.0;
  if (t.classifier) e.accuracy = sums.count > 0 ? sums.correct / sums.count : 0.0;
  return e;
}

}  // namespace lt
