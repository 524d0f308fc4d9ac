// FSDP's parameter side (--strategy fsdp, ZeRO-3): each transformer block is a unit whose
// trainable parameters live only on their owners (shard_owners) between uses. The unit's forward
// wrapper broadcasts the missing ones into fresh allocations (one NCCL group on the communication
// stream) and frees them after its forward (--reshard-after-forward true) or after its backward
// (false). While a unit runs, the next one is gathered (forward order in forward, reverse order
// in backward; a checkpointed unit's backward prefetches once half of its gradients are in, past
// its recomputation's activation peak), so the broadcast overlaps compute as FSDP's prefetch
// does. With resharding, what backward saved of those parameters is packed as a reference (saved-tensor hooks) and
// re-gathered when backward unpacks it. A checkpointed block gathers inside its region: the
// forward under no grad releases at once, the recomputation in backward keeps the parameters
// until the unit's gradients are in. Gradients go the zero2 way (data_parallel.cpp).
//
// Modules outside the blocks that Model::standalone_modules names (an untied embedding table and
// LM head) are units too, in module order: the table is gathered for its lookup only, the head
// (the last unit) from its forward to its backward. The other parameters outside the blocks
// (norms, positions, a tied table) stay replicated, as PyTorch's root FSDP unit keeps them; they
// are broadcast by their owners after each step.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "backend/event.h"
#include "leantrain/dist.h"
#include "leantrain/nn.h"

namespace lt::dist {

// The modules fsdp makes units of, in module order: the transformer blocks and the modules
// Model::standalone_modules names. FsdpUnits and the sharded build (fsdp_build.h) both ask here.
std::vector<nn::Module*> fsdp_unit_modules(nn::Module& model);

class FsdpUnits {
 public:
  // params: the trainable parameters in registration order; owner: their ranks. low: under an
  // autocast policy with f32 parameters (bf16-mixed, 16-mixed), the compute dtype, in which the
  // transformer blocks are gathered (below); nullopt gathers everything in the parameters' dtype.
  FsdpUnits(Communicator& comm, nn::Module& model, const std::vector<Tensor>& params, const std::vector<int>& owner,
            bool reshard_after_forward, Device device, std::optional<DType> low = std::nullopt);
  ~FsdpUnits();
  // Whether parameter i belongs to a unit (else it is replicated).
  bool in_unit(size_t i) const { return unit_of_[i] >= 0; }
  // After the optimizer step: every gathered copy goes (the next forward gathers fresh values).
  void release_all();
  // Every unit's parameters gathered (a checkpoint of the whole model); release_all() undoes it.
  void gather_all();
  // Collective: each unit gathered in turn, `visit` called for each of its parameters (with
  // whether this rank owns it) while the unit is gathered, then released. A checkpoint's host
  // copies, with one unit at a time on the device instead of the whole model.
  void visit_gathered(const std::function<void(const Tensor& param, bool owned)>& visit);
  // From the post-accumulate-grad hook: once a unit's parameters all have their gradients, its
  // backward is over and its gathered copies can go.
  void grad_ready(size_t i);

 private:
  struct Unit {
    std::vector<size_t> params;
    bool low = false;       // a block gathered as 16-bit copies (the compute dtype)
    bool gathered = false;  // its broadcast is enqueued (or done)
    Tensor store;           // while gathered as 16-bit copies (low_): their one allocation
    bool gathered_low() const { return store.defined(); }
    bool waited = false;    // the compute stream waits for it
    size_t grads = 0;
    bool backward_reads = true;  // its backward reads its parameters (an embedding's does not)
    bool recomputed = false;     // checkpointed: its backward runs a recomputation first
    std::unique_ptr<Event> arrived;  // recorded on the communication stream after the broadcast
  };
  void gather(Unit& u);               // enqueues the broadcast on the communication stream
  void use(size_t unit);              // gathered, and the compute stream waits for it
  void prefetch(size_t unit);         // gather() of a unit about to run (none when out of range)
  void prefetch_backward(size_t unit);  // prefetch() of a unit whose backward reads its parameters
  void release(Unit& u);
  // Under grad, each 16-bit copy of the unit recorded as a cast of its parameter (once).
  void record_casts(Unit& u);
  void move_out_of_flat_store(nn::Module& model);

  Communicator& comm_;
  Device device_;
  std::vector<Tensor> params_;
  std::vector<int> owner_, unit_of_;
  std::vector<Unit> units_;
  bool reshard_;
  std::optional<DType> low_dtype_;
  std::vector<Tensor> low_;  // per parameter: its 16-bit copy while its unit is gathered low
  bool force_f32_ = false;   // gather_all / visit_gathered: a checkpoint reads the f32 values
};

}  // namespace lt::dist
