// `leantrain train`: one flag per RunConfig field, then the run with its progress, final metrics
// and the memory table. The defaults are the demo (a small ViT on Fashion-MNIST).
#include <charconv>

#include "cli/cli.h"
#include "dist/session.h"
#include "leantrain/data.h"
#include "leantrain/plan.h"
#include "leantrain/models.h"
#include "train/progress.h"

namespace lt::cli {

namespace {

// A path flag's default is "" (off); given as "" it would silently mean off too (--save "" saved
// nothing), so an empty value is refused.
CLI::Option* path_flag(CLI::Option* o, const std::string& flag) {
  return o->each([flag](const std::string& v) {
    if (v.empty())
      throw UsageError(flag + " ''", "the path is empty, which would quietly turn " + flag + " off",
                       "pass a path, or leave " + flag + " out");
  });
}

}  // namespace

void add_train_flags(CLI::App& cmd, RunConfig& c) {
  cmd.footer("Example: leantrain train --model gpt2-tiny --data fortunes --steps 200 --lr 3e-4 --save runs/gpt");
  const char* what = "Model and data";
  std::string presets;
  for (const std::string& p : models::preset_names()) presets += (presets.empty() ? "" : ", ") + p;
  cmd.add_option("--model", c.model,
                 "A preset (" + presets + "), or a model directory (config.json + model.safetensors or its shards) "
                 "to fine-tune from its weights")
      ->capture_default_str()->group(what);
  path_flag(cmd.add_option("--config", c.model_config, "A Hugging Face config.json (instead of --model)")->group(what), "--config");
  cmd.add_option("--data", c.data, "fashion-mnist, fortunes, or a text/.jsonl file or directory (default: fashion-mnist for ViT, fortunes for GPT)")
      ->group(what);
  add_int_flag(cmd, flag_range::seq_len, c.seq_len, "Context length in tokens (0: min(128, the model's))")->capture_default_str()->group(what);
  path_flag(cmd.add_option("--tokenizer", c.tokenizer,
                 "A tokenizer.json or a directory holding one (default: the model directory's, else bytes for GPT-2)")
      ->group(what), "--tokenizer");
  cmd.add_option("--prompt-field", c.prompt_field, ".jsonl field of the prompt (its tokens are masked from the loss)")
      ->capture_default_str()->group(what);
  cmd.add_option("--response-field", c.response_field, ".jsonl field of the response")->capture_default_str()->group(what);
  add_int_flag(cmd, flag_range::dim, c.dim, "Override the preset's width (0: keep)")->group(what);
  add_int_flag(cmd, flag_range::depth, c.depth, "Override the preset's number of blocks (0: keep)")->group(what);
  add_int_flag(cmd, flag_range::heads, c.heads, "Override the preset's attention heads (0: keep)")->group(what);
  add_int_flag(cmd, flag_range::patch, c.patch, "Override the ViT patch size (0: keep)")->group(what);
  add_int_flag(cmd, flag_range::mlp_dim, c.mlp_dim, "Override the MLP width (0: keep)")->group(what);

  what = "Batching and length";
  add_int_flag(cmd, flag_range::batch, c.batch, "Samples per optimizer step")->capture_default_str()->group(what);
  add_int_flag(cmd, flag_range::micro_batch, c.micro_batch, "Samples per forward/backward; the batch is accumulated (0: = batch)")
      ->capture_default_str()->group(what);
  add_int_flag(cmd, flag_range::loss_chunk, c.loss_chunk,
               "Causal LMs: the head and loss a chunk of this many token rows at a time, never the whole logits (0: off)")
      ->capture_default_str()->group(what);
  add_int_flag(cmd, flag_range::steps, c.steps, "Optimizer steps (0: from --epochs)")->capture_default_str()->group(what);
  add_real_flag(cmd, "--epochs", c.epochs, "Passes over the training data, may be fractional (used when --steps is 0)",
                &flag_range::epochs)
      ->capture_default_str()->group(what);
  // 0 and negatives are refused here; RunConfig's 0 (the default) means min(8, hardware threads - 1).
  cmd.add_option_function<std::string>(
         "--workers",
         [&c](const std::string& text) {
           int64_t n = 0;
           auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
           if (ec == std::errc() && end == text.data() + text.size() && n < 1)
             throw UsageError("--workers " + std::to_string(n), "it counts the threads that build batches",
                              "pass --workers 1 or more; without it, this machine uses " +
                                  std::to_string(default_loader_workers()));
           c.workers = parse_int_flag(flag_range::workers, text);
         },
         "Threads building batches (default: min(8, hardware threads - 1)); batches are the same for any count")
      ->type_name("INT")
      ->group(what);

  what = "Optimizer";
  cmd.add_option("--optimizer", c.optimizer, "sgd, adamw, lion, adamw8bit or lion8bit")->capture_default_str()->group(what);
  add_real_flag(cmd, "--lr", c.lr, "Peak learning rate")->capture_default_str()->group(what);
  add_real_flag(cmd, "--momentum", c.momentum, "SGD momentum")->capture_default_str()->group(what);
  cmd.add_flag("--nesterov", c.nesterov, "SGD: Nesterov momentum (look-ahead gradient; needs --momentum > 0)")->group(what);
  add_real_flag(cmd, "--dampening", c.dampening, "SGD: scale the gradient entering the momentum buffer by 1 - this")
      ->capture_default_str()->group(what);
  add_real_flag(cmd, "--weight-decay", c.weight_decay, "Decoupled weight decay")->capture_default_str()->group(what);
  add_real_flag(cmd, "--beta1", c.beta1, "AdamW beta1")->capture_default_str()->group(what);
  add_real_flag(cmd, "--beta2", c.beta2, "AdamW beta2")->capture_default_str()->group(what);
  add_real_flag(cmd, "--eps", c.eps, "AdamW epsilon")->capture_default_str()->group(what);
  cmd.add_option("--schedule", c.schedule, "constant or cosine")->capture_default_str()->group(what);
  add_int_flag(cmd, flag_range::warmup, c.warmup, "Linear warmup steps (-1: 10% of the run)")->capture_default_str()->group(what);
  add_real_flag(cmd, "--min-lr-ratio", c.min_lr_ratio, "Cosine ends at lr * this")->capture_default_str()->group(what);
  add_real_flag(cmd, "--clip", c.clip, "Clip the global gradient norm to this (0: off)")->capture_default_str()->group(what);
  add_seed_flag(cmd, c.seed, "Seed for initialisation, shuffling and dropout")->capture_default_str()->group(what);

  what = "Precision";
  cmd.add_option("--precision", c.precision, "32-true, 16-mixed, bf16-mixed, 16-true or bf16-true")
      ->capture_default_str()->group(what);
  cmd.add_option("--state-dtype", c.state_dtype, "Optimizer moments: auto (the parameter's dtype), f32 or bf16")
      ->capture_default_str()
      ->group(what);
  cmd.add_option("--master-weights", c.master_weights, "fp32: keep f32 master copies of 16-bit parameters (-true policies)")
      ->capture_default_str()->group(what);
  cmd.add_flag("--stochastic-rounding", c.stochastic_rounding,
               "Round updates into 16-bit parameters stochastically (bf16-true/16-true without master weights)")
      ->group(what);
  cmd.add_flag("--fused-step,!--no-fused-step", c.fused_step, "Run the optimizer step inside backward: no gradient buffer is kept")
      ->group(what);
  what = "Activation checkpointing";
  cmd.add_flag("--lean-saves,!--no-lean-saves", c.lean_saves,
               "Blocks recompute their norm and GELU outputs in backward instead of keeping them (GPT-2/ViT: 10 C per "
               "token kept instead of 16; off: a few % faster)")
      ->group(what);
  cmd.add_option("--checkpoint", c.checkpoint,
                 "Activation checkpointing: none, blocks, every:K, selective, or a regex over module paths "
                 "(e.g. 'transformer\\.h\\.[0-5]')")
      ->capture_default_str()->group(what);
  cmd.add_flag("--offload-activations", c.offload_activations,
               "Keep what checkpointed modules save in pinned host memory, copied back one module ahead in backward "
               "(needs --checkpoint)")
      ->group(what);
  cmd.add_option("--offload", c.offload,
                 "none; optimizer: the f32 master weights and optimizer state in pinned host memory, gradients "
                 "drained there during backward, the step on the CPU (SIMD, all cores); params: that, and the "
                 "checkpointed blocks' weights in pinned host memory, each block copied to the device for its "
                 "forward and its recomputation (needs --checkpoint)")
      ->capture_default_str()->group(what);
  path_flag(cmd.add_option("--offload-dir", c.offload_dir,
                 "With --offload optimizer: keep the optimizer state (f32 master weights and moments) of the "
                 "16-bit parameters in a file in this directory on a local NVMe drive, read and written a chunk "
                 "at a time through io_uring (ZeRO-Infinity); with --host-memory-limit only what does not fit it")
      ->group(what), "--offload-dir");
  cmd.add_option_function<std::string>(
         "--host-memory-limit",
         [&c](const std::string& text) { c.host_memory_limit = parse_bytes(text, "--host-memory-limit"); },
         "With --offload-dir: host memory the optimizer state may take (e.g. 64GiB); the state of parameters "
         "beyond it goes to the directory")
      ->group(what);
  cmd.add_option_function<std::string>(
         "--gemm-workspace",
         [&c](const std::string& text) { c.gemm_workspace = parse_bytes(text, "--gemm-workspace"); },
         "cuBLASLt's workspace per GPU (default 32MiB); 0: none, for the leanest runs (cuBLASLt then picks "
         "algorithms that need none, some products slower)")
      ->group(what);
  cmd.add_option("--quantize", c.quantize,
                 "none, or nf4: the blocks' linear layers as frozen 4-bit NF4 weights (bitsandbytes' QLoRA "
                 "format; embeddings, head and norms stay 16-bit)")
      ->capture_default_str()->group(what);

  what = "LoRA adapters";
  add_int_flag(cmd, flag_range::lora_rank, c.lora_rank,
               "LoRA rank r: train low-rank adapters on the linear layers, everything else frozen (0: off)")
      ->capture_default_str()->group(what);
  add_real_flag(cmd, "--lora-alpha", c.lora_alpha, "LoRA alpha: the adapters' update is scaled by alpha / r (PEFT's default 8)")
      ->capture_default_str()->group(what);
  add_real_flag(cmd, "--lora-dropout", c.lora_dropout, "Dropout on the adapters' input, in [0, 1)")
      ->capture_default_str()->group(what);
  cmd.add_option("--lora-targets", c.lora_targets,
                 "Regex over module paths of the linear layers to adapt (default: every linear layer inside the "
                 "blocks, e.g. q|k|v|o|gate|up|down_proj)")
      ->group(what);
  path_flag(cmd.add_option("--lora-init", c.lora_init, "Start the adapters from this PEFT adapter directory")->group(what), "--lora-init");
  what = "Several processes";
  cmd.add_option("--strategy", c.strategy,
                 "With 2+ ranks: ddp (replicas, gradients all-reduced), zero1 (+ optimizer state sharded), zero2 "
                 "(+ gradients sharded), fsdp (+ parameters sharded)")
      ->capture_default_str()->group(what);
  cmd.add_option("--reshard-after-forward", c.reshard_after_forward,
                 "fsdp: free a block's gathered parameters after its forward (false: keep them to backward)")
      ->capture_default_str()->group(what);
  cmd.add_flag("--save-sharded", c.save_sharded,
               "With --save under zero1/zero2/fsdp: each rank writes its own optimizer-state shard and rank 0 a "
               "manifest, instead of gathering the whole state to rank 0 (a file system every rank sees)")
      ->group(what);
  cmd.add_option("--devices", c.devices,
                 "Start this many processes on this host (one per GPU; on the CPU through mpirun); a job started "
                 "by torchrun, mpirun or SLURM needs no flag")
      ->capture_default_str()->group(what);

  what = "Memory visibility";
  cmd.add_flag("--memory-history", c.memory_history, "Record every allocation and free (category, size, stream, op)")
      ->group(what);
  path_flag(cmd.add_option("--memory-snapshot", c.memory_snapshot,
                 "After the last step write PATH.json and PATH.pickle (PyTorch memory_viz schema)")
      ->group(what), "--memory-snapshot");
  path_flag(cmd.add_option("--memory-report", c.memory_report, "Write a self-contained HTML memory timeline by category")
      ->group(what), "--memory-report");
  what = "Evaluation, checkpoints, output";
  add_int_flag(cmd, flag_range::eval_every, c.eval_every, "Evaluate every N steps (0: only at the end)")->capture_default_str()->group(what);
  add_int_flag(cmd, flag_range::eval_batches, c.eval_batches, "Cap evaluation at N batches (0: the whole split)")
      ->capture_default_str()->group(what);
  path_flag(cmd.add_option("--save", c.save, "Checkpoint directory, written at each evaluation and at the end")->group(what), "--save");
  cmd.add_option_function<std::string>(
         "--save-shard-size",
         [&c](const std::string& text) { c.save_shard_bytes = parse_bytes(text, "--save-shard-size"); },
         "Weights larger than this are saved in shards + model.safetensors.index.json, as transformers does "
         "(default 5GB; 1GB = 10^9 bytes, 1GiB = 2^30)")
      ->type_name("SIZE")
      ->group(what);
  path_flag(cmd.add_option("--resume", c.resume, "Continue the run saved in this checkpoint directory")->group(what), "--resume");
  cmd.add_option("--device", c.device, "cpu, cuda, cuda:N or auto")->capture_default_str()->group(what);
  add_int_flag(cmd, flag_range::log_every, c.log_every, "Progress line period when not on a terminal (0: ~20 lines)")
      ->capture_default_str()->group(what);
  path_flag(cmd.add_option("--metrics", c.metrics, "Write each step's loss to this JSON-lines file")->group(what), "--metrics");
  add_int_flag(cmd, flag_range::stop_at, c.stop_at, "End this process after step N (the schedule still spans --steps; --resume continues)")
      ->group(what);
  add_int_flag(cmd, flag_range::debug_nan_at_step, c.debug_nan_at_step, "testing: poison the loss at this step")->group("");
}

int run_train(RunConfig cfg, RunResult* result) {
  validate(cfg);
  dist::Session session(cfg);  // joins an mpirun / torchrun / SLURM job; ranks > 0 stay quiet
  std::FILE* out = stdout;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet(nullptr, &std::fclose);
  if (session.rank() != 0) quiet.reset(std::fopen("/dev/null", "w")), out = quiet ? quiet.get() : stdout;
  ProgressPrinter printer(out, out == stdout && is_terminal(stdout), cfg.log_every);
  RunObserver obs;
  obs.on_message = [&](const std::string& s) { printer.message(s); };
  obs.on_step = [&](const ProgressInfo& p) { printer.step(p); };
  obs.on_eval = [&](const EvalInfo& e) { printer.eval(e); };
  obs.on_save = [&](const std::string& dir, int64_t step) {
    printer.message("saved checkpoint " + dir + " (step " + std::to_string(step) + ")");
  };
  if (session.size() > 1)
    printer.message("rank 0 of " + std::to_string(session.size()) + ", strategy " + cfg.strategy + ": each rank trains on " +
                    std::to_string(cfg.batch / session.size()) + " of the " + std::to_string(cfg.batch) +
                    " samples of every batch");
  RunResult r = train(cfg, obs);
  printer.finish();
  if (session.rank() != 0) {
    if (result) *result = std::move(r);
    return 0;
  }

  std::printf("\nfinal: steps %lld | train loss %.4f", (long long)r.steps, r.final_loss);
  if (r.eval) {
    if (r.eval->accuracy) std::printf(" | test loss %.4f | test accuracy %.2f%%", r.eval->loss, 100.0 * *r.eval->accuracy);
    else std::printf(" | validation loss %.4f", r.eval->loss);
  }
  std::printf(" | time %s\n\n", format_duration(r.seconds).c_str());
  std::fputs(memory_summary(r.device, r.memory, r.pinned_host, &r.disk).c_str(), stdout);
  std::fflush(stdout);
  if (result) *result = std::move(r);
  return 0;
}

}  // namespace lt::cli
