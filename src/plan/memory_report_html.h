// The memory report: one self-contained HTML page (inline SVG, CSS and a little JS; nothing is
// fetched) with the memory timeline stacked by category, reserved bytes as a line above it, the
// peak marked with its size and op, and a table of per-category peaks.
//
// The chart is drawn as static SVG when the page is written, so it shows even where scripts are
// blocked; the script only adds a hover readout and, once the page is laid out, marks the chart
// root with data-drawn="1" and data-paths=<paths drawn> (what the headless-browser test checks).
#pragma once
#include <string>

#include "memory/snapshot.h"

namespace lt {

// max_points bounds the chart's points, and with them the file size (about 300 bytes a point).
// pinned_host, when given, adds a "pinned host" section: that account's total and categories;
// disk, when given and not empty, a "disk" section likewise (--offload-dir).
std::string render_memory_report_html(const MemoryState& s, const std::string& title, size_t max_points = 1000,
                                      const MemoryStats* pinned_host = nullptr, const MemoryStats* disk = nullptr);

}  // namespace lt
