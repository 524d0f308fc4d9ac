// The `leantrain` command line: subcommands over the library (train, generate; plan and profile
// will register the same way). Every failure ends as one line on stderr and an exit code:
// 0 ok, 1 runtime error (bad data, bad checkpoint, NaN loss), 2 usage error (bad flag or value).
#pragma once
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "leantrain/train.h"

namespace lt::cli {

inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;

// Parses argv and runs the chosen command; catches everything and returns the exit code. Closes
// stdout at the end: a write to it that failed (full disk) is an error too.
int run(int argc, char** argv);

// Binds every RunConfig field to a flag of `cmd`.
void add_train_flags(CLI::App& cmd, RunConfig& cfg);
int run_train(RunConfig cfg, RunResult* result = nullptr);  // result: filled when non-null

// `plan` (src/cli/plan_command.cpp): the train flags plus the plan's own.
struct PlanFlags {
  std::string device_type = "cuda";
  std::string context;  // --context-bytes; empty: the measured constant
  std::string budget;   // --budget; empty: just plan
  bool json = false;
};
void add_plan_flags(CLI::App& cmd, RunConfig& cfg, PlanFlags& p);
int run_plan(const RunConfig& cfg, const PlanFlags& p);
// train --fit BUDGET and --metrics-json PATH (both handled by app.cpp around run_train).
void add_fit_flag(CLI::App& train, std::string& fit);
int run_train_fit(RunConfig cfg, const std::string& fit, RunResult* result = nullptr);

// `profile` (src/cli/profile_command.cpp): the train flags plus which modules, steps and files.
struct ProfileFlags {
  std::string modules = "sublayers";
  int64_t warmup = 2, timed = 5;
  std::string json, svg;
  CLI::App* cmd = nullptr;  // to tell which train flags were given (those a profile refuses)
};
void add_profile_flags(CLI::App& cmd, RunConfig& cfg, ProfileFlags& p);
int run_profile(const RunConfig& cfg, const ProfileFlags& p);

void add_generate_flags(CLI::App& cmd, GenerateConfig& cfg);
int run_generate(const GenerateConfig& cfg);

// "leantrain: error: <what>: <why> (<fix>)" on one line; returns the exit code to use.
int report(const std::exception& e, std::FILE* err = stderr);
// The same for a CLI11 parse error of `command` ("train", "generate" or "").
int report_parse_error(const CLI::ParseError& e, const std::string& command, std::FILE* err = stderr);

}  // namespace lt::cli
