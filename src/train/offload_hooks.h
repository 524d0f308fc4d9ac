// --offload optimizer's step hook: arms the optimizer's gradient draining for the last
// micro-batch's backward (earlier micro-batches accumulate on the device), and after backward
// makes the compute stream wait for the copies before the norm reads them (offload_optimizer.h).
// Without --clip and loss scaling it also switches early steps on (buckets stepped on the host
// during backward): a hook that skips steps for another reason must switch them off.
#pragma once

namespace lt {

class Trainer;

// Adds the hook when the run offloads the optimizer (--offload optimizer or params; nothing otherwise).
void add_offload_hooks(Trainer& t);

}  // namespace lt
