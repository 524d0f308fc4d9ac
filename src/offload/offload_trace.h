// LEANTRAIN_OFFLOAD_TRACE=1: one line per training step on stderr saying where the wall time of
// an offloaded step went (forward, backward, the waits for gradient copies, parameter fetches,
// early and late host steps, the copies back), so that one GPU run shows what to speed up.
// Off (the default), every call below is a test of one flag. On, the points that measure a
// device-side wait (a fetch, a drain, the copies back) first synchronise the host with the
// device, so the traced step runs somewhat slower than an untraced one: read the shares, not
// the total.
#pragma once
#include <string>

namespace lt {
class Event;
}

namespace lt::offload {

enum class Phase {
  Forward,        // step start (or the previous backward) to the loss: forward, with the batch
  Backward,       // enqueueing backward (the host runs ahead of the device)
  FetchWait,      // --offload params: the device waiting for a block's weights (traced: host-synced)
  DrainWait,      // the device waiting for gradient copies to free memory (traced: host-synced)
  FinishWait,     // after backward: the host waiting for the last gradient copies
  Norm,           // after backward to the update: the trainer's gradient norm (a device read of host memory)
  EarlySteps,     // host steps during backward, summed over the stepping thread's buckets
  EarlyWait,      // in the update: waiting for the stepping thread to finish
  DeviceWait,     // in the update: waiting for the device's readers of the gradients
  LateSteps,      // in the update: the host steps not done early
  CopyBackWait,   // after the update: the copies of the results to the device (traced: host-synced)
  Count
};

bool trace_on();  // LEANTRAIN_OFFLOAD_TRACE=1 (read once)
double trace_now_ms();  // a steady clock
void trace_add(Phase p, double ms);  // thread-safe
// The time since the last mark, added to `p`; the mark moves to now. Phases measured this way
// follow each other on the trainer's thread.
void trace_lap(Phase p);
void trace_mark();  // the mark to now (a step starts)
// How long the current stream would stall on `e`: the host first waits for the stream's work
// enqueued so far, then for `e`; the second wait is added to `p`. Traced runs only.
void trace_device_wait(Event& e, Phase p);
// The step's line (the phases, then the wall time since the previous call's), and a reset.
std::string trace_step_line(long long step);

}  // namespace lt::offload
