// The `leantrain` command line: subcommands over the library (train, generate; plan and profile
// will register the same way). Every failure ends as one line on stderr and an exit code:
// 0 ok, 1 runtime error (bad data, bad checkpoint, NaN loss), 2 usage error (bad flag or value).
#pragma once
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "leantrain/train.h"
#include "train/eval_inputs.h"
#include "train/flag_ranges.h"
#include "train/lora_merge.h"

namespace lt::cli {

inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;

// Parses argv and runs the chosen command; catches everything and returns the exit code. Closes
// stdout at the end: a write to it that failed (full disk) is an error too.
int run(int argc, char** argv);

// Numeric flags (src/cli/number_flags.cpp): decimal only, checked against the flag's range while
// parsing; a bad value is one UsageError naming the flag, its range and unit.
int64_t parse_int_flag(const IntRange& r, const std::string& text);
double parse_real_flag(const std::string& flag, const std::string& text, const RealRange* r = nullptr);
uint64_t parse_seed_flag(const std::string& flag, const std::string& text);
CLI::Option* add_int_flag(CLI::App& cmd, const IntRange& r, int64_t& target, const std::string& help);
CLI::Option* add_real_flag(CLI::App& cmd, const std::string& flag, double& target, const std::string& help,
                           const RealRange* r = nullptr);
CLI::Option* add_seed_flag(CLI::App& cmd, uint64_t& target, const std::string& help);

// Binds every RunConfig field to a flag of `cmd`.
void add_train_flags(CLI::App& cmd, RunConfig& cfg);
int run_train(RunConfig cfg, RunResult* result = nullptr);  // result: filled when non-null

// `plan` (src/cli/plan_command.cpp): the train flags plus the plan's own.
struct PlanFlags {
  std::string device_type = "cuda";
  std::string context;  // --context-bytes; empty: the measured constant
  std::string nccl;     // --nccl-bytes; empty: the measured constant
  std::string budget;   // --budget; empty: just plan
  std::string maximize; // --maximize seq-len|batch (with --budget); empty: the cheapest-config search
  bool json = false;
  int rank = 0;  // --rank: whose full report (with --devices N)
};
void add_plan_flags(CLI::App& cmd, RunConfig& cfg, PlanFlags& p);
int run_plan(const RunConfig& cfg, const PlanFlags& p);
// train --fit BUDGET and --metrics-json PATH (both handled by app.cpp around run_train).
void add_fit_flag(CLI::App& train, std::string& fit);
int run_train_fit(RunConfig cfg, const std::string& fit, RunResult* result = nullptr);

// `profile` (src/cli/profile_command.cpp): the train flags plus which modules, steps and files.
struct ProfileFlags {
  std::string modules = "sublayers";
  bool subsets = false;
  int64_t warmup = 2, timed = 5;
  std::string json, svg;
  CLI::App* cmd = nullptr;  // to tell which train flags were given (those a profile refuses)
};
void add_profile_flags(CLI::App& cmd, RunConfig& cfg, ProfileFlags& p);
int run_profile(const RunConfig& cfg, const ProfileFlags& p);

void add_generate_flags(CLI::App& cmd, GenerateConfig& cfg);
int run_generate(const GenerateConfig& cfg);

// `eval` (src/cli/eval_command.cpp): logits and loss of a model directory on given inputs.
void add_eval_flags(CLI::App& cmd, EvalConfig& cfg);
int run_eval(const EvalConfig& cfg);

// `merge` (src/cli/merge_command.cpp): a LoRA adapter folded into its base model.
void add_merge_flags(CLI::App& cmd, MergeConfig& cfg);
int run_merge(const MergeConfig& cfg);

// "leantrain: error: <what>: <why> (<fix>)" on one line; returns the exit code to use.
int report(const std::exception& e, std::FILE* err = stderr);
// The same for a CLI11 parse error of `command` ("train", "generate" or "").
int report_parse_error(const CLI::ParseError& e, const std::string& command, std::FILE* err = stderr);

}  // namespace lt::cli
