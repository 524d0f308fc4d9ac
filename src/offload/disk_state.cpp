// The disk tier's state file, its windows and their prefetch (disk_state.h).
#include "offload/disk_state.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "leantrain/error.h"
#include "memory/format_bytes.h"
#include "offload/offload_trace.h"

namespace lt::offload {

namespace {

constexpr int64_t kAlign = 4096;  // O_DIRECT: buffers, offsets and lengths
int64_t align_up(int64_t b) { return (b + kAlign - 1) / kAlign * kAlign; }
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
std::string what_dir(const std::string& dir) { return "--offload-dir " + dir; }

// An unnamed file in `dir`: O_TMPFILE, or a fresh name (O_EXCL) unlinked at once.
int open_unnamed(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  const int tmpfile_err = errno;
  if (tmpfile_err == ENOENT || tmpfile_err == ENOTDIR || tmpfile_err == EACCES || tmpfile_err == EROFS)
    fail(what_dir(dir) + ": cannot create the optimizer's state file", std::strerror(tmpfile_err),
         "give an existing directory you can write, on a local drive");
  std::string path = dir + "/.leantrain-state-XXXXXX";
  fd = ::mkostemp(path.data(), O_CLOEXEC);
  LT_CHECK(fd >= 0, what_dir(dir) + ": cannot create the optimizer's state file", std::strerror(errno),
           "give an existing directory you can write, on a local drive");
  ::unlink(path.c_str());
  return fd;
}

// O_DIRECT when the file system takes it for real: set, then one aligned write probed.
bool try_direct(int fd) {
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_DIRECT) != 0) return false;
  void* buf = nullptr;
  if (::posix_memalign(&buf, size_t(kAlign), size_t(kAlign)) != 0) return false;
  std::memset(buf, 0, size_t(kAlign));
  const bool ok = ::pwrite(fd, buf, size_t(kAlign), 0) == kAlign;
  std::free(buf);
  if (!ok) ::fcntl(fd, F_SETFL, fl);
  return ok && ::ftruncate(fd, 0) == 0;
}

}  // namespace

int64_t DiskStateStore::window_bytes(const DiskStoreOptions& o) {
  return int64_t(o.windows) * (int64_t(o.parts) * align_up(o.chunk_elems * 4) + kAlign);
}

int64_t DiskStateStore::extent_bytes(int parts, int64_t numel) { return int64_t(parts) * align_up(numel * 4); }

DiskStateStore::DiskStateStore(const DiskStoreOptions& o) : opt_(o) {
  LT_CHECK(o.parts >= 1 && o.parts <= kMaxDiskParts, "--offload-dir: " + std::to_string(o.parts) + " state arrays",
           "the disk tier holds 1 to 4 per parameter", "report this");
  LT_CHECK(o.chunk_elems > 0 && o.chunk_elems % 1024 == 0,
           "--offload-dir: chunk of " + std::to_string(o.chunk_elems) + " elements",
           "a chunk must be a positive multiple of 1024 elements (4096-byte offsets)", "use e.g. 4194304");
  LT_CHECK(o.windows >= 2, "--offload-dir: " + std::to_string(o.windows) + " windows",
           "one chunk is read while another is stepped", "use at least 2");
  meta_ = o.account.is_meta();
  if (!meta_) {
    fd_ = open_unnamed(o.dir);
    direct_ = try_direct(fd_);
    io_ = make_disk_io(fd_, o.prefer_uring);
  }
  // The windows: pinned (page-locked on a GPU run), each aligned to 4096 inside its buffer.
  MemoryCategoryScope scope(Category::OptimizerState);
  const int64_t each = window_bytes(o) / o.windows;
  for (int i = 0; i < o.windows; ++i) {
    Window w;
    w.mem = allocate_pinned_host(each, o.account);
    LT_CHECK(w.mem != nullptr, what_dir(o.dir) + ": pinning " + std::to_string(each) + " bytes for an I/O window",
             "the system refused to pin more host memory", "raise the locked-memory limit (ulimit -l)");
    windows_.push_back(std::move(w));
  }
  if (!meta_) prefetcher_ = std::thread([this] { prefetch_loop(); });
}

DiskStateStore::~DiskStateStore() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return in_flight_ == 0; });
    stop_ = true;
  }
  cv_.notify_all();
  if (prefetcher_.joinable()) prefetcher_.join();
  io_.reset();
  for (auto& [p, n] : maps_) ::munmap(p, n);
  if (fd_ >= 0) ::close(fd_);
  Allocator& disk = disk_allocator(opt_.account);
  for (const Extent& e : extents_) disk.deallocate(e.block);
}

int DiskStateStore::add(int64_t numel) {
  const int64_t part_bytes = align_up(numel * 4);
  Extent e;
  e.numel = numel;
  e.part_bytes = part_bytes;
  {
    MemoryCategoryScope scope(Category::OptimizerState);
    e.block = disk_allocator(opt_.account).allocate(int64_t(opt_.parts) * part_bytes);
  }
  const int64_t end = int64_t(e.block.addr) + e.block.size;
  if (!meta_ && end > file_bytes_) {
    struct statvfs fs {};
    if (::fstatvfs(fd_, &fs) == 0) {
      const int64_t free_bytes = int64_t(fs.f_bavail) * int64_t(fs.f_frsize);
      if (free_bytes < end - file_bytes_) {
        disk_allocator(opt_.account).deallocate(e.block);
        fail(what_dir(opt_.dir) + ": " + format_bytes(free_bytes) + " free",
             "the optimizer state needs " + format_bytes(end - file_bytes_) + " more there",
             "free space there, choose another drive, or raise --host-memory-limit");
      }
    }
    // Reserved now (a full drive fails here, not in the middle of a step), read as zeros.
    // (fallocate itself: glibc's posix_fallocate would write a byte per block where it is missing.)
    int r = ::fallocate(fd_, 0, file_bytes_, end - file_bytes_) == 0 ? 0 : errno;
    if (r == EOPNOTSUPP || r == ENOSYS) r = ::ftruncate(fd_, end) == 0 ? 0 : errno;
    if (r != 0) {
      disk_allocator(opt_.account).deallocate(e.block);
      fail(what_dir(opt_.dir) + ": cannot grow the state file to " + format_bytes(end), std::strerror(r),
           "free space there, or choose another drive");
    }
    file_bytes_ = end;
  }
  extents_.push_back(e);
  total_chunks_ += (numel + opt_.chunk_elems - 1) / opt_.chunk_elems;
  return int(extents_.size()) - 1;
}

int64_t DiskStateStore::chunks(int id) const {
  return (extents_.at(size_t(id)).numel + opt_.chunk_elems - 1) / opt_.chunk_elems;
}

DiskStateStore::Lease DiskStateStore::lease_of(int w, int id, int64_t chunk) const {
  const Extent& e = extents_.at(size_t(id));
  Lease l;
  l.window = w;
  l.id = id;
  l.chunk = chunk;
  l.begin = chunk * opt_.chunk_elems;
  l.count = std::min(opt_.chunk_elems, e.numel - l.begin);
  char* base = reinterpret_cast<char*>(align_up(reinterpret_cast<int64_t>(windows_[size_t(w)].mem->data())));
  for (int k = 0; k < opt_.parts; ++k)
    l.part[k] = reinterpret_cast<float*>(base + int64_t(k) * align_up(opt_.chunk_elems * 4));
  return l;
}

int DiskStateStore::find(uint64_t key) const {
  for (size_t i = 0; i < windows_.size(); ++i)
    if (windows_[i].state != State::Free && windows_[i].key == key) return int(i);
  return -1;
}

// The requests of one window's transfer; called with mu_ held, the window's state and key set.
// The caller submits them after unlocking (a submission may wait for room in the ring, which
// the completion thread frees, and its callbacks take mu_).
std::vector<DiskRequest> DiskStateStore::requests(int w, bool write) {
  Window& W = windows_[size_t(w)];
  const int id = int(W.key >> 40);
  const int64_t chunk = int64_t(W.key & ((uint64_t(1) << 40) - 1));
  const Lease l = lease_of(w, id, chunk);
  const Extent& e = extents_[size_t(id)];
  std::vector<DiskRequest> out;
  W.pending = opt_.parts;
  for (int k = 0; k < opt_.parts; ++k) {
    DiskRequest r;
    r.write = write;
    r.buf = l.part[k];
    r.len = align_up(l.count * 4);
    r.offset = int64_t(e.block.addr) + int64_t(k) * e.part_bytes + l.begin * 4;
    r.done = [this, w, write, len = r.len](int err) { on_done(w, write, len, err); };
    out.push_back(std::move(r));
  }
  if (in_flight_ == 0) busy_since_ = now_s();
  in_flight_ += opt_.parts;
  return out;
}

void DiskStateStore::submit(std::vector<DiskRequest> rs) {
  for (DiskRequest& r : rs) io_->submit(std::move(r));
}

void DiskStateStore::on_done(int w, bool write, int64_t len, int err) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (err && !err_) {
      err_ = err;
      err_what_ = write ? "writing" : "reading";
    }
    (write ? written_ : read_) += len;
    if (--in_flight_ == 0) busy_s_ += now_s() - busy_since_;
    Window& W = windows_[size_t(w)];
    if (--W.pending == 0) W.state = W.state == State::Writing ? State::Free : State::Ready;
  }
  cv_.notify_all();
}

void DiskStateStore::throw_if_failed() {
  if (!err_) return;
  const int e = err_;
  fail(what_dir(opt_.dir) + ": " + err_what_ + " the optimizer state failed", std::strerror(e),
       "check the drive (free space, errors in the kernel log); the run cannot continue");
}

DiskStateStore::Lease DiskStateStore::acquire(int id, int64_t chunk, bool fresh) {
  LT_CHECK(!meta_, "--offload-dir: a chunk leased in a dry run", "nothing moves on meta", "report this");
  const uint64_t key = key_of(id, chunk);
  std::unique_lock<std::mutex> lk(mu_);
  if (!fresh) note_leased(key);
  for (;;) {
    throw_if_failed();
    int w = find(key);
    if (w >= 0) {
      Window& W = windows_[size_t(w)];
      if (W.state == State::Ready) {
        W.state = State::InUse;
        return lease_of(w, id, chunk);
      }
      cv_.wait(lk);  // being read, or the last write of it still out
      continue;
    }
    // A free window, else one read ahead and not taken (its chunk will be read again when due).
    int f = -1;
    for (size_t i = 0; i < windows_.size() && f < 0; ++i)
      if (windows_[i].state == State::Free) f = int(i);
    for (size_t i = 0; i < windows_.size() && f < 0; ++i)
      if (windows_[i].state == State::Ready) f = int(i);
    if (f < 0) {
      cv_.wait(lk);
      continue;
    }
    Window& W = windows_[size_t(f)];
    W.key = key;
    if (fresh) {
      W.state = State::InUse;
      return lease_of(f, id, chunk);
    }
    W.state = State::Reading;
    std::vector<DiskRequest> rs = requests(f, false);
    lk.unlock();
    submit(std::move(rs));
    lk.lock();
  }
}

void DiskStateStore::release(const Lease& l) {
  std::vector<DiskRequest> rs;
  {
    std::lock_guard<std::mutex> lk(mu_);
    Window& W = windows_.at(size_t(l.window));
    W.state = State::Writing;
    rs = requests(l.window, true);
  }
  submit(std::move(rs));
}

// A pass ends when every chunk was leased once (one optimizer step), or when a chunk comes
// round again first (some parameter had no gradient): its order is the next pass's prediction.
void DiskStateStore::note_leased(uint64_t key) {
  auto end_pass = [&] {
    predicted_ = std::move(pass_);
    pass_.clear();
    seen_.clear();
    next_read_ = 0;
    if (trace_on()) {
      DiskTraffic& last = last_pass_;
      const double busy = busy_s_ - last.busy_s;
      const int64_t rd = read_ - last.read, wr = written_ - last.written;
      std::fprintf(stderr,
                   "offload disk: %lld chunks, read %.3f GB, wrote %.3f GB, drive busy %.3f s: %.2f GB/s (%s, %s)\n",
                   (long long)predicted_.size(), double(rd) / 1e9, double(wr) / 1e9, busy,
                   busy > 0 ? double(rd + wr) / 1e9 / busy : 0.0, io_->name(), direct_ ? "O_DIRECT" : "buffered");
      last = {read_, written_, busy_s_};
    }
    cv_.notify_all();
  };
  if (seen_.count(key)) end_pass();
  // The consumer is at `key`: reading ahead continues after it.
  for (size_t i = next_read_; i < predicted_.size() && i < next_read_ + windows_.size() * 2; ++i)
    if (predicted_[i] == key) {
      next_read_ = i + 1;
      break;
    }
  seen_[key] = pass_.size();
  pass_.push_back(key);
  if (int64_t(pass_.size()) == total_chunks_) end_pass();
}

void DiskStateStore::prefetch_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    bool issued = false;
    while (!stop_ && !err_ && next_read_ < predicted_.size()) {
      const uint64_t key = predicted_[next_read_];
      const int w = find(key);
      if (w >= 0) {
        if (windows_[size_t(w)].state == State::Writing) break;  // read it once written
        ++next_read_;  // there already, or in use
        continue;
      }
      int f = -1;
      for (size_t i = 0; i < windows_.size() && f < 0; ++i)
        if (windows_[i].state == State::Free) f = int(i);
      if (f < 0) break;
      Window& W = windows_[size_t(f)];
      W.key = key;
      W.state = State::Reading;
      ++next_read_;
      std::vector<DiskRequest> rs = requests(f, false);
      lk.unlock();
      submit(std::move(rs));
      lk.lock();
      issued = true;
    }
    if (!issued) cv_.wait(lk);
  }
}

void DiskStateStore::quiesce() {
  if (meta_) return;
  std::unique_lock<std::mutex> lk(mu_);
  next_read_ = predicted_.size();  // no more reading ahead until the next pass ends
  cv_.wait(lk, [&] { return in_flight_ == 0; });
  for (Window& w : windows_)
    if (w.state == State::Ready) w.state = State::Free;
  throw_if_failed();
}

float* DiskStateStore::mapped(int id, int part) {
  if (meta_) return nullptr;
  const Extent& e = extents_.at(size_t(id));
  const int64_t off = int64_t(e.block.addr) + int64_t(part) * e.part_bytes;
  void* p = ::mmap(nullptr, size_t(e.part_bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, off);
  LT_CHECK(p != MAP_FAILED, what_dir(opt_.dir) + ": cannot map the state file", std::strerror(errno),
           "raise the address-space limit (ulimit -v)");
  std::lock_guard<std::mutex> lk(mu_);
  maps_.emplace_back(p, size_t(e.part_bytes));
  return static_cast<float*>(p);
}

void DiskStateStore::sync_mapped() {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [p, n] : maps_) ::msync(p, n, MS_SYNC);
}

DiskTraffic DiskStateStore::traffic() const {
  std::lock_guard<std::mutex> lk(mu_);
  return {read_, written_, busy_s_};
}

}  // namespace lt::offload
