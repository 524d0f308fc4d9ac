// command_line: the `leantrain train` flags that reproduce a config, so the budget search can
// print the run it chose and an OOM can suggest the plan to run. --model (or --config) is always
// written, so the command names its model and can be pasted as is; every other flag only where
// it differs from the default.
#include <charconv>
#include <cstdint>
#include <string>

#include "leantrain/plan.h"
#include "train/recipe_table.h"

namespace lt {

namespace {

std::string quoted(const std::string& s) {
  if (!s.empty() && s.find_first_of(" '\"$\\*?|&;<>()") == std::string::npos) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

// Walks the recipe table (src/train/recipe_table.cpp): each field echoed when it differs from
// the default (or always, --model), switches as the bare flag or its negation.
std::string command_line(const RunConfig& c) {
  std::string s = "leantrain train";
  if (c.model_config.empty()) s += " --model " + quoted(c.model);  // even when it is the default
  else s += " --config " + quoted(c.model_config);
  for (const RecipeField& f : recipe_fields()) {
    if (f.echo != Echo::IfChanged || std::string(f.key) == "model_config") continue;  // written above
    if (field_is_default(f, c) || (f.echo_if && !f.echo_if(c))) continue;
    if (f.kind == FieldKind::Switch) {
      const bool on = c.*std::get<bool RunConfig::*>(f.member);
      if (on) s += std::string(" ") + f.flag;
      else if (f.negation) s += std::string(" ") + f.negation;
      continue;
    }
    s += std::string(" ") + f.flag + " " + quoted(field_text(f, c));
  }
  return s;
}

}  // namespace lt
