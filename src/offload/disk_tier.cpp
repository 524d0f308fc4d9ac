// The disk tier of OffloadOptimizer (offload_optimizer.h, --offload-dir): which parameters'
// state goes to the file, its first values, the chunked host step, and the state dicts.
#include <algorithm>
#include <cstring>

#include "leantrain/error.h"
#include "leantrain/ops.h"
#include "memory/format_bytes.h"
#include "offload/disk_state.h"
#include "offload/offload_optimizer.h"
#include "core/raw_view.h"

namespace lt::offload {

namespace {
int64_t disk_align64(int64_t b) { return (b + 63) / 64 * 64; }
}  // namespace

void OffloadOptimizer::plan_disk_tier() {
  if (opt_.disk_dir.empty()) {
    LT_CHECK(opt_.host_limit < 0, "--host-memory-limit without --offload-dir",
             "the state beyond the limit needs a place on disk", "add --offload-dir DIR, or drop the limit");
    return;
  }
  LT_CHECK(!is_eight_bit(kind_), "--offload-dir with --optimizer " + name_of(kind_),
           "the disk tier holds f32 state (AdamW, Lion, SGD); 8-bit state is small enough for host memory",
           "use --optimizer adamw, lion or sgd, or drop --offload-dir");
  std::vector<Tensor> params;
  for (const auto& [name, t] : named_params()) params.push_back(t);
  if (params.empty()) return;
  DiskStoreOptions so;
  so.dir = opt_.disk_dir;
  so.account = opt_.device.value_or(params.front().device());
  so.parts = states() + 1;
  // A chunk no larger than the largest candidate parameter (rounded up to 1024 elements): a
  // small model's windows stay small.
  int64_t largest = 1024;
  for (const Tensor& p : params)
    if (p.dtype() != DType::F32) largest = std::max(largest, (p.numel() + 1023) / 1024 * 1024);
  so.chunk_elems = std::min(opt_.disk_chunk_elems, largest);
  so.windows = opt_.disk_windows;
  // What make_state pins for a parameter on the host, as the account rounds it.
  auto host_bytes = [&](const Tensor& p) { return round_allocation(int64_t(so.parts) * disk_align64(p.numel() * 4)); };
  int64_t total = 0;
  for (const Tensor& p : params) total += host_bytes(p);
  const int64_t limit = opt_.host_limit;
  if (limit >= 0 && total <= limit) return;  // everything fits: no file
  const int64_t windows = DiskStateStore::window_bytes(so);
  int64_t left = limit - windows;
  LT_CHECK(limit < 0 || left >= 0, "--host-memory-limit " + format_bytes(limit),
           "the disk tier's I/O windows alone take " + format_bytes(windows) + " of host memory",
           "raise the limit to at least that, or drop --offload-dir");
  // f32 parameters stay on the host (their step's result is the master itself); then first fit
  // in parameter order.
  for (const Tensor& p : params)
    if (p.dtype() == DType::F32) left -= host_bytes(p);
  LT_CHECK(limit < 0 || left >= 0, "--host-memory-limit " + format_bytes(limit),
           "the f32 parameters' state, which stays on the host, and the I/O windows need " + format_bytes(limit - left),
           "raise the limit, or train the model in bf16-true / 16-true so its state can go to disk");
  std::vector<Tensor> to_disk;
  for (const Tensor& p : params) {
    if (p.dtype() == DType::F32) continue;
    if (limit >= 0 && host_bytes(p) <= left) {
      left -= host_bytes(p);
      continue;
    }
    to_disk.push_back(p);
  }
  if (to_disk.empty()) return;
  disk_ = std::make_unique<DiskStateStore>(so);
  for (const Tensor& p : to_disk) disk_ids_.emplace_back(p, disk_->add(p.numel()));
}

int OffloadOptimizer::disk_id_of(const Tensor& p) const {
  for (const auto& [t, id] : disk_ids_)
    if (t.same(p)) return id;
  return -1;
}

// The state of a disk-tier parameter: views over the file's mapping (read and written by the
// state dicts only); its first values, zero moments and the widened parameter as master, written
// through the windows.
std::vector<Tensor> OffloadOptimizer::make_disk_state(const Tensor& p, int id) const {
  const int parts = states() + 1;
  std::vector<Tensor> out;
  for (int k = 0; k < parts; ++k) out.push_back(raw_view(disk_->mapped(id, k), p.shape(), DType::F32));
  if (disk_->meta()) return out;
  const size_t es = dtype_size(p.dtype());
  std::vector<char> narrow(size_t(p.nbytes()));  // untracked: one parameter, the host's working memory
  copy_(raw_view(narrow.data(), p.shape(), p.dtype()), p);
  for (int64_t c = 0; c < disk_->chunks(id); ++c) {
    const DiskStateStore::Lease l = disk_->acquire(id, c, /*fresh=*/true);
    for (int k = 0; k + 1 < parts; ++k) std::memset(l.part[k], 0, size_t(l.count) * 4);
    copy_(raw_view(l.part[parts - 1], {l.count}, DType::F32), raw_view(narrow.data() + l.begin * es, {l.count}, p.dtype()));
    disk_->release(l);
  }
  disk_->quiesce();
  return out;
}

void OffloadOptimizer::step_from_disk(Slot& s, int id, const void* grad, void* param16, float grad_scale, int threads) {
  const int64_t es = int64_t(dtype_size(s.param.dtype()));
  for (int64_t c = 0; c < disk_->chunks(id); ++c) {
    const DiskStateStore::Lease l = disk_->acquire(id, c);
    const void* g = static_cast<const char*>(grad) + l.begin * es;
    void* out = param16 ? static_cast<char*>(param16) + l.begin * es : nullptr;
    step_span(s, l.part, g, out, l.count, grad_scale, {}, threads);
    disk_->release(l);
  }
}

// Saving and resuming see the file through its mapping, with the windows' transfers done first.
OptimizerStateDict OffloadOptimizer::state_dict() const {
  if (disk_) disk_->quiesce();
  return Optimizer::state_dict();
}

void OffloadOptimizer::load_state_dict(const OptimizerStateDict& sd) {
  if (disk_) disk_->quiesce();
  Optimizer::load_state_dict(sd);
  if (disk_) disk_->sync_mapped();
}

}  // namespace lt::offload
