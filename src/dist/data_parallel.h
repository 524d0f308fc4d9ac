// Data parallelism over the process's world (dist::world()): ddp, zero1, zero2 (issue #13).
//
// Every rank holds the whole model and trains on its rows of each global micro-batch
// (micro-batch / world, contiguous, rank order), so the world sees the same global batch as one
// process. Gradients are reduced during backward: post-accumulate-grad hooks mark parameters
// ready, and a bucket (~25 MiB of gradients in reverse registration order, the order backward
// produces them) is reduced as soon as all of its parameters are, on the last micro-batch.
//
//   ddp:   buckets all-reduced (mean); every rank steps every parameter.
//   zero1: as ddp, but each rank's optimizer steps (and keeps state for) its shard only; the
//          shards are then broadcast by their owners (an all-gather of the parameter store).
//   zero2: buckets reduced (mean) to each parameter's owner only; the others drop those
//          gradients at once, so a rank keeps gradients for its shard alone.
//
// A shard is a contiguous range of the trainable parameters in registration order, which is the
// order of the flat parameter store, balanced by bytes: its parameters are one offset range of
// the flat buffer, broadcast in one call. Sharding is by whole parameters (no parameter is split
// across ranks); docs/decisions.md says why.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "leantrain/dist.h"
#include "leantrain/nn.h"
#include "leantrain/optim.h"
#include "leantrain/recipe.h"

namespace lt {
class Trainer;
}

namespace lt::dist {

// The rank (of `world`) that owns each of `params` (contiguous ranges balanced by bytes): zero1, zero2.
std::vector<int> shard_owners(const std::vector<Tensor>& params, int world);

// fsdp's owners: block u (unit_of[i] = u, -1 outside the blocks) belongs to rank u % world, so
// every rank's gradients arrive throughout backward instead of the last blocks' owner holding
// all of its shard while the activations are still there; the parameters outside the blocks go
// one by one to the rank holding the least (a block's parameter weighs 4 times its bytes on its
// owner, one outside the blocks 3: every rank holds its value, or, for a standalone module's, a
// gathered copy around its own call).
std::vector<int> interleaved_owners(const std::vector<Tensor>& params, const std::vector<int>& unit_of, int world);
// The block (transformer block, in module order) each of `params` belongs to, -1 for none; a
// parameter shared by two blocks belongs to the first.
std::vector<int> block_units(nn::Module& model, const std::vector<Tensor>& params);
// The dtype fsdp gathers the transformer blocks in: under bf16-mixed / 16-mixed the compute
// dtype, as FSDP2's MixedPrecisionPolicy(param_dtype=...) does (half the bytes moved and held, no
// cast on the ranks that receive them); nullopt (the parameters' own dtype) otherwise, for LoRA
// (its units are the adapters, a few MB), and with --fsdp-gather f32 (for measuring; a
// plan reads it too).
std::optional<DType> fsdp_gather_dtype(const RunConfig& c);
// interleaved_owners under fsdp, shard_owners otherwise.
std::vector<int> owners_for(const RunConfig& cfg, nn::Module& model, const std::vector<Tensor>& params, int world);

// The parameters this rank's optimizer steps: all of them under ddp or in a world of one rank,
// the rank's shard under zero1 / zero2 / fsdp.
std::vector<NamedTensor> owned_parameters(const RunConfig& cfg, nn::Module& model, const std::vector<NamedTensor>& named);

// Installs the strategy's hook on the trainer when the world has 2+ ranks (or a sharded strategy
// is asked for in one process, where it is the identity). Throws UsageError on what cannot combine.
void install_strategy(Trainer& trainer);

// A checkpoint is one consolidated directory whatever the strategy: every rank constructs this
// (a collective) when the run saves; under zero1 / zero2 / fsdp it brings every rank's optimizer
// state to rank 0, so that rank 0 writes the same files a 1-process run would. Under fsdp the
// units are gathered one at a time and rank 0 copies the parameters it does not own to the host
// (host_params), so no rank holds the whole model on its device; a LoRA run's adapters are
// small, and stay gathered until this is destroyed. Such a checkpoint resumes on any number of
// ranks with any strategy (owned_state keeps each rank's part).
class CheckpointGather {
 public:
  // gather_state false (--save-sharded): every rank keeps its own optimizer state (each writes it).
  explicit CheckpointGather(Trainer& t, bool gather_state = true);
  ~CheckpointGather();
  CheckpointGather(const CheckpointGather&) = delete;
  CheckpointGather& operator=(const CheckpointGather&) = delete;
  bool writes() const { return world().rank() == 0; }
  OptimizerStateDict state;  // rank 0: the whole run's; other ranks: their own
  // Rank 0 under fsdp: host copies of the unit parameters other ranks own (storage-less here),
  // by parameter; what a checkpoint writes and checks in their place.
  std::map<const TensorImpl*, Tensor> host_params;

 private:
  class FsdpUnits* units_ = nullptr;
};

// The entries of a loaded optimizer state that belong to this rank's optimizer (all of them
// unless it steps a shard).
std::map<std::string, Tensor> owned_state(Trainer& t, std::map<std::string, Tensor> all);

}  // namespace lt::dist
