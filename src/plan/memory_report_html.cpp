#include "plan/memory_report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "io/file_io.h"
#include "io/text_format.h"
#include "io/json_writer.h"
#include "leantrain/memory_snapshot.h"
#include "memory/memory_timeline.h"

namespace lt {

namespace {

// Tableau-like colours, one per category in Category order (bottom of the stack first).
constexpr const char* kColours[kNumCategories] = {"#4e79a7", "#f28e2c", "#59a14f", "#e15759",
                                                  "#76b7b2", "#edc949", "#bab0ab"};

// Chart geometry (SVG user units).
constexpr double kW = 1100, kH = 460, kLeft = 90, kRight = 24, kTop = 40, kBottom = 46;
constexpr double kPlotW = kW - kLeft - kRight, kPlotH = kH - kTop - kBottom;

std::string bytes_str(int64_t b) {
  char buf[64];
  const double v = double(b), kib = 1024.0, mib = kib * 1024, gib = mib * 1024;
  if (std::fabs(v) >= gib) std::snprintf(buf, sizeof buf, "%.2f GiB", v / gib);
  else if (std::fabs(v) >= mib) std::snprintf(buf, sizeof buf, "%.2f MiB", v / mib);
  else if (std::fabs(v) >= kib) std::snprintf(buf, sizeof buf, "%.1f KiB", v / kib);
  else std::snprintf(buf, sizeof buf, "%lld B", (long long)b);
  return buf;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string op_label(const char* op) { return op && *op ? op : "(no op)"; }

// 1, 2 or 5 times a power of ten, at least `raw` (and at least 1).
uint64_t round_step(double raw) {
  uint64_t p = 1;
  for (;;) {
    for (uint64_t m : {1, 2, 5})
      if (double(m * p) >= raw) return m * p;
    p *= 10;
  }
}

// A round axis maximum: 1, 2 or 5 times a power of two unit (B, KiB, MiB, GiB) per tick.
void y_axis(int64_t top, int64_t& ymax, int64_t& step) {
  top = std::max<int64_t>(top, 1);
  double unit = 1;
  for (double u : {1024.0, 1048576.0, 1073741824.0})
    if (double(top) >= u) unit = u;
  const double raw = double(top) / unit / 5;
  const double p10 = std::pow(10.0, std::floor(std::log10(std::max(raw, 1e-9))));
  double nice = 10 * p10;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p10 >= raw) {
      nice = m * p10;
      break;
    }
  step = std::max<int64_t>(1, int64_t(std::llround(nice * unit)));
  ymax = (top + step - 1) / step * step;
}

struct Chart {
  const MemoryTimeline& t;
  int64_t ymax, ystep;
  double xmax;
  double x(uint64_t state) const { return kLeft + kPlotW * double(state) / xmax; }
  double y(int64_t v) const { return kTop + kPlotH - kPlotH * double(v) / double(ymax); }
};

// Point positions; a single point is stretched over the whole width so it still draws an area.
std::vector<double> xs(const Chart& ch) {
  std::vector<double> v;
  for (const TimelinePoint& p : ch.t.points) v.push_back(ch.x(p.state));
  if (v.size() == 1) v.push_back(kLeft + kPlotW);
  return v;
}

Chart make_chart(const MemoryTimeline& t) {
  int64_t ymax, ystep;
  y_axis(std::max(t.reserved_max, t.peak_allocated), ymax, ystep);
  return Chart{t, ymax, ystep, double(std::max<uint64_t>(t.states - 1, 1))};
}

const TimelinePoint& point_at(const MemoryTimeline& t, size_t i) { return t.points[std::min(i, t.points.size() - 1)]; }

std::string area_path(const Chart& ch, const std::vector<double>& x, int c) {
  auto cum = [&](const TimelinePoint& p, int upto) {
    int64_t s = 0;
    for (int k = 0; k <= upto; ++k) s += p.bytes[size_t(k)];
    return s;
  };
  std::string d;
  for (size_t i = 0; i < x.size(); ++i)
    d += (i ? " L" : "M") + num(x[i]) + "," + num(ch.y(cum(point_at(ch.t, i), c)));
  for (size_t i = x.size(); i-- > 0;) d += " L" + num(x[i]) + "," + num(ch.y(cum(point_at(ch.t, i), c - 1)));
  return d + " Z";
}

std::string reserved_path(const Chart& ch, const std::vector<double>& x) {
  std::string d;
  for (size_t i = 0; i < x.size(); ++i) d += (i ? " L" : "M") + num(x[i]) + "," + num(ch.y(point_at(ch.t, i).reserved));
  return d;
}

std::string svg(const Chart& ch) {
  const MemoryTimeline& t = ch.t;
  const int64_t ymax = ch.ymax, ystep = ch.ystep;
  std::string o = "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " + num(kW) + " " + num(kH) +
                  "\" role=\"img\" aria-label=\"memory timeline\">\n";
  // Grid and axes.
  o += "<g class=\"axes\">\n";
  for (int64_t v = 0; v <= ymax; v += ystep) {
    const double y = ch.y(v);
    o += "<line class=\"grid\" x1=\"" + num(kLeft) + "\" x2=\"" + num(kLeft + kPlotW) + "\" y1=\"" + num(y) + "\" y2=\"" +
         num(y) + "\"/><text x=\"" + num(kLeft - 6) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" + bytes_str(v) +
         "</text>\n";
  }
  const uint64_t xstep = round_step(ch.xmax / 6);
  for (uint64_t state = 0; double(state) <= ch.xmax; state += xstep)
    o += "<text x=\"" + num(ch.x(state)) + "\" y=\"" + num(kTop + kPlotH + 18) + "\" text-anchor=\"middle\">" +
         std::to_string(state) + "</text>\n";
  o += "<text x=\"" + num(kLeft + kPlotW / 2) + "\" y=\"" + num(kH - 6) +
       "\" text-anchor=\"middle\">allocator events recorded</text>\n";
  o += "<line class=\"axis\" x1=\"" + num(kLeft) + "\" x2=\"" + num(kLeft) + "\" y1=\"" + num(kTop) + "\" y2=\"" +
       num(kTop + kPlotH) + "\"/><line class=\"axis\" x1=\"" + num(kLeft) + "\" x2=\"" + num(kLeft + kPlotW) +
       "\" y1=\"" + num(kTop + kPlotH) + "\" y2=\"" + num(kTop + kPlotH) + "\"/>\n</g>\n";
  // One stacked area per category, bottom first, then reserved above them.
  const std::vector<double> x = xs(ch);
  for (int c = 0; c < kNumCategories; ++c)
    o += "<path class=\"area\" data-category=\"" + std::string(category_name(Category(c))) + "\" fill=\"" + kColours[c] +
         "\" d=\"" + area_path(ch, x, c) + "\"><title>" + category_name(Category(c)) + "</title></path>\n";
  o += "<path class=\"reserved\" data-category=\"reserved\" fill=\"none\" d=\"" + reserved_path(ch, x) +
       "\"><title>reserved</title></path>\n";
  // Out-of-memory events.
  for (uint64_t st : t.oom_states)
    o += "<line class=\"oom\" x1=\"" + num(ch.x(st)) + "\" x2=\"" + num(ch.x(st)) + "\" y1=\"" + num(kTop) + "\" y2=\"" +
         num(kTop + kPlotH) + "\"><title>out of memory at event " + std::to_string(st) + "</title></line>\n";
  // The peak: a dashed drop line, a dot on the top of the stack and its label.
  const double px = ch.x(t.peak_state), py = ch.y(t.peak_allocated);
  const bool right = px > kLeft + kPlotW * 0.6;
  const std::string label = "peak " + bytes_str(t.peak_allocated) + " at event " + std::to_string(t.peak_state) +
                            (t.peak_state ? " (" + op_label(t.peak_op) + ")" : " (before the recorded history)");
  o += "<g id=\"peak-marker\" data-bytes=\"" + std::to_string(t.peak_allocated) + "\" data-event=\"" +
       std::to_string(t.peak_state) + "\" data-op=\"" + xml_escape(op_label(t.peak_op)) + "\">";
  o += "<line x1=\"" + num(px) + "\" x2=\"" + num(px) + "\" y1=\"" + num(py) + "\" y2=\"" + num(kTop + kPlotH) + "\"/>";
  o += "<circle cx=\"" + num(px) + "\" cy=\"" + num(py) + "\" r=\"4.5\"/>";
  o += "<text x=\"" + num(px + (right ? -8 : 8)) + "\" y=\"" + num(std::max(py - 10, kTop - 8)) + "\" text-anchor=\"" +
       (right ? "end" : "start") + "\">" + xml_escape(label) + "</text></g>\n";
  o += "<line id=\"cursor\" x1=\"0\" x2=\"0\" y1=\"" + num(kTop) + "\" y2=\"" + num(kTop + kPlotH) + "\" visibility=\"hidden\"/>\n";
  return o + "</svg>\n";
}

std::string legend() {
  std::string o = "<div id=\"legend\">";
  for (int c = 0; c < kNumCategories; ++c)
    o += "<span><i style=\"background:" + std::string(kColours[c]) + "\"></i>" + category_name(Category(c)) + "</span>";
  return o + "<span><i class=\"reserved-key\"></i>reserved</span></div>\n";
}

std::string table(const MemoryState& s, const MemoryTimeline& t) {
  std::string o =
      "<table id=\"category-peaks\">\n<tr><th>category</th><th>peak (recorded)</th><th>at the allocated peak</th>"
      "<th>now</th><th>peak (whole run)</th></tr>\n";
  auto row = [&](const std::string& name, const std::string& swatch, int64_t a, int64_t b, int64_t c, int64_t d) {
    o += "<tr><td>" + swatch + xml_escape(name) + "</td><td>" + bytes_str(a) + "</td><td>" + bytes_str(b) + "</td><td>" +
         bytes_str(c) + "</td><td>" + bytes_str(d) + "</td></tr>\n";
  };
  for (int c = 0; c < kNumCategories; ++c) {
    const size_t i = size_t(c);
    row(category_name(Category(c)), "<i style=\"background:" + std::string(kColours[c]) + "\"></i>", t.category_max[i],
        t.at_peak[i], s.stats.category[i].current, s.stats.category[i].peak);
  }
  row("allocated (all)", "", t.peak_allocated, t.peak_allocated, s.stats.allocated_bytes.current,
      s.stats.allocated_bytes.peak);
  row("reserved", "", t.reserved_max, point_at(t, t.peak_point).reserved, s.stats.reserved_bytes.current,
      s.stats.reserved_bytes.peak);
  return o + "</table>\n";
}

// An account beside the device's (pinned host memory, --offload-dir's disk), by category: neither
// in the chart nor in the device's totals.
std::string account_table(const MemoryStats& h, const std::string& id, const std::string& title,
                          const std::string& summary) {
  std::string o = "<h2>" + title + "</h2>\n<p class=\"summary\">" + summary + "; not part of the device figures above</p>\n";
  o += "<table id=\"" + id + "\">\n<tr><th>" + title + "</th><th>now</th><th>peak (whole run)</th></tr>\n";
  auto row = [&](const std::string& name, const std::string& swatch, int64_t now, int64_t peak) {
    o += "<tr><td>" + swatch + xml_escape(name) + "</td><td>" + bytes_str(now) + "</td><td>" + bytes_str(peak) + "</td></tr>\n";
  };
  for (int c = 0; c < kNumCategories; ++c)
    row(category_name(Category(c)), "<i style=\"background:" + std::string(kColours[c]) + "\"></i>",
        h.category[size_t(c)].current, h.category[size_t(c)].peak);
  row("allocated (all)", "", h.allocated_bytes.current, h.allocated_bytes.peak);
  return o + "</table>\n";
}

std::string pinned_host_table(const MemoryStats& h, Device d) {
  return account_table(h, "pinned-host", "pinned host",
                       "host memory staged for " + xml_escape(d.str()) +
                           "'s transfers (the data loader's ring, offload buffers)" +
                           (d.is_cuda() ? std::string(", page-locked") : std::string(", ordinary memory on this device type")));
}

// The points again, for the hover readout: [x, first, last, state, bytes x7, reserved, op index].
std::string data_json(const Chart& ch) {
  const MemoryTimeline& t = ch.t;
  std::map<std::string, int64_t> op_index;
  std::vector<std::string> ops;
  io::JsonWriter w;
  w.begin_dict(3);
  w.key("categories");
  w.begin_list(kNumCategories);
  for (int c = 0; c < kNumCategories; ++c) w.str(category_name(Category(c)));
  w.end_list();
  w.key("points");
  w.begin_list(t.points.size());
  for (const TimelinePoint& p : t.points) {
    const std::string op = op_label(p.op);
    auto [it, fresh] = op_index.emplace(op, int64_t(ops.size()));
    if (fresh) ops.push_back(op);
    w.begin_list(6 + kNumCategories);
    w.real(std::round(ch.x(p.state) * 10) / 10);
    w.uinteger(p.first);
    w.uinteger(p.last);
    w.uinteger(p.state);
    for (int64_t b : p.bytes) w.integer(b);
    w.integer(p.reserved);
    w.integer(it->second);
    w.end_list();
  }
  w.end_list();
  w.key("ops");
  w.begin_list(ops.size());
  for (const std::string& op : ops) w.str(op);
  w.end_list();
  w.end_dict();
  std::string js = w.finish(), safe;
  for (char c : js) safe += c == '<' ? std::string("\\u003c") : std::string(1, c);  // never "</script>"
  return safe;
}

constexpr const char* kStyle = R"(<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1160px}
h1{font-size:20px;margin:0 0 6px}
h2{font-size:16px;margin:18px 0 4px}
.summary{margin:4px 0;color:#444}
.warn{color:#b00}
#timeline{width:100%;height:auto;background:#fff;border:1px solid #ddd}
#timeline text{font-size:12px;fill:#444}
#timeline .grid{stroke:#eee}
#timeline .axis{stroke:#888}
#timeline .reserved{stroke:#222;stroke-width:1.5;stroke-dasharray:5 3}
#timeline .oom{stroke:#d00;stroke-width:1.5}
#peak-marker line{stroke:#000;stroke-dasharray:3 3}
#peak-marker circle{fill:#fff;stroke:#000;stroke-width:2}
#peak-marker text{font-weight:bold;fill:#000}
#cursor{stroke:#555}
#legend span{margin-right:14px;white-space:nowrap}
#legend i,td i{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:-1px}
#legend .reserved-key{height:0;border-top:2px dashed #222;vertical-align:4px}
#readout{font-family:monospace;white-space:pre;min-height:3em;color:#333;margin:6px 0}
table{border-collapse:collapse;margin-top:12px}
td,th{border:1px solid #ccc;padding:3px 10px;text-align:right}
td:first-child,th:first-child{text-align:left}
</style>
)";

// Hover readout, then the drawn-check for headless tests. Plain ES2017, no libraries.
constexpr const char* kScript = R"(<script>
(function () {
  const root = document.getElementById('memory-report');
  const svg = document.getElementById('timeline');
  const data = JSON.parse(document.getElementById('timeline-data').textContent);
  const readout = document.getElementById('readout');
  const cursor = document.getElementById('cursor');
  const fmt = b => {
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(2) : b) + ' ' + u[i];
  };
  svg.addEventListener('mousemove', ev => {
    const m = svg.getScreenCTM();
    if (!m || !data.points.length) return;
    const x = (ev.clientX - m.e) / m.a;
    let lo = 0, hi = data.points.length - 1;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (data.points[mid][0] < x) lo = mid + 1; else hi = mid; }
    if (lo > 0 && x - data.points[lo - 1][0] < data.points[lo][0] - x) lo--;
    const p = data.points[lo];
    cursor.setAttribute('x1', p[0]);
    cursor.setAttribute('x2', p[0]);
    cursor.setAttribute('visibility', 'visible');
    let total = 0, lines = [];
    data.categories.forEach((c, i) => { total += p[4 + i]; if (p[4 + i]) lines.push(c + ' ' + fmt(p[4 + i])); });
    readout.textContent = 'event ' + p[3] + (p[1] !== p[2] ? ' (max of events ' + p[1] + '-' + p[2] + ')' : '') +
      ', op ' + data.ops[p[12]] + ': allocated ' + fmt(total) + ', reserved ' + fmt(p[11]) + '\n' + lines.join(', ');
  });
  svg.addEventListener('mouseleave', () => cursor.setAttribute('visibility', 'hidden'));
  // Laid-out paths: all of them span the chart; the filled ones also have height.
  let drawn = 0, filled = 0;
  svg.querySelectorAll('path').forEach(p => {
    const b = p.getBBox();
    if (b.width > 0) drawn++;
    if (b.width > 0 && b.height > 0) filled++;
  });
  root.setAttribute('data-paths', String(drawn));
  root.setAttribute('data-filled-paths', String(filled));
  root.setAttribute('data-points', String(data.points.length));
  root.setAttribute('data-drawn', drawn > 0 ? '1' : '0');
})();
</script>
)";

}  // namespace

std::string render_memory_report_html(const MemoryState& s, const std::string& title, size_t max_points,
                                      const MemoryStats* pinned_host, const MemoryStats* disk) {
  const MemoryTimeline t = build_memory_timeline(s.history, s.stats, max_points);
  std::string o = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + xml_escape(title) +
                  "</title>\n" + kStyle + "</head>\n<body>\n<div id=\"memory-report\" data-drawn=\"0\">\n<h1>" +
                  xml_escape(title) + "</h1>\n";
  o += "<p class=\"summary\">device " + xml_escape(s.device.str()) + " &middot; allocated " +
       bytes_str(s.stats.allocated_bytes.current) + " now, peak " + bytes_str(s.stats.allocated_bytes.peak) +
       " &middot; reserved " + bytes_str(s.stats.reserved_bytes.current) + " now, peak " +
       bytes_str(s.stats.reserved_bytes.peak) + "</p>\n";
  if (s.history.empty()) {
    o += "<p class=\"summary warn\">No allocation history was recorded, so the chart shows only the present state. "
         "Record it with <code>--memory-history</code> (Allocator::set_history(true)).</p>\n";
  } else {
    o += "<p class=\"summary\">" + std::to_string(s.history.size()) + " events recorded";
    if (s.history_dropped)
      o += " (" + std::to_string(s.history_dropped) + " older ones dropped: the history keeps the most recent)";
    if (t.points.size() < t.states)
      o += ", drawn as " + std::to_string(t.points.size()) + " points, each the highest of its stretch";
    o += " &middot; peak in the recording " + bytes_str(t.peak_allocated) + " at event " + std::to_string(t.peak_state) +
         ", op <b>" + xml_escape(op_label(t.peak_op)) + "</b></p>\n";
  }
  if (!t.consistent)
    o += "<p class=\"summary warn\">Some counts came out negative: recording was paused during the history, so the "
         "chart's starting point is approximate.</p>\n";
  const Chart ch = make_chart(t);
  o += svg(ch) + legend() + "<div id=\"readout\">hover over the chart for the bytes at an event</div>\n";
  o += table(s, t);
  if (pinned_host) o += pinned_host_table(*pinned_host, s.device);
  if (disk && disk->allocated_bytes.peak > 0)
    o += account_table(*disk, "disk", "disk", "--offload-dir's optimizer state file");
  o += "</div>\n<script type=\"application/json\" id=\"timeline-data\">" + data_json(ch) + "</script>\n";
  o += kScript;
  return o + "</body>\n</html>\n";
}

void write_memory_report_html(const Allocator& a, const std::string& html_path, const std::string& title) {
  MemoryStats pinned, disk;  // the pinned-host and disk accounts of a device allocator's device
  const bool has_pinned = a.kind() == MemoryKind::Device;
  if (has_pinned) pinned = pinned_host_allocator(a.device()).stats(), disk = disk_allocator(a.device()).stats();
  const std::string page = render_memory_report_html(capture_memory_state(a), title, 1000, has_pinned ? &pinned : nullptr,
                                                     has_pinned ? &disk : nullptr);
  io::detail::AtomicFile f(html_path);
  f.write(page.data(), int64_t(page.size()));
  f.commit();
}

}  // namespace lt
