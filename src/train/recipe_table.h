// The recipe table: one row per RunConfig field — its flag, type, range, help group and text,
// whether a checkpoint keeps it and whether the plan's echoed command repeats it. The command
// line (src/cli/train_command.cpp), the range checks of validate(), the saved run config
// (config_to_json / config_from_json, so trainer_state.json and --metrics-json) and
// command_line() all walk this table; a new flag is one row (docs/decisions.md, "One recipe
// table"). Choices are enums (leantrain/choices.h) parsed here, by name, and nowhere else.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "leantrain/train.h"
#include "train/flag_ranges.h"

namespace lt {

// A field whose type is an enum of leantrain/choices.h, seen through its names.
struct ChoiceMember {
  std::string (*get)(const RunConfig&);
  bool (*set)(RunConfig&, const std::string&);  // false: not one of the names
  std::string (*list)();                        // "none, optimizer or params"
};

using RecipeMember = std::variant<int64_t RunConfig::*, uint64_t RunConfig::*, double RunConfig::*, bool RunConfig::*,
                                  std::string RunConfig::*, nn::CheckpointSpec RunConfig::*, ChoiceMember>;

enum class FieldKind {
  Int,     // a decimal integer checked against `irange`
  Seed,    // a 64-bit unsigned integer
  Real,    // a finite decimal number (checked against `rrange` when set)
  Switch,  // a flag without a value; `negation` ("--no-...") turns it off
  Bool,    // true or false
  Text,    // any string
  Path,    // a non-empty path (an empty one would silently mean "off")
  Bytes,   // a size: 5GB, 2GiB, 123
  Choice,  // one of an enum's names
  Checkpoint,  // a --checkpoint spec (none, blocks, every:K, selective or a regex)
};

// When command_line() repeats a field: never, when it differs from the default, or always.
enum class Echo { Never, IfChanged, Always };

struct RecipeField {
  const char* key;   // the JSON key of the saved run config (the RunConfig member's name)
  const char* flag;  // "--batch"
  FieldKind kind;
  RecipeMember member;
  const char* group;  // the help section: "Model and data", "Optimizer", ...; "" hides it
  std::string help;
  bool saved = true;           // kept in a checkpoint's run config (--resume reads it back)
  Echo echo = Echo::IfChanged;
  const IntRange* irange = nullptr;
  const RealRange* rrange = nullptr;
  const char* negation = nullptr;  // Switch: the flag that turns it off
  // Echoed only when this holds for the run (e.g. --strategy only with 2+ devices); null: always.
  bool (*echo_if)(const RunConfig&) = nullptr;
  // The member's 0 means "not given, choose for me" (--workers), a value the flag itself refuses:
  // validate() then skips the range check for 0.
  bool zero_is_unset = false;
  // A saved field added after checkpoints without it were written: such a config read back takes
  // the default, which is what those runs did (--objective: they were all sft). Other saved
  // fields are required (a missing one is a damaged file).
  bool older_saves_lack = false;
  // The same for a field whose old behaviour is not its default: the value a saved config without
  // it means, as its flag writes it (--packing: older runs concatenated, "concat"; the default is
  // docs). Null: older_saves_lack decides.
  const char* if_missing = nullptr;
};

const std::vector<RecipeField>& recipe_fields();
// The row of a flag ("--offload") or JSON key ("offload"); null when none.
const RecipeField* recipe_field(const std::string& flag_or_key);

// A choice field's value from its name (what the command line and a saved config hold): throws
// UsageError "--offload X | the choices are none, optimizer or params | pass one of them".
void set_choice(const RecipeField& f, RunConfig& c, const std::string& name);
// A --checkpoint spec parsed (syntax only; what it matches is checked on the model). "" is none.
nn::CheckpointSpec parse_checkpoint_flag(const std::string& text);

// The field's value as the command line writes it ("bf16-mixed", "0.001", "true").
std::string field_text(const RecipeField& f, const RunConfig& c);
// The config as one JSON object keyed by the table's keys (choices by name): every field, or
// (saved_only) those a checkpoint keeps, which is config_to_json. indent < 0: one line.
std::string recipe_json(const RunConfig& c, bool saved_only, int indent = -1);
bool field_is_default(const RecipeField& f, const RunConfig& c);

}  // namespace lt
