// A few CPU training steps of a tiny GPT with the memory history on, then the memory report, the
// JSON snapshot and the pickle snapshot: what `leantrain train --memory-history --memory-report
// ... --memory-snapshot ...` writes, for the e2e tests (tests/e2e/html_report_chromium.sh,
// tests/e2e/pickle_roundtrip.sh) before and apart from the CLI.
//   usage: memory_report_demo OUT_DIR TEXT_FILE
#include <cstdio>
#include <string>

#include "leantrain/memory_snapshot.h"
#include "leantrain/train.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUT_DIR TEXT_FILE\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  try {
    lt::RunConfig cfg;
    cfg.model = "gpt2-tiny";
    cfg.data = argv[2];
    cfg.device = "cpu";
    cfg.steps = 3;
    cfg.batch = 4;
    cfg.micro_batch = 2;
    cfg.seq_len = 32;
    cfg.eval_batches = 1;
    lt::Allocator& a = lt::allocator_for(lt::Device::cpu());
    a.set_history(true);
    // Snapshots after the last step, while the model and optimizer state are still allocated;
    // the report after the run, when the history holds all of it.
    lt::RunObserver obs;
    obs.on_step = [&](const lt::ProgressInfo& p) {
      if (p.step != p.total_steps) return;
      lt::write_memory_snapshot(a, out + "/memory.json");
      lt::write_memory_snapshot_pickle(a, out + "/memory.pickle");
    };
    lt::train(cfg, obs);
    lt::write_memory_report_html(a, out + "/memory.html", "memory_report_demo: gpt2-tiny, 3 CPU steps");
    std::printf("wrote %s/memory.{html,json,pickle} (%zu events)\n", out.c_str(), a.history().size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_report_demo: %s\n", e.what());
    return 1;
  }
  return 0;
}
