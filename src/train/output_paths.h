// Before a run: every path it will write is checked, so a path that cannot be written (or that
// holds something leantrain must not replace) is a usage error at once, not a failure after hours
// of training. The writers check again when they write (io/file_io.h, train/atomic_dir.h).
#pragma once
#include <string>

#include "leantrain/train.h"

namespace lt {

// An output file named by `flag`; "-" (standard output) is accepted when `dash_is_stdout`.
// Throws UsageError("cannot write FLAG PATH", why, fix).
void check_output_file(const std::string& flag, const std::string& path, bool dash_is_stdout);
// --save DIR (see train/atomic_dir.h); throws UsageError.
void check_save_dir(const std::string& dir);
// --metrics, --memory-snapshot (and its .pickle), --memory-report and --save of `c`.
void check_run_outputs(const RunConfig& c);

}  // namespace lt
