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

// Parses argv and runs the chosen command; catches everything and returns the exit code.
int run(int argc, char** argv);

// Binds every RunConfig field to a flag of `cmd`.
void add_train_flags(CLI::App& cmd, RunConfig& cfg);
int run_train(RunConfig cfg);

void add_generate_flags(CLI::App& cmd, GenerateConfig& cfg);
int run_generate(const GenerateConfig& cfg);

// "leantrain: error: <what>: <why> (<fix>)" on one line; returns the exit code to use.
int report(const std::exception& e, std::FILE* err = stderr);
// The same for a CLI11 parse error of `command` ("train", "generate" or "").
int report_parse_error(const CLI::ParseError& e, const std::string& command, std::FILE* err = stderr);

}  // namespace lt::cli
