// leantrain profile: the SVG scatter writer (ticks, escaping, one element per point, the
// frontier and the highlight), the Pareto frontier and the pick, and a small CPU profile whose
// measured peaks equal the meta prediction to the byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>

#include "io/text_format.h"
#include "leantrain/checkpoint.h"
#include "profile/profile.h"
#include "profile/scatter_svg.h"
#include "leantrain/ops.h"

using namespace lt;

namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST(ScatterSvg, NiceTicksCoverTheRangeInSteppedUnits) {
  auto t = nice_ticks(0, 37.5);
  ASSERT_GE(t.size(), 3u);
  EXPECT_LE(t.front(), 0);
  EXPECT_GE(t.back(), 37.5);
  const double step = t[1] - t[0];
  EXPECT_TRUE(step == 5 || step == 10) << step;
  for (size_t i = 1; i < t.size(); ++i) EXPECT_NEAR(t[i] - t[i - 1], step, 1e-9);

  t = nice_ticks(-3.2, 41);  // negative time added (noise) keeps zero as a tick
  EXPECT_LE(t.front(), -3.2);
  EXPECT_GE(t.back(), 41);
  EXPECT_NE(std::find(t.begin(), t.end(), 0.0), t.end());

  t = nice_ticks(0.002, 0.0071);
  EXPECT_LE(t.front(), 0.002);
  EXPECT_GE(t.back(), 0.0071);
  t = nice_ticks(5, 5);  // a single value still gets an axis
  EXPECT_LT(t.front(), 5);
  EXPECT_GT(t.back(), 5);
}

TEST(ScatterSvg, TickLabelsUseTheDecimalsOfTheStep) {
  EXPECT_EQ(format_tick(250, 50), "250");
  EXPECT_EQ(format_tick(0.5, 0.5), "0.5");
  EXPECT_EQ(format_tick(0.25, 0.05), "0.25");
  EXPECT_EQ(format_tick(-2, 1), "-2");
}

TEST(ScatterSvg, EscapesText) {
  EXPECT_EQ(xml_escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
}

TEST(ScatterSvg, OnePointElementPerPointWithLabelsFrontierAndHighlight) {
  ScatterChart c;
  c.title = "t <1>";
  c.x_label = "memory saved (MiB)";
  c.y_label = "step time added (ms)";
  for (int i = 0; i < 12; ++i) {
    ScatterPoint p;
    p.x = 8.0 + (i % 3) * 0.01;
    p.y = 30 + i;
    p.label = "h." + std::to_string(i) + (i % 2 ? ".attn" : "");
    p.frontier = i == 0;
    c.points.push_back(p);
  }
  c.points.push_back({30.0, 95.0, "all blocks", "", true, false});
  c.points.push_back({2.0, 0.5, "h.0.mlp & co", "full path", true, true});
  const std::string s = scatter_svg(c);
  EXPECT_EQ(s.rfind("<?xml", 0), 0u);
  EXPECT_EQ(count(s, "<circle class=\"point\""), c.points.size());
  EXPECT_EQ(count(s, "<text class=\"label\""), c.points.size());
  EXPECT_EQ(count(s, "<circle class=\"highlight\""), 1u);
  EXPECT_EQ(count(s, "<polyline class=\"frontier\""), 1u);
  EXPECT_NE(s.find("h.0.mlp &amp; co"), std::string::npos);
  EXPECT_NE(s.find("<title>full path</title>"), std::string::npos);
  EXPECT_NE(s.find("t &lt;1&gt;"), std::string::npos);
  EXPECT_NE(s.find("memory saved (MiB)"), std::string::npos);
  EXPECT_GE(count(s, "class=\"xtick\""), 3u);
  EXPECT_GE(count(s, "class=\"ytick\""), 3u);
  // Every coordinate is a finite number: no "nan" or "inf" leaks into the document.
  EXPECT_EQ(s.find("nan"), std::string::npos);
  EXPECT_EQ(s.find("inf\""), std::string::npos);
  // Labels do not overlap here (there is room): their boxes are distinct rows or columns.
  std::regex label_re("<text class=\"label\" x=\"([0-9.]+)\" y=\"([0-9.]+)\"");
  std::vector<std::pair<double, double>> at;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), label_re); it != std::sregex_iterator(); ++it)
    at.push_back({std::stod((*it)[1]), std::stod((*it)[2])});
  for (size_t i = 0; i < at.size(); ++i)
    for (size_t j = i + 1; j < at.size(); ++j)
      EXPECT_FALSE(at[i].first == at[j].first && at[i].second == at[j].second) << i << " " << j;
}

TEST(ScatterSvg, EmptyAndNonFiniteInputsStillDrawAxes) {
  ScatterChart c;
  c.points.push_back({std::nan(""), 1.0, "bad", "", false, false});
  const std::string s = scatter_svg(c);
  EXPECT_EQ(count(s, "<circle class=\"point\""), 0u);
  EXPECT_GE(count(s, "class=\"xtick\""), 2u);
  EXPECT_EQ(s.find("nan"), std::string::npos);
}

TEST(ProfilePick, ParetoFrontMaximisesSavingAndMinimisesTime) {
  //                       a    b    c    d    e(=a)
  std::vector<double> x = {10, 10, 20, 5, 10};
  std::vector<double> y = {5, 7, 30, 6, 5};
  auto f = profile_pareto_front(x, y);
  EXPECT_TRUE(f[0]);   // a
  EXPECT_FALSE(f[1]);  // b: a saves as much for less
  EXPECT_TRUE(f[2]);   // c: saves the most
  EXPECT_FALSE(f[3]);  // d: a saves more for less
  EXPECT_TRUE(f[4]);   // e: equal to a
}

TEST(ProfilePick, BestRatioOnTheFrontierWithANoiseFloor) {
  std::vector<ProfileRow> rows(3);
  rows[0].saved_measured = 8 << 20, rows[0].ms_added = 30, rows[0].pareto = true;
  rows[1].saved_measured = 1 << 20, rows[1].ms_added = -0.2, rows[1].pareto = true;  // noise: counts as the floor
  rows[2].saved_measured = 24 << 20, rows[2].ms_added = 100, rows[2].pareto = true;
  EXPECT_EQ(profile_pick(rows, 5.0), 0);   // 8 MiB / 30 ms beats 1 MiB / 5 ms and 24 MiB / 100 ms
  EXPECT_EQ(profile_pick(rows, 0.05), 1);  // with a tiny floor, the near-free row wins
  rows[0].pareto = false;
  EXPECT_EQ(profile_pick(rows, 5.0), 2);
  for (auto& r : rows) r.saved_measured = 0;
  EXPECT_EQ(profile_pick(rows, 5.0), -1);
}

TEST(ProfilePick, RegexEscapeSelectsExactlyThePath) {
  EXPECT_EQ(nn::checkpoint_regex_for("transformer.h.3"), "transformer\\.h\\.3");
  EXPECT_TRUE(std::regex_match("encoder.layers.encoder_layer_1.mlp", std::regex(nn::checkpoint_regex_for("encoder.layers.encoder_layer_1.mlp"))));
  EXPECT_FALSE(std::regex_match("transformer.h.3x", std::regex(nn::checkpoint_regex_for("transformer.h.3"))));
}

TEST(Profile, CpuPeaksEqualTheMetaPredictionToTheByte) {
  RunConfig c;
  c.model = "gpt2-tiny";
  c.data = "synthetic";
  c.depth = 2;
  c.seq_len = 128;
  c.batch = 4;  // activations make the peak
  c.device = "cpu";
  ProfileOptions o;
  o.warmup_steps = 1;
  o.timed_steps = 1;
  // Memory someone else holds on the device (an earlier test, an embedding program) is not the
  // runs': measured peaks must still equal meta's, which never sees it.
  lt::Tensor outsider = lt::zeros({1 << 20}, lt::DType::F32, lt::Device::cpu());
  ProfileResult r = profile_run(c, o);
  EXPECT_FALSE(r.device.is_cuda());
  ASSERT_EQ(r.rows.size(), 2u * 3 + 1);  // two blocks, each with attention and MLP, then all blocks
  EXPECT_EQ(r.rows[0].module, "transformer.h.0");
  EXPECT_EQ(r.rows[1].module, "transformer.h.0.attn");
  EXPECT_EQ(r.rows[2].module, "transformer.h.0.mlp");
  EXPECT_EQ(r.rows.back().module, "all blocks");
  EXPECT_EQ(r.baseline.peak_measured, r.baseline.peak_predicted);
  for (const ProfileRow& w : r.rows) {
    EXPECT_EQ(w.peak_measured, w.peak_predicted) << w.module;
    EXPECT_EQ(w.saved_measured, w.saved_predicted) << w.module;
    EXPECT_EQ(w.step_ms.size(), 1u);
  }
  EXPECT_GT(r.rows[0].saved_measured, 0);
  EXPECT_GT(r.rows.back().saved_measured, 0);
  // Not ">= block 0's": a block keeps little since it recomputes its norms and GELU, and the last
  // block's recomputation runs at the backward's peak, so checkpointing it can cost a little;
  // "all blocks" is then block 0's saving less that cost.
  EXPECT_GT(r.rows.back().act_saved_measured, 0);
  const std::string svg = profile_svg(r);
  EXPECT_EQ(count(svg, "<circle class=\"point\""), r.rows.size());
  EXPECT_NE(profile_table(r).find("CPU figures"), std::string::npos);
}

TEST(Profile, RegexThatMatchesNothingOrAContainerIsAUsageError) {
  RunConfig c;
  c.model = "gpt2-tiny";
  c.data = "synthetic";
  c.device = "cpu";
  EXPECT_THROW(profile_modules(c, "nothing\\.here"), UsageError);
  EXPECT_THROW(profile_modules(c, "transformer\\.h"), UsageError);  // a ModuleList
  EXPECT_THROW(profile_modules(c, "(["), UsageError);
  EXPECT_EQ(profile_modules(c, "transformer\\.h\\.1\\.mlp").size(), 1u);
  EXPECT_EQ(profile_modules(c, "blocks").size(), 4u);
}
