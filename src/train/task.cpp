// make_task: resolves --model/--config into a GPT-2 or ViT config, applies the size overrides,
// fits it to the data (image size, channels, classes; byte vocabulary), builds the model on the
// device and the loaders. Mistakes in the flags are UsageErrors; bad files are lt::Errors.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "leantrain/precision.h"
#include "data/synthetic.h"
#include "io/input_file.h"
#include "models/config_json.h"
#include "train/task.h"

namespace lt {

namespace {

[[noreturn]] void usage(std::string what, std::string why, std::string fix) {
  throw UsageError(std::move(what), std::move(why), std::move(fix));
}

struct ModelSpec {
  bool gpt = false;
  std::string name;  // preset name or config path
  models::GPT2Config gpt_cfg;
  models::ViTConfig vit_cfg;
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

ModelSpec spec_from_json(const std::string& name, const std::string& text) {
  nlohmann::json j = models::detail::parse_config(text);
  std::string type;
  models::detail::read_string(j, "model_type", type);
  if (type.empty()) type = j.contains("n_embd") ? "gpt2" : j.contains("hidden_size") ? "vit" : "";
  ModelSpec s;
  s.name = name;
  if (type == "gpt2") {
    s.gpt = true;
    s.gpt_cfg = models::GPT2Config::from_json(text);
  } else if (type == "vit") {
    s.vit_cfg = models::ViTConfig::from_json(text);
  } else {
    fail("config " + name + ": unknown model_type '" + type + "'", "leantrain trains gpt2 and vit models",
         "set \"model_type\" to \"gpt2\" or \"vit\"");
  }
  return s;
}

ModelSpec resolve_model(const RunConfig& c) {
  if (!c.model_config.empty()) return spec_from_json(c.model_config, read_config_file("--config", c.model_config));
  auto names = models::preset_names();
  if (std::find(names.begin(), names.end(), c.model) != names.end()) {
    ModelSpec s;
    s.name = c.model;
    s.gpt = c.model.rfind("gpt2", 0) == 0;
    if (s.gpt) s.gpt_cfg = models::GPT2Config::preset(c.model);
    else s.vit_cfg = models::ViTConfig::preset(c.model);
    return s;
  }
  if (std::filesystem::exists(c.model)) return spec_from_json(c.model, read_config_file("--model", c.model));
  std::string known;
  for (auto& n : names) known += (known.empty() ? "" : ", ") + n;
  usage("unknown model '" + c.model + "'", "the presets are " + known,
        "pass one of them to --model, or a config.json to --config");
}

void apply_overrides(ModelSpec& s, const RunConfig& c) {
  if (s.gpt) {
    if (c.patch) usage("--patch " + std::to_string(c.patch), "GPT-2 has no patches", "drop --patch");
    if (c.mlp_dim) usage("--mlp-dim " + std::to_string(c.mlp_dim), "GPT-2's MLP is 4 x dim", "drop --mlp-dim");
    auto& g = s.gpt_cfg;
    if (c.dim) g.n_embd = c.dim;
    if (c.depth) g.n_layer = c.depth;
    if (c.heads) g.n_head = c.heads;
    if (g.n_embd % g.n_head)
      usage("width " + std::to_string(g.n_embd) + " is not divisible by " + std::to_string(g.n_head) + " heads",
            "each head gets dim/heads channels", "pass --dim and --heads that divide");
  } else {
    auto& v = s.vit_cfg;
    if (c.dim) v.hidden_size = c.dim;
    if (c.depth) v.num_hidden_layers = c.depth;
    if (c.heads) v.num_attention_heads = c.heads;
    if (c.patch) v.patch_size = c.patch;
    if (c.mlp_dim) v.intermediate_size = c.mlp_dim;
    if (v.hidden_size % v.num_attention_heads)
      usage("width " + std::to_string(v.hidden_size) + " is not divisible by " + std::to_string(v.num_attention_heads) +
                " heads",
            "each head gets dim/heads channels", "pass --dim and --heads that divide");
  }
}

// --workers, or min(8, hardware threads - 1) when not given.
int loader_workers(const RunConfig& c) {
  if (c.workers < 0)
    usage("--workers " + std::to_string(c.workers), "it counts the threads that build batches",
          "pass --workers 1 or more");
  return c.workers > 0 ? int(std::min<int64_t>(c.workers, 1024)) : default_loader_workers();
}

std::string millions(int64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fM", double(n) / 1e6);
  return buf;
}

// --data synthetic: the preset's own image size and channels, 10 classes (the memory ladder's),
// 8 steps' worth of training samples and 2 micro-batches of held-out ones.
void make_synthetic_image_task(Task& t, ModelSpec& s, const RunConfig& c, nn::InitOptions init) {
  auto& v = s.vit_cfg;
  v.num_labels = 10;
  v.validate();
  {
    MemoryCategoryScope p(Category::Parameter);
    t.model = std::make_shared<models::ViT>(v, init);
  }
  const int64_t mb = c.micro_batch ? c.micro_batch : c.batch;
  t.classifier = true;
  t.unit = "img/s";
  t.held_out = std::make_shared<SyntheticImages>(2 * mb, v.num_channels, v.image_size, v.num_labels, c.seed + 1);
  LoaderOptions lo;
  lo.batch_size = mb;
  lo.seed = c.seed;
  lo.drop_last = true;
  lo.device = init.device;
  lo.workers = loader_workers(c);
  auto train = std::make_shared<SyntheticImages>(8 * c.batch, v.num_channels, v.image_size, v.num_labels, c.seed);
  t.train = std::make_unique<DataLoader>(train, lo);
  t.description = "model " + s.name + ": ViT, " + millions(t.model->num_parameters()) + " parameters (" +
                  std::to_string(v.image_size) + "x" + std::to_string(v.image_size) + "x" +
                  std::to_string(v.num_channels) + " images); data synthetic";
}

void make_image_task(Task& t, ModelSpec& s, const RunConfig& c, nn::InitOptions init) {
  if (c.data == "fortunes")
    usage("--data fortunes is text", s.name + " is an image classifier", "pass --data fashion-mnist, or a GPT model");
  if (c.seq_len) usage("--seq-len " + std::to_string(c.seq_len), "it applies to GPT models", "drop --seq-len");
  if (c.data == kSyntheticData) return make_synthetic_image_task(t, s, c, init);
  std::string dir = c.data.empty() || c.data == "fashion-mnist" ? kFashionMnistDir : c.data;
  auto train = std::make_shared<const ImageSet>(load_fashion_mnist(Split::Train, dir));
  auto test = std::make_shared<const ImageSet>(load_fashion_mnist(Split::Test, dir));
  auto& v = s.vit_cfg;
  LT_CHECK(train->rows == train->cols, "images in " + dir + " are " + std::to_string(train->rows) + "x" +
           std::to_string(train->cols), "the ViT needs square images", "use square images");
  v.image_size = train->rows;  // the data decides the input and the classes
  v.num_channels = 1;
  v.num_labels = 10;
  if (v.image_size % v.patch_size)
    usage("patch size " + std::to_string(v.patch_size) + " does not divide the " + std::to_string(v.image_size) +
              "-pixel images",
          "a ViT cuts images into whole patches", "pass e.g. --patch 7 or --patch 4");
  v.validate();
  {
    MemoryCategoryScope p(Category::Parameter);
    t.model = std::make_shared<models::ViT>(v, init);
  }
  t.classifier = true;
  t.unit = "img/s";
  t.held_out = std::make_shared<ImageDataset>(test);
  LoaderOptions lo;
  lo.batch_size = c.micro_batch ? c.micro_batch : c.batch;
  lo.seed = c.seed;
  lo.drop_last = true;
  lo.device = init.device;
  lo.workers = loader_workers(c);
  t.train = std::make_unique<DataLoader>(std::make_shared<ImageDataset>(train), lo);
  char buf[300];
  std::snprintf(buf, sizeof buf,
                "model %s: ViT, %s parameters (%lldx%lld images, patch %lld, dim %lld, depth %lld, heads %lld, mlp %lld); "
                "data %s: %lld train / %lld test images",
                s.name.c_str(), millions(t.model->num_parameters()).c_str(), (long long)v.image_size,
                (long long)v.image_size, (long long)v.patch_size, (long long)v.hidden_size,
                (long long)v.num_hidden_layers, (long long)v.num_attention_heads, (long long)v.intermediate_size,
                dir.c_str(), (long long)train->count, (long long)test->count);
  t.description = buf;
}

void make_text_task(Task& t, ModelSpec& s, const RunConfig& c, nn::InitOptions init) {
  if (c.data == "fashion-mnist")
    usage("--data fashion-mnist is images", s.name + " is a language model", "pass --data fortunes or a text file");
  auto& g = s.gpt_cfg;
  if (g.vocab_size < 256)
    usage("model " + s.name + " has a vocabulary of " + std::to_string(g.vocab_size), "text is tokenized as bytes (256 ids)",
          "use a config with vocab_size >= 256");
  int64_t seq = c.seq_len ? c.seq_len : std::min<int64_t>(128, g.n_positions);
  if (seq > g.n_positions)
    usage("--seq-len " + std::to_string(seq), "the model has " + std::to_string(g.n_positions) + " positions",
          "pass --seq-len " + std::to_string(g.n_positions) + " or less");
  g.validate();
  if (c.data == kSyntheticData) {  // random ids over the model's whole vocabulary
    {
      MemoryCategoryScope p(Category::Parameter);
      t.model = std::make_shared<models::GPT2>(g, init);
    }
    const int64_t mb = c.micro_batch ? c.micro_batch : c.batch;
    t.unit = "tok/s";
    t.tokenizer = "bytes";
    t.held_out = std::make_shared<SyntheticTokens>(2 * mb, seq, g.vocab_size, c.seed + 1);
    LoaderOptions lo;
    lo.batch_size = mb;
    lo.seed = c.seed;
    lo.drop_last = true;
    lo.device = init.device;
    lo.workers = loader_workers(c);
    t.train = std::make_unique<DataLoader>(std::make_shared<SyntheticTokens>(8 * c.batch, seq, g.vocab_size, c.seed), lo);
    t.description = "model " + s.name + ": GPT-2, " + millions(t.model->num_parameters()) + " parameters (context " +
                    std::to_string(seq) + "); data synthetic";
    return;
  }
  std::string source = c.data.empty() || c.data == "fortunes" ? kFortunesDir : c.data;
  TextCorpus corpus = source == kFortunesDir ? load_fortunes(source) : load_text(source);
  {
    MemoryCategoryScope p(Category::Parameter);
    t.model = std::make_shared<models::GPT2>(g, init);
  }
  t.classifier = false;
  t.unit = "tok/s";
  t.tokenizer = "bytes";
  auto train_tokens = std::make_shared<const std::vector<uint8_t>>(std::move(corpus.train));
  auto val_tokens = std::make_shared<const std::vector<uint8_t>>(std::move(corpus.val));
  t.held_out = std::make_shared<TokenWindows>(val_tokens, seq);
  LoaderOptions lo;
  lo.batch_size = c.micro_batch ? c.micro_batch : c.batch;
  lo.seed = c.seed;
  lo.drop_last = true;
  lo.device = init.device;
  lo.workers = loader_workers(c);
  auto windows = std::make_shared<TokenWindows>(train_tokens, seq);
  t.train = std::make_unique<DataLoader>(windows, lo);
  char buf[300];
  std::snprintf(buf, sizeof buf,
                "model %s: GPT-2, %s parameters (dim %lld, depth %lld, heads %lld, context %lld of %lld); data %s: "
                "%zu train / %zu validation bytes, %lld windows",
                s.name.c_str(), millions(t.model->num_parameters()).c_str(), (long long)g.n_embd, (long long)g.n_layer,
                (long long)g.n_head, (long long)seq, (long long)g.n_positions, source.c_str(), train_tokens->size(),
                val_tokens->size(), (long long)windows->size());
  t.description = buf;
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
  if (s.gpt) make_text_task(*t, s, c, init);
  else make_image_task(*t, s, c, init);
  int64_t mb = c.micro_batch ? c.micro_batch : c.batch;
  if (t->train->batches_per_epoch() * mb < c.batch)
    usage("--batch " + std::to_string(c.batch), "the training data has only " +
          std::to_string(t->train->dataset().size()) + " samples", "pass a smaller --batch");
  return t;
}

EvalInfo evaluate_task(Task& t, int64_t batch_size, int64_t max_batches) {
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
    Tensor logits = t.model->forward(b.inputs);
    int64_t classes = logits.size(logits.dim() - 1);
    Tensor flat = reshape(logits, {-1, classes});
    Tensor targets = reshape(b.targets, {-1});
    Tensor batch_loss = cross_entropy(flat, targets, -100, Reduction::Sum);
    count += targets.numel();
    if (t.device.is_meta()) {  // a plan's dry-run: the same allocations, no values to read
      Tensor pred = t.classifier ? argmax(flat) : Tensor();
      continue;
    }
    loss_sum += batch_loss.item();
    if (t.classifier) {
      std::vector<int64_t> pred = argmax(flat).to_int_vector(), want = targets.to_int_vector();
      for (size_t k = 0; k < pred.size(); ++k) correct += pred[k] == want[k];
    }
  }
  EvalInfo e;
  e.loss = count ? loss_sum / double(count) : 0.0;
  if (t.classifier) e.accuracy = count ? double(correct) / double(count) : 0.0;
  return e;
}

}  // namespace lt
