// A CUDA injection library that writes the GPU's timeline: every kernel, copy and fill with its
// start and end on the device clock, and every host-side synchronisation, through CUPTI's activity
// API. The GPU machine has Nsight Compute (each kernel replayed alone: no gaps) but no Nsight
// Systems; this answers what ncu cannot: how long the GPU sits idle between kernels, and where.
//   CUDA_INJECTION64_PATH=libgpu_timeline.so GPU_TIMELINE_OUT=trace.csv ./leantrain train ...
//   python3 bench/gpu_timeline/gaps.py trace.csv
// CSV columns: kind (kernel, memcpy, memset, sync), start_ns, end_ns, stream, name.
// Build: bench/gpu_timeline/build.sh (needs the toolkit's cupti.h and libcupti).
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Row {
  const char* kind;
  uint64_t start, end;
  uint32_t stream;
  std::string name;
};

std::mutex g_mu;
std::vector<Row> g_rows;
constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = kBufferBytes;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, kBufferBytes));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<Row> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
        got.push_back({"kernel", k->start, k->end, k->streamId, k->name ? k->name : "?"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
        got.push_back({"memcpy", m->start, m->end, m->streamId, "copy kind " + std::to_string(m->copyKind) + " " +
                                                                    std::to_string(m->bytes) + " B"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(rec);
        got.push_back({"memset", m->start, m->end, m->streamId, std::to_string(m->bytes) + " B"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        auto* s = reinterpret_cast<CUpti_ActivitySynchronization2*>(rec);
        got.push_back({"sync", s->start, s->end, s->streamId, "sync type " + std::to_string(int(s->type))});
        break;
      }
      default: break;
    }
  }
  free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  for (Row& r : got) g_rows.push_back(std::move(r));
}

// Names go in double quotes with any quote doubled: template arguments hold commas.
std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

void write_out() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("GPU_TIMELINE_OUT");
  FILE* f = std::fopen(path && *path ? path : "gpu_timeline.csv", "w");
  if (!f) {
    std::fprintf(stderr, "gpu_timeline: cannot write %s\n", path ? path : "gpu_timeline.csv");
    return;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(f, "kind,start_ns,end_ns,stream,name\n");
  for (const Row& r : g_rows)
    std::fprintf(f, "%s,%llu,%llu,%u,%s\n", r.kind, (unsigned long long)r.start, (unsigned long long)r.end, r.stream,
                 quoted(r.name).c_str());
  std::fclose(f);
  std::fprintf(stderr, "gpu_timeline: %zu records\n", g_rows.size());
}

}  // namespace

// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection(void) {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
  std::atexit(write_out);
  return 1;
}
