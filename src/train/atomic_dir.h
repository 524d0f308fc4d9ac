// Atomic replacement of a checkpoint directory. Files are written into DIR.tmp; commit() then
// renames DIR -> DIR.old, DIR.tmp -> DIR and removes DIR.old. A crash at any point leaves a
// complete checkpoint under DIR or DIR.old (and read_text_file's error says so).
//
// What a save may replace (docs/user-guide.md, "What leantrain writes and what it refuses to
// overwrite"): DIR, DIR.tmp and DIR.old each only when it is missing, an empty directory, or a
// leantrain checkpoint. A checkpoint is recognised by its marker file LEANTRAIN_CHECKPOINT, written
// first so that an interrupted DIR.tmp is recognised too, or (checkpoints saved before the marker
// existed) by a trainer_state.json with the leantrain format. The marker's first line is the
// format and its second says what the directory holds; a file that is merely named like it (empty,
// or anything else) makes no directory ours. Markers written before the kind line are checkpoints. A user's directory, a regular file,
// a device node or a FIFO at any of the three paths is refused before anything is written.
#pragma once
#include <optional>
#include <string>

namespace lt {

inline constexpr const char* kCheckpointMarker = "LEANTRAIN_CHECKPOINT";
inline constexpr const char* kCheckpointFormat = "leantrain-checkpoint-1";

// What a directory leantrain wrote holds: a training checkpoint (--save), or a model alone
// (`merge`'s output: a Hugging Face model directory, with no trainer_state.json).
enum class SavedKind { Checkpoint, Model };
// The marker's text for a directory of that kind.
std::string checkpoint_marker_text(SavedKind kind);
// The kind `dir`'s marker names; nullopt when it has no marker, or one that is not leantrain's.
std::optional<SavedKind> marker_kind(const std::string& dir);

// Whether `dir` is a directory holding a leantrain checkpoint (complete or being written).
bool is_leantrain_checkpoint(const std::string& dir);

// Where a save to `dir` goes, or why it cannot: `dir` with trailing slashes removed, a symlink to
// a directory followed, an existing directory made absolute.
struct SaveTarget {
  std::string dir;
  std::string why, fix;  // why is empty when the save can go ahead
  bool ok() const { return why.empty(); }
};
SaveTarget save_target(const std::string& dir);

class StagedDir {
 public:
  // Checks the target (an lt::Error saying why when it cannot be written), then creates DIR.tmp
  // with the marker in it, and DIR's parents if needed.
  explicit StagedDir(const std::string& dir, SavedKind kind = SavedKind::Checkpoint);
  ~StagedDir();  // removes DIR.tmp unless committed
  std::string path(const std::string& file) const { return tmp_ + "/" + file; }
  const std::string& dir() const { return tmp_; }  // DIR.tmp, where the files go
  void commit();

 private:
  std::string given_, dir_, tmp_;
  bool committed_ = false;
};

// Writes a whole file and flushes it to disk (used inside a StagedDir).
void write_text_file(const std::string& path, const std::string& text);
// Reads a checkpoint file; a clear lt::Error when the directory or the file is missing.
std::string read_text_file(const std::string& dir, const std::string& file);
// Throws a clear lt::Error unless `dir` looks like a checkpoint directory.
void check_checkpoint_dir(const std::string& dir);

}  // namespace lt
