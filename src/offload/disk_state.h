// The disk tier of --offload optimizer (--offload-dir; ZeRO-Infinity's NVMe offload): the f32
// state and master copy of some parameters in one file, read into a ring of pinned windows a
// chunk at a time, stepped there by the host step and written back.
//
// The file: unnamed (O_TMPFILE, else created with O_EXCL and unlinked at once) in the directory
// the user gave, so nothing is left behind by a crash and nothing a user owns is touched; opened
// O_DIRECT where the file system takes it (page-cache free, the drive's own speed), else
// buffered. Each parameter owns an extent of `parts` arrays of numel f32 (the states, then the
// master), each padded to 4096 bytes; extents come from the run's disk account (disk_allocator:
// category optimizer_state, the block's addr is the file offset), so `plan` predicts the bytes.
//
// A chunk is `chunk_elems` elements of every part of one parameter: a lease on a window holds
// them. Prefetch: the order in which chunks were leased over the last full pass (every chunk
// once: one optimizer step) is taken as the next pass's order, and as soon as a pass ends the
// free windows read ahead along it, so the next step's first chunks load during its forward and
// backward; each released chunk is written back while the next is stepped. A chunk is never read
// while its write is in flight. Reads and writes go through disk_io.h (io_uring or threads).
//
// Between steps the parts are also reachable as ordinary memory through a shared mapping of the
// file (mapped()), which state_dict and load_state_dict use (saving and resuming a checkpoint),
// with the I/O quiesced first. On meta (plan's dry run) there is no file: the windows are taken
// from the pinned-host account and the extents from the disk account as in a run, and nothing is
// read or written.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "leantrain/memory.h"
#include "leantrain/tensor.h"
#include "offload/disk_io.h"

namespace lt::offload {

inline constexpr int kMaxDiskParts = 4;

struct DiskStoreOptions {
  std::string dir;
  Device account = Device::cpu();  // whose pinned-host and disk accounts the store uses
  int parts = 3;                   // f32 arrays per parameter (AdamW: exp_avg, exp_avg_sq, master)
  int64_t chunk_elems = int64_t(4) << 20;  // a multiple of 1024 (4096-byte offsets)
  int windows = 4;
  bool prefer_uring = true;
};

// Bytes moved and the time the drive was busy (some transfer in flight), since construction.
struct DiskTraffic {
  int64_t read = 0, written = 0;
  double busy_s = 0;
};

class DiskStateStore {
 public:
  explicit DiskStateStore(const DiskStoreOptions& o);
  ~DiskStateStore();
  DiskStateStore(const DiskStateStore&) = delete;
  DiskStateStore& operator=(const DiskStateStore&) = delete;

  // Pinned bytes of the windows (what a limit on host memory must leave them), before creating one.
  static int64_t window_bytes(const DiskStoreOptions& o);
  // Disk bytes of one parameter's extent.
  static int64_t extent_bytes(int parts, int64_t numel);

  // A parameter of numel elements: its extent taken from the disk account (the file grows). Its
  // contents read as zeros until written. Returns its id.
  int add(int64_t numel);
  int64_t chunks(int id) const;

  struct Lease {
    float* part[kMaxDiskParts] = {};
    int64_t begin = 0, count = 0;  // elements of the parameter this chunk covers
    int window = -1;
    int id = -1;
    int64_t chunk = 0;
  };
  // The chunk's parts in a window: read from the file, or (fresh) left for the caller to fill
  // entirely. Blocks until the data is there. Throws lt::Error on an I/O error.
  Lease acquire(int id, int64_t chunk, bool fresh = false);
  // Writes the chunk's parts back (asynchronously) and frees the window once written.
  void release(const Lease& l);
  // Waits for every transfer in flight and drops what was prefetched (their data may be about to
  // change through the mapping). Throws an I/O error that happened since.
  void quiesce();
  // Part `part` of parameter `id` as f32 memory over a shared mapping of the file (between steps
  // only, after quiesce()); nullptr on meta.
  float* mapped(int id, int part);
  // Makes writes through mapped() visible to the direct reads that follow.
  void sync_mapped();

  bool meta() const { return meta_; }
  const char* engine() const { return io_ ? io_->name() : "none"; }
  bool direct() const { return direct_; }
  DiskTraffic traffic() const;
  const std::string& dir() const { return opt_.dir; }

 private:
  enum class State { Free, Reading, Ready, InUse, Writing };
  struct Window {
    std::shared_ptr<Storage> mem;
    State state = State::Free;
    uint64_t key = 0;
    int pending = 0;  // requests of the current transfer still out
  };
  struct Extent {
    Block block;
    int64_t numel = 0, part_bytes = 0;
  };
  static uint64_t key_of(int id, int64_t chunk) { return (uint64_t(id) << 40) | uint64_t(chunk); }
  Lease lease_of(int w, int id, int64_t chunk) const;
  std::vector<DiskRequest> requests(int w, bool write);  // with mu_ held: one request per part
  void submit(std::vector<DiskRequest> rs);                // without mu_
  void on_done(int w, bool write, int64_t len, int err);
  int find(uint64_t key) const;     // the window holding or moving key, or -1
  void prefetch_loop();
  void note_leased(uint64_t key);   // with mu_ held: the pass bookkeeping
  void throw_if_failed();           // with mu_ held

  DiskStoreOptions opt_;
  bool meta_ = false, direct_ = false;
  int fd_ = -1;
  int64_t file_bytes_ = 0;
  std::unique_ptr<DiskIo> io_;
  std::vector<Extent> extents_;
  int64_t total_chunks_ = 0;
  std::vector<Window> windows_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int err_ = 0;
  std::string err_what_;
  // Pass bookkeeping: this pass's order so far, the last full pass's order (the prediction), and
  // how far along it the reads have been issued.
  std::vector<uint64_t> pass_, predicted_;
  std::unordered_map<uint64_t, size_t> seen_;
  size_t next_read_ = 0;
  bool stop_ = false;
  std::thread prefetcher_;
  // Traffic.
  int64_t read_ = 0, written_ = 0;
  int in_flight_ = 0;
  double busy_s_ = 0, busy_since_ = 0;
  DiskTraffic last_pass_;  // at the end of the last pass (the trace's per-pass figures)
  std::vector<std::pair<void*, size_t>> maps_;
};

}  // namespace lt::offload
