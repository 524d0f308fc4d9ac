// Builds the command tree and dispatches. --resume parses twice: the checkpoint's saved config
// becomes the defaults, so `leantrain train --resume DIR` continues the same run and any flag
// given again on the command line still wins.
#include "leantrain/memory_snapshot.h"
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>

#include "cli/cli.h"
#include "core/knobs.h"
#include "dist/rank_supervisor.h"
#include "train/job_session.h"
#include "leantrain/plan.h"
#include "models/registry.h"
#include "train/checkpoint.h"
#include "train/output_paths.h"

namespace lt::cli {

namespace {

struct Commands {
  std::unique_ptr<CLI::App> app;
  CLI::App* train = nullptr;
  CLI::App* generate = nullptr;
  CLI::App* plan = nullptr;
  CLI::App* profile = nullptr;
  CLI::App* eval = nullptr;
  CLI::App* merge = nullptr;
  CLI::App* knobs = nullptr;
};

// Flags of train and plan that live outside RunConfig.
struct Extras {
  std::string fit, metrics_json;
  RunConfig pcfg;
  PlanFlags plan;
  RunConfig prof_cfg;
  ProfileFlags profile;
  EvalConfig eval;
  MergeConfig merge;
};

// "GPT-2, ViT, LLaMA, ..." from the model registry, so the help never falls behind a new family.
// A family registered under two model types (Gemma 3's and Qwen3.5's text-only and multimodal
// configs) is named once.
std::string family_names() {
  std::string s;
  std::vector<std::string> seen;
  for (const models::ModelFamily* f : models::model_families()) {
    const std::string name = f->display_name();
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
    seen.push_back(name);
    s += (s.empty() ? "" : ", ") + name;
  }
  return s;
}

Commands make_app(RunConfig& tcfg, GenerateConfig& gcfg, Extras& x) {
  Commands c;
  c.app = std::make_unique<CLI::App>(
      "leantrain trains and fine-tunes models with little memory and says where every byte goes.\n"
      "Model families: " + family_names() + "\n"
      "(`leantrain train --help` lists every preset under --model; a Hugging Face model directory works too).\n"
      "Run 'leantrain train' with no flags for the demo: a small ViT on Fashion-MNIST.",
      "leantrain");
  c.app->require_subcommand(0, 1);
  c.app->set_version_flag("--version", "leantrain 0.1.0");
  c.train = c.app->add_subcommand("train", "Train or fine-tune a model of any family: " + family_names() +
                                               " (default: the ViT demo on Fashion-MNIST)");
  add_train_flags(*c.train, tcfg);
  add_fit_flag(*c.train, x.fit);
  c.train->add_option("--metrics-json", x.metrics_json, "Write the run's measured memory peaks to this JSON file at the end")
      ->group("Evaluation, checkpoints, output");
  c.generate = c.app->add_subcommand("generate", "Sample text from a saved language model (GPT-2, LLaMA/Qwen2/Mistral)");
  add_generate_flags(*c.generate, gcfg);
  c.plan = c.app->add_subcommand("plan", "Predict a run's GPU memory (peaks, categories, total) without a GPU; --budget fits one");
  add_plan_flags(*c.plan, x.pcfg, x.plan);
  c.profile = c.app->add_subcommand(
      "profile", "Measure, module by module, the memory that activation checkpointing saves and the time it adds");
  add_profile_flags(*c.profile, x.prof_cfg, x.profile);
  c.eval = c.app->add_subcommand("eval", "Write a model's logits and loss on inputs from a safetensors file (" +
                                             family_names() + ")");
  add_eval_flags(*c.eval, x.eval);
  c.merge = c.app->add_subcommand("merge", "Fold a LoRA adapter into its base model: a merged Hugging Face model directory");
  add_merge_flags(*c.merge, x.merge);
  c.knobs = c.app->add_subcommand("knobs", "List the LEANTRAIN_* environment knobs: type, default, memory effect, value set now");
  return c;
}

// The subcommand named on the command line, for error messages ("" when none).
std::string command_of(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "train" || a == "generate" || a == "plan" || a == "profile" || a == "eval" || a == "merge" || a == "knobs")
      return a;
    if (a.rfind("-", 0) != 0) return "";
  }
  return "";
}

void write_report(const RunConfig& c) {
  write_memory_report_html(allocator_for(resolve_device(c.device)), c.memory_report, "leantrain train " + c.model);
  std::printf("memory report: %s\n", c.memory_report.c_str());
}

int dispatch(int argc, char** argv) {
  RunConfig tcfg;
  GenerateConfig gcfg;
  Extras x;
  Commands c = make_app(tcfg, gcfg, x);
  try {
    c.app->parse(argc, argv);
    if (c.train->parsed() && !tcfg.resume.empty()) {
      RunConfig base = read_checkpoint_config(tcfg.resume);
      Extras x2;
      Commands again = make_app(base, gcfg, x2);
      again.app->parse(argc, argv);
      base.resume = tcfg.resume;
      // The stored --save names where the original run saved; a copied or moved checkpoint must
      // not write there. A resumed run saves into the directory it resumed from unless --save
      // is given again (docs/decisions.md).
      if (again.train->get_option("--save")->count() == 0) base.save = tcfg.resume;
      tcfg = base;
    }
  } catch (const CLI::Success& e) {  // --help, --version
    return c.app->exit(e);
  } catch (const CLI::ParseError& e) {
    return report_parse_error(e, command_of(argc, argv));
  }
  if (c.knobs->parsed()) {  // lists them even when one is malformed (that is what the listing is for)
    std::fputs(knobs_listing().c_str(), stdout);
    return 0;
  }
  // Every LEANTRAIN_* variable is a declared knob with a well-formed value, before anything runs
  // (a misspelt knob would otherwise be silently ignored).
  check_knob_environment(environ);
  if (c.train->parsed()) {
    // --devices N in a process no launcher started: this process becomes the launcher.
    if (tcfg.devices > 1 && dist::launch_info().world_size == 1) {
      validate(tcfg);
      return launch_local(int(tcfg.devices), tcfg.device, argc, argv);
    }
    check_output_file("--metrics-json", x.metrics_json, true);  // before the run, not after it
    try {
      RunResult result;
      int rc = x.fit.empty() ? run_train(tcfg, &result) : run_train_fit(tcfg, x.fit, &result);
      if (rc == 0 && !x.metrics_json.empty() && dist::launch_info().rank == 0) write_run_memory_json(x.metrics_json, tcfg, result);
      if (!tcfg.memory_report.empty() && dist::launch_info().rank == 0) write_report(tcfg);  // rank 0 writes
      return rc;
    } catch (const OutOfMemoryError& e) {  // name what grew and the plan that fits (docs/memory-model.md)
      if (!tcfg.memory_report.empty() && dist::launch_info().rank == 0) write_report(tcfg);  // the timeline up to the OOM is what helps most
      throw OutOfMemoryError(e.what_part(), oom_guidance(tcfg, e), "");
    }
  }
  if (c.plan->parsed()) return run_plan(x.pcfg, x.plan);
  if (c.profile->parsed()) return run_profile(x.prof_cfg, x.profile);
  if (c.generate->parsed()) return run_generate(gcfg);
  if (c.eval->parsed()) return run_eval(x.eval);
  if (c.merge->parsed()) return run_merge(x.merge);
  std::fputs(c.app->help().c_str(), stdout);
  return 0;
}

// Standard output is a file like any other: a write that failed (a full disk, /dev/full) is an
// error, reported once, after everything else. Closing it here surfaces a failed final flush.
int finish_stdout(int rc) {
  errno = 0;
  const bool failed = std::ferror(stdout) != 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  const bool closed = std::fclose(stdout) == 0;
  if (failed || !flushed || !closed) {
    if (rc != 0) return rc;  // the run's own error was reported already
    std::fprintf(stderr, "leantrain: error: cannot write to standard output: %s (free space where it goes, or redirect it)\n",
                 err != 0 ? std::strerror(err) : !closed ? std::strerror(errno) : "a write to it failed");
    return kExitRuntime;
  }
  return rc;
}

}  // namespace

int run(int argc, char** argv) {
  // A write past the file-size limit (ulimit -f) then fails with EFBIG, which the writers report
  // and clean up after, instead of the signal killing the process mid-save.
  std::signal(SIGXFSZ, SIG_IGN);
  dist::supervise_rank_if_asked();  // a CPU rank under --devices: its parent reports a signal that kills it
  int rc = kExitRuntime;
  try {
    rc = dispatch(argc, argv);
  } catch (const std::exception& e) {
    rc = report(e);
  } catch (...) {
    std::fputs("leantrain: error: internal error: an unknown exception (please report this as a bug)\n", stderr);
  }
  return finish_stdout(rc);
}

}  // namespace lt::cli
