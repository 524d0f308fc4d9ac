// A model with Nf4Linear layers in Hugging Face checkpoints, as transformers + bitsandbytes save
// a load_in_4bit model: each NF4 layer's state as the six tensors of quant/nf4_bnb_format.h under
// its weight's name, and config.json's "quantization_config".
#pragma once
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/weight_files.h"
#include "io/weight_load.h"
#include "leantrain/models.h"
#include "leantrain/nn_moe.h"
#include "leantrain/nn_quant.h"

namespace lt {

// Every Nf4Linear below `m`, by path.
std::vector<std::pair<std::string, nn::Nf4Linear*>> nf4_layers(nn::Module& m);
// Every NF4 experts module (nn::MoeExperts, quantized) below `m`, by path.
std::vector<std::pair<std::string, nn::MoeExperts*>> nf4_experts(nn::Module& m);
// Whether m holds NF4 state (layers or experts).
bool has_nf4(nn::Module& m);
// The NF4 expert stacks of m by the name of their codes buffer (PATH.gate_up_proj, PATH.down_proj):
// a checkpoint layout's entry for that buffer names piece `row` (Llama::checkpoint_tensors).
std::map<std::string, Nf4Stack> nf4_expert_stacks(nn::Module& m);
// The key of piece p of the stack whose codes buffer is `param`, in nf4_prepare_load's float_keys.
std::string nf4_piece_key(const std::string& param, int64_t piece);

// `tensors` (name -> tensor, in save order, the module's own names) with each NF4 layer's buffers
// replaced by bitsandbytes' six tensors, at the position of its "weight".
std::vector<std::pair<std::string, Tensor>> nf4_save_layout(nn::Module& m,
                                                            std::vector<std::pair<std::string, Tensor>> tensors);

// Prepares `spec` (the model's whole layout, see train/checkpoint_weights.cpp) for a model with
// NF4 layers: a layer whose state is in the files gets its three buffers filled from
// bitsandbytes' tensors and its host state (offset, nested map, dtype) read and checked here; a
// layer named in `from_float` (its module path) must have a floating weight in the files instead,
// which the load skips (the caller quantises it). Anything else is refused with one line.
// NF4 experts alike, piece by piece under the names of `layout` (the model's checkpoint_tensors):
// each piece's six bitsandbytes tensors, or (from_float) its floating tensor, or the fused
// stack's (transformers 5's experts.gate_up_proj / down_proj), every piece reading that one.
// `key_to_name`: the model's checkpoint_key_to_name. Returns, for each layer of `from_float`, the
// file tensor holding its weight; for each expert piece, under nf4_piece_key(codes buffer, p).
std::map<std::string, std::string> nf4_prepare_load(const io::WeightFiles& files, nn::Module& m,
                                                    io::WeightLoadSpec& spec,
                                                    const std::function<std::string(const std::string&)>& key_to_name,
                                                    const std::set<std::string>& from_float = {},
                                                    const std::vector<models::CheckpointTensor>& layout = {});

// The "quantization_config" transformers writes for BitsAndBytesConfig(load_in_4bit=True,
// bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=compute).
nlohmann::json bnb_quantization_config(DType compute);

// config.json text with the quantization_config of `m`'s NF4 layers added (their weights' dtype as
// bnb_4bit_compute_dtype); the text unchanged when m has none.
std::string nf4_config_json(nn::Module& m, const std::string& config_json);

}  // namespace lt
