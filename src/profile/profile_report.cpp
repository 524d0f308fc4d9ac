// What `leantrain profile` writes: the table on stdout, the JSON document and the SVG chart.
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "io/text_format.h"
#include "leantrain/plan.h"
#include "profile/profile.h"
#include "profile/scatter_svg.h"
#include "train/recipe_table.h"

namespace lt {

namespace {

std::string cpu_note(const ProfileResult& r) {
  return r.cpu() ? "CPU figures: bytes and times of the CPU backend on this machine, not of a GPU (run with --device cuda "
                   "for GPU figures)"
                 : "GPU figures, measured on " + r.device.str();
}

// The dotted prefix every module path shares ("transformer.h."), so labels stay short.
std::string common_prefix(const ProfileResult& r) {
  std::vector<const std::string*> paths;
  for (const ProfileRow& w : r.rows)
    if (w.kind != "blocks") paths.push_back(&w.module);
  if (paths.size() < 2) return "";
  std::string p = *paths[0];
  for (const std::string* s : paths) {
    size_t k = 0;
    while (k < p.size() && k < s->size() && p[k] == (*s)[k]) ++k;
    p.resize(k);
  }
  size_t dot = p.rfind('.');
  if (dot == std::string::npos) return "";
  p.resize(dot + 1);
  // "transformer.h." would leave bare numbers ("3.attn"): keep the list's name ("h.3.attn").
  const std::string rest = paths[0]->substr(p.size());
  const std::string head = rest.substr(0, rest.find('.'));
  if (!head.empty() && head.find_first_not_of("0123456789") == std::string::npos) {
    dot = p.rfind('.', p.size() - 2);
    p = dot == std::string::npos ? "" : p.substr(0, dot + 1);
  }
  return p;
}

std::string short_label(const std::string& path, const std::string& prefix) {
  return !prefix.empty() && path.rfind(prefix, 0) == 0 ? path.substr(prefix.size()) : path;
}

// The x axis unit: KiB, MiB or GiB, whichever keeps the largest saving between 1 and 4096.
std::pair<double, const char*> byte_unit(const ProfileResult& r) {
  int64_t m = 0;
  for (const ProfileRow& w : r.rows) m = std::max(m, std::abs(w.saved_measured));
  if (m >= (int64_t(4) << 30)) return {double(int64_t(1) << 30), "GiB"};
  if (m >= (int64_t(1) << 20)) return {double(int64_t(1) << 20), "MiB"};
  return {1024.0, "KiB"};
}

nlohmann::json row_json(const ProfileRow& w, bool suggested) {
  nlohmann::json j;
  j["module"] = w.module;
  j["kind"] = w.kind;
  j["checkpoint"] = w.checkpoint;
  j["peak_allocated_bytes_measured"] = w.peak_measured;
  j["peak_allocated_bytes_predicted"] = w.peak_predicted;
  j["bytes_saved_measured"] = w.saved_measured;
  j["bytes_saved_predicted"] = w.saved_predicted;
  j["activation_peak_bytes_measured"] = w.act_peak_measured;
  j["activation_peak_bytes_predicted"] = w.act_peak_predicted;
  j["activation_bytes_saved_measured"] = w.act_saved_measured;
  j["activation_bytes_saved_predicted"] = w.act_saved_predicted;
  j["step_ms_median"] = w.median_ms;
  j["ms_added"] = w.ms_added;
  const double bpm = w.bytes_per_ms();
  j["bytes_per_ms"] = std::isfinite(bpm) ? nlohmann::json(bpm) : nlohmann::json(nullptr);
  j["items_per_s"] = w.items_per_s;
  j["step_ms"] = w.step_ms;
  j["pareto"] = w.pareto;
  j["suggested"] = suggested;
  return j;
}

}  // namespace

std::string profile_table(const ProfileResult& r) {
  const ProfileRow& b = r.baseline;
  std::string s;
  s += "leantrain profile: " + r.description + "\n";
  s += "device " + r.device.str() + ": " + cpu_note(r) + "\n";
  s += "modules: " + r.modules_note + "; each run built afresh with " +
       (r.options.subsets ? "that combination" : "that module alone") + " checkpointed\n";
  s += "steps: " + std::to_string(r.options.warmup_steps) + " warm-up + " + std::to_string(r.options.timed_steps) +
       " timed per run, step time = median of the timed steps, device synchronised around each\n";
  s += "baseline (no checkpointing): peak allocated " + format_bytes(b.peak_measured) + " (predicted " +
       format_bytes(b.peak_predicted) + "), step " + format_number("%.2f ms", b.median_ms) + ", " +
       format_number("%.0f ", b.items_per_s) + r.unit + " (median of its runs first and last: " +
       format_number("%.2f", r.baseline_first_ms) + format_number(" and %.2f ms)\n", r.baseline_last_ms);
  if (r.drifted())
    s += "warning: the baseline's step time drifted by more than 10% between the first and the last run: the machine\n"
         "  was busy with other work, so the times added are unreliable (the bytes are not affected); run it again\n";
  s += "\n";

  size_t wmod = 6;
  for (const ProfileRow& w : r.rows) wmod = std::max(wmod, w.module.size());
  char line[512];
  std::snprintf(line, sizeof line, "  %-*s  %12s  %12s  %6s  %12s  %10s  %9s  %7s  %10s\n", int(wmod), "module", "saved",
                "predicted", "= plan", "act. saved", "step ms", "+ms", "+%", "MiB per ms");
  s += line;
  bool all_match = b.peak_measured == b.peak_predicted && b.act_peak_measured == b.act_peak_predicted;
  bool any_saved = false;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const ProfileRow& w = r.rows[i];
    const bool match = w.peak_measured == w.peak_predicted && w.act_peak_measured == w.act_peak_predicted;
    all_match = all_match && match;
    any_saved = any_saved || w.saved_measured > 0;
    const double bpm = w.bytes_per_ms();
    std::string ratio = std::isfinite(bpm) ? format_number("%.3f", bpm / double(1 << 20)) : "-";
    std::string diff = match ? "yes" : "NO";
    const char mark = int(i) == r.pick ? '>' : w.pareto ? '*' : ' ';
    std::snprintf(line, sizeof line, "%c %-*s  %12s  %12s  %6s  %12s  %10.2f  %+9.2f  %+6.1f%%  %10s\n", mark,
                  int(wmod), w.module.c_str(), format_bytes(w.saved_measured).c_str(),
                  format_bytes(w.saved_predicted).c_str(), diff.c_str(), format_bytes(w.act_saved_measured).c_str(),
                  w.median_ms, w.ms_added, b.median_ms > 0 ? 100 * w.ms_added / b.median_ms : 0.0,
                  ratio.c_str());
    s += line;
  }
  s += "\n  saved: baseline peak allocated minus this run's; predicted: the same from the meta dry-run; = plan: yes when\n"
       "  the measured peaks (all bytes and activations) equal the predicted ones to the byte; act. saved: the same for\n"
       "  the activation category's peak. * on the Pareto frontier (no row saves as much for less time), > suggested.\n";
  s += all_match ? "prediction: every measured peak equals the planner's, to the byte\n"
                 : "prediction: some measured peaks differ from the planner's (see '= plan'); please report this\n";
  if (r.pick >= 0) {
    const ProfileRow& p = r.rows[size_t(r.pick)];
    RunConfig c = r.config;
    c.checkpoint = parse_checkpoint_flag(p.checkpoint);  // a regex the profile built
    c.steps = RunConfig().steps;
    s += "suggested: " + p.module + ": saves " + format_bytes(p.saved_measured) + " for " +
         format_number("%+.2f ms", p.ms_added) + " a step, the most bytes per ms on the frontier\n  " + command_line(c) + "\n";
  } else {
    s += "suggested: none (no module lowers the peak of this run)\n";
  if (!any_saved)
    s += "note: the peak lies outside the activations (e.g. the optimizer step: parameters + gradients + state), so\n"
         "  checkpointing cannot lower it here; a larger --batch or --seq-len moves it into the activations\n";
  }
  return s;
}

std::string profile_json(const ProfileResult& r) {
  nlohmann::json j;
  j["device"] = r.device.str();
  j["cpu_figures"] = r.cpu();
  j["note"] = cpu_note(r);
  j["model"] = r.description;
  RunConfig c = r.config;
  c.steps = RunConfig().steps;
  j["command"] = command_line(c);
  j["modules"] = r.options.modules;
  j["warmup_steps"] = r.options.warmup_steps;
  j["timed_steps"] = r.options.timed_steps;
  j["unit"] = r.unit;
  j["baseline_first_ms"] = r.baseline_first_ms;
  j["baseline_last_ms"] = r.baseline_last_ms;
  j["timing_drifted"] = r.drifted();
  j["baseline"] = row_json(r.baseline, false);
  j["rows"] = nlohmann::json::array();
  for (size_t i = 0; i < r.rows.size(); ++i) j["rows"].push_back(row_json(r.rows[i], int(i) == r.pick));
  j["suggested"] = r.pick >= 0 ? nlohmann::json(r.rows[size_t(r.pick)].module) : nlohmann::json(nullptr);
  j["seconds"] = r.seconds;
  return j.dump(2) + "\n";
}

std::string profile_svg(const ProfileResult& r) {
  auto [scale, unit] = byte_unit(r);
  const std::string prefix = common_prefix(r);
  ScatterChart c;
  c.title = "Activation checkpointing, one module at a time: memory saved vs step time added";
  c.subtitle = r.description + "\n" + r.device.str() + (r.cpu() ? " (CPU figures)" : "") + " | baseline step " +
               format_number("%.2f ms", r.baseline.median_ms) + ", peak " + format_bytes(r.baseline.peak_measured) +
               (prefix.empty() ? "" : " | labels under '" + prefix + "'") +
               (r.drifted() ? " | WARNING: timing drifted, times unreliable" : "");
  c.x_label = std::string("activation memory saved (") + unit + ", peak allocated)";
  c.y_label = "step time added (ms, median of " + std::to_string(r.options.timed_steps) + ")";
  c.highlight_name = "suggested";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const ProfileRow& w = r.rows[i];
    ScatterPoint p;
    p.x = double(w.saved_measured) / scale;
    p.y = w.ms_added;
    p.label = short_label(w.module, prefix);
    p.tooltip = w.module + ": saves " + format_bytes(w.saved_measured) + " (predicted " +
                format_bytes(w.saved_predicted) + "), " + format_number("%+.2f ms", w.ms_added) +
                " a step; --checkpoint '" + w.checkpoint + "'";
    p.frontier = w.pareto;
    p.highlight = int(i) == r.pick;
    c.points.push_back(p);
  }
  return scatter_svg(c);
}

}  // namespace lt
