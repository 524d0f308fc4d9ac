#include "train/checkpoint_weights.h"

#include "io/weight_files.h"
#include "io/weight_load.h"
#include "io/weight_save.h"
#include "leantrain/error.h"
#include "quant/nf4_bnb_format.h"
#include "quant/nf4_checkpoint.h"

namespace lt {

namespace {

// The part of parameter `t` that checkpoint tensor `c` holds: all of it, or rows along dim 0; for
// a parameter of 3 or more dims, rows of it seen as 2-D [numel / last, last] (one expert's gate
// rows of a stacked [E, 2I, C] MoE weight, Llama::checkpoint_tensors).
Tensor rows_of(const Tensor& t, const models::CheckpointTensor& c) {
  if (c.rows < 0) return t;
  if (t.dim() >= 3) {
    const int64_t last = t.size(-1), all = last == 0 ? 0 : t.numel() / last;
    LT_ASSERT(c.row >= 0 && c.row + c.rows <= all && t.is_contiguous());
    return make_view(t, {c.rows, last}, {last, 1}, t.offset() + c.row * last);
  }
  LT_ASSERT(t.dim() >= 1 && c.row >= 0 && c.row + c.rows <= t.size(0) && t.is_contiguous());
  Shape s = t.shape();
  s[0] = c.rows;
  return make_view(t, s, t.strides(), t.offset() + c.row * t.strides()[0]);
}

std::map<std::string, Tensor> tensors_by_name(const models::Model& m) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : m.named_parameters()) out[name] = t;
  for (const auto& [name, t] : m.named_buffers()) out[name] = t;
  return out;
}

// leantrain saves its weights in one dtype, a precision it trains in; anything else was edited.
// Integer buffers (batch norm's i64 num_batches_tracked) keep their own dtype.
void check_single_dtype(const io::WeightFiles& files) {
  const io::TensorEntry* first = nullptr;
  for (const std::string& name : files.names()) {
    const io::WeightFiles::Located at = files.find(name);
    const io::TensorEntry& e = *at.entry;
    if (e.dtype == DType::I64) continue;
    const bool known = e.dtype == DType::F32 || e.dtype == DType::BF16 || e.dtype == DType::F16;
    if (!known || (first && e.dtype != first->dtype))
      fail("'" + at.file->path() + "' has tensor '" + e.name + "' in " + dtype_safetensors_name(e.dtype),
           first && known ? std::string("the other weights are ") + dtype_safetensors_name(first->dtype) +
                                ", and a checkpoint holds one dtype"
                          : "leantrain saves weights as F32, BF16 or F16",
           "pass a checkpoint directory written by 'leantrain train --save'");
    if (!first) first = &e;
  }
}

}  // namespace

bool has_model_weights(const std::string& dir) { return io::WeightFiles::present(dir); }

LoadedWeights load_model_weights(const std::string& dir, models::Model& m, bool leantrain_checkpoint) {
  std::map<std::string, std::string> unused;
  return load_model_weights_nf4(dir, m, {}, unused, leantrain_checkpoint);
}

LoadedWeights load_model_weights_nf4(const std::string& dir, models::Model& m, const std::set<std::string>& quantize_from,
                                     std::map<std::string, std::string>& float_keys, bool leantrain_checkpoint) {
  io::WeightFiles files(dir);
  // A quantised model's checkpoint holds bitsandbytes' u8 and f32 state beside its 16-bit weights.
  const bool quantized = has_nf4(m);
  if (leantrain_checkpoint && !quantized) check_single_dtype(files);
  io::WeightLoadSpec spec;
  spec.params = tensors_by_name(m);
  const std::vector<models::CheckpointTensor> layout = m.checkpoint_tensors();
  for (const models::CheckpointTensor& c : layout) {
    auto p = spec.params.find(c.param);
    LT_ASSERT(p != spec.params.end());  // a layout names the model's own parameters
    spec.targets.push_back({c.name, c.param, rows_of(p->second, c), !c.buffer});
  }
  spec.rename = [&m](const std::string& key) { return m.checkpoint_key_to_name(key); };
  if (quantized)
    float_keys = nf4_prepare_load(files, m, spec, [&m](const std::string& key) { return m.checkpoint_key_to_name(key); },
                                  quantize_from, layout);
  const io::WeightLoadResult r = io::load_weights(files, spec);
  return {r.tensors, r.bytes, int64_t(files.files().size()), r.staging_bytes};
}

void save_model_weights(const std::string& dir, const models::Model& m, int64_t shard_bytes,
                        const std::map<const TensorImpl*, Tensor>& stand_ins) {
  std::map<std::string, Tensor> all = tensors_by_name(m);
  for (auto& [name, t] : all)
    if (auto it = stand_ins.find(t.impl()); it != stand_ins.end()) t = it->second;
  std::vector<std::pair<std::string, Tensor>> tensors;
  // NF4 experts: each piece (an expert's projection) as the six tensors bitsandbytes saves for it.
  const std::map<std::string, Nf4Stack> stacks = nf4_expert_stacks(const_cast<models::Model&>(m));
  for (const models::CheckpointTensor& c : m.checkpoint_tensors()) {
    if (auto it = stacks.find(c.param); it != stacks.end()) {
      for (auto& e : nf4_to_bnb(it->second.piece(c.row), c.name)) tensors.push_back(std::move(e));
      continue;
    }
    tensors.emplace_back(c.name, rows_of(all.at(c.param), c));
  }
  // NF4 layers as bitsandbytes saves them (quant/nf4_checkpoint.h).
  tensors = nf4_save_layout(const_cast<models::Model&>(m), std::move(tensors));
  io::save_weight_files(dir, tensors, shard_bytes);
}

DType stored_weights_dtype(const std::string& dir) {
  io::WeightFiles files(dir);
  std::optional<DType> common;
  for (const std::string& name : files.names()) {
    const DType d = files.find(name).entry->dtype;
    if (d != DType::F32 && d != DType::BF16 && d != DType::F16) return DType::F32;
    if (common && *common != d) return DType::F32;
    common = d;
  }
  return common.value_or(DType::F32);
}

}  // namespace lt
