// The scatter as SVG text. Coordinates are written with one decimal; text is escaped; every
// style is an attribute, so the file renders the same in a browser, an image viewer or a
// document, and parses as plain XML.
#include "profile/scatter_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "io/text_format.h"

namespace lt {

namespace {

std::string n1(double v) { return format_number("%.1f", v); }

struct Rect {
  double x0, y0, x1, y1;
  bool overlaps(const Rect& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};

constexpr double kFont = 11;        // label font size, px
constexpr double kCharW = 6.4;      // average glyph width at kFont (sans-serif), px
constexpr double kLineH = 13;       // label line height, px
constexpr double kRadius = 4.5;     // point radius, px

double text_width(const std::string& s, double font = kFont) { return double(s.size()) * kCharW * font / kFont; }

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.5;
    lo -= pad, hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  const double first = std::floor(lo / step + 1e-9) * step, last = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> t;
  for (int i = 0; first + i * step <= last + step * 1e-6 && i < 1000; ++i) {
    double v = first + i * step;
    t.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);  // no "-0"
  }
  return t;
}

std::string format_tick(double v, double step) {
  int decimals = step > 0 ? std::max(0, int(-std::floor(std::log10(step) + 1e-9))) : 0;
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", std::min(decimals, 12), v);
  return b;
}

std::string scatter_svg(const ScatterChart& c) {
  const double W = c.width, H = c.height;
  // The subtitle may hold several lines ('\n').
  std::vector<std::string> sub;
  for (size_t p = 0; !c.subtitle.empty() && p <= c.subtitle.size();) {
    size_t q = c.subtitle.find('\n', p);
    if (q == std::string::npos) q = c.subtitle.size();
    sub.push_back(c.subtitle.substr(p, q - p));
    p = q + 1;
  }
  const double left = 84, right = 40, top = 64 + 17 * double(sub.size()), bottom = 64;
  const double px0 = left, px1 = W - right, py0 = top, py1 = H - bottom;  // plot area

  // Both axes start at zero or below, so "saves nothing" and "costs nothing" are visible.
  double xlo = 0, xhi = 0, ylo = 0, yhi = 0;
  for (const ScatterPoint& p : c.points) {
    if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
    xlo = std::min(xlo, p.x), xhi = std::max(xhi, p.x);
    ylo = std::min(ylo, p.y), yhi = std::max(yhi, p.y);
  }
  const std::vector<double> xt = nice_ticks(xlo, xhi), yt = nice_ticks(ylo, yhi);
  const double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  auto sx = [&](double v) { return px0 + (v - x0) / (x1 - x0) * (px1 - px0); };
  auto sy = [&](double v) { return py1 - (v - y0) / (y1 - y0) * (py1 - py0); };
  auto finite = [](const ScatterPoint& p) { return std::isfinite(p.x) && std::isfinite(p.y); };

  std::string s;
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + n1(W) + "\" height=\"" + n1(H) + "\" viewBox=\"0 0 " +
       n1(W) + " " + n1(H) + "\" font-family=\"Helvetica, Arial, sans-serif\">\n";
  s += "<rect x=\"0\" y=\"0\" width=\"" + n1(W) + "\" height=\"" + n1(H) + "\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"" + n1(px0) + "\" y=\"26\" font-size=\"17\" font-weight=\"bold\" fill=\"#111\">" + xml_escape(c.title) +
       "</text>\n";
  for (size_t i = 0; i < sub.size(); ++i)
    s += "<text x=\"" + n1(px0) + "\" y=\"" + n1(46 + 17 * double(i)) + "\" font-size=\"12\" fill=\"#444\">" +
         xml_escape(sub[i]) + "</text>\n";

  // Grid, ticks and tick labels.
  s += "<g class=\"axes\" font-size=\"11\" fill=\"#333\">\n";
  for (double v : xt) {
    const double X = sx(v);
    s += "<line x1=\"" + n1(X) + "\" y1=\"" + n1(py0) + "\" x2=\"" + n1(X) + "\" y2=\"" + n1(py1) +
         "\" stroke=\"#e6e6e6\"/>\n";
    s += "<line x1=\"" + n1(X) + "\" y1=\"" + n1(py1) + "\" x2=\"" + n1(X) + "\" y2=\"" + n1(py1 + 5) +
         "\" stroke=\"#333\"/>\n";
    s += "<text class=\"xtick\" x=\"" + n1(X) + "\" y=\"" + n1(py1 + 18) + "\" text-anchor=\"middle\">" +
         format_tick(v, xstep) + "</text>\n";
  }
  for (double v : yt) {
    const double Y = sy(v);
    s += "<line x1=\"" + n1(px0) + "\" y1=\"" + n1(Y) + "\" x2=\"" + n1(px1) + "\" y2=\"" + n1(Y) +
         "\" stroke=\"" + (v == 0 ? "#999999" : "#e6e6e6") + "\"/>\n";
    s += "<line x1=\"" + n1(px0 - 5) + "\" y1=\"" + n1(Y) + "\" x2=\"" + n1(px0) + "\" y2=\"" + n1(Y) +
         "\" stroke=\"#333\"/>\n";
    s += "<text class=\"ytick\" x=\"" + n1(px0 - 8) + "\" y=\"" + n1(Y + 4) + "\" text-anchor=\"end\">" +
         format_tick(v, ystep) + "</text>\n";
  }
  s += "<rect x=\"" + n1(px0) + "\" y=\"" + n1(py0) + "\" width=\"" + n1(px1 - px0) + "\" height=\"" + n1(py1 - py0) +
       "\" fill=\"none\" stroke=\"#333\"/>\n";
  s += "<text class=\"xlabel\" x=\"" + n1((px0 + px1) / 2) + "\" y=\"" + n1(H - 18) +
       "\" font-size=\"13\" text-anchor=\"middle\">" + xml_escape(c.x_label) + "</text>\n";
  s += "<text class=\"ylabel\" transform=\"translate(20 " + n1((py0 + py1) / 2) +
       ") rotate(-90)\" font-size=\"13\" text-anchor=\"middle\">" + xml_escape(c.y_label) + "</text>\n";
  s += "</g>\n";

  // The frontier, in order of x.
  std::vector<const ScatterPoint*> front;
  for (const ScatterPoint& p : c.points)
    if (p.frontier && finite(p)) front.push_back(&p);
  std::stable_sort(front.begin(), front.end(), [](auto* a, auto* b) { return a->x < b->x || (a->x == b->x && a->y < b->y); });
  if (front.size() >= 2) {
    s += "<polyline class=\"frontier\" fill=\"none\" stroke=\"#d95f02\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\" points=\"";
    for (size_t i = 0; i < front.size(); ++i) s += (i ? " " : "") + n1(sx(front[i]->x)) + "," + n1(sy(front[i]->y));
    s += "\"/>\n";
  }

  // Points, then labels placed around them.
  std::vector<Rect> taken;
  for (const ScatterPoint& p : c.points) {
    const double r = p.highlight ? 12 : kRadius;  // the ring around a highlighted point
    if (finite(p)) taken.push_back({sx(p.x) - r, sy(p.y) - r, sx(p.x) + r, sy(p.y) + r});
  }
  s += "<g class=\"points\">\n";
  for (const ScatterPoint& p : c.points) {
    if (!finite(p)) continue;
    const std::string fill = p.highlight ? "#1b9e77" : p.frontier ? "#d95f02" : "#4a6fa5";
    s += "<circle class=\"point\" cx=\"" + n1(sx(p.x)) + "\" cy=\"" + n1(sy(p.y)) + "\" r=\"" + n1(kRadius) +
         "\" fill=\"" + fill + "\" fill-opacity=\"0.85\" data-label=\"" + xml_escape(p.label) + "\"><title>" +
         xml_escape(p.tooltip.empty() ? p.label : p.tooltip) + "</title></circle>\n";
    if (p.highlight)
      s += "<circle class=\"highlight\" cx=\"" + n1(sx(p.x)) + "\" cy=\"" + n1(sy(p.y)) +
           "\" r=\"10\" fill=\"none\" stroke=\"#1b9e77\" stroke-width=\"2.5\"/>\n";
  }
  s += "</g>\n";

  // Highlighted and frontier labels get the best places, then the others from left to right.
  std::vector<size_t> order;
  for (size_t i = 0; i < c.points.size(); ++i)
    if (finite(c.points[i])) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    auto rank = [&](const ScatterPoint& p) { return p.highlight ? 0 : p.frontier ? 1 : 2; };
    const ScatterPoint &pa = c.points[a], &pb = c.points[b];
    if (rank(pa) != rank(pb)) return rank(pa) < rank(pb);
    return pa.x < pb.x;
  });
  s += "<g class=\"labels\" font-size=\"" + n1(kFont) + "\" fill=\"#222\">\n";
  const Rect area{px0 + 1, py0 + 1, px1 - 1, py1 - 1};
  for (size_t i : order) {
    const ScatterPoint& p = c.points[i];
    const double X = sx(p.x), Y = sy(p.y), w = text_width(p.label), gap = p.highlight ? 14 : 7;
    // Candidate boxes: right, left, above, below, then further up and down on either side.
    std::vector<std::pair<double, double>> cand = {{X + gap, Y - kLineH / 2}, {X - gap - w, Y - kLineH / 2},
                                                   {X - w / 2, Y - gap - kLineH}, {X - w / 2, Y + gap}};
    for (int k = 1; k <= 12; ++k)
      for (int sign : {-1, 1}) {
        cand.push_back({X + gap, Y - kLineH / 2 + sign * k * kLineH});
        cand.push_back({X - gap - w, Y - kLineH / 2 + sign * k * kLineH});
      }
    size_t chosen = 0;
    bool found = false;
    for (size_t k = 0; k < cand.size() && !found; ++k) {
      Rect r{cand[k].first, cand[k].second, cand[k].first + w, cand[k].second + kLineH};
      if (r.x0 < area.x0 || r.x1 > area.x1 || r.y0 < area.y0 || r.y1 > area.y1) continue;
      if (std::any_of(taken.begin(), taken.end(), [&](const Rect& t) { return t.overlaps(r); })) continue;
      chosen = k, found = true;
    }
    if (!found) {  // crowded: keep it inside the plot, overlapping
      chosen = X + gap + w <= area.x1 ? 0 : 1;
    }
    double lx = std::clamp(cand[chosen].first, area.x0, std::max(area.x0, area.x1 - w));
    double ly = std::clamp(cand[chosen].second, area.y0, area.y1 - kLineH);
    taken.push_back({lx, ly, lx + w, ly + kLineH});
    if (chosen >= 4) {  // moved off its point: a leader line to the nearer end of the label
      const double ex = lx > X ? lx - 1 : lx + w + 1;
      s += "<line x1=\"" + n1(X) + "\" y1=\"" + n1(Y) + "\" x2=\"" + n1(ex) + "\" y2=\"" + n1(ly + kLineH / 2) +
           "\" stroke=\"#aaaaaa\" stroke-width=\"0.7\"/>\n";
    }
    s += "<text class=\"label\" x=\"" + n1(lx) + "\" y=\"" + n1(ly + kLineH - 3) + "\"" +
         (p.highlight ? " font-weight=\"bold\" fill=\"#0f6b50\"" : "") + ">" + xml_escape(p.label) + "</text>\n";
  }
  s += "</g>\n";

  // Legend: one row between the titles and the plot, so it hides no point.
  std::vector<std::pair<std::string, std::string>> legend = {{"#4a6fa5", "module"}};
  if (!front.empty()) legend.push_back({"#d95f02", c.frontier_name});
  const ScatterPoint* hl = nullptr;
  for (const ScatterPoint& p : c.points)
    if (p.highlight && finite(p)) hl = &p;
  if (hl) legend.push_back({"#1b9e77", c.highlight_name + ": " + hl->label});
  s += "<g class=\"legend\" font-size=\"" + n1(kFont) + "\" fill=\"#222\">\n";
  double lx = px0;
  const double ly = py0 - 12;
  for (size_t i = 0; i < legend.size(); ++i) {
    if (i == 1 && !front.empty())
      s += "<line x1=\"" + n1(lx) + "\" y1=\"" + n1(ly) + "\" x2=\"" + n1(lx + 18) + "\" y2=\"" + n1(ly) +
           "\" stroke=\"#d95f02\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n";
    else
      s += "<rect x=\"" + n1(lx + 4) + "\" y=\"" + n1(ly - 4.5) + "\" width=\"9\" height=\"9\" rx=\"4.5\" fill=\"" +
           legend[i].first + "\"/>\n";
    s += "<text x=\"" + n1(lx + 24) + "\" y=\"" + n1(ly + 4) + "\">" + xml_escape(legend[i].second) + "</text>\n";
    lx += 24 + text_width(legend[i].second) + 22;
  }
  s += "</g>\n</svg>\n";
  return s;
}

}  // namespace lt
