// Hugging Face model directories: the index parser, the shard split, saving and loading GPT-2
// and ViT through their checkpoint layouts (sharded, cast between dtypes, staged in chunks), every
// hostile directory as one clear error before anything is written, and what loading costs in
// memory on the meta device (nothing on the device, the staging buffer on the pinned account).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors_index.h"
#include "io/weight_files.h"
#include "io/weight_load.h"
#include "io/weight_save.h"
#include "leantrain/error.h"
#include "leantrain/models.h"
#include "leantrain/safetensors.h"
#include "memory/host_allocators.h"
#include "train/checkpoint_weights.h"
#include "unit/small_models.h"

using namespace lt;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path d = fs::temp_directory_path() / ("lt_wf_" + std::to_string(::getpid()) + "_" + info->name()) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The error's message holds every fragment and is one line.
void expect_error(const std::function<void()>& f, std::initializer_list<std::string> fragments) {
  const std::string msg = message_of(f);
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  for (const auto& frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << "'" << frag << "' not in: " << msg;
}

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  std::vector<uint8_t> b(size_t(c.nbytes()));
  if (!b.empty()) std::memcpy(b.data(), c.raw_data(), b.size());
  return b;
}

// Every parameter of a and b holds the same bits.
void expect_same_weights(const models::Model& a, const models::Model& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_TRUE(bytes_of(pa[i].second) == bytes_of(pb[i].second)) << pa[i].first;
  }
}

std::shared_ptr<models::Model> gpt2(uint64_t seed, DType dtype = DType::F32, bool tied = true, Device d = Device::cpu()) {
  return std::make_shared<models::GPT2>(test::small_gpt2(tied), nn::InitOptions{.device = d, .dtype = dtype, .seed = seed});
}

std::shared_ptr<models::Model> vit(uint64_t seed, DType dtype = DType::F32, Device d = Device::cpu()) {
  return std::make_shared<models::ViT>(test::small_vit(), nn::InitOptions{.device = d, .dtype = dtype, .seed = seed});
}

// Rewrites DIR's single model.safetensors with `edit` applied to its tensors (name -> tensor).
void edit_weights(const fs::path& dir, const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  std::map<std::string, Tensor> m = io::load_safetensors((dir / "model.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> v(m.begin(), m.end());
  edit(v);
  io::save_safetensors((dir / "model.safetensors").string(), v, {{"format", "pt"}});
}

}  // namespace

// ---------------------------------------------------------------- the index file

TEST(SafetensorsIndex, ParsesWhatSavePretrainedWrites) {
  const auto idx = io::parse_safetensors_index(
      R"({"metadata": {"total_size": 1234}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
          "b.weight": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}})",
      "idx.json");
  EXPECT_EQ(idx.total_size, 1234);
  EXPECT_EQ(idx.weight_map.size(), 3u);
  EXPECT_EQ(idx.weight_map.at("b.weight"), "model-00002-of-00002.safetensors");
  EXPECT_EQ(idx.shards, (std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
  // No metadata (older exporters) and a float total_size are fine too.
  EXPECT_FALSE(io::parse_safetensors_index(R"({"weight_map": {"a": "x.safetensors"}})", "i").total_size);
  EXPECT_EQ(io::parse_safetensors_index(R"({"metadata": {"total_size": 8.0}, "weight_map": {"a": "x"}})", "i").total_size, 8);
}

TEST(SafetensorsIndex, RefusesMalformedIndexesAndPathsLeavingTheDirectory) {
  auto err = [](const std::string& text, const std::string& frag) {
    expect_error([&] { io::parse_safetensors_index(text, "dir/model.safetensors.index.json"); },
                 {"invalid safetensors index 'dir/model.safetensors.index.json'", frag});
  };
  err("{", "not valid JSON");
  err("[]", "not an object");
  err("{}", "no \"weight_map\"");
  err(R"({"weight_map": []})", "\"weight_map\" is not an object");
  err(R"({"weight_map": {}})", "names no tensor");
  err(R"({"weight_map": {"a": 3}})", "shard of tensor 'a' is number");
  err(R"({"weight_map": {"": "x"}})", "empty name");
  err(R"({"weight_map": {"a": "../x.safetensors"}})", "'../x.safetensors' of tensor 'a' is a path");
  err(R"({"weight_map": {"a": "/etc/passwd"}})", "absolute path");
  err(R"({"weight_map": {"a": "sub/x.safetensors"}})", "is a path");
  err(R"({"weight_map": {"a": ".."}})", "not a file name");
  err(R"({"weight_map": {"a": ""}})", "is empty");
  err("{\"weight_map\": {\"a\": \"x\\u0000y\"}}", "NUL byte");
  err(R"({"metadata": 3, "weight_map": {"a": "x"}})", "\"metadata\" is not an object");
  err(R"({"metadata": {"total_size": -1}, "weight_map": {"a": "x"}})", "not a byte count");
  err("{\"weight_map\": {\"a\": \"x\\n\\u0001y/z\"}}", "'x\\x0a\\x01y/z'");  // control bytes shown, one line
}

// ---------------------------------------------------------------- the shard split

TEST(WeightSave, SplitsShardsAsSavePretrained) {
  EXPECT_EQ(io::split_into_shards({10, 10, 10}, 25), (std::vector<std::vector<size_t>>{{0, 1}, {2}}));
  EXPECT_EQ(io::split_into_shards({10, 10, 10}, 30), (std::vector<std::vector<size_t>>{{0, 1, 2}}));
  // A tensor over the limit gets a shard of its own; the current shard goes on filling after it.
  EXPECT_EQ(io::split_into_shards({5, 30, 5}, 20), (std::vector<std::vector<size_t>>{{1}, {0, 2}}));
  EXPECT_EQ(io::split_into_shards({}, 20), (std::vector<std::vector<size_t>>{{}}));
  EXPECT_EQ(io::shard_file_names(1), (std::vector<std::string>{"model.safetensors"}));
  EXPECT_EQ(io::shard_file_names(3)[1], "model-00002-of-00003.safetensors");
}

// ---------------------------------------------------------------- round trips

TEST(WeightFiles, Gpt2ShardedRoundTripIsBitIdentical) {
  for (bool tied : {true, false}) {
    const fs::path dir = temp_dir(tied ? "tied" : "untied");
    auto a = gpt2(1, DType::F32, tied), b = gpt2(2, DType::F32, tied);
    save_model_weights(dir.string(), *a, 20000);
    ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
    EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
    io::WeightFiles files(dir.string());
    EXPECT_GT(files.files().size(), 2u);
    // The tied LM head is saved once, as transformers does (under transformer.wte.weight).
    EXPECT_EQ(files.find("lm_head.weight").file != nullptr, !tied);
    EXPECT_EQ(io::SafetensorsReader(files.files()[0]->path()).metadata().at("format"), "pt");
    const LoadedWeights w = load_model_weights(dir.string(), *b);
    EXPECT_EQ(w.files, int64_t(files.files().size()));
    EXPECT_EQ(w.staging_bytes, 0);  // the CPU copies straight from the mapping
    expect_same_weights(*a, *b);
  }
}

TEST(WeightFiles, IndexListsEveryTensorWithTotalSize) {
  const fs::path dir = temp_dir("d");
  auto a = gpt2(1);
  save_model_weights(dir.string(), *a, 20000);
  std::ifstream f(dir / "model.safetensors.index.json");
  std::stringstream ss;
  ss << f.rdbuf();
  const auto idx = io::parse_safetensors_index(ss.str(), "idx");
  EXPECT_EQ(idx.weight_map.size(), a->named_parameters().size());
  EXPECT_EQ(idx.total_size, a->parameter_bytes());
}

TEST(WeightFiles, VitSavesTransformersNamesAndLoadsThemBack) {
  const fs::path dir = temp_dir("d");
  auto a = vit(1), b = vit(2);
  save_model_weights(dir.string(), *a, io::kDefaultShardBytes);
  io::WeightFiles files(dir.string());
  EXPECT_FALSE(files.sharded());
  const int64_t D = test::small_vit().hidden_size;
  for (const char* n : {"vit.embeddings.cls_token", "vit.embeddings.position_embeddings",
                        "vit.embeddings.patch_embeddings.projection.weight", "vit.encoder.layer.1.layernorm_after.bias",
                        "vit.encoder.layer.0.intermediate.dense.weight", "vit.layernorm.weight", "classifier.bias"})
    EXPECT_NE(files.find(n).file, nullptr) << n;
  // in_proj split: key holds rows [D, 2D) of the torchvision in_proj_weight.
  const io::WeightFiles::Located key = files.find("vit.encoder.layer.0.attention.attention.key.weight");
  ASSERT_NE(key.file, nullptr);
  EXPECT_EQ(key.entry->shape, Shape({D, D}));
  Tensor in_proj = a->parameter("encoder.layers.encoder_layer_0.self_attention.in_proj_weight");
  EXPECT_TRUE(bytes_of(key.file->read(key.entry->name)) == bytes_of(slice(in_proj, 0, D, 2 * D)));
  EXPECT_EQ(files.find("encoder.layers.encoder_layer_0.self_attention.in_proj_weight").file, nullptr);
  load_model_weights(dir.string(), *b);
  expect_same_weights(*a, *b);
}

TEST(WeightFiles, TorchvisionNamedVitFilesStillLoad) {
  // ViT checkpoints saved before the Hugging Face layout used torchvision's names.
  const fs::path dir = temp_dir("d");
  auto a = vit(1), b = vit(2);
  io::save_module(*a, (dir / "model.safetensors").string());
  load_model_weights(dir.string(), *b);
  expect_same_weights(*a, *b);
}

TEST(WeightFiles, CastsBf16FilesIntoF32ModelsAndBack) {
  const fs::path d16 = temp_dir("bf16"), d32 = temp_dir("f32");
  auto src16 = gpt2(1, DType::BF16), src32 = gpt2(1, DType::F32);
  save_model_weights(d16.string(), *src16, 30000);
  save_model_weights(d32.string(), *src32, 30000);
  // bf16 -> f32 is exact; f32 -> bf16 rounds as the CPU backend's cast does.
  auto up = gpt2(5, DType::F32), down = gpt2(5, DType::BF16);
  load_model_weights(d16.string(), *up);
  load_model_weights(d32.string(), *down);
  auto pu = up->named_parameters(), p16 = src16->named_parameters(), pd = down->named_parameters(),
       p32 = src32->named_parameters();
  for (size_t i = 0; i < pu.size(); ++i) {
    EXPECT_TRUE(bytes_of(pu[i].second) == bytes_of(p16[i].second.to(DType::F32))) << pu[i].first;
    EXPECT_TRUE(bytes_of(pd[i].second) == bytes_of(p32[i].second.to(DType::BF16))) << pd[i].first;
  }
}

TEST(WeightFiles, StagedPathInSmallChunksEqualsTheDirectCopy) {
  // The GPU's path (pinned staging halves, cast on the host, one chunk after another), taken on
  // the CPU: a 128-byte buffer splits every tensor into many chunks, of any dtype pair.
  const fs::path dir = temp_dir("d");
  auto src = gpt2(1, DType::BF16);
  save_model_weights(dir.string(), *src, 30000);
  for (DType target : {DType::F32, DType::BF16, DType::F16}) {
    auto direct = gpt2(7, target), staged = gpt2(8, target);
    load_model_weights(dir.string(), *direct);
    io::WeightFiles files(dir.string());
    io::WeightLoadSpec spec;
    for (auto& [n, t] : staged->named_parameters()) {
      spec.params[n] = t;
      spec.targets.push_back({n, n, t, true});
    }
    spec.chunk_bytes = 128;
    spec.force_staging = true;
    const int64_t before = pinned_host_allocator(Device::cpu()).stats().allocated_bytes.current;
    const io::WeightLoadResult r = io::load_weights(files, spec);
    EXPECT_EQ(r.staging_bytes, 128);
    EXPECT_EQ(pinned_host_allocator(Device::cpu()).stats().allocated_bytes.current, before);  // freed
    EXPECT_EQ(r.tensors, int64_t(staged->named_parameters().size()));
    expect_same_weights(*direct, *staged);
  }
}

TEST(WeightFiles, ParametersBuiltUnfilledGetNoDrawsButBuffersAreFilled) {
  class WithBuffer : public nn::Module {
   public:
    explicit WithBuffer(const nn::InitOptions& o) {
      nn::ParamFactory pf(o);
      w = &register_parameter("w", pf.make({4}, nn::Init::ones()));
      b = &register_buffer("b", pf.make_buffer({4}, nn::Init::ones()));
    }
    Tensor *w, *b;
  };
  nn::InitOptions o;
  o.fill = false;
  for (bool flat : {true, false}) {
    o.flat = flat;
    WithBuffer m(o);
    EXPECT_EQ(m.b->to_float_vector(), std::vector<float>(4, 1.0f));
    EXPECT_EQ(m.w->nbytes(), 16);  // memory all the same
  }
}

// ---------------------------------------------------------------- what a load costs (meta)

TEST(WeightFiles, LoadingAllocatesNothingOnTheDeviceAndStagesOnThePinnedAccountWhenPlanningCuda) {
  const fs::path dir = temp_dir("d");
  save_model_weights(dir.string(), *gpt2(1), 20000);
  for (bool cuda : {false, true}) {
    MetaAllocatorScope scope(cuda);
    Allocator& dev = allocator_for(Device::meta());
    auto m = gpt2(1, DType::BF16, true, Device::meta());
    const MemoryStats built = dev.stats();
    const LoadedWeights w = load_model_weights(dir.string(), *m);
    const MemoryStats loaded = dev.stats();
    EXPECT_EQ(loaded.allocated_bytes.peak, built.allocated_bytes.peak);
    EXPECT_EQ(loaded.num_allocs, built.num_allocs);
    const MemoryStats pinned = pinned_host_allocator(Device::meta()).stats();
    // Two halves of the largest tensor (an MLP weight, 32 x 128 bf16), freed at the end.
    int64_t largest = 0;
    for (auto& [n, t] : m->named_parameters()) largest = std::max(largest, t.nbytes());
    EXPECT_EQ(largest, 32 * 128 * 2);
    EXPECT_EQ(w.staging_bytes, cuda ? 2 * largest : 0);
    EXPECT_EQ(pinned.allocated_bytes.peak, cuda ? 2 * largest : 0);
    EXPECT_EQ(pinned.allocated_bytes.current, 0);
    EXPECT_EQ(io::load_uses_staging(Device::meta()), cuda);
  }
}

// ---------------------------------------------------------------- hostile directories

TEST(WeightFiles, NamesMissingUnexpectedAndMismatchedTensorsBeforeWritingAnything) {
  const fs::path dir = temp_dir("d");
  auto a = gpt2(1);
  save_model_weights(dir.string(), *a, io::kDefaultShardBytes);
  auto fresh = [&] { return gpt2(3); };
  auto untouched = [&](const std::function<void(models::Model&)>& load) {
    auto m = fresh(), ref = fresh();
    EXPECT_THROW(load(*m), Error);
    expect_same_weights(*m, *ref);  // nothing written before the error
  };
  auto load = [&](models::Model& m) { load_model_weights(dir.string(), m); };
  const std::string W = "transformer.h.0.attn.c_attn.weight";

  edit_weights(dir, [&](auto& v) { std::erase_if(v, [&](auto& p) { return p.first.find("transformer.h.1.") == 0; }); });
  expect_error([&] { load(*fresh()); }, {"missing tensor 'transformer.h.1.", "(and 11 more)", "model.safetensors",
                                         "no weight file holds"});
  untouched(load);

  save_model_weights(dir.string(), *a, io::kDefaultShardBytes);
  edit_weights(dir, [](auto& v) { v.emplace_back("transformer.h.9.mlp.c_fc.weight", zeros({2})); v.emplace_back("zzz", zeros({1})); });
  expect_error([&] { load(*fresh()); }, {"unexpected tensor 'transformer.h.9.mlp.c_fc.weight' (and 1 more)"});
  untouched(load);

  save_model_weights(dir.string(), *a, io::kDefaultShardBytes);
  edit_weights(dir, [&](auto& v) {
    for (auto& [n, t] : v) if (n == W) t = zeros({3, 5});
  });
  expect_error([&] { load(*fresh()); }, {"shape mismatch for tensor '" + W + "'", "the file has [3, 5]", "needs [32, 96]"});
  untouched(load);

  save_model_weights(dir.string(), *a, io::kDefaultShardBytes);
  edit_weights(dir, [&](auto& v) {
    for (auto& [n, t] : v) if (n == W) t = zeros(t.shape(), DType::I64);
  });
  expect_error([&] { load(*fresh()); }, {"dtype mismatch for tensor '" + W + "'", "the file has I64", "is F32"});
  untouched(load);

  // Both the GPT2Model name and the GPT2LMHeadModel name of one parameter.
  save_model_weights(dir.string(), *a, io::kDefaultShardBytes);
  edit_weights(dir, [](auto& v) { v.emplace_back("h.0.ln_1.weight", zeros({32})); });
  expect_error([&] { load(*fresh()); }, {"ambiguous", "both hold parameter 'transformer.h.0.ln_1.weight'"});
  // ViT: a missing query names the transformers tensor and the parameter it is part of.
  const fs::path vdir = temp_dir("v");
  save_model_weights(vdir.string(), *vit(1), io::kDefaultShardBytes);
  edit_weights(vdir, [](auto& v) {
    std::erase_if(v, [](auto& p) { return p.first == "vit.encoder.layer.1.attention.attention.value.bias"; });
  });
  expect_error([&] { load_model_weights(vdir.string(), *vit(2)); },
               {"missing tensor 'vit.encoder.layer.1.attention.attention.value.bias'",
                "parameter 'encoder.layers.encoder_layer_1.self_attention.in_proj_bias'"});
  // leantrain's own checkpoints: one dtype.
  save_model_weights(dir.string(), *a, io::kDefaultShardBytes);
  edit_weights(dir, [&](auto& v) {
    for (auto& [n, t] : v) if (n == W) t = t.to(DType::BF16);
  });
  EXPECT_NO_THROW(load(*fresh()));  // a model directory may mix them
  expect_error([&] { load_model_weights(dir.string(), *fresh(), true); },
               {"has tensor '" + W + "' in BF16", "the other weights are F32"});
}

TEST(WeightFiles, RefusesInconsistentOrEscapingShards) {
  const fs::path dir = temp_dir("d");
  auto a = gpt2(1);
  std::vector<std::string> shards;  // the shard files, in order
  auto fresh_save = [&] {
    fs::remove_all(dir);
    fs::create_directories(dir);
    save_model_weights(dir.string(), *a, 20000);
    shards.clear();
    for (auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().rfind("model-", 0) == 0) shards.push_back(e.path().filename().string());
    std::sort(shards.begin(), shards.end());
  };
  auto load = [&] { load_model_weights(dir.string(), *gpt2(2)); };
  const fs::path index = dir / "model.safetensors.index.json";
  auto edit_index = [&](const std::function<void(nlohmann::json&)>& f) {
    std::ifstream in(index);
    nlohmann::json j = nlohmann::json::parse(in);
    f(j);
    write_text(index, j.dump(2));
  };
  fresh_save();
  ASSERT_GE(shards.size(), 4u);
  const std::string n = std::to_string(shards.size());
  // The first tensor of the first shard.
  const std::string first = io::SafetensorsReader((dir / shards[0]).string()).entries().front().name;
  // A shard outside the directory, by path.
  edit_index([&](nlohmann::json& j) { j["weight_map"][first] = "../" + shards[0]; });
  expect_error(load, {"invalid safetensors index", "is a path"});
  // A shard that is missing.
  fresh_save();
  fs::remove(dir / shards[2]);
  expect_error(load, {"inconsistent sharded checkpoint", "the shard '" + shards[2] + "' named by "
                      "model.safetensors.index.json is missing (the index names " + n + " shards)"});
  // A symlink leaving the directory.
  fresh_save();
  const fs::path outside = dir.parent_path() / "elsewhere.safetensors";
  fs::rename(dir / shards[1], outside);
  fs::create_symlink(outside, dir / shards[1]);
  expect_error(load, {shards[1] + "'", "is a symlink to '", "outside the checkpoint directory"});
  // ... and one staying inside is fine.
  fs::remove(dir / shards[1]);
  fs::create_directories(dir / "blobs");
  fs::rename(outside, dir / "blobs" / "x");
  fs::create_symlink("blobs/x", dir / shards[1]);
  EXPECT_NO_THROW(load());
  // A tensor in two shards.
  fresh_save();
  {
    std::map<std::string, Tensor> s1 = io::load_safetensors((dir / shards[0]).string());
    std::map<std::string, Tensor> s2 = io::load_safetensors((dir / shards[1]).string());
    s2.insert(s1.begin(), s1.end());
    io::save_safetensors((dir / shards[1]).string(), {s2.begin(), s2.end()});
  }
  expect_error(load, {"' is in two shards, '", shards[0] + "' and '", shards[1] + "'"});
  // A tensor the index puts in another shard, one it does not list, one missing from its shard.
  fresh_save();
  edit_index([&](nlohmann::json& j) { j["weight_map"][first] = shards[1]; });
  expect_error(load, {"the index puts tensor '" + first + "' in '" + shards[1] + "', but it is in '" + shards[0] + "'"});
  fresh_save();
  edit_index([&](nlohmann::json& j) { j["weight_map"].erase(first); });
  expect_error(load, {"tensor '" + first + "' of shard '" + shards[0] + "' is not in the index's weight_map"});
  fresh_save();
  edit_index([&](nlohmann::json& j) { j["weight_map"]["extra.weight"] = shards[0]; });
  expect_error(load, {"tensor 'extra.weight' is not in shard '" + shards[0] + "', where the index puts it"});
  // A truncated shard: its header promises more data than the file holds.
  fresh_save();
  fs::resize_file(dir / shards[3], fs::file_size(dir / shards[3]) - 10);
  expect_error(load, {shards[3] + "'", "beyond the data section"});
  // No weights at all, and a directory that is none.
  fresh_save();
  for (auto& e : fs::directory_iterator(dir)) fs::remove(e.path());
  expect_error(load, {"no weights in '", "neither model.safetensors nor model.safetensors.index.json"});
  expect_error([&] { io::WeightFiles((dir / "nope").string()); }, {"it is not a directory"});
}

TEST(WeightFiles, SingleFileWinsOverAnIndexAsInTransformers) {
  const fs::path dir = temp_dir("d");
  auto a = gpt2(1), b = gpt2(2);
  save_model_weights(dir.string(), *b, 20000);  // shards of b
  save_model_weights(dir.string(), *a, io::kDefaultShardBytes);  // model.safetensors of a
  auto c = gpt2(3);
  load_model_weights(dir.string(), *c);
  expect_same_weights(*a, *c);
}

// On the GPU machine: the staged, chunked copy with a cast lands the same values as the CPU's.
TEST(WeightFiles, CudaLoadEqualsCpuLoad) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build or machine";
  const fs::path dir = temp_dir("d");
  save_model_weights(dir.string(), *gpt2(1, DType::BF16), 30000);
  for (DType target : {DType::F32, DType::BF16}) {
    auto cpu = gpt2(2, target), gpu = gpt2(3, target, true, Device::cuda(0));
    load_model_weights(dir.string(), *cpu);
    const LoadedWeights w = load_model_weights(dir.string(), *gpu);
    EXPECT_GT(w.staging_bytes, 0);
    expect_same_weights(*cpu, *gpu);
  }
}
