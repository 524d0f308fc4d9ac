"""The timing every single-process PyTorch peer shares: warm-up steps, then the median of the
timed steps' CUDA-event time (peaks reset after the warm-up, so they are the timed steps')."""
import statistics

import torch


def median_step_ms(step, warmup, steps):
    """step(i) runs optimizer step i and returns its loss. Returns (median ms, the last loss)."""
    for i in range(warmup):
        step(i)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times, loss = [], None
    for i in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        loss = step(warmup + i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), loss
