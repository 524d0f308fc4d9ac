// The finite-state guard. A run that diverged has NaN or infinite weights, optimizer state or
// evaluation loss; saving that state would replace the last good checkpoint with a useless one,
// and loading it would train on (or sample from) garbage. So a save checks the weights and the
// optimizer state first, and loading a checkpoint (resume, generate) checks what it read.
// AdamW's second moments (exp_avg_sq) are squares: a negative one is damage too.
#pragma once
#include <map>
#include <string>

#include "leantrain/models.h"
#include "leantrain/tensor.h"

namespace lt {

// "" when every element of `t` is finite (integer tensors always are), else the first bad
// element: "NaN at element 12".
std::string first_nonfinite(const Tensor& t);
// The first weight of `m` that is not finite, as "weight 'NAME' holds NaN at element 3"; "" when none.
// `stand_ins`: values checked in place of parameters (by TensorImpl), as fsdp's rank 0 holds the
// other ranks' (dist::CheckpointGather::host_params); a parameter without memory and without a
// stand-in is another rank's to check.
std::string nonfinite_weight(const models::Model& m, const std::map<const TensorImpl*, Tensor>& stand_ins = {});
// The first optimizer state tensor that is not finite, or a second moment ("*.exp_avg_sq") or
// quantisation scale ("*_absmax") below zero; "" when none.
std::string bad_optimizer_state(const std::map<std::string, Tensor>& state);

}  // namespace lt
