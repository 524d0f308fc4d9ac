// Selective checkpointing's memory of matmul results. A region checkpointed with
// CheckpointOptions::keep_matmul_outputs runs its forward with a KeptOutputs in Record mode:
// every matmul-class op (linear, matmul, attention) appends its results. The recomputation during
// backward runs the same forward in Replay mode: those ops take their results back, in the same
// order, instead of computing them again, and record their backward nodes as usual. So the
// recomputation redoes only the cheap ops between the matmuls (norms, activations, residual adds,
// dropout), and the gradients are bitwise those of the run without checkpointing. The kept
// results are saved tensors of the region's node: they go through the pack/unpack hooks.
#pragma once
#include <string>
#include <vector>

#include "leantrain/autograd.h"

namespace lt::detail {

struct KeptOutputs {
  bool replay = false;
  size_t next = 0;                            // Replay: the next entry to hand out
  std::vector<std::vector<SavedTensor>> entries;  // one per op call, in call order
  std::vector<std::string> ops;               // the op of each entry, for the error message
};

// The KeptOutputs of the region whose forward is running on this thread, or null.
KeptOutputs* active_kept_outputs();

// Makes k the active one (null: none) until the scope ends. Every checkpointed region sets its
// own (null when it keeps nothing), so regions nested in a selective one do not mix entries.
// The matmul-class ops call no other op while they compute, so nothing inside them is recorded.
class KeptOutputsScope {
 public:
  explicit KeptOutputsScope(KeptOutputs* k);
  ~KeptOutputsScope();
  KeptOutputsScope(const KeptOutputsScope&) = delete;
  KeptOutputsScope& operator=(const KeptOutputsScope&) = delete;

 private:
  KeptOutputs* prev_;
};

// For a matmul-class op about to compute results of these shapes and dtypes. In Replay mode:
// returns the kept results (fresh handles on the same storage), after checking that they are
// what this call would compute; throws when the recomputation diverges from the forward. In any
// other case: returns an empty vector, and the op computes.
std::vector<Tensor> take_kept_outputs(const char* op, const std::vector<Shape>& shapes,
                                      const std::vector<DType>& dtypes);
// After the op computed: in Record mode keeps its results for the replay.
void keep_outputs(const char* op, const std::vector<Tensor>& results);
// For an op with one result: the kept one (fresh = false), or a new empty tensor to compute into
// (fresh = true; the op then calls keep_outputs with it).
Tensor kept_or_empty(const char* op, const Shape& shape, DType dtype, Device device, bool& fresh);

}  // namespace lt::detail
