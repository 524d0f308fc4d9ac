// Environment switches (knobs): every LEANTRAIN_* variable leantrain reads, declared once in
// knobs.cpp's table with its type, default, range and what it changes. They are for measuring
// kernels and strategies against each other; what a user needs belongs in a flag (docs/decisions.md
// lists the knobs that should become flags). One parser for all of them:
//   switch   0/1 (also off/on, false/true, no/yes); unset or empty keeps the default
//   integer  a whole number within the knob's range
//   seconds  a positive number
//   choice   one of the listed words
// A value outside that is a UsageError naming the variable. The CLI checks the whole environment
// before any command runs (an unknown LEANTRAIN_* name is an error too, so a misspelt knob never
// goes unnoticed), prints the knobs that differ from their defaults in the run header, and records
// them in --metrics-json; `leantrain knobs` lists the table.
//
// Readers read the environment at each call (tests switch knobs within one process); a kernel's
// caller keeps the value in a function static, so a run never changes its kernels halfway.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lt {

enum class KnobType { Switch, Integer, Choice };
// Whether a knob changes the memory a run uses (Yes: `leantrain plan` reads the same variable, so
// plan and run still agree; Unchecked: a kernel choice whose memory nobody has compared).
enum class KnobMemory { No, Yes, Unchecked };
// Who reads it: the binary (the rest of this list), a build script, or leantrain's own processes.
enum class KnobUse { Run, Script, Internal };

struct Knob {
  const char* name;      // LEANTRAIN_...
  KnobType type;
  const char* fallback;  // the default, as a value of the knob ("1", "25", "600", "compute")
  int64_t lo, hi;        // Integer: the accepted range (inclusive)
  const char* choices;   // Choice: the words, '|'-separated
  KnobMemory memory;
  KnobUse use;
  const char* group;     // "kernels", "distributed", "offload", "debugging", ...
  const char* what;      // what it changes, one line
};

std::span<const Knob> knob_table();
const Knob* find_knob(std::string_view name);  // null when leantrain has no such knob

// The knob's value now (the default when unset or empty). `name` must be in the table (a reader
// of an undeclared knob is a bug: internal error). Throws UsageError on a malformed value.
bool knob_on(const char* name);         // Switch
int64_t knob_int(const char* name);     // Integer
std::string knob_choice(const char* name);  // Choice

// Parses `value` as `k` wants it, in canonical form ("0"/"1", the integer, the number, the word).
// Throws UsageError (what: NAME='value', why, and what to set) when it does not fit.
std::string parse_knob(const Knob& k, std::string_view value);

// Checks every LEANTRAIN_* entry of `env` (NAME=VALUE strings, environ's form): unknown names and
// malformed values throw UsageError. Names of build scripts and internal ones are accepted.
void check_knob_environment(char** env);

// The knobs of the table (Run use) set to something other than their default, canonical values.
std::vector<std::pair<std::string, std::string>> knobs_changed();
// "knobs: LEANTRAIN_GEMM_GELU=0, LEANTRAIN_PEER_CHUNK_MB=32" for a run's header; "" when none.
std::string knobs_header();
// {"LEANTRAIN_GEMM_GELU": "0"} for --metrics-json; {} when none.
std::string knobs_json();
// `leantrain knobs`: the table as text, grouped, with the values set now.
std::string knobs_listing();

}  // namespace lt
