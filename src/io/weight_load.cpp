// load_weights: resolve and check every tensor, then stream (the plan in io/weight_load.h).
#include "io/weight_load.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "backend/backend.h"
#include "backend/event.h"
#include "core/raw_view.h"
#include "io/name_list.h"
#include "leantrain/error.h"
#include "memory/host_allocators.h"

namespace lt::io {

namespace {

struct Job {
  WeightFiles::Located at;
  Tensor dst;
  std::string param;
};

bool loadable_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

Tensor host_view(const void* p, const Shape& shape, DType dtype) { return raw_view(p, shape, dtype); }

const char* const kSameModel = "pass a checkpoint of this model: its config.json must describe these weights";

// Every file tensor's destination; lt::Error for a name that fits nothing, fits twice, or is missing.
std::vector<Job> resolve(const WeightFiles& files, const WeightLoadSpec& spec, WeightLoadResult& r) {
  std::map<std::string, const WeightTarget*> by_name;
  for (const WeightTarget& t : spec.targets) by_name[t.name] = &t;
  std::map<std::string, std::string> whole, part;  // parameter -> a file tensor filling it whole / in part
  std::set<std::string> loaded;
  std::vector<std::string> unexpected;
  std::vector<Job> jobs;
  const std::string where = files.dir() + "/" + files.describe();
  auto both = [&](const std::string& param, const std::string& a, const std::string& b) {
    fail("ambiguous checkpoint '" + files.dir() + "'", "tensors '" + a + "' and '" + b + "' both hold parameter '" + param + "'",
         "remove one of them from the weight files");
  };
  for (const std::string& name : files.names()) {
    const WeightFiles::Located at = files.find(name);
    if (auto t = by_name.find(name); t != by_name.end()) {
      loaded.insert(name);
      part.emplace(t->second->param, name);
      jobs.push_back({at, t->second->dst, t->second->param});
      continue;
    }
    const std::string param = spec.rename ? spec.rename(name) : std::string();
    if (spec.rename && param.empty()) {
      ++r.ignored;
      continue;
    }
    auto p = spec.params.find(param);
    if (p == spec.params.end()) {
      unexpected.push_back(name);
      continue;
    }
    if (auto [it, fresh] = whole.emplace(param, name); !fresh) both(param, it->second, name);
    jobs.push_back({at, p->second, param});
  }
  for (const auto& [param, name] : whole)
    if (auto it = part.find(param); it != part.end()) both(param, name, it->second);
  if (!unexpected.empty())
    fail("unexpected tensor " + first_of(unexpected) + " in " + where, "the model has no parameter it could fill",
         kSameModel);
  std::vector<std::string> missing;
  std::string first_param;
  for (const WeightTarget& t : spec.targets)
    if (t.required && !loaded.count(t.name) && !whole.count(t.param)) {
      if (missing.empty()) first_param = t.param;
      missing.push_back(t.name);
    }
  if (!missing.empty())
    fail("missing tensor " + first_of(missing) + " in " + where,
         (first_param == missing.front() ? std::string("the model's parameter needs it")
                                         : "the model's parameter '" + first_param + "' needs it") +
             ", and no weight file holds a tensor of that name",
         kSameModel);
  return jobs;
}

void check(const Job& j, const WeightLoadSpec& spec) {
  const TensorEntry& e = *j.at.entry;
  const std::string& file = j.at.file->path();
  const std::string param = j.param == e.name ? "parameter" : "parameter '" + j.param + "'";
  LT_CHECK(e.shape == j.dst.shape(), "shape mismatch for tensor '" + e.name + "' in " + file,
           "the file has " + shape_str(e.shape) + ", the model's " + param + " needs " + shape_str(j.dst.shape()),
           kSameModel);
  const bool castable = spec.allow_cast && loadable_float(e.dtype) && loadable_float(j.dst.dtype());
  LT_CHECK(e.dtype == j.dst.dtype() || castable, "dtype mismatch for tensor '" + e.name + "' in " + file,
           std::string("the file has ") + dtype_safetensors_name(e.dtype) + ", the model's " + param + " is " +
               dtype_safetensors_name(j.dst.dtype()) + (spec.allow_cast ? " (F32, F16 and BF16 files load into it)" : ""),
           "convert the tensor to " + std::string(dtype_safetensors_name(j.dst.dtype())));
}

// The two halves of the staging buffer, each with the event of the last copy out of it. The
// backend's own events, not lt::Event: they order nothing the allocator must know about (no
// device memory is involved), so a plan on meta, which moves no data, sees the same allocator.
class Staging {
 public:
  Staging(Device d, int64_t bytes) : backend_(backend_for(d)), half_(bytes / 2) {
    MemoryCategoryScope cat(Category::Parameter);  // parameter bytes on their way in
    pinned_ = allocate_pinned_host(2 * half_, d);
    if (!pinned_) {  // the system pins no more: pageable memory works, only slower
      MemoryCategoryScope other(Category::Other);
      pageable_ = Tensor::empty({2 * half_}, DType::U8, Device::cpu());
    }
    for (void*& e : events_) e = backend_.create_event();
  }
  ~Staging() {
    for (void* e : events_) {
      if (!e) continue;
      try {
        backend_.wait_event(e);  // no copy may still read the buffer when it is freed
      } catch (...) {
      }
      backend_.destroy_event(e);
    }
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  int64_t half_bytes() const { return half_; }
  // The other half, once the copy that last read it has finished.
  uint8_t* next() {
    cur_ = 1 - cur_;
    if (used_[cur_]) backend_.wait_event(events_[cur_]);
    return static_cast<uint8_t*>(pinned_ ? pinned_->data() : pageable_.raw_data()) + cur_ * half_;
  }
  // After the copy out of the current half is enqueued.
  void copied() {
    backend_.record_event(events_[cur_]);
    used_[cur_] = true;
  }

 private:
  Backend& backend_;
  int64_t half_;
  std::shared_ptr<Storage> pinned_;
  Tensor pageable_;
  void* events_[2] = {nullptr, nullptr};
  bool used_[2] = {false, false};
  int cur_ = 1;
};

// Host to host: straight from the mapping into the parameter.
void copy_direct(const uint8_t* src, const TensorEntry& e, const Tensor& dst) {
  if (e.dtype == dst.dtype() && dst.is_contiguous()) {
    std::memcpy(dst.raw_data(), src, size_t(dst.nbytes()));
    return;
  }
  backend_for(Device::cpu()).copy(dst, host_view(src, e.shape, e.dtype));
}

// Through the staging halves: cast on the host into one, its copy to the device runs while the
// next chunk is cast into the other.
void copy_staged(const uint8_t* src, const TensorEntry& e, const Tensor& dst, Staging& st) {
  LT_ASSERT(dst.is_contiguous());
  const int64_t n = dst.numel(), ssz = int64_t(dtype_size(e.dtype)), dsz = int64_t(dtype_size(dst.dtype()));
  const int64_t chunk = std::max<int64_t>(1, st.half_bytes() / dsz);
  Backend& be = backend_for(dst.device());
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t k = std::min(chunk, n - i);
    uint8_t* buf = st.next();
    if (e.dtype == dst.dtype()) std::memcpy(buf, src + i * ssz, size_t(k * dsz));
    else backend_for(Device::cpu()).copy(host_view(buf, {k}, dst.dtype()), host_view(src + i * ssz, {k}, e.dtype));
    be.copy_from_host_async(make_view(dst, {k}, {1}, dst.offset() + i), buf);
    st.copied();
  }
}

}  // namespace

bool load_uses_staging(Device d) {
  return d.is_cuda() || (d.is_meta() && dynamic_cast<SimulatedCudaAllocator*>(&allocator_for(Device::meta())));
}

WeightLoadResult load_weights(const WeightFiles& files, const WeightLoadSpec& spec) {
  WeightLoadResult r;
  std::vector<Job> jobs = resolve(files, spec, r);
  for (const Job& j : jobs) check(j, spec);

  // One staging buffer for the whole load, two halves of at most chunk_bytes / 2 each, sized by
  // the largest tensor so that a small model pins little. All of a load goes to one device.
  int64_t half = 0;
  Device device = Device::cpu();
  auto staged = [&](const Tensor& dst) { return spec.force_staging || load_uses_staging(dst.device()); };
  // A parameter without memory is another rank's (fsdp's sharded build, dist/fsdp_build.h): its
  // tensor is checked and counted, not read.
  auto absent = [](const Tensor& dst) { return !dst.storage(); };
  for (const Job& j : jobs)
    if (staged(j.dst) && !absent(j.dst)) {
      half = std::max(half, std::min(spec.chunk_bytes / 2, j.dst.nbytes()));
      device = j.dst.device();
    }
  std::unique_ptr<Staging> st;
  if (half > 0) {
    half = std::max<int64_t>(64, (half + 63) / 64 * 64);  // room for one element of any dtype
    st = std::make_unique<Staging>(device, 2 * half);
    r.staging_bytes = 2 * half;
  }

  const SafetensorsReader* mapped = nullptr;
  for (const Job& j : jobs) {
    const TensorEntry& e = *j.at.entry;
    ++r.tensors;
    r.bytes += e.end - e.begin;
    if (j.dst.device().is_meta() || j.dst.numel() == 0 || absent(j.dst)) continue;  // meta: nothing to move
    if (mapped != j.at.file) {  // one file mapped at a time (jobs come file by file)
      if (mapped) mapped->unmap();
      mapped = j.at.file;
    }
    const uint8_t* src = mapped->mapped_data() + e.begin;
    if (staged(j.dst)) copy_staged(src, e, j.dst, *st);
    else copy_direct(src, e, j.dst);
    mapped->release_pages(e.begin, e.end);  // read: the host copy is done (staged copies read the staging buffer)
  }
  if (mapped) mapped->unmap();
  st.reset();  // waits for the last copies
  return r;
}

}  // namespace lt::io
