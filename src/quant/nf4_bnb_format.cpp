// Reading and writing bitsandbytes' 4-bit state; see nf4_bnb_format.h for the layout.
#include "quant/nf4_bnb_format.h"

#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>

#include "backend/nf4.h"
#include "leantrain/error.h"
#include "leantrain/ops.h"

namespace lt {

namespace {

constexpr const char* kNf4State = ".quant_state.bitsandbytes__nf4";
constexpr const char* kFp4State = ".quant_state.bitsandbytes__fp4";

struct Reader {
  const std::map<std::string, Tensor>& tensors;
  std::string name, source;

  [[noreturn]] void refuse(const std::string& what, const std::string& why, const std::string& fix) const {
    fail(source + ": " + name + what, why, fix);
  }
  const Tensor& get(const std::string& suffix, DType dtype, int64_t numel) const {
    const auto it = tensors.find(name + suffix);
    if (it == tensors.end())
      refuse(suffix, "missing (a bitsandbytes 4-bit weight with double quantisation has it)",
             "save the checkpoint with bnb_4bit_use_double_quant=True, or pass the unquantised weights");
    const Tensor& t = it->second;
    if (t.dtype() != dtype || t.numel() != numel)
      refuse(suffix, std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()) + ", expected " +
                         dtype_name(dtype) + " with " + std::to_string(numel) + " elements",
             "the file is not a bitsandbytes NF4 state of the shape its quant_state names");
    return t;
  }
};

std::vector<float> host_floats(const Tensor& t) {
  const Tensor h = contiguous(t.device().is_cpu() ? t : to_device(t, Device::cpu()));
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

const char* dtype_word(DType t) {
  switch (t) {
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    default: return "float32";
  }
}

// Python's repr of the f32 offset as a double (json.dumps of offset.item()): the shortest
// decimal that reads back as that double.
std::string python_float(float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), double(v));
  std::string s(buf, r.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

bool has_bnb_4bit_state(const std::map<std::string, Tensor>& tensors, const std::string& name) {
  return tensors.count(name + kNf4State) || tensors.count(name + kFp4State);
}

Nf4Weight nf4_from_bnb(const std::map<std::string, Tensor>& tensors, const std::string& name,
                       const std::string& source) {
  const Reader r{tensors, name, source};
  if (tensors.count(name + kFp4State))
    r.refuse(kFp4State, "FP4 is not supported (leantrain reads NF4)", "quantise with bnb_4bit_quant_type=\"nf4\"");
  const auto st = tensors.find(name + kNf4State);
  if (st == tensors.end())
    r.refuse(kNf4State, "missing", "pass a checkpoint saved by bitsandbytes with load_in_4bit");
  const Tensor state = contiguous(st->second.device().is_cpu() ? st->second : to_device(st->second, Device::cpu()));
  if (state.dtype() != DType::U8) r.refuse(kNf4State, "not u8 bytes", "the file is not a bitsandbytes state");
  const auto* p = state.data<uint8_t>();
  const nlohmann::json j = nlohmann::json::parse(p, p + state.numel(), nullptr, false);
  if (!j.is_object()) r.refuse(kNf4State, "not a JSON object", "the file is not a bitsandbytes state");
  auto field = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key))
      r.refuse(kNf4State, std::string("has no '") + key + "'",
               "leantrain reads NF4 with double quantisation (bnb_4bit_use_double_quant=True)");
    return j.at(key);
  };
  if (field("quant_type") != "nf4") r.refuse(kNf4State, "quant_type is not nf4", "quantise to NF4");
  if (field("blocksize") != kNf4Block)
    r.refuse(kNf4State, "blocksize is " + field("blocksize").dump() + ", not 64",
             "quantise with bitsandbytes' default blocksize 64");
  if (field("nested_blocksize") != kNf4NestedBlock)
    r.refuse(kNf4State, "nested_blocksize is " + field("nested_blocksize").dump() + ", not 256",
             "quantise with bitsandbytes' defaults");
  if (field("nested_dtype") != "float32")
    r.refuse(kNf4State, "nested_dtype is " + field("nested_dtype").dump(), "the nested absmax must be float32");
  const nlohmann::json& shape = field("shape");
  const nlohmann::json& offset = field("nested_offset");
  if (!shape.is_array() || shape.size() != 2 || !shape[0].is_number_unsigned() || !shape[1].is_number_unsigned() ||
      !offset.is_number())
    r.refuse(kNf4State, "shape " + shape.dump() + " or nested_offset " + offset.dump() + " is malformed",
             "a linear weight's state has shape [out, in] and a numeric offset");
  Nf4Weight q;
  const std::string dt = field("dtype").is_string() ? field("dtype").get<std::string>() : "";
  if (dt == "bfloat16") q.dtype = DType::BF16;
  else if (dt == "float16") q.dtype = DType::F16;
  else if (dt == "float32") q.dtype = DType::F32;
  else r.refuse(kNf4State, "dtype '" + dt + "' is not bfloat16, float16 or float32", "quantise a floating weight");
  q.shape = {shape[0].get<int64_t>(), shape[1].get<int64_t>()};
  const int64_t n = q.shape[0] * q.shape[1], blocks = nf4_blocks(n);
  q.offset = float(offset.get<double>());
  q.codes = reshape(r.get("", DType::U8, nf4_bytes(n)), {nf4_bytes(n)});
  q.absmax_codes = r.get(".absmax", DType::U8, blocks);
  q.nested_absmax = r.get(".nested_absmax", DType::F32, nf4_nested_blocks(blocks));
  q.nested_map = host_floats(r.get(".nested_quant_map", DType::F32, 256));
  const std::vector<float> map = host_floats(r.get(".quant_map", DType::F32, 16));
  for (int k = 0; k < 16; ++k)
    if (map[size_t(k)] != nf4_value(k))
      r.refuse(".quant_map", "entry " + std::to_string(k) + " is " + std::to_string(map[size_t(k)]) +
                                 ", not the NF4 value " + std::to_string(nf4_value(k)),
               "leantrain reads bitsandbytes' NF4 map only");
  return q;
}

std::vector<std::pair<std::string, Tensor>> nf4_to_bnb(const Nf4Weight& q, const std::string& name) {
  LT_CHECK(q.shape.size() == 2, "nf4: saving " + name + " of shape " + shape_str(q.shape),
           "bitsandbytes' state names a 2-d [out, in] shape", "quantise linear weights only");
  const Device dev = q.codes.device();
  std::vector<float> nf4(16);
  for (int k = 0; k < 16; ++k) nf4[size_t(k)] = nf4_value(k);
  // json.dumps' layout (", " and ": "), keys in bitsandbytes' order.
  const std::string json = std::string("{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"") +
                           dtype_word(q.dtype) + "\", \"shape\": [" + std::to_string(q.shape[0]) + ", " +
                           std::to_string(q.shape[1]) +
                           "], \"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": " +
                           python_float(q.offset) + "}";
  std::vector<int64_t> bytes(json.begin(), json.end());
  return {{name, reshape(q.codes, {q.codes.numel(), 1})},
          {name + ".absmax", q.absmax_codes},
          {name + ".quant_map", from_vector(nf4, {16}, DType::F32, dev)},
          {name + ".nested_absmax", q.nested_absmax},
          {name + ".nested_quant_map", from_vector(q.nested_map, {256}, DType::F32, dev)},
          {name + kNf4State, from_ints(bytes, {int64_t(bytes.size())}, DType::U8, dev)}};
}

}  // namespace lt
