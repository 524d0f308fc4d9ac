// `leantrain train`: one flag per RunConfig field, then the run with its progress, final metrics
// and the memory table. The defaults are the demo (a small ViT on Fashion-MNIST).
#include <charconv>

#include "cli/cli.h"
#include "train/job_session.h"
#include "leantrain/data.h"
#include "leantrain/plan.h"
#include "leantrain/models.h"
#include "train/progress.h"
#include "train/recipe_table.h"

namespace lt::cli {

namespace {

// A path flag's default is "" (off); given as "" it would silently mean off too (--save "" saved
// nothing), so an empty value is refused.
CLI::Option* path_flag(CLI::Option* o, const std::string& flag) {
  return o->each([flag](const std::string& v) {
    if (v.empty())
      throw UsageError(flag + " ''", "the path is empty, which would quietly turn " + flag + " off",
                       "pass a path, or leave " + flag + " out");
  });
}

}  // namespace

// One flag per row of the recipe table (src/train/recipe_table.cpp), parsed by its kind.
void add_train_flags(CLI::App& cmd, RunConfig& c) {
  cmd.footer("Example: leantrain train --model gpt2-tiny --data fortunes --steps 200 --lr 3e-4 --save runs/gpt");
  static const RunConfig defaults;
  for (const RecipeField& f : recipe_fields()) {
    const std::string flag = f.flag;
    CLI::Option* o = nullptr;
    switch (f.kind) {
      case FieldKind::Int: {
        int64_t& v = c.*std::get<int64_t RunConfig::*>(f.member);
        if (flag == "--workers") {  // 0 is RunConfig's "auto"; the flag itself takes 1 or more
          o = cmd.add_option_function<std::string>(
                     flag,
                     [&v, r = *f.irange](const std::string& text) {
                       int64_t n = 0;
                       auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
                       if (ec == std::errc() && end == text.data() + text.size() && n < 1)
                         throw UsageError("--workers " + std::to_string(n), "it counts the threads that build batches",
                                          "pass --workers 1 or more; without it, this machine uses " +
                                              std::to_string(default_loader_workers()));
                       v = parse_int_flag(r, text);
                     },
                     f.help)
                  ->type_name("INT");
        } else {
          o = add_int_flag(cmd, *f.irange, v, f.help);
        }
        break;
      }
      case FieldKind::Seed: o = add_seed_flag(cmd, c.*std::get<uint64_t RunConfig::*>(f.member), f.help); break;
      case FieldKind::Real: o = add_real_flag(cmd, flag, c.*std::get<double RunConfig::*>(f.member), f.help, f.rrange); break;
      case FieldKind::Switch: {
        bool& v = c.*std::get<bool RunConfig::*>(f.member);
        o = cmd.add_flag(f.negation ? flag + ",!" + f.negation : flag, v, f.help);
        break;
      }
      case FieldKind::Bool: o = cmd.add_option(flag, c.*std::get<bool RunConfig::*>(f.member), f.help); break;
      case FieldKind::Text: o = cmd.add_option(flag, c.*std::get<std::string RunConfig::*>(f.member), f.help); break;
      case FieldKind::Path: o = path_flag(cmd.add_option(flag, c.*std::get<std::string RunConfig::*>(f.member), f.help), flag); break;
      case FieldKind::Bytes: {
        int64_t& v = c.*std::get<int64_t RunConfig::*>(f.member);
        o = cmd.add_option_function<std::string>(flag, [&v, flag](const std::string& text) { v = parse_bytes(text, flag); },
                                                 f.help)
                ->type_name("SIZE");
        break;
      }
      case FieldKind::Choice:
        o = cmd.add_option_function<std::string>(flag, [&c, &f](const std::string& text) { set_choice(f, c, text); }, f.help)
                ->type_name(std::get<ChoiceMember>(f.member).list());
        break;
      case FieldKind::Checkpoint: {
        nn::CheckpointSpec& v = c.*std::get<nn::CheckpointSpec RunConfig::*>(f.member);
        o = cmd.add_option_function<std::string>(flag, [&v](const std::string& text) { v = parse_checkpoint_flag(text); },
                                                 f.help)
                ->type_name("SPEC");
        break;
      }
    }
    if (f.kind == FieldKind::Int || f.kind == FieldKind::Real || f.kind == FieldKind::Seed) o->capture_default_str();
    else if (f.kind == FieldKind::Bytes && defaults.*std::get<int64_t RunConfig::*>(f.member) > 0)
      o->default_str(format_bytes(defaults.*std::get<int64_t RunConfig::*>(f.member)));
    else if (f.kind != FieldKind::Switch && f.kind != FieldKind::Path && f.kind != FieldKind::Bytes &&
             !field_text(f, defaults).empty())
      o->default_str(field_text(f, defaults));
    o->group(f.group);
  }
}

int run_train(RunConfig cfg, RunResult* result) {
  validate(cfg);
  JobSession session(cfg);  // joins an mpirun / torchrun / SLURM job; ranks > 0 stay quiet
  std::FILE* out = stdout;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet(nullptr, &std::fclose);
  if (session.rank() != 0) quiet.reset(std::fopen("/dev/null", "w")), out = quiet ? quiet.get() : stdout;
  ProgressPrinter printer(out, out == stdout && is_terminal(stdout), cfg.log_every);
  RunObserver obs;
  obs.on_message = [&](const std::string& s) { printer.message(s); };
  obs.on_step = [&](const ProgressInfo& p) { printer.step(p); };
  obs.on_eval = [&](const EvalInfo& e) { printer.eval(e); };
  obs.on_save = [&](const std::string& dir, int64_t step) {
    printer.message("saved checkpoint " + dir + " (step " + std::to_string(step) + ")");
  };
  if (session.size() > 1)
    printer.message("rank 0 of " + std::to_string(session.size()) + ", strategy " + name_of(cfg.strategy) + ": each rank trains on " +
                    std::to_string(cfg.batch / session.size()) + " of the " + std::to_string(cfg.batch) +
                    " samples of every batch");
  RunResult r = train(cfg, obs);
  printer.finish();
  if (session.rank() != 0) {
    if (result) *result = std::move(r);
    return 0;
  }

  std::printf("\nfinal: steps %lld | train loss %.4f", (long long)r.steps, r.final_loss);
  if (r.eval) {
    if (r.eval->accuracy) std::printf(" | test loss %.4f | test accuracy %.2f%%", r.eval->loss, 100.0 * *r.eval->accuracy);
    else std::printf(" | validation loss %.4f", r.eval->loss);
  }
  std::printf(" | time %s\n\n", format_duration(r.seconds).c_str());
  std::fputs(memory_summary(r.device, r.memory, r.pinned_host, &r.disk).c_str(), stdout);
  std::fflush(stdout);
  if (result) *result = std::move(r);
  return 0;
}

}  // namespace lt::cli
