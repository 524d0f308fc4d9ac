// bitsandbytes' serialised NF4 state: names, shapes and the quant_state JSON written by
// nf4_to_bnb, a round trip through a safetensors file, and the refusals of nf4_from_bnb.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

#include "error_of.h"
#include "leantrain/ops.h"
#include "leantrain/safetensors.h"
#include "quant/nf4.h"
#include "quant/nf4_bnb_format.h"

using namespace lt;
using lt::test::error_of;

namespace {

Nf4Weight sample_weight() {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> w(48 * 72);
  for (float& v : w) v = d(rng);
  return nf4_quantize(from_vector(w, {48, 72}, DType::BF16));
}

std::map<std::string, Tensor> as_map(const std::vector<std::pair<std::string, Tensor>>& v) {
  return std::map<std::string, Tensor>(v.begin(), v.end());
}

std::string text_of(const Tensor& u8) { return std::string(u8.data<char>(), size_t(u8.numel())); }

template <class T> std::vector<T> values(const Tensor& t) {
  const Tensor c = contiguous(t);
  return std::vector<T>(c.data<T>(), c.data<T>() + c.numel());
}

const std::string kName = "model.layers.0.mlp.up_proj.weight";

}  // namespace

TEST(QuantNf4BnbFormat, WritesBitsandbytesNamesAndState) {
  const Nf4Weight q = sample_weight();
  const auto t = nf4_to_bnb(q, kName);
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0].first, kName);
  EXPECT_EQ(t[0].second.shape(), (Shape{48 * 72 / 2, 1}));
  EXPECT_EQ(t[1].first, kName + ".absmax");
  EXPECT_EQ(t[1].second.numel(), 48 * 72 / 64);
  EXPECT_EQ(t[2].first, kName + ".quant_map");
  EXPECT_EQ(t[3].first, kName + ".nested_absmax");
  EXPECT_EQ(t[4].first, kName + ".nested_quant_map");
  EXPECT_EQ(t[5].first, kName + ".quant_state.bitsandbytes__nf4");
  const std::string json = text_of(t[5].second);
  EXPECT_EQ(json.rfind("{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [48, 72], "
                       "\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": ",
                       0),
            0u)
      << json;
  EXPECT_NE(json.find(std::to_string(q.offset).substr(0, 5)), std::string::npos) << json;
}

TEST(QuantNf4BnbFormat, RoundTripsThroughASafetensorsFile) {
  const Nf4Weight q = sample_weight();
  const std::string path = ::testing::TempDir() + "nf4_bnb_roundtrip.safetensors";
  io::save_safetensors(path, nf4_to_bnb(q, kName));
  const std::map<std::string, Tensor> loaded = io::load_safetensors(path);
  std::remove(path.c_str());
  ASSERT_TRUE(has_bnb_4bit_state(loaded, kName));
  const Nf4Weight r = nf4_from_bnb(loaded, kName, path);
  EXPECT_EQ(r.shape, q.shape);
  EXPECT_EQ(r.dtype, DType::BF16);
  EXPECT_EQ(r.offset, q.offset);
  EXPECT_EQ(r.nested_map, q.nested_map);
  EXPECT_EQ(values<uint8_t>(r.codes), values<uint8_t>(q.codes));
  EXPECT_EQ(values<uint8_t>(r.absmax_codes), values<uint8_t>(q.absmax_codes));
  EXPECT_EQ(values<float>(r.nested_absmax), values<float>(q.nested_absmax));
  EXPECT_EQ(values<float>(nf4_dequantize(r, DType::F32)), values<float>(nf4_dequantize(q, DType::F32)));
}

TEST(QuantNf4BnbFormat, Refusals) {
  const Nf4Weight q = sample_weight();
  const std::string state = kName + ".quant_state.bitsandbytes__nf4";
  auto with = [&](auto&& change) {
    std::map<std::string, Tensor> m = as_map(nf4_to_bnb(q, kName));
    change(m);
    return error_of([&] { nf4_from_bnb(m, kName, "model.safetensors"); });
  };
  auto json_state = [&](const std::string& s) {
    return from_ints(std::vector<int64_t>(s.begin(), s.end()), {int64_t(s.size())}, DType::U8);
  };
  EXPECT_EQ(with([](auto&) {}), "");
  EXPECT_NE(with([&](auto& m) { m.erase(kName + ".nested_absmax"); }).find(".nested_absmax: missing"),
            std::string::npos);
  EXPECT_NE(with([&](auto& m) {
              m.erase(state);
              m[kName + ".quant_state.bitsandbytes__fp4"] = json_state("{}");
            }).find("FP4 is not supported"),
            std::string::npos);
  EXPECT_NE(with([&](auto& m) {
              m[state] = json_state("{\"quant_type\": \"nf4\", \"blocksize\": 128, \"dtype\": \"bfloat16\", "
                                    "\"shape\": [48, 72], \"nested_blocksize\": 256, \"nested_dtype\": "
                                    "\"float32\", \"nested_offset\": 0.01}");
            }).find("blocksize is 128"),
            std::string::npos);
  EXPECT_NE(with([&](auto& m) {
              m[state] = json_state("{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", "
                                    "\"shape\": [48, 73], \"nested_blocksize\": 256, \"nested_dtype\": "
                                    "\"float32\", \"nested_offset\": 0.01}");
            }).find("expected u8 with 1752 elements"),
            std::string::npos);
  EXPECT_NE(with([&](auto& m) { m[state] = json_state("not json"); }).find("not a JSON object"), std::string::npos);
  EXPECT_NE(with([&](auto& m) {
              std::vector<float> map(16, 0.5f);
              m[kName + ".quant_map"] = from_vector(map, {16});
            }).find("NF4 value"),
            std::string::npos);
  EXPECT_NE(error_of([&] { nf4_from_bnb({}, kName, "model.safetensors"); }).find("model.safetensors: " + kName),
            std::string::npos);
}

TEST(QuantNf4BnbFormat, MessageReadsAsOneLine) {
  std::map<std::string, Tensor> m = as_map(nf4_to_bnb(sample_weight(), kName));
  m.erase(kName + ".absmax");
  EXPECT_EQ(error_of([&] { nf4_from_bnb(m, kName, "model.safetensors"); }),
            "model.safetensors: " + kName +
                ".absmax: missing (a bitsandbytes 4-bit weight with double quantisation has it) (save the checkpoint "
                "with bnb_4bit_use_double_quant=True, or pass the unquantised weights)");
}
