// Shared by the training-loop tests (run, precision, fused step, checkpointing): a tiny GPT run on
// a generated text file (no data set needed), and a Trainer so tests can reach inside a step.
#pragma once
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "leantrain/train.h"
#include "train/assemble.h"
#include "train/task.h"
#include "train/trainer.h"

namespace lt::test {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("lt-train-test-" + std::to_string(::getpid()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// gpt2-tiny narrowed to dim 32, depth 2: its largest parameters (wte, wpe) are [256, 32].
// Constant lr, no warmup, 4 steps; tests override what they vary.
inline RunConfig tiny_gpt(const std::filesystem::path& dir) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox " + std::to_string(i % 7) + " jumps over the lazy dog\n";
  std::ofstream(dir / "text.txt") << text;
  RunConfig c;
  c.model = "gpt2-tiny";
  c.dim = 32;
  c.depth = 2;
  c.heads = 2;
  c.data = (dir / "text.txt").string();
  c.seq_len = 16;
  c.batch = 8;
  c.steps = 4;
  c.lr = 3e-3;
  c.warmup = 0;
  c.schedule = ScheduleKind::Constant;
  c.eval_batches = 1;
  c.device = "cpu";
  return c;
}

// A run as train() assembles it (train/assemble.h: task, checkpointing, trainer and its hooks),
// started, for tests that look inside a step.
struct TrainerRun {
  std::unique_ptr<Task> task;
  std::unique_ptr<Trainer> trainer;
  explicit TrainerRun(const RunConfig& c) {
    validate(c);
    AssembledRun run = assemble_run(c, Device::cpu());
    task = std::move(run.task);
    trainer = std::move(run.trainer);
    trainer->start();
  }
  Trainer& operator*() { return *trainer; }
  Trainer* operator->() { return trainer.get(); }
};

// Raw bytes of a tensor (a bitwise comparison that also holds for NaN patterns).
inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  std::vector<uint8_t> out(size_t(c.nbytes()));
  std::memcpy(out.data(), c.raw_data(), out.size());
  return out;
}

inline std::vector<std::vector<uint8_t>> bytes_of(const std::vector<Tensor>& ts) {
  std::vector<std::vector<uint8_t>> out;
  for (const Tensor& t : ts) out.push_back(bytes_of(t));
  return out;
}

// What the allocator charges for each tensor of `numel` elements of `bytes_per` bytes, summed.
inline int64_t rounded_bytes(const std::vector<Tensor>& ts, int64_t bytes_per) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += round_allocation(t.numel() * bytes_per);
  return n;
}

inline int64_t category_current(Category c) { return allocator_for(Device::cpu()).stats().category[int(c)].current; }
inline int64_t category_peak(Category c) { return allocator_for(Device::cpu()).stats().category[int(c)].peak; }

}  // namespace lt::test
