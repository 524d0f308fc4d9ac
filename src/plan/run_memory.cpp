// After a real run: its measured peaks as JSON (train --metrics-json, same keys as plan --json,
// plus the run's throughput),
// and the guidance an out-of-memory error gets (the category that grew most, predicted need
// versus what the device offers, the plan command that fits).
#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "core/knobs.h"
#include "io/file_io.h"
#include "leantrain/cuda_info.h"
#include "leantrain/plan.h"
#include "train/recipe_table.h"

namespace lt {

void write_run_memory_json(const std::string& path, const RunConfig& cfg, const RunResult& r) {
  const Device d = resolve_device(cfg.device);
  const MemoryStats s = allocator_for(d).stats();
  std::string j = "{\"device\": \"" + d.str() + "\", \"peak_allocated_bytes\": " + std::to_string(s.allocated_bytes.peak) +
                  ", \"peak_reserved_bytes\": " + std::to_string(s.reserved_bytes.peak) +
                  ", \"num_alloc_retries\": " + std::to_string(s.num_alloc_retries) + ", \"categories_peak\": {";
  for (int i = 0; i < kNumCategories; ++i)
    j += "\"" + std::string(category_name(Category(i))) + "\": " + std::to_string(s.category[size_t(i)].peak) +
         (i + 1 < kNumCategories ? ", " : "");
  j += "}, \"peak_pinned_host_bytes\": " + std::to_string(r.pinned_host.allocated_bytes.peak) +
       ", \"pinned_host_categories_peak\": " + pinned_host_categories_json(r.pinned_host) +
       ", \"peak_disk_bytes\": " + std::to_string(r.disk.allocated_bytes.peak);
  if (d.is_cuda()) {
    // Device memory outside the caching allocator beyond the CUDA context and the streams'
    // handles, at the end of the run: NCCL's buffers on a run of several GPUs (a plan's
    // "NCCL buffers" line), close to nothing on one. Device-wide: another process on the GPU counts.
    try {
      const CudaMemoryInfo m = cuda_memory_info(d.index);
      j += ", \"context_bytes\": " + std::to_string(m.context_bytes + m.library_bytes) + ", \"outside_allocator_bytes\": " +
           std::to_string(m.total_bytes - m.free_bytes - m.context_bytes - m.library_bytes - m.reserved_bytes);
    } catch (const Error&) {
    }
  }
  if (!r.rank_peak_allocated.empty()) {
    auto list = [](const std::vector<int64_t>& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + "]";
    };
    j += ", \"rank_peak_allocated_bytes\": " + list(r.rank_peak_allocated) +
         ", \"rank_peak_reserved_bytes\": " + list(r.rank_peak_reserved);
  }
  char buf[200];  // throughput of the run, as its progress line reports it
  std::snprintf(buf, sizeof buf, ", \"unit\": \"%s\", \"items_per_s\": %.6g, \"steady_items_per_s\": %.6g", r.unit,
                r.items_per_s, r.steady_items_per_s);
  j += buf;
  if (!r.final_metrics.empty()) {  // --objective dpo: the last step's and the last evaluation's numbers (TRL's names)
    auto num = [](double v) {
      char b[40];
      std::snprintf(b, sizeof b, "%.17g", v);
      return std::isfinite(v) ? std::string(b) : std::string("null");
    };
    j += ", \"objective\": {\"loss\": " + num(r.final_loss);
    for (const Metric& m : r.final_metrics) j += ", \"" + m.name + "\": " + num(m.value);
    if (r.eval) {
      j += ", \"eval_loss\": " + num(r.eval->loss);
      for (const Metric& m : r.eval->metrics) j += ", \"eval_" + m.name + "\": " + num(m.value);
    }
    j += "}";
  }
  j += ", \"knobs\": " + knobs_json();  // the LEANTRAIN_* knobs not at their defaults
  j += ", \"recipe\": " + recipe_json(cfg, false);  // every flag's value (train/recipe_table.h)
  j += "}\n";
  io::detail::AtomicFile f(path, io::detail::Dash::Stdout);
  f.write(j);
  f.commit();
}

std::string oom_guidance(const RunConfig& cfg, const OutOfMemoryError& e) {
  const Device d = resolve_device(cfg.device);
  const MemoryStats s = allocator_for(d).stats();
  // The run reset the peaks at its start, so a category's peak is how far it grew in this run.
  int grew = 0;
  for (int i = 1; i < kNumCategories; ++i)
    if (s.category[size_t(i)].peak > s.category[size_t(grew)].peak) grew = i;
  std::string msg = e.why() + "; grew most: " + category_name(Category(grew)) + " (peak " +
                    format_bytes(s.category[size_t(grew)].peak) + ")";
  int64_t available = -1;
  if (d.is_cuda()) {
    try {
      CudaMemoryInfo info = cuda_memory_info(d.index);
      available = info.total_bytes;  // the plan's total includes the context, so compare with the whole device
    } catch (const Error&) {
    }
  } else {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) available = int64_t(pages) * int64_t(page);
  }
  // A command `leantrain plan` accepts as printed (tests/e2e/output_safety.sh runs it).
  std::string plan_cmd = command_line(cfg);
  plan_cmd.replace(0, std::string("leantrain train").size(), "leantrain plan");
  if (!d.is_cuda()) plan_cmd += " --device-type cpu";
  try {
    PlanResult p = plan_run(cfg, PlanOptions{d.is_cuda() ? "cuda" : "cpu"});
    msg += "; predicted need " + format_bytes(p.total_needed());
  } catch (const std::exception&) {
  }
  if (available <= 0) return msg + " (run `" + plan_cmd + "` to see what it needs)";
  msg += " versus " + format_bytes(available) + (d.is_cuda() ? " on " + d.str() : " of host memory");
  plan_cmd += " --budget " + std::to_string(available / (1 << 20)) + "MiB";
  return msg + " (run `" + plan_cmd + "` for a configuration that fits)";
}

}  // namespace lt
