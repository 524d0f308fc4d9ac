// --offload-activations: what checkpointed modules keep for their recomputation (their inputs,
// and the matmul results of `selective`) goes to the device's pinned host memory during the
// forward and comes back one module ahead during the backward (docs/memory-model.md,
// "Activation offload").
//
// Forward, when a checkpointed region saves a tensor (pack hook): the copy stream waits for the
// compute stream, copies the tensor into a pinned host buffer (Category::Activation in the
// pinned-host account), and the tensor's memory is marked used by the copy stream
// (record_stream), so that once the region's caller drops it the caching allocator hands it out
// again only after the copy. Each pack first makes the compute stream wait for the copies enqueued
// so far (the previous module's, which had this module's forward to finish), which is what lets
// the allocator reuse the memory freed since (Note [Cross-stream reuse]).
//
// Backward, when a module's backward starts (a pre-hook on its region's node): its own tensors
// (if nobody fetched them yet) and those of the module whose forward ran just before it are
// copied back on the copy stream into fresh device memory; the compute stream waits for that copy
// only when the recomputation unpacks them. Host buffers are kept for the next step (pinning is
// slow, and freeing pinned memory synchronises the device).
//
// Every decision follows program order, none timing, so cpu (plain copies), meta (no copies) and
// cuda allocate alike and `leantrain plan` predicts both the device and the pinned-host peak.
#pragma once
#include <string>
#include <vector>

#include "leantrain/nn.h"

namespace lt {

// Wraps the forward of each module at `paths` (already checkpointed: its wrapper is a
// checkpointing one) so that what its region saves is offloaded as above.
void offload_checkpointed_modules(nn::Module& root, const std::vector<std::string>& paths);

}  // namespace lt
