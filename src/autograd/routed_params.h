// While a breadth-first step's checkpointed region runs its nested backward, its parameters'
// gradients are caught and handed to the outer engine (src/autograd/checkpoint.cpp); a gradient
// reaching a real leaf there would be a parameter from outside the region, accumulated one
// micro-batch at a time. AccumulateGrad refuses that while this scope is active.
#pragma once

namespace lt::detail {

bool leaf_accumulation_refused();

class RefuseLeafAccumulation {
 public:
  RefuseLeafAccumulation();
  ~RefuseLeafAccumulation();
  RefuseLeafAccumulation(const RefuseLeafAccumulation&) = delete;
  RefuseLeafAccumulation& operator=(const RefuseLeafAccumulation&) = delete;
};

}  // namespace lt::detail
