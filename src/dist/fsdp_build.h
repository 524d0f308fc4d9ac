// fsdp's sharded build: a rank creates only the parameters it keeps between uses.
//
// Built whole and sharded afterwards (FsdpUnits' first act), every rank would hold the whole
// model once, at the build: for a 7B model in f32, 25 GiB on every GPU before the first step,
// above anything the step itself needs. Instead the model is laid out as slots without memory
// (nn::InitOptions::deferred), the ranks' ownership is worked out from the shapes alone (the
// same owners_for and fsdp_unit_modules FsdpUnits uses later), and only what this rank keeps
// gets memory and values: its share of the units' parameters, every parameter outside them and
// every buffer, each in an allocation of its own. The values are a whole build's: each slot's
// random draws are keyed by its generator counter, not by where it lands. A weight file then
// loads into what exists (io::load_weights skips parameters without memory).
#pragma once
#include <vector>

#include "leantrain/models.h"
#include "leantrain/nn.h"
#include "leantrain/recipe.h"

namespace lt::dist {

// Whether build_model lays the model out sharded: --strategy fsdp over 2+ ranks with every
// parameter trainable at the build. LoRA (its base is frozen after the build) and --offload
// params build whole, as before; so does NF4, whose build never asks.
bool builds_sharded(const RunConfig& c);

// Gives `slots` (a deferred build of `model`, in registration order) memory for what this rank of
// world() keeps, with their values when `fill` (buffers always); the others stay without memory.
void materialize_rank_share(const RunConfig& c, models::Model& model, const std::vector<nn::DeferredSlot>& slots,
                            bool fill);

}  // namespace lt::dist
