// Builds the command tree and dispatches. --resume parses twice: the checkpoint's saved config
// becomes the defaults, so `leantrain train --resume DIR` continues the same run and any flag
// given again on the command line still wins.
#include <memory>

#include "cli/cli.h"
#include "train/checkpoint.h"

namespace lt::cli {

namespace {

struct Commands {
  std::unique_ptr<CLI::App> app;
  CLI::App* train = nullptr;
  CLI::App* generate = nullptr;
};

Commands make_app(RunConfig& tcfg, GenerateConfig& gcfg) {
  Commands c;
  c.app = std::make_unique<CLI::App>(
      "leantrain trains transformers (ViT, GPT-2) with little memory and says where every byte goes.\n"
      "Run 'leantrain train' with no flags for the demo: a small ViT on Fashion-MNIST.",
      "leantrain");
  c.app->require_subcommand(0, 1);
  c.app->set_version_flag("--version", "leantrain 0.1.0");
  c.train = c.app->add_subcommand("train", "Train a model (default: the ViT demo on Fashion-MNIST)");
  add_train_flags(*c.train, tcfg);
  c.generate = c.app->add_subcommand("generate", "Sample text from a saved GPT checkpoint");
  add_generate_flags(*c.generate, gcfg);
  // `plan` and `profile` will be added here the same way: flags bound to a config, one runner.
  return c;
}

// The subcommand named on the command line, for error messages ("" when none).
std::string command_of(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "train" || a == "generate") return a;
    if (a.rfind("-", 0) != 0) return "";
  }
  return "";
}

int dispatch(int argc, char** argv) {
  RunConfig tcfg;
  GenerateConfig gcfg;
  Commands c = make_app(tcfg, gcfg);
  try {
    c.app->parse(argc, argv);
    if (c.train->parsed() && !tcfg.resume.empty()) {
      RunConfig base = read_checkpoint_config(tcfg.resume);
      Commands again = make_app(base, gcfg);
      again.app->parse(argc, argv);
      base.resume = tcfg.resume;
      tcfg = base;
    }
  } catch (const CLI::Success& e) {  // --help, --version
    return c.app->exit(e);
  } catch (const CLI::ParseError& e) {
    return report_parse_error(e, command_of(argc, argv));
  }
  if (c.train->parsed()) return run_train(tcfg);
  if (c.generate->parsed()) return run_generate(gcfg);
  std::fputs(c.app->help().c_str(), stdout);
  return 0;
}

}  // namespace

int run(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const std::exception& e) {
    return report(e);
  } catch (...) {
    std::fputs("leantrain: error: internal error: an unknown exception (please report this as a bug)\n", stderr);
    return kExitRuntime;
  }
}

}  // namespace lt::cli
