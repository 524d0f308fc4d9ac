// What leantrain writes and what it refuses to overwrite: the output writers (AtomicFile,
// StreamFile), the --save target rule, and the finite-state guard of a save.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/file_io.h"
#include "io/output_target.h"
#include "leantrain/ops.h"
#include "train/atomic_dir.h"
#include "train/checkpoint.h"
#include "train/finite_state.h"
#include "train/output_paths.h"
#include "train_test_util.h"
#include "unit/error_of.h"

using namespace lt;
namespace fs = std::filesystem;
using io::detail::AtomicFile;
using io::detail::Dash;
using io::detail::StreamFile;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void put(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

using lt::test::error_of;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Every entry of `dir`, to show that a refused write left nothing behind.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(OutputFiles, AtomicFileCreatesAndReplacesRegularFiles) {
  test::TempDir tmp;
  const fs::path p = tmp.path / "out.json";
  {
    AtomicFile f(p.string());
    f.write("first");
    f.commit();
  }
  EXPECT_EQ(slurp(p), "first");
  ::chmod(p.c_str(), 0600);
  // A file that happens to have the temp file's name is never truncated (O_EXCL, next name).
  const fs::path squatter = p.string() + ".tmp." + std::to_string(::getpid()) + ".0";
  put(squatter, "not yours");
  {
    AtomicFile f(p.string());
    f.write("second");
    f.commit();
  }
  EXPECT_EQ(slurp(p), "second");
  EXPECT_EQ(slurp(squatter), "not yours");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);  // the replaced file's permissions are kept
  // Not committed: the target is untouched and the temp file is gone.
  { AtomicFile f(p.string()); f.write("never"); }
  EXPECT_EQ(slurp(p), "second");
  EXPECT_EQ(entries(tmp.path), (std::vector<std::string>{"out.json", squatter.filename().string()}));
}

TEST(OutputFiles, AtomicFileWritesThroughASymlinkAndKeepsIt) {
  test::TempDir tmp;
  put(tmp.path / "real.json", "old");
  fs::create_symlink(tmp.path / "real.json", tmp.path / "link.json");
  AtomicFile f((tmp.path / "link.json").string());
  f.write("new");
  f.commit();
  EXPECT_TRUE(fs::is_symlink(tmp.path / "link.json"));
  EXPECT_EQ(slurp(tmp.path / "real.json"), "new");
}

TEST(OutputFiles, NonRegularTargetsAreRefusedAndLeftAlone) {
  test::TempDir tmp;
  const fs::path fifo = tmp.path / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_directory(tmp.path / "dir");
  fs::create_symlink(tmp.path / "nothing", tmp.path / "dangling");
  fs::create_symlink(fifo, tmp.path / "to-fifo");
  const auto before = entries(tmp.path);
  struct Case {
    std::string path, why;
  };
  for (const Case& c : {Case{fifo.string(), "it is a FIFO"}, Case{(tmp.path / "dir").string(), "it is a directory"},
                        Case{(tmp.path / "dangling").string(), "symlink to nothing"},
                        Case{(tmp.path / "to-fifo").string(), "symlink to a FIFO"},
                        Case{(tmp.path / "no/such/out.json").string(), "does not exist"}}) {
    EXPECT_TRUE(contains(error_of([&] { AtomicFile f(c.path); }), c.why)) << c.path;
    EXPECT_TRUE(contains(error_of([&] { StreamFile f(c.path, false); }), c.why)) << c.path;
    EXPECT_FALSE(io::output_target(c.path).ok()) << c.path;
  }
  EXPECT_EQ(entries(tmp.path), before);
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_symlink(tmp.path / "to-fifo"));
  // "-" is stdout only where the caller says so.
  EXPECT_TRUE(contains(error_of([] { AtomicFile f("-"); }), "cannot go to standard output"));
  EXPECT_TRUE(contains(error_of([] { check_output_file("--memory-report", "-", false); }), "cannot write --memory-report -"));
  EXPECT_EQ(error_of([] { check_output_file("--metrics", "-", true); }), "");
}

TEST(OutputFiles, StreamFileAppendsOrStartsAfresh) {
  test::TempDir tmp;
  const fs::path p = tmp.path / "m.jsonl";
  put(p, "old\n");
  {
    StreamFile f(p.string(), true);
    f.write("a\n");
    f.close();
  }
  EXPECT_EQ(slurp(p), "old\na\n");
  {
    StreamFile f(p.string(), false);
    f.write("b\n");
    f.close();
  }
  EXPECT_EQ(slurp(p), "b\n");
  StreamFile none("", false);  // no path: writes nothing
  EXPECT_FALSE(none.is_open());
  none.write("ignored");
  none.close();
}

TEST(OutputFiles, SaveTargetsAreNewEmptyOrLeantrainDirectories) {
  test::TempDir tmp;
  auto why = [&](const std::string& name) { return save_target((tmp.path / name).string()).why; };
  EXPECT_EQ(why("new/deeper/ck"), "");
  fs::create_directory(tmp.path / "empty");
  EXPECT_EQ(why("empty"), "");
  fs::create_directory(tmp.path / "marked");
  put(tmp.path / "marked" / kCheckpointMarker, checkpoint_marker_text(SavedKind::Checkpoint));
  EXPECT_EQ(why("marked"), "");
  fs::create_directory(tmp.path / "old-marker");  // a marker written before its kind line
  put(tmp.path / "old-marker" / kCheckpointMarker, "leantrain-checkpoint-1\nThis directory is a leantrain checkpoint.\n");
  EXPECT_EQ(marker_kind((tmp.path / "old-marker").string()), SavedKind::Checkpoint);
  fs::create_directory(tmp.path / "merged");
  put(tmp.path / "merged" / kCheckpointMarker, checkpoint_marker_text(SavedKind::Model));
  EXPECT_EQ(marker_kind((tmp.path / "merged").string()), SavedKind::Model);
  // A file merely named like the marker makes no directory ours (issue 47).
  for (const char* text : {"", "leantrain-checkpoint-2\n", "hello\nleantrain-checkpoint-1\n", "leantrain-checkpoint-1\nkind: x\n"}) {
    fs::create_directory(tmp.path / "named");
    put(tmp.path / "named" / kCheckpointMarker, text);
    put(tmp.path / "named" / "notes.txt", "precious");
    EXPECT_FALSE(marker_kind((tmp.path / "named").string())) << text;
    EXPECT_TRUE(contains(why("named"), "holds files but no leantrain checkpoint")) << text;
  }
  fs::create_directory(tmp.path / "old-format");  // saved before the marker existed
  put(tmp.path / "old-format" / "trainer_state.json", "{\"format\": \"leantrain-checkpoint-1\", \"step\": 1}");
  EXPECT_EQ(why("old-format"), "");
  EXPECT_TRUE(is_leantrain_checkpoint((tmp.path / "old-format").string()));

  fs::create_directory(tmp.path / "mine");
  put(tmp.path / "mine" / "notes.txt", "precious");
  EXPECT_TRUE(contains(why("mine"), "holds files but no leantrain checkpoint"));
  fs::create_directory(tmp.path / "hf");  // a Hugging Face Trainer's directory is not ours either
  put(tmp.path / "hf" / "trainer_state.json", "{\"global_step\": 10}");
  EXPECT_TRUE(contains(why("hf"), "no leantrain checkpoint"));
  put(tmp.path / "file", "x");
  EXPECT_TRUE(contains(why("file"), "it is a regular file"));
  EXPECT_TRUE(contains(why("file/ck"), "is a regular file, not a directory"));
  EXPECT_TRUE(contains(save_target("-").why, "standard output"));

  // DIR.tmp and DIR.old: only ours (marker) or empty ones may be removed.
  fs::create_directory(tmp.path / "ck.tmp");
  put(tmp.path / "ck.tmp" / "notes.txt", "precious");
  EXPECT_TRUE(contains(why("ck"), "ck.tmp is a directory that holds files but no leantrain checkpoint"));
  put(tmp.path / "ck.tmp" / kCheckpointMarker, checkpoint_marker_text(SavedKind::Checkpoint));  // an interrupted save's
  EXPECT_EQ(why("ck"), "");
  put(tmp.path / "ck.old", "x");
  EXPECT_TRUE(contains(why("ck"), "ck.old is a regular file"));
}

TEST(OutputFiles, StagedDirReplacesOnlyWhatIsOurs) {
  test::TempDir tmp;
  const std::string ck = (tmp.path / "ck").string();
  fs::create_directory(ck + ".tmp");  // an interrupted save, marked as ours
  put(ck + ".tmp/" + kCheckpointMarker, checkpoint_marker_text(SavedKind::Checkpoint));
  put(ck + ".tmp/model.safetensors", "half");
  for (int i = 0; i < 2; ++i) {
    StagedDir s(ck);
    write_text_file(s.path("a.txt"), "round " + std::to_string(i));
    s.commit();
  }
  EXPECT_EQ(slurp(tmp.path / "ck" / "a.txt"), "round 1");
  EXPECT_TRUE(fs::exists(tmp.path / "ck" / kCheckpointMarker));
  EXPECT_EQ(entries(tmp.path), std::vector<std::string>{"ck"});
  // A user's file at DIR.old stops the save before anything is written.
  put(ck + ".old", "precious");
  EXPECT_TRUE(contains(error_of([&] { StagedDir s(ck); }), "ck.old is a regular file"));
  EXPECT_EQ(slurp(ck + ".old"), "precious");
  EXPECT_FALSE(fs::exists(ck + ".tmp"));
}

TEST(OutputFiles, ADivergedStateIsNeverSaved) {
  test::TempDir tmp;
  RunConfig c = test::tiny_gpt(tmp.path);
  test::TrainerRun run(c);
  run->step();
  const std::string ck = (tmp.path / "ck").string();
  save_checkpoint(ck, *run);
  const std::string good = slurp(fs::path(ck) / "model.safetensors");

  Tensor w = run->model().named_parameters().front().second;
  const std::string name = run->model().named_parameters().front().first;
  std::vector<float> v = w.to_float_vector();
  v[3] = std::nanf("");
  copy_(w, from_vector(v, w.shape()));
  EXPECT_EQ(nonfinite_weight(run->model()), "weight '" + name + "' holds NaN at element 3");
  std::string msg;
  try {
    save_checkpoint(ck, *run);
  } catch (const NumericError& e) {
    msg = e.what();
  }
  EXPECT_TRUE(contains(msg, "not saving the checkpoint of step 1")) << msg;
  EXPECT_TRUE(contains(msg, "weight '" + name + "' holds NaN")) << msg;
  EXPECT_EQ(slurp(fs::path(ck) / "model.safetensors"), good);  // the good checkpoint is untouched
  EXPECT_FALSE(fs::exists(ck + ".tmp"));

  // Second moments are squares: a negative one is damage, as is a NaN anywhere in the state.
  auto f32 = [](std::vector<float> v, DType d = DType::F32) { return from_vector(v, {int64_t(v.size())}, d); };
  std::map<std::string, Tensor> state{{"w.exp_avg", f32({0.5f, -1.0f})}, {"w.exp_avg_sq", f32({0.5f, 1.0f})}};
  EXPECT_EQ(bad_optimizer_state(state), "");
  state["w.exp_avg_sq"] = f32({0.5f, -2.0f});
  EXPECT_TRUE(contains(bad_optimizer_state(state), "'w.exp_avg_sq' holds -2 at element 1"));
  state["w.exp_avg_sq"] = f32({0.5f, 1.0f});
  state["w.exp_avg"] = f32({INFINITY, 1.0f}, DType::BF16);
  EXPECT_TRUE(contains(bad_optimizer_state(state), "'w.exp_avg' holds inf at element 0"));
}
