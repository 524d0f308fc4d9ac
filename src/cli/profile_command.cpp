// `leantrain profile`: every `train` flag that shapes the run (model, data, batch, precision,
// optimizer, device), plus which modules to try, how many steps to time, and the two files.
// Flags of `train` that make no sense here (a fixed --checkpoint, --save, --steps, ...) are
// usage errors rather than silently ignored. Output paths are checked before the first run, so
// a long profile never ends in "cannot write".
#include <cstdio>

#include "cli/cli.h"
#include "io/file_io.h"
#include "profile/profile.h"
#include "train/output_paths.h"

namespace lt::cli {

void add_profile_flags(CLI::App& cmd, RunConfig& c, ProfileFlags& p) {
  add_train_flags(cmd, c);
  p.cmd = &cmd;
  cmd.footer("Example: leantrain profile --model gpt2-tiny --data synthetic --batch 8 --json prof.json --svg prof.svg");
  const char* what = "Profile";
  cmd.add_option("--modules", p.modules,
                 "What to try checkpointing, one module at a time: blocks, sublayers (each block, its attention, its "
                 "MLP) or a regex over module paths")
      ->capture_default_str()->group(what);
  cmd.add_flag("--subsets", p.subsets,
               "Try every combination of the --modules matches checkpointed together (at most 6 modules: 63 runs), "
               "e.g. --modules 'layer[1-4]' --subsets for layer1..layer4 and their subsets")
      ->group(what);
  add_int_flag(cmd, flag_range::warmup_steps, p.warmup, "Untimed optimizer steps before the timed ones, per run")
      ->capture_default_str()->group(what);
  add_int_flag(cmd, flag_range::timed_steps, p.timed, "Timed optimizer steps per run; the step time is their median")
      ->capture_default_str()->group(what);
  cmd.add_option("--json", p.json, "Write every row (bytes saved measured and predicted, ms added) to this JSON file")
      ->group(what);
  cmd.add_option("--svg", p.svg, "Write the memory-saved versus time-added scatter to this SVG file")->group(what);
}

namespace {

// `train` flags that a profile does not use: naming one is a usage error.
constexpr const char* kNotForProfile[] = {"--steps", "--epochs", "--checkpoint", "--resume", "--save", "--save-shard-size", "--stop-at",
                                          "--eval-every", "--eval-batches", "--metrics", "--memory-history",
                                          "--memory-snapshot", "--memory-report", "--log-every"};

void refuse_unused_flags(const ProfileFlags& p) {
  if (!p.cmd) return;
  for (const char* f : kNotForProfile) {
    const CLI::Option* o = p.cmd->get_option_no_throw(f);
    if (!o || o->count() == 0) continue;
    const std::string flag = f;
    std::string fix = "drop " + flag;
    if (flag == "--steps" || flag == "--epochs") fix += "; --warmup-steps and --timed-steps set the steps of each run";
    if (flag == "--checkpoint") fix += "; profile checkpoints each module in turn (--modules chooses which)";
    throw UsageError(flag + " does not apply to 'leantrain profile'",
                     "profile makes short runs of its own and writes only its table, --json and --svg", fix);
  }
}

void write_file(const std::string& path, const std::string& text) {
  io::detail::AtomicFile f(path);
  f.write(text);
  f.commit();
}

}  // namespace

int run_profile(const RunConfig& cfg, const ProfileFlags& p) {
  refuse_unused_flags(p);
  check_output_file("--json", p.json, false);  // before the runs: a long profile never ends in "cannot write"
  check_output_file("--svg", p.svg, false);
  ProfileOptions o;
  o.modules = p.modules;
  o.subsets = p.subsets;
  o.warmup_steps = p.warmup;
  o.timed_steps = p.timed;
  ProfileResult r = profile_run(cfg, o, [](const std::string& line) {
    std::fprintf(stderr, "profile: %s\n", line.c_str());
    std::fflush(stderr);
  });
  std::fputs(profile_table(r).c_str(), stdout);
  if (!p.json.empty()) {
    write_file(p.json, profile_json(r));
    std::printf("json: %s\n", p.json.c_str());
  }
  if (!p.svg.empty()) {
    write_file(p.svg, profile_svg(r));
    std::printf("svg: %s\n", p.svg.c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace lt::cli
