// Loading modules by name: round trip, every mismatch as a clear error (checked before anything
// is written), non-strict loading, casting, and GPT-2 checkpoints in the Hugging Face layouts.
#include <gtest/gtest.h>

#include <filesystem>

#include "leantrain/error.h"
#include "leantrain/models.h"
#include "leantrain/nn.h"
#include "leantrain/safetensors.h"

using namespace lt;
namespace fs = std::filesystem;

namespace {

fs::path temp_file(const std::string& name) {
  auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path d = fs::temp_directory_path() / ("lt_stm_" + std::to_string(::getpid()) + "_" + info->name());
  fs::create_directories(d);
  return d / name;
}

class Net : public nn::Module {
 public:
  explicit Net(const nn::InitOptions& o, int64_t out = 3) {
    nn::ParamFactory pf(o);
    fc = register_module("fc", std::make_shared<nn::Linear>(pf, 4, out));
    ln = register_module("ln", std::make_shared<nn::LayerNorm>(pf, out));
  }
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::LayerNorm> ln;
};

template <class F>
void expect_error(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << "'" << frag << "' not in: " << msg;
  }
}

bool same_values(nn::Module& a, nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); ++i)
    if (pa[i].first != pb[i].first || pa[i].second.to_double_vector() != pb[i].second.to_double_vector()) return false;
  return true;
}

}  // namespace

TEST(SafetensorsModule, SaveLoadRoundTrip) {
  std::string path = temp_file("net.safetensors").string();
  Net a({.seed = 1}), b({.seed = 2});
  EXPECT_FALSE(same_values(a, b));
  io::save_module(a, path, {{"step", "3"}});
  io::LoadResult r = io::load_module(b, path);
  EXPECT_TRUE(same_values(a, b));
  EXPECT_EQ(r.loaded, (std::vector<std::string>{"fc.weight", "fc.bias", "ln.weight", "ln.bias"}));
  EXPECT_TRUE(r.missing.empty() && r.unexpected.empty());
  // Loading writes into the existing parameters: same storage, still a leaf that requires grad.
  EXPECT_TRUE(b.fc->weight().requires_grad());
  EXPECT_EQ(b.fc->weight().category(), Category::Parameter);
  auto meta = io::SafetensorsReader(path).metadata();
  EXPECT_EQ(meta.at("format"), "pt");  // added for transformers' from_pretrained
  EXPECT_EQ(meta.at("step"), "3");
}

TEST(SafetensorsModule, MismatchesAreErrorsAndLeaveTheModuleUntouched) {
  std::string path = temp_file("net.safetensors").string();
  Net a({.seed = 1});
  auto params = a.named_parameters();

  Net b({.seed = 2}), b_copy({.seed = 2});
  io::save_safetensors(path, {params[0], params[1], params[2]});  // ln.bias missing
  expect_error([&] { io::load_module(b, path); }, {"parameter 'ln.bias' is missing", path});
  EXPECT_TRUE(same_values(b, b_copy));  // nothing was written before the error
  io::LoadResult r = io::load_module(b, path, {.allow_missing = true});
  EXPECT_EQ(r.missing, std::vector<std::string>{"ln.bias"});

  auto extra = params;
  extra.emplace_back("head.weight", ones({2}));
  io::save_safetensors(path, extra);
  expect_error([&] { io::load_module(b, path); }, {"unexpected tensor 'head.weight'"});
  r = io::load_module(b, path, {.strict = false});
  EXPECT_EQ(r.unexpected, std::vector<std::string>{"head.weight"});
  EXPECT_TRUE(same_values(a, b));

  Net wide({.seed = 3}, /*out=*/5);
  io::save_module(wide, path);
  Net c({.seed = 2});
  expect_error([&] { io::load_module(c, path); }, {"shape mismatch", "'fc.weight'", "[5, 4]", "[3, 4]"});
  EXPECT_TRUE(same_values(c, b_copy));

  Net half({.dtype = DType::BF16, .seed = 4});
  io::save_module(a, path);
  expect_error([&] { io::load_module(half, path); }, {"dtype mismatch", "'fc.weight'", "F32", "BF16"});
  io::load_module(half, path, {.allow_cast = true});
  auto want = a.fc->weight().to_float_vector(), got = half.fc->weight().to_float_vector();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], std::abs(want[i]) * 1e-2);

  expect_error([&] { io::load_module(c, temp_file("absent.safetensors").string()); }, {"cannot read", "absent.safetensors", "does not exist"});
}

TEST(SafetensorsModule, RenameMapsAndSkips) {
  std::string path = temp_file("net.safetensors").string();
  Net a({.seed = 1}), b({.seed = 2});
  std::vector<std::pair<std::string, Tensor>> renamed;
  for (auto& [n, t] : a.named_parameters()) renamed.emplace_back("model." + n, t);
  renamed.emplace_back("model.buffer", zeros({1}));
  io::save_safetensors(path, renamed);
  io::LoadOptions o;
  o.rename = [](const std::string& k) { return k == "model.buffer" ? std::string() : k.substr(6); };
  io::LoadResult r = io::load_module(b, path, o);
  EXPECT_EQ(r.skipped, std::vector<std::string>{"model.buffer"});
  EXPECT_TRUE(same_values(a, b));
}

TEST(SafetensorsModule, LoadsHuggingFaceGpt2Layouts) {
  models::GPT2Config cfg = models::GPT2Config::preset("gpt2-tiny");
  cfg.n_layer = 2;
  models::GPT2 src(cfg, {.seed = 1});
  // save_pretrained(GPT2LMHeadModel): our names exactly, lm_head dropped as tied.
  std::string p1 = temp_file("lm.safetensors").string();
  io::save_module(src, p1);
  models::GPT2 dst(cfg, {.seed = 2});
  io::load_module(dst, p1);
  EXPECT_TRUE(same_values(src, dst));
  // The original GPT-2 files: GPT2Model names (no "transformer."), causal-mask buffers, and an
  // lm_head.weight copy in some exports.
  std::vector<std::pair<std::string, Tensor>> hf;
  for (auto& [n, t] : src.named_parameters()) hf.emplace_back(n.substr(std::string("transformer.").size()), t);
  hf.emplace_back("h.0.attn.bias", ones({1, 1, 4, 4}));
  hf.emplace_back("lm_head.weight", src.parameter("transformer.wte.weight"));
  std::string p2 = temp_file("base.safetensors").string();
  io::save_safetensors(p2, hf);
  models::GPT2 dst2(cfg, {.seed = 3});
  io::LoadResult r = io::load_module(dst2, p2);
  EXPECT_TRUE(same_values(src, dst2));
  EXPECT_EQ(r.skipped.size(), 2u);
}

TEST(SafetensorsModule, MetaModuleIsCheckedNotRead) {
  std::string path = temp_file("net.safetensors").string();
  Net a({.seed = 1});
  io::save_module(a, path);
  Net m({.device = Device::meta()});
  io::LoadResult r = io::load_module(m, path);
  EXPECT_EQ(r.loaded.size(), 4u);
  Net wide({.device = Device::meta()}, 5);
  expect_error([&] { io::load_module(wide, path); }, {"shape mismatch"});
}
