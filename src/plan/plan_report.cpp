// The plan's two outputs: a table for people and one JSON object for scripts (bench/
// plan_vs_measured.sh compares its peaks with `train --metrics-json`, which uses the same keys).
#include <cstdio>

#include "leantrain/plan.h"

namespace lt {

namespace {

std::string line(const char* label, int64_t bytes, const char* note = "") {
  char buf[200];
  std::snprintf(buf, sizeof buf, "  %-34s %12s  %15lld B%s\n", label, format_bytes(bytes).c_str(), (long long)bytes, note);
  return buf;
}

}  // namespace

std::string pinned_host_categories_json(const MemoryStats& s) {
  std::string j = "{";
  for (int i = 0; i < kNumCategories; ++i)
    j += "\"" + std::string(category_name(Category(i))) + "\": " + std::to_string(s.category[size_t(i)].peak) +
         (i + 1 < kNumCategories ? ", " : "");
  return j + "}";
}

std::string plan_text(const PlanResult& r) {
  std::string s = r.description + "\n";
  char buf[300];
  std::snprintf(buf, sizeof buf, "plan for a %s run: %lld optimizer steps and the final evaluation, dry-run on meta in %.1fs\n\n",
                r.device_type.c_str(), (long long)r.steps, r.seconds);
  s += buf;
  s += line("predicted peak allocated", r.peak_allocated);
  s += line("predicted peak reserved", r.peak_reserved);
  s += "  peak reached during: " + r.peak_phase + "\n\n";
  std::snprintf(buf, sizeof buf, "  %-18s %12s %12s %12s\n", "category", "at peak", "peak", "at end");
  s += buf;
  for (int i = 0; i < kNumCategories; ++i) {
    std::snprintf(buf, sizeof buf, "  %-18s %12s %12s %12s\n", category_name(Category(i)), format_bytes(r.at_peak[size_t(i)]).c_str(),
                  format_bytes(r.stats.category[size_t(i)].peak).c_str(), format_bytes(r.stats.category[size_t(i)].current).c_str());
    s += buf;
  }
  s += "\n";
  s += line("predicted peak pinned host", r.pinned_host.allocated_bytes.peak,
            r.device_type == "cuda" ? "  (host: loader ring, offload buffers; page-locked; not in the totals)"
                                    : "  (host: loader ring, offload buffers; ordinary memory on cpu; not in the totals)");
  for (int i = 0; i < kNumCategories; ++i)
    if (r.pinned_host.category[size_t(i)].peak) {
      std::snprintf(buf, sizeof buf, "    %s", category_name(Category(i)));
      s += line(buf, r.pinned_host.category[size_t(i)].peak);
    }
  if (r.disk.allocated_bytes.peak > 0)
    s += line("predicted peak disk", r.disk.allocated_bytes.peak,
              "  (--offload-dir: the optimizer state file; free space it needs there)");
  s += "\n";
  if (r.device_type == "cuda") {
    s += line("cuBLASLt workspace (in reserved)", r.workspace_bytes);
    s += line("CUDA context + stream/cuBLASLt", r.context_bytes, "  (outside the allocator; --context-bytes)");
    if (r.nccl_bytes > 0) {
      s += line("NCCL buffers (per rank)", r.nccl_bytes, "  (outside the allocator, an estimate; --nccl-bytes)");
      s += line("total device memory needed", r.total_needed(), "  (= peak reserved + context + NCCL)");
    } else {
      s += line("total device memory needed", r.total_needed(), "  (= peak reserved + context)");
    }
    s += "  not included: other processes on the GPU\n";
  } else {
    s += line("total memory needed", r.total_needed(), "  (= peak reserved)");
  }
  if (r.predicted_step_seconds > 0) {
    std::snprintf(buf, sizeof buf, "\n  cost model: %.4g s per step on the reference GPU (forward %.3g TFLOP, recompute %.3g TFLOP per step)\n",
                  r.predicted_step_seconds, r.forward_flops / 1e12, r.recompute_flops / 1e12);
    s += buf;
  }
  return s;
}

std::string plan_json(const PlanResult& r) {
  std::string s = "{";
  auto num = [&](const char* k, int64_t v, bool comma = true) {
    s += "\"" + std::string(k) + "\": " + std::to_string(v) + (comma ? ", " : "");
  };
  auto str = [&](const char* k, const std::string& v) {
    std::string e;
    for (char c : v) {
      if (c == '"' || c == '\\') e += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) e += c;
    }
    s += "\"" + std::string(k) + "\": \"" + e + "\", ";
  };
  str("device_type", r.device_type);
  str("model", r.config.model_config.empty() ? r.config.model : r.config.model_config);
  num("parameters", r.parameters);
  num("steps", r.steps);
  num("peak_allocated_bytes", r.peak_allocated);
  num("peak_reserved_bytes", r.peak_reserved);
  str("peak_phase", r.peak_phase);
  num("workspace_bytes", r.workspace_bytes);
  num("context_bytes", r.context_bytes);
  num("nccl_bytes", r.nccl_bytes);
  num("total_needed_bytes", r.total_needed());
  num("num_alloc_retries", r.stats.num_alloc_retries);
  num("peak_pinned_host_bytes", r.pinned_host.allocated_bytes.peak);
  num("peak_disk_bytes", r.disk.allocated_bytes.peak);
  // How far each figure can be trusted (docs/memory-model.md, "Exact and stated"): the four peaks
  // are replayed by the run's own code under the run's allocator policy; the context and NCCL lines
  // are constants measured once, and the total inherits them.
  s += "\"exactness\": {\"peak_allocated_bytes\": \"exact\", \"peak_reserved_bytes\": \"exact\", "
       "\"peak_pinned_host_bytes\": \"exact\", \"peak_disk_bytes\": \"exact\", "
       "\"context_bytes\": \"stated constant\", \"nccl_bytes\": \"stated constant\", "
       "\"total_needed_bytes\": \"exact peak reserved + stated constants\"}, ";
  s += "\"pinned_host_categories_peak\": " + pinned_host_categories_json(r.pinned_host) + ", ";
  for (const char* part : {"at_peak", "peak", "end"}) {
    s += "\"categories_" + std::string(part) + "\": {";
    for (int i = 0; i < kNumCategories; ++i) {
      const Stat& st = r.stats.category[size_t(i)];
      int64_t v = part[0] == 'a' ? r.at_peak[size_t(i)] : part[0] == 'p' ? st.peak : st.current;
      s += "\"" + std::string(category_name(Category(i))) + "\": " + std::to_string(v) + (i + 1 < kNumCategories ? ", " : "");
    }
    s += "}, ";
  }
  char buf[200];
  if (r.predicted_step_seconds > 0) {
    std::snprintf(buf, sizeof buf, "\"predicted_step_seconds\": %.6g, \"forward_flops\": %.6g, \"recompute_flops\": %.6g, ",
                  r.predicted_step_seconds, r.forward_flops, r.recompute_flops);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "\"plan_seconds\": %.3f}", r.seconds);
  return s + buf;
}

}  // namespace lt
