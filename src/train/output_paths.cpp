#include "train/output_paths.h"

#include "io/output_target.h"
#include "leantrain/memory_snapshot.h"
#include "train/atomic_dir.h"

namespace lt {

void check_output_file(const std::string& flag, const std::string& path, bool dash_is_stdout) {
  if (path.empty()) return;
  if (path == "-") {
    if (dash_is_stdout) return;
    throw UsageError("cannot write " + flag + " -", "this output cannot go to standard output",
                     "pass a file path; only --metrics and --metrics-json take '-'");
  }
  io::OutputTarget t = io::output_target(path);
  if (!t.ok()) throw UsageError("cannot write " + flag + " " + path, t.why, t.fix);
}

void check_save_dir(const std::string& dir) {
  if (dir.empty()) return;
  SaveTarget t = save_target(dir);
  if (!t.ok()) throw UsageError("cannot save checkpoints to --save " + dir, t.why, t.fix);
}

void check_run_outputs(const RunConfig& c) {
  check_output_file("--metrics", c.metrics, true);
  check_output_file("--memory-report", c.memory_report, false);
  check_output_file("--memory-snapshot", c.memory_snapshot, false);
  if (!c.memory_snapshot.empty()) check_output_file("--memory-snapshot", pickle_path_for(c.memory_snapshot), false);
  check_save_dir(c.save);
}

}  // namespace lt
