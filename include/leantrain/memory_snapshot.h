// Memory you can see: files that show where a device's memory went.
//
//  - write_memory_snapshot: the allocator's segments and blocks now, and its recorded history,
//    as JSON in the layout of PyTorch's torch.cuda.memory._snapshot(); each event's frames name
//    the op and category that asked ("linear [activation]").
//  - write_memory_snapshot_pickle: the same as a Python pickle (protocol 4), which is what
//    https://pytorch.org/memory_viz and `python -m torch.cuda._memory_viz` load.
//  - write_memory_report_html: one self-contained HTML page (no network): the memory timeline
//    stacked by category with reserved bytes above it, the peak marked with its op, and a table
//    of per-category peaks.
//
// Turn the history on before the part of the run to look at: allocator_for(d).set_history(true)
// (set_history_max_entries bounds it; older events are dropped first). Files are written
// atomically (temp file + rename); errors are lt::Error naming the path.
#pragma once
#include <string>

#include "leantrain/memory.h"

namespace lt {

void write_memory_snapshot(const Allocator& a, const std::string& json_path);
void write_memory_snapshot_pickle(const Allocator& a, const std::string& pickle_path);
// The pickle written beside a snapshot JSON: out.json -> out.pickle (memory_viz reads pickles only).
std::string pickle_path_for(const std::string& json_path);
void write_memory_report_html(const Allocator& a, const std::string& html_path,
                              const std::string& title = "leantrain memory report");

}  // namespace lt
