// RunConfig: what a run trains and how, every field a flag (the recipe table,
// src/train/recipe_table.cpp, binds, checks, saves and echoes them). Plain data on purpose: it
// sits below dist in the layers (src/layers.txt), so the strategies read the run's choices
// without depending on the training loop. Technique choices are enums (leantrain/choices.h).
#pragma once
#include <cstdint>
#include <string>

#include "leantrain/checkpoint.h"
#include "leantrain/choices.h"

namespace lt {

struct RunConfig {
  // What to train.
  std::string model = "vit-tiny";  // a preset name, or a model directory whose weights are loaded
  std::string model_config;        // a Hugging Face config.json; replaces `model` when set
  std::string data;                // fashion-mnist | fortunes | PATH; empty: the model's default
  int64_t seq_len = 0;             // GPT context in tokens; 0: min(128, the model's n_positions)
  // A tokenizer.json (or a directory holding one); empty: the model directory's, else the family's
  // default. Not kept in the saved run config: a resumed run reads the checkpoint's copy.
  std::string tokenizer;
  // .jsonl fields of a prompt/response pair (the prompt's tokens are masked from the loss).
  std::string prompt_field = "prompt", response_field = "response";
  // A chat template replacing the tokenizer's (a .jinja file, or a tokenizer_config.json holding
  // one); saved with checkpoints as chat_template.jinja, so not kept in the run config.
  std::string chat_template;
  // Which tokens carry the loss: the assistant's turns (a pair's response), or all.
  TrainOn train_on = TrainOn::Assistant;
  // How documents fill the rows of seq_len tokens (docs/user-guide.md, "Packing"): docs (several
  // whole documents a row, each attending to itself), none (one a row, padded), concat.
  Packing packing = Packing::Docs;
  // What the step minimises (leantrain/choices.h). dpo: the data are {"prompt", "chosen",
  // "rejected"} pairs and the loss compares the policy with a reference that costs no second
  // model (docs/memory-model.md, "What a DPO run holds").
  Objective objective = Objective::Sft;
  DpoLoss dpo_loss = DpoLoss::Sigmoid;
  double beta = 0.1;             // DPO's beta: how far the policy may move from the reference
  double label_smoothing = 0;    // conservative DPO: the share of pairs assumed mislabelled, in [0, 0.5)
  double simpo_gamma = 0.5;      // SimPO's target reward margin
  std::string chosen_field = "chosen", rejected_field = "rejected";  // .jsonl fields of a preference pair
  // Overrides of the preset's sizes (0: keep the preset's): the demo's small ViT uses these.
  int64_t dim = 0, depth = 0, heads = 0, patch = 0, mlp_dim = 0;

  // How much. The defaults are the demo: vit-tiny on Fashion-MNIST, 2 epochs (>= 85% accuracy).
  int64_t batch = 128;
  int64_t micro_batch = 0;  // 0: equal to batch (no accumulation)
  // Rows per chunk of a causal LM's chunked head + loss (linear_cross_entropy); 0: off (the logits whole).
  int64_t loss_chunk = 0;
  int64_t steps = 0;        // 0: derived from epochs
  double epochs = 2;        // used when steps == 0

  // How.
  OptimizerKind optimizer = OptimizerKind::AdamW;
  StateDtype state_dtype = StateDtype::Auto;  // optimizer moments: the parameter's dtype, f32 or bf16
  double lr = 2e-3;
  double momentum = 0.9;       // sgd
  double dampening = 0.0;      // sgd: the gradient enters the momentum buffer scaled by 1 - dampening
  bool nesterov = false;       // sgd: Nesterov momentum (needs momentum > 0 and dampening 0)
  double weight_decay = 0.05;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adamw
  ScheduleKind schedule = ScheduleKind::Cosine;
  int64_t warmup = -1;              // linear warmup steps; -1: 10% of the run
  double min_lr_ratio = 0.0;        // cosine ends at lr * min_lr_ratio
  double clip = 0.0;                // max global gradient norm; 0: off
  uint64_t seed = 0;

  // Precision and where the optimizer step runs (docs/user-guide.md, "Precision").
  Precision precision = Precision::True32;
  MasterWeights master_weights = MasterWeights::None;  // Fp32: f32 master copies of the 16-bit parameters (-true)
  bool fused_step = false;              // optimizer step inside backward: no gradient buffer is kept
  bool keep_casts = false;              // -mixed: each update writes its weight's 16-bit copy, kept between steps
  bool lean_saves = true;               // blocks recompute norm and GELU outputs in backward (nn::set_lean_saves)
  bool stochastic_rounding = false;     // round 16-bit parameter updates stochastically (-true, no master weights)
  // Activation checkpointing (docs/activation-checkpointing.md): none | blocks | every:K |
  // selective | a regex over module paths; .text is the flag's value.
  nn::CheckpointSpec checkpoint = nn::CheckpointSpec::none();
  // What the checkpointed modules keep goes to pinned host memory during the forward and comes
  // back one module ahead in backward (docs/memory-model.md, "Activation offload"). Needs --checkpoint.
  bool offload_activations = false;
  // none | optimizer: the f32 master weights and optimizer state in pinned host memory, the step
  // on the CPU; params: that, and the checkpointed blocks' weights resting in pinned host memory
  // (docs/decisions.md, "--offload optimizer").
  OffloadKind offload = OffloadKind::None;
  // --offload-dir: a directory on a local drive where the state of 16-bit parameters beyond
  // host_memory_limit bytes of host state (all of it without a limit) lives, in an unnamed file
  // (docs/memory-model.md, "Disk"). Needs --offload optimizer.
  std::string offload_dir;
  int64_t host_memory_limit = -1;  // bytes; < 0: none
  // cuBLASLt's workspace on each GPU (bytes, category workspace): 0 leaves it out, and cuBLASLt
  // then picks algorithms that need none (some products slower).
  int64_t gemm_workspace = int64_t(32) << 20;
  // Dense attention's kernels on CUDA: leantrain's, cuDNN's fused SDPA, or auto (cuDNN where it
  // can take the call). cudnn and auto add a workspace tensor to each attention backward
  // (docs/memory-model.md, "What attention saves"); a plan sees it.
  AttentionKernel attention_kernel = AttentionKernel::Leantrain;
  // none | nf4: the linear layers of the blocks as frozen NF4 weights (bitsandbytes' QLoRA format;
  // docs/user-guide.md, "Quantised base weights"). A bitsandbytes 4-bit --model DIR implies nf4.
  QuantizeKind quantize = QuantizeKind::None;
  // LoRA adapters (docs/user-guide.md, "LoRA"): rank 0 is off. Everything else is frozen.
  int64_t lora_rank = 0;
  double lora_alpha = 8;        // PEFT's default; the update is scaled by alpha / rank
  double lora_dropout = 0;      // on the adapters' input
  std::string lora_targets;     // regex over module paths; "": every linear layer inside the blocks
  std::string lora_init;        // a PEFT adapter directory the adapters start from (not saved with the run)
  // Several processes (docs/user-guide.md, "Several GPUs / processes"; issue #13). Each rank
  // trains on batch / world rows of every global batch.
  StrategyKind strategy = StrategyKind::Ddp;  // used when the world has 2+ ranks
  bool reshard_after_forward = true;  // fsdp: free a block's gathered parameters after its forward
  FsdpGather fsdp_gather = FsdpGather::Compute;  // fsdp: gather in the compute dtype, or f32
  int64_t bucket_mb = 25;          // ddp / zero1 / zero2: MiB of gradients per reduction bucket
  int64_t buckets_in_flight = 2;   // reductions that may still run when the next bucket starts
  double dist_timeout = 600;       // seconds a rendezvous or collective may wait for the other ranks
  bool save_sharded = false;  // --save-sharded: each rank writes its optimizer-state shard + a manifest
  int64_t devices = 1;                // start this many processes on this host (not saved with the run)
  // Memory visibility (outputs of this invocation; not saved with the run):
  bool memory_history = false;  // record every alloc/free (category, size, stream, op)
  std::string memory_snapshot;  // PATH.json (+ PATH.pickle for pytorch.org/memory_viz) after the last step
  std::string memory_report;    // a self-contained HTML timeline stacked by category

  // Evaluation, checkpoints, reports.
  int64_t eval_every = 0;    // steps; 0: only at the end
  int64_t eval_batches = 0;  // cap on evaluation batches; 0: the whole split
  std::string save;          // checkpoint directory, written at each evaluation and at the end
  int64_t save_shard_bytes = 5'000'000'000;  // weights beyond this go in shards (--save-shard-size, 5GB)
  std::string resume;        // checkpoint directory to continue from
  std::string device = "auto";  // cpu | cuda | cuda:N | auto
  int64_t log_every = 0;        // plain-progress period in steps; 0: about 20 lines per run
  std::string metrics;          // JSON-lines file with every step's loss (for comparisons)
  int64_t stop_at = 0;            // end this process after this step (0: at the end); the schedule
                                  // still spans --steps, so --resume continues the same curve
  int64_t debug_nan_at_step = 0;  // testing only: make the loss NaN at this step
  // Threads that build host batches (a property of this machine, not saved with the run);
  // 0: default_loader_workers(). Batches are the same for any count.
  int64_t workers = 0;
};

}  // namespace lt
