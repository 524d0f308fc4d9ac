// Capturing an allocator's state and writing it in PyTorch's snapshot layout. Field names follow
// torch/cuda/memory.py (_snapshot's Segment, Block, TraceEntry) and what torch/utils/viz/MemoryViz.js
// reads. Choices where our allocator differs from PyTorch's:
//  - a free is synchronous here, so each one is written as free_requested + free_completed
//    (the viewer folds the pair into one "free", as it does for PyTorch's own synchronous frees);
//  - there are no Python stacks: each event gets one frame naming the op and the category;
//  - a retag (an activation buffer becoming a gradient) is not an allocator event in PyTorch, so
//    it is folded into the allocation it retags: the alloc shows the category it ended with;
//  - trace entries carry "category", which the viewer uses to colour its timeline. The viewer
//    expects "unknown" among the categories once any is present, so a final "snapshot" entry
//    (an action PyTorch itself records) carries it.
#include "memory/snapshot.h"

#include <algorithm>
#include <unordered_map>

#include "io/file_io.h"
#include "io/json_writer.h"
#include "io/pickle_writer.h"
#include "leantrain/memory_snapshot.h"
#include "memory/caching_policy.h"

namespace lt {

MemoryState capture_memory_state(const Allocator& a) {
  MemoryState s;
  s.device = a.device();
  s.limit = a.limit();
  std::vector<LiveBlock> live = a.live_blocks();
  if (const auto* ca = dynamic_cast<const CachingAllocator*>(&a)) {
    std::unordered_map<uint64_t, const LiveBlock*> by_addr;
    for (const LiveBlock& b : live) by_addr[b.addr] = &b;
    for (const SegmentInfo& info : ca->segments()) {
      SnapshotSegment seg{info.addr, info.size, info.stream, info.small, {}};
      uint64_t addr = info.addr;
      for (size_t i = 0; i < info.block_sizes.size(); ++i) {
        SnapshotBlock b;
        b.addr = addr;
        b.size = info.block_sizes[i];
        b.allocated = info.block_allocated[i];
        if (b.allocated) {
          b.requested = b.size;  // unless we know better
          if (auto it = by_addr.find(addr); it != by_addr.end()) {
            b.requested = it->second->requested;
            b.category = it->second->category;
            b.op = it->second->op;
          }
        }
        seg.blocks.push_back(b);
        addr += uint64_t(b.size);
      }
      s.segments.push_back(std::move(seg));
    }
  } else {
    for (const LiveBlock& b : live) {
      SnapshotBlock blk{b.addr, b.size, b.requested, true, b.category, b.op};
      s.segments.push_back({b.addr, b.size, b.stream, b.size <= kSmallBlockMax, {blk}});
    }
  }
  std::sort(s.segments.begin(), s.segments.end(),
            [](const SnapshotSegment& x, const SnapshotSegment& y) { return x.addr < y.addr; });
  s.stats = a.stats();
  s.history = a.history();
  s.history_dropped = a.history_dropped();
  return s;
}

namespace {

using Action = MemoryEvent::Action;

std::string frame_name(const char* op, Category c) {
  return std::string(op && *op ? op : "(no op)") + " [" + category_name(c) + "]";
}

// What the trace shows for each history event, worked out before writing (counts are needed first).
struct TraceView {
  std::vector<Category> shown;          // per event: the category to show
  std::vector<std::string> name;        // per event: the frame name ("" for retags)
  size_t entries = 0;                   // trace entries to write
};

TraceView view_trace(const std::vector<MemoryEvent>& h) {
  TraceView v;
  v.shown.resize(h.size());
  v.name.resize(h.size());
  std::unordered_map<uint64_t, size_t> pending;  // addr -> index of its alloc in h
  std::vector<Category> born(h.size(), Category::Other);
  for (size_t i = 0; i < h.size(); ++i) {
    const MemoryEvent& e = h[i];
    v.shown[i] = e.category;
    switch (e.action) {
      case Action::Alloc:
        pending[e.addr] = i;
        born[i] = e.category;
        break;
      case Action::Retag:
        if (auto it = pending.find(e.addr); it != pending.end()) v.shown[it->second] = e.category;
        break;
      case Action::Free:
        if (auto it = pending.find(e.addr); it != pending.end()) {
          v.name[i] = frame_name(h[it->second].op, e.category);
          pending.erase(it);
        } else {
          v.name[i] = std::string("freed during ") + frame_name(e.op, e.category);
        }
        break;
      default: break;
    }
  }
  for (size_t i = 0; i < h.size(); ++i) {
    const MemoryEvent& e = h[i];
    switch (e.action) {
      case Action::Alloc:
        v.name[i] = frame_name(e.op, v.shown[i]);
        if (v.shown[i] != born[i]) v.name[i] += std::string(" (allocated as ") + category_name(born[i]) + ")";
        v.entries += 1;
        break;
      case Action::Free: v.entries += 2; break;
      case Action::Retag: break;
      default:
        v.name[i] = frame_name(e.op, e.category);
        v.entries += 1;
    }
  }
  if (!h.empty()) v.entries += 1;  // the closing "snapshot" entry
  return v;
}

template <class W>
void frames(W& w, const std::string& name) {
  w.begin_list(1);
  w.begin_dict(3);
  w.key("filename");
  w.str("leantrain");
  w.key("line");
  w.integer(0);
  w.key("name");
  w.str(name);
  w.end_dict();
  w.end_list();
}

template <class W>
void segment(W& w, const SnapshotSegment& seg, int device) {
  int64_t allocated = 0, requested = 0;
  for (const SnapshotBlock& b : seg.blocks) {
    if (!b.allocated) continue;
    allocated += b.size;
    requested += b.requested;
  }
  w.begin_dict(10);
  w.key("device");
  w.integer(device);
  w.key("address");
  w.uinteger(seg.addr);
  w.key("total_size");
  w.integer(seg.size);
  w.key("allocated_size");
  w.integer(allocated);
  w.key("active_size");  // no pending frees here: active == allocated
  w.integer(allocated);
  w.key("requested_size");
  w.integer(requested);
  w.key("stream");
  w.integer(seg.stream);
  w.key("segment_type");
  w.str(seg.small ? "small" : "large");
  w.key("is_expandable");
  w.boolean(false);
  w.key("blocks");
  w.begin_list(seg.blocks.size());
  for (const SnapshotBlock& b : seg.blocks) {
    w.begin_dict(5);
    w.key("address");
    w.uinteger(b.addr);
    w.key("size");
    w.integer(b.size);
    w.key("requested_size");
    w.integer(b.requested);
    w.key("state");
    w.str(b.allocated ? "active_allocated" : "inactive");
    w.key("frames");
    if (b.allocated) {
      frames(w, frame_name(b.op, b.category));
    } else {
      w.begin_list(0);
      w.end_list();
    }
    w.end_dict();
  }
  w.end_list();
  w.end_dict();
}

template <class W>
void entry(W& w, const char* action, const MemoryEvent& e, Category c, const std::string& name, int64_t device_free) {
  const bool oom = e.action == Action::Oom;
  w.begin_dict(7);
  w.key("action");
  w.str(action);
  if (oom) {  // PyTorch's OOM entries have no address, but say what the device had free
    w.key("device_free");
    w.integer(device_free);
  } else {
    w.key("addr");
    w.uinteger(e.addr);
  }
  w.key("size");
  w.integer(e.size);
  w.key("stream");
  w.integer(e.stream);
  w.key("time_us");
  w.integer(e.time_us);
  w.key("category");
  w.str(category_name(c));
  w.key("frames");
  frames(w, name);
  w.end_dict();
}

template <class W>
void leantrain_extras(W& w, const MemoryState& s) {
  const MemoryStats& st = s.stats;
  w.begin_dict(10);
  w.key("device");
  w.str(s.device.str());
  w.key("allocated_bytes");
  w.begin_dict(2);
  w.key("current");
  w.integer(st.allocated_bytes.current);
  w.key("peak");
  w.integer(st.allocated_bytes.peak);
  w.end_dict();
  w.key("reserved_bytes");
  w.begin_dict(2);
  w.key("current");
  w.integer(st.reserved_bytes.current);
  w.key("peak");
  w.integer(st.reserved_bytes.peak);
  w.end_dict();
  for (bool peak : {false, true}) {
    w.key(peak ? "category_peak" : "category_current");
    w.begin_dict(kNumCategories);
    for (int c = 0; c < kNumCategories; ++c) {
      w.key(category_name(Category(c)));
      w.integer(peak ? st.category[size_t(c)].peak : st.category[size_t(c)].current);
    }
    w.end_dict();
  }
  w.key("num_allocs");
  w.integer(st.num_allocs);
  w.key("num_frees");
  w.integer(st.num_frees);
  w.key("num_ooms");
  w.integer(st.num_ooms);
  w.key("history_events");
  w.integer(int64_t(s.history.size()));
  w.key("history_dropped");
  w.uinteger(s.history_dropped);
  w.end_dict();
}

template <class W>
void emit(W& w, const MemoryState& s, const std::function<void(const std::string&)>& sink) {
  const int device = std::max(0, s.device.index);
  auto flush = [&] {
    std::string b = w.take();
    if (!b.empty()) sink(b);
  };
  w.begin_dict(3);
  w.key("segments");
  w.begin_list(s.segments.size());
  for (const SnapshotSegment& seg : s.segments) segment(w, seg, device);
  w.end_list();
  flush();

  // Reserved bytes before the first kept event, to say what an OOM found free under a limit.
  int64_t reserved = s.stats.reserved_bytes.current;
  for (const MemoryEvent& e : s.history) {
    if (e.action == Action::SegmentAlloc) reserved -= e.size;
    if (e.action == Action::SegmentFree) reserved += e.size;
  }
  const TraceView v = view_trace(s.history);
  w.key("device_traces");
  w.begin_list(size_t(device) + 1);
  for (int d = 0; d < device; ++d) {
    w.begin_list(0);
    w.end_list();
  }
  w.begin_list(v.entries);
  for (size_t i = 0; i < s.history.size(); ++i) {
    const MemoryEvent& e = s.history[i];
    switch (e.action) {
      case Action::Alloc: entry(w, "alloc", e, v.shown[i], v.name[i], 0); break;
      case Action::Free:
        entry(w, "free_requested", e, v.shown[i], v.name[i], 0);
        entry(w, "free_completed", e, v.shown[i], v.name[i], 0);
        break;
      case Action::SegmentAlloc:
        reserved += e.size;
        entry(w, "segment_alloc", e, v.shown[i], v.name[i], 0);
        break;
      case Action::SegmentFree:
        reserved -= e.size;
        entry(w, "segment_free", e, v.shown[i], v.name[i], 0);
        break;
      case Action::Oom:
        entry(w, "oom", e, v.shown[i], v.name[i], s.limit >= 0 ? std::max<int64_t>(0, s.limit - reserved) : 0);
        break;
      case Action::Retag: break;
    }
    if (i % 4096 == 4095) flush();
  }
  if (!s.history.empty()) {
    w.begin_dict(7);
    w.key("action");
    w.str("snapshot");
    w.key("addr");
    w.integer(0);
    w.key("size");
    w.integer(0);
    w.key("stream");
    w.integer(0);
    w.key("time_us");
    w.integer(s.history.back().time_us);
    w.key("category");
    w.str("unknown");
    w.key("frames");
    w.begin_list(0);
    w.end_list();
    w.end_dict();
  }
  w.end_list();
  w.end_list();
  w.key("leantrain");
  leantrain_extras(w, s);
  w.end_dict();
  sink(w.finish());
}

}  // namespace

void write_memory_state(const MemoryState& s, SnapshotFormat f, const std::function<void(const std::string&)>& sink) {
  if (f == SnapshotFormat::Json) {
    io::JsonWriter w;
    emit(w, s, sink);
  } else {
    io::PickleWriter w;
    emit(w, s, sink);
  }
}

std::string memory_snapshot_string(const MemoryState& s, SnapshotFormat f) {
  std::string out;
  write_memory_state(s, f, [&](const std::string& b) { out += b; });
  return out;
}

static void write_file(const Allocator& a, const std::string& path, SnapshotFormat f) {
  const MemoryState s = capture_memory_state(a);
  io::detail::AtomicFile file(path);
  write_memory_state(s, f, [&](const std::string& b) { file.write(b.data(), int64_t(b.size())); });
  file.commit();
}

void write_memory_snapshot(const Allocator& a, const std::string& json_path) {
  write_file(a, json_path, SnapshotFormat::Json);
}

void write_memory_snapshot_pickle(const Allocator& a, const std::string& pickle_path) {
  write_file(a, pickle_path, SnapshotFormat::Pickle);
}

}  // namespace lt
