// leantrain's NF4 against bench/peers/nf4_reference.py (torch, bitsandbytes' algorithm), byte for
// byte: run on the GPU machine with LT_NF4_REFERENCE=<the file that script wrote>; skipped
// without it. Every NAME.input is quantised on the CPU (and on CUDA when there is one); codes,
// nested absmax codes, nested absmax, offset, the dynamic map and the dequantised tensor must be
// identical to the reference's; 2-d cases also go through the bitsandbytes-format loader and writer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "leantrain/device.h"
#include "leantrain/ops.h"
#include "leantrain/safetensors.h"
#include "quant/bnb_dynamic_map.h"
#include "quant/nf4.h"
#include "quant/nf4_bnb_format.h"

using namespace lt;

namespace {

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = contiguous(t.device().is_cpu() ? t : to_device(t, Device::cpu()));
  const auto* p = static_cast<const uint8_t*>(h.raw_data());
  return std::vector<uint8_t>(p, p + h.numel() * int64_t(dtype_size(h.dtype())));
}

}  // namespace

TEST(QuantNf4Reference, MatchesTorchReferenceFile) {
  const char* path = std::getenv("LT_NF4_REFERENCE");
  if (!path || !*path) GTEST_SKIP() << "set LT_NF4_REFERENCE to the file bench/peers/nf4_reference.py wrote";
  const std::map<std::string, Tensor> ref = io::load_safetensors(path);
  ASSERT_TRUE(ref.count("bnb_dynamic_map"));
  // The map: torch's f32 linspace differs between versions and CPUs in the last bit of some
  // boundaries (see docs/decisions.md), so leantrain's map must agree to a few ulps only; the
  // cases below quantise with the reference's own map, so everything else must agree exactly.
  const std::span<const float> map = bnb_dynamic_map_signed();
  const std::vector<uint8_t> ref_map_bytes = bytes_of(ref.at("bnb_dynamic_map"));
  ASSERT_EQ(ref_map_bytes.size(), 256 * sizeof(float));
  std::vector<float> ref_map(256);
  std::memcpy(ref_map.data(), ref_map_bytes.data(), ref_map_bytes.size());
  int differ = 0;
  for (size_t i = 0; i < 256; ++i) {
    EXPECT_NEAR(map[i], ref_map[i], 4e-7 * std::abs(ref_map[i])) << "dynamic map entry " << i;
    differ += map[i] != ref_map[i];
  }
  std::printf("dynamic map: %d of 256 entries differ from the reference's in the last bits\n", differ);
  std::vector<Device> devices = {Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda());
  int cases = 0;
  for (const auto& [key, input] : ref) {
    const std::string suffix = ".input";
    if (key.size() <= suffix.size() || key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string name = key.substr(0, key.size() - suffix.size());
    ++cases;
    for (Device dev : devices) {
      SCOPED_TRACE(name + " on " + (dev.is_cpu() ? "cpu" : "cuda"));
      const Nf4Weight q = nf4_quantize(to_device(input, dev), ref_map);
      EXPECT_EQ(bytes_of(q.codes), bytes_of(ref.at(name + ".weight")));
      EXPECT_EQ(bytes_of(q.absmax_codes), bytes_of(ref.at(name + ".weight.absmax")));
      EXPECT_EQ(bytes_of(q.nested_absmax), bytes_of(ref.at(name + ".weight.nested_absmax")));
      EXPECT_EQ(bytes_of(from_vector(std::vector<float>{q.offset}, {1})), bytes_of(ref.at(name + ".weight.offset")));
      EXPECT_EQ(bytes_of(nf4_dequantize(q, input.dtype())), bytes_of(ref.at(name + ".dequant")));
      if (input.dim() != 2) continue;
      // A linear weight: the reference's state read through the bitsandbytes loader, and the
      // JSON leantrain writes for its own state byte-identical to json.dumps'.
      const Nf4Weight b = nf4_from_bnb(ref, name + ".weight", path);
      EXPECT_EQ(bytes_of(nf4_dequantize(b, b.dtype)), bytes_of(ref.at(name + ".dequant")));
      const auto written = nf4_to_bnb(q, name + ".weight");
      EXPECT_EQ(bytes_of(written.back().second), bytes_of(ref.at(name + ".weight.quant_state.bitsandbytes__nf4")));
    }
  }
  EXPECT_GT(cases, 10);
}
