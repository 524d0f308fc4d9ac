// bitsandbytes' serialised 4-bit state (Params4bit / QuantState.as_dict(packed=True)), as Hugging
// Face checkpoints of load_in_4bit models hold it, for one weight NAME (e.g.
// "model.layers.0.mlp.up_proj.weight"):
//   NAME                                       u8 [(n + 1) / 2, 1]  packed codes
//   NAME.absmax                                u8 [blocks]          nested codes of the absmax
//   NAME.quant_map                             f32 [16]             the NF4 values
//   NAME.nested_absmax                         f32 [nested blocks]
//   NAME.nested_quant_map                      f32 [256]
//   NAME.quant_state.bitsandbytes__nf4         u8: JSON {quant_type, blocksize, dtype, shape,
//                                              nested_blocksize, nested_dtype, nested_offset}
// Only NF4 with double quantisation, blocks of 64 and nested blocks of 256 is read (what
// quantize_4bit(compress_statistics=True) and QLoRA's BitsAndBytesConfig write); anything else
// is refused with one line naming the tensor.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "quant/nf4.h"

namespace lt {

// `source` names the file in messages. The state's tensors stay on their device.
Nf4Weight nf4_from_bnb(const std::map<std::string, Tensor>& tensors, const std::string& name,
                       const std::string& source);

// The six tensors bitsandbytes writes for `name`, in its order.
std::vector<std::pair<std::string, Tensor>> nf4_to_bnb(const Nf4Weight& q, const std::string& name);

// True when `name` has a bitsandbytes 4-bit state in `tensors` (its quant_state entry).
bool has_bnb_4bit_state(const std::map<std::string, Tensor>& tensors, const std::string& name);

}  // namespace lt
