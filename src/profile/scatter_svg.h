// A self-contained SVG scatter plot (no script, no external font or style sheet): labelled
// points, axes with "nice" ticks (1, 2, 5 x 10^k) and unit titles, an optional frontier drawn
// through the points marked on it, and one highlighted point. Labels are placed greedily so that
// they do not overlap each other or a point; a label moved away from its point gets a leader
// line. `leantrain profile --svg` draws memory saved against time added with it.
#pragma once
#include <string>
#include <vector>

namespace lt {

struct ScatterPoint {
  double x = 0, y = 0;
  std::string label;    // drawn beside the point
  std::string tooltip;  // the point's <title> (hover text); the label when empty
  bool frontier = false;   // joined by the frontier line (in order of x)
  bool highlight = false;  // ringed, and named in the legend
};

struct ScatterChart {
  std::string title, subtitle;
  std::string x_label, y_label;  // with their units, e.g. "memory saved (MiB)"
  std::string frontier_name = "Pareto frontier";
  std::string highlight_name = "suggested";
  std::vector<ScatterPoint> points;
  int width = 960, height = 640;
};

// Tick values covering [lo, hi] at a step of 1, 2 or 5 x 10^k, about `target` of them; the
// first tick is <= lo and the last >= hi. lo == hi widens the range around it.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);
// A tick value with as many decimals as the step between ticks needs ("0.5", "250", "-2").
std::string format_tick(double v, double step);

std::string scatter_svg(const ScatterChart& chart);

}  // namespace lt
