// The rows of the recipe table (train/recipe_table.h), in help order. Each technique's choice
// is an enum field; its help text is the user guide's summary of it.
#include "train/recipe_table.h"

#include <charconv>

#include "io/text_format.h"
#include "leantrain/models.h"

namespace lt {

namespace {

template <auto M>
ChoiceMember choice() {
  using E = std::remove_reference_t<decltype(std::declval<RunConfig&>().*M)>;
  return {[](const RunConfig& c) { return name_of(c.*M); },
          [](RunConfig& c, const std::string& s) {
            std::optional<E> v = choice_named<E>(s);
            if (v) c.*M = *v;
            return v.has_value();
          },
          [] { return choice_list<E>(); }};
}

std::string presets() {
  std::string s;
  for (const std::string& p : models::preset_names()) s += (s.empty() ? "" : ", ") + p;
  return s;
}

bool several_devices(const RunConfig& c) { return c.devices > 1; }
bool fsdp_on_several(const RunConfig& c) { return c.devices > 1 && c.strategy == StrategyKind::Fsdp; }
bool lora_on(const RunConfig& c) { return c.lora_rank > 0; }
bool dpo_on(const RunConfig& c) { return c.objective == Objective::Dpo; }

constexpr IntRange kDevices{"--devices", 1, 1024, "processes on this host"};

std::vector<RecipeField> make_fields() {
  using K = FieldKind;
  using C = RunConfig;
  std::vector<RecipeField> f;
  auto add = [&](RecipeField r) -> RecipeField& { return f.emplace_back(std::move(r)); };

  const char* g = "Model and data";
  add({"model", "--model", K::Text, &C::model, g,
       "A preset (" + presets() + "), or a model directory (config.json + model.safetensors or its shards) to "
       "fine-tune from its weights",
       true, Echo::Always});
  add({"model_config", "--config", K::Path, &C::model_config, g, "A Hugging Face config.json (instead of --model)"});
  add({"data", "--data", K::Text, &C::data, g,
       "fashion-mnist, fortunes, or a text/.jsonl file or directory (default: fashion-mnist for ViT and ResNet, "
       "fortunes for the language models)"});
  add({"seq_len", "--seq-len", K::Int, &C::seq_len, g, "Context length in tokens (0: min(128, the model's))", true,
       Echo::IfChanged, &flag_range::seq_len});
  add({"tokenizer", "--tokenizer", K::Path, &C::tokenizer, g,
       "A tokenizer.json or a directory holding one (default: the model directory's, else bytes for GPT-2)", false});
  add({"prompt_field", "--prompt-field", K::Text, &C::prompt_field, g,
       ".jsonl field of the prompt (its tokens are masked from the loss)"});
  add({"response_field", "--response-field", K::Text, &C::response_field, g, ".jsonl field of the response"});
  add({"chat_template", "--chat-template", K::Path, &C::chat_template, g,
       "A chat template for .jsonl conversations ({\"messages\": [...]}) instead of the tokenizer's: a .jinja file, or "
       "a tokenizer_config.json holding one (saved with checkpoints as chat_template.jinja)",
       false});
  add({"train_on", "--train-on", K::Choice, choice<&C::train_on>(), g,
       "Which tokens carry the loss: assistant (a conversation's assistant turns, a prompt/response pair's response) "
       "or all"})
      .older_saves_lack = true;  // saved before the flag: a pair's prompt was masked, the default
  add({"packing", "--packing", K::Choice, choice<&C::packing>(), g,
       "How documents fill the rows of --seq-len tokens: docs (several whole documents a row, each attending only to "
       "itself, positions from 0: padding-free), none (one a row, padded), concat (back to back, attending across "
       "documents)"})
      .if_missing = "concat";  // saved before the flag: every run concatenated
  add({"dim", "--dim", K::Int, &C::dim, g, "Override the preset's width (0: keep)", true, Echo::IfChanged, &flag_range::dim});
  add({"depth", "--depth", K::Int, &C::depth, g, "Override the preset's number of blocks (0: keep)", true, Echo::IfChanged,
       &flag_range::depth});
  add({"heads", "--heads", K::Int, &C::heads, g, "Override the preset's attention heads (0: keep)", true, Echo::IfChanged,
       &flag_range::heads});
  add({"patch", "--patch", K::Int, &C::patch, g, "Override the ViT patch size (0: keep)", true, Echo::IfChanged,
       &flag_range::patch});
  add({"mlp_dim", "--mlp-dim", K::Int, &C::mlp_dim, g, "Override the MLP width (0: keep)", true, Echo::IfChanged,
       &flag_range::mlp_dim});

  g = "Objective";
  // Added with issue 48: a checkpoint saved before it has none of these rows (older_saves_lack).
  auto later = [](RecipeField& r) { r.older_saves_lack = true; };
  later(add({"objective", "--objective", K::Choice, choice<&C::objective>(), g,
             "Language models: sft (next-token cross-entropy) or dpo (a preference loss over .jsonl {\"prompt\", "
             "\"chosen\", \"rejected\"} pairs; the reference is the base with the LoRA adapters off, or the "
             "starting weights' log-probabilities computed in a first pass)"}));
  later(add({"dpo_loss", "--dpo-loss", K::Choice, choice<&C::dpo_loss>(), g,
             "With --objective dpo: sigmoid (DPO), ipo (IPO, on mean token log-probabilities) or simpo (SimPO: mean "
             "log-probabilities, no reference)",
             true, Echo::IfChanged, nullptr, nullptr, nullptr, dpo_on}));
  later(add({"beta", "--beta", K::Real, &C::beta, g, "DPO's beta (TRL's default 0.1)", true, Echo::IfChanged, nullptr,
             &flag_range::beta, nullptr, dpo_on}));
  later(add({"label_smoothing", "--label-smoothing", K::Real, &C::label_smoothing, g,
             "Conservative DPO: the share of pairs taken as mislabelled, in [0, 0.5] (sigmoid and simpo)", true,
             Echo::IfChanged, nullptr, &flag_range::label_smoothing, nullptr, dpo_on}));
  later(add({"simpo_gamma", "--simpo-gamma", K::Real, &C::simpo_gamma, g, "SimPO's target reward margin (TRL's 0.5)",
             true, Echo::IfChanged, nullptr, &flag_range::simpo_gamma, nullptr, dpo_on}));
  later(add({"chosen_field", "--chosen-field", K::Text, &C::chosen_field, g,
             ".jsonl field of a pair's preferred completion (a string, or a list of messages rendered by the chat template)", true, Echo::IfChanged,
             nullptr, nullptr, nullptr, dpo_on}));
  later(add({"rejected_field", "--rejected-field", K::Text, &C::rejected_field, g,
             ".jsonl field of a pair's dispreferred completion", true, Echo::IfChanged, nullptr, nullptr, nullptr, dpo_on}));

  g = "Batching and length";
  add({"batch", "--batch", K::Int, &C::batch, g, "Samples per optimizer step", true, Echo::IfChanged, &flag_range::batch});
  add({"micro_batch", "--micro-batch", K::Int, &C::micro_batch, g,
       "Samples per forward/backward; the batch is accumulated (0: = batch)", true, Echo::IfChanged,
       &flag_range::micro_batch});
  add({"loss_chunk", "--loss-chunk", K::Int, &C::loss_chunk, g,
       "Causal LMs: the head and loss a chunk of this many token rows at a time, never the whole logits (0: off)", true,
       Echo::IfChanged, &flag_range::loss_chunk});
  add({"steps", "--steps", K::Int, &C::steps, g, "Optimizer steps (0: from --epochs)", true, Echo::IfChanged,
       &flag_range::steps});
  add({"epochs", "--epochs", K::Real, &C::epochs, g,
       "Passes over the training data, may be fractional (used when --steps is 0)", true, Echo::IfChanged, nullptr,
       &flag_range::epochs});
  add({"workers", "--workers", K::Int, &C::workers, g,
       "Threads building batches (default: min(8, hardware threads - 1)); batches are the same for any count", false,
       Echo::Never, &flag_range::workers, nullptr, nullptr, nullptr, /*zero_is_unset=*/true});

  g = "Optimizer";
  add({"optimizer", "--optimizer", K::Choice, choice<&C::optimizer>(), g,
       "sgd, adamw, lion, adamw8bit or lion8bit (8-bit states: bitsandbytes' block-wise dynamic quantisation)"});
  add({"lr", "--lr", K::Real, &C::lr, g, "Peak learning rate"});
  add({"momentum", "--momentum", K::Real, &C::momentum, g, "SGD momentum"});
  add({"nesterov", "--nesterov", K::Switch, &C::nesterov, g,
       "SGD: Nesterov momentum (look-ahead gradient; needs --momentum > 0)"});
  add({"dampening", "--dampening", K::Real, &C::dampening, g,
       "SGD: scale the gradient entering the momentum buffer by 1 - this"});
  add({"weight_decay", "--weight-decay", K::Real, &C::weight_decay, g, "Decoupled weight decay"});
  add({"beta1", "--beta1", K::Real, &C::beta1, g, "AdamW beta1"});
  add({"beta2", "--beta2", K::Real, &C::beta2, g, "AdamW beta2"});
  add({"eps", "--eps", K::Real, &C::eps, g, "AdamW epsilon"});
  add({"schedule", "--schedule", K::Choice, choice<&C::schedule>(), g, "constant or cosine (both after the warmup)"});
  add({"warmup", "--warmup", K::Int, &C::warmup, g, "Linear warmup steps (-1: 10% of the run)", true, Echo::IfChanged,
       &flag_range::warmup});
  add({"min_lr_ratio", "--min-lr-ratio", K::Real, &C::min_lr_ratio, g, "Cosine ends at lr * this"});
  add({"clip", "--clip", K::Real, &C::clip, g, "Clip the global gradient norm to this (0: off)"});
  add({"seed", "--seed", K::Seed, &C::seed, g, "Seed for initialisation, shuffling and dropout"});

  g = "Precision";
  add({"precision", "--precision", K::Choice, choice<&C::precision>(), g,
       "32-true, 16-mixed, bf16-mixed, 16-true or bf16-true (Lightning's names)"});
  add({"state_dtype", "--state-dtype", K::Choice, choice<&C::state_dtype>(), g,
       "Optimizer moments: auto (the parameter's dtype), f32 or bf16"});
  add({"master_weights", "--master-weights", K::Choice, choice<&C::master_weights>(), g,
       "fp32: keep f32 master copies of 16-bit parameters (-true policies); none"});
  add({"stochastic_rounding", "--stochastic-rounding", K::Switch, &C::stochastic_rounding, g,
       "Round updates into 16-bit parameters stochastically (bf16-true/16-true without master weights)"});
  add({"fused_step", "--fused-step", K::Switch, &C::fused_step, g,
       "Run the optimizer step inside backward: no gradient buffer is kept", true, Echo::IfChanged, nullptr, nullptr,
       "--no-fused-step"});
  add({"keep_casts", "--keep-casts", K::Switch, &C::keep_casts, g,
       "With a -mixed precision, keep each weight's 16-bit copy between steps, written by its optimizer update, so the "
       "forward casts no weight (+2 bytes a weight; no higher peak without --checkpoint, which casts one block at a "
       "time)"})
      .older_saves_lack = true;  // saved before the flag: every run cast its weights each step

  g = "Activation checkpointing and offload";
  add({"lean_saves", "--lean-saves", K::Switch, &C::lean_saves, g,
       "Blocks recompute their norm and GELU outputs in backward instead of keeping them (GPT-2/ViT: 10 C per token "
       "kept instead of 16; off: a few % faster)",
       true, Echo::IfChanged, nullptr, nullptr, "--no-lean-saves"});
  add({"checkpoint", "--checkpoint", K::Checkpoint, &C::checkpoint, g,
       "Activation checkpointing: none, blocks, every:K, selective, or a regex over module paths (e.g. "
       "'transformer\\.h\\.[0-5]')"});
  add({"offload_activations", "--offload-activations", K::Switch, &C::offload_activations, g,
       "Keep what checkpointed modules save in pinned host memory, copied back one module ahead in backward (needs "
       "--checkpoint)"});
  add({"offload", "--offload", K::Choice, choice<&C::offload>(), g,
       "none; optimizer: the f32 master weights and optimizer state in pinned host memory, gradients drained there "
       "during backward, the step on the CPU (SIMD, all cores); params: that, and the checkpointed blocks' weights in "
       "pinned host memory, each block copied to the device for its forward and its recomputation (needs --checkpoint)"});
  add({"offload_dir", "--offload-dir", K::Path, &C::offload_dir, g,
       "With --offload optimizer: keep the optimizer state (f32 master weights and moments) of the 16-bit parameters "
       "in a file in this directory on a local NVMe drive, read and written a chunk at a time through io_uring "
       "(ZeRO-Infinity); with --host-memory-limit only what does not fit it",
       false});
  add({"host_memory_limit", "--host-memory-limit", K::Bytes, &C::host_memory_limit, g,
       "With --offload-dir: host memory the optimizer state may take (e.g. 64GiB); the state of parameters beyond it "
       "goes to the directory",
       false});
  add({"gemm_workspace", "--gemm-workspace", K::Bytes, &C::gemm_workspace, g,
       "cuBLASLt's workspace per GPU (default 32MiB); 0: none, for the leanest runs (cuBLASLt then picks algorithms "
       "that need none, some products slower)",
       false});
  add({"attention_kernel", "--attention-kernel", K::Choice, choice<&C::attention_kernel>(), g,
       "Dense attention on CUDA: leantrain (its own flash kernels, deterministic), cudnn (cuDNN 9's fused SDPA, "
       "bf16/f16, no padding mask, window or packed documents; its backward adds a workspace of 4 B*H*T*(D+1) bytes) "
       "or auto (cudnn where it applies, leantrain elsewhere)",
       false});
  add({"quantize", "--quantize", K::Choice, choice<&C::quantize>(), g,
       "none, or nf4: the blocks' linear layers as frozen 4-bit NF4 weights (bitsandbytes' QLoRA format; "
       "embeddings, head and norms stay 16-bit)"});

  g = "LoRA adapters";
  add({"lora_rank", "--lora-rank", K::Int, &C::lora_rank, g,
       "LoRA rank r: train low-rank adapters on the linear layers, everything else frozen (0: off)", true,
       Echo::IfChanged, &flag_range::lora_rank});
  add({"lora_alpha", "--lora-alpha", K::Real, &C::lora_alpha, g,
       "LoRA alpha: the adapters' update is scaled by alpha / r (PEFT's default 8)", true, Echo::IfChanged, nullptr,
       nullptr, nullptr, lora_on});
  add({"lora_dropout", "--lora-dropout", K::Real, &C::lora_dropout, g, "Dropout on the adapters' input, in [0, 1)"});
  add({"lora_targets", "--lora-targets", K::Text, &C::lora_targets, g,
       "Regex over module paths of the linear layers to adapt (default: every linear layer inside the blocks, e.g. "
       "q|k|v|o|gate|up|down_proj)"});
  add({"lora_init", "--lora-init", K::Path, &C::lora_init, g, "Start the adapters from this PEFT adapter directory",
       false});

  g = "Several processes";
  add({"devices", "--devices", K::Int, &C::devices, g,
       "Start this many processes on this host (one per GPU; on the CPU through mpirun); a job started by torchrun, "
       "mpirun or SLURM needs no flag",
       false, Echo::IfChanged, &kDevices});
  add({"strategy", "--strategy", K::Choice, choice<&C::strategy>(), g,
       "With 2+ ranks: ddp (replicas, gradients all-reduced), zero1 (+ optimizer state sharded), zero2 (+ gradients "
       "sharded), fsdp (+ parameters sharded)",
       true, Echo::IfChanged, nullptr, nullptr, nullptr, several_devices});
  add({"reshard_after_forward", "--reshard-after-forward", K::Bool, &C::reshard_after_forward, g,
       "fsdp: free a block's gathered parameters after its forward (false: keep them to backward)", true,
       Echo::IfChanged, nullptr, nullptr, nullptr, fsdp_on_several});
  add({"fsdp_gather", "--fsdp-gather", K::Choice, choice<&C::fsdp_gather>(), g,
       "fsdp: gather parameters in the compute dtype (bf16 under bf16-mixed: half the traffic and memory), or f32",
       false, Echo::IfChanged, nullptr, nullptr, nullptr, fsdp_on_several});
  add({"bucket_mb", "--bucket-mb", K::Int, &C::bucket_mb, g,
       "ddp / zero1 / zero2: MiB of gradients per reduction bucket (PyTorch DDP's bucket_cap_mb)", false,
       Echo::IfChanged, &flag_range::bucket_mb, nullptr, nullptr, several_devices});
  add({"buckets_in_flight", "--buckets-in-flight", K::Int, &C::buckets_in_flight, g,
       "Reductions that may still run when the next bucket starts (more: more overlap, more staging memory)", false,
       Echo::IfChanged, &flag_range::buckets_in_flight, nullptr, nullptr, several_devices});
  add({"dist_timeout", "--dist-timeout", K::Real, &C::dist_timeout, g,
       "Seconds a rendezvous or collective may wait for the other ranks before the run ends with an error", false,
       Echo::IfChanged, nullptr, &flag_range::dist_timeout, nullptr, several_devices});
  add({"save_sharded", "--save-sharded", K::Switch, &C::save_sharded, g,
       "With --save under zero1/zero2/fsdp: each rank writes its own optimizer-state shard and rank 0 a manifest, "
       "instead of gathering the whole state to rank 0 (a file system every rank sees)"});

  g = "Memory visibility";
  add({"memory_history", "--memory-history", K::Switch, &C::memory_history, g,
       "Record every allocation and free (category, size, stream, op)", false, Echo::Never});
  add({"memory_snapshot", "--memory-snapshot", K::Path, &C::memory_snapshot, g,
       "After the last step write PATH.json and PATH.pickle (PyTorch memory_viz schema)", false, Echo::Never});
  add({"memory_report", "--memory-report", K::Path, &C::memory_report, g,
       "Write a self-contained HTML memory timeline by category", false, Echo::Never});

  g = "Evaluation, checkpoints, output";
  add({"eval_every", "--eval-every", K::Int, &C::eval_every, g, "Evaluate every N steps (0: only at the end)", true,
       Echo::IfChanged, &flag_range::eval_every});
  add({"eval_batches", "--eval-batches", K::Int, &C::eval_batches, g, "Cap evaluation at N batches (0: the whole split)",
       true, Echo::IfChanged, &flag_range::eval_batches});
  add({"save", "--save", K::Path, &C::save, g, "Checkpoint directory, written at each evaluation and at the end"});
  add({"save_shard_bytes", "--save-shard-size", K::Bytes, &C::save_shard_bytes, g,
       "Weights larger than this are saved in shards + model.safetensors.index.json, as transformers does (default "
       "5GB; 1GB = 10^9 bytes, 1GiB = 2^30)",
       true, Echo::IfChanged});
  add({"resume", "--resume", K::Path, &C::resume, g, "Continue the run saved in this checkpoint directory", true,
       Echo::Never});
  add({"device", "--device", K::Text, &C::device, g, "cpu, cuda, cuda:N or auto"});
  add({"log_every", "--log-every", K::Int, &C::log_every, g, "Progress line period when not on a terminal (0: ~20 lines)",
       true, Echo::Never, &flag_range::log_every});
  add({"metrics", "--metrics", K::Path, &C::metrics, g, "Write each step's loss to this JSON-lines file"});
  add({"stop_at", "--stop-at", K::Int, &C::stop_at, g,
       "End this process after step N (the schedule still spans --steps; --resume continues)", false, Echo::Never,
       &flag_range::stop_at});
  add({"debug_nan_at_step", "--debug-nan-at-step", K::Int, &C::debug_nan_at_step, "",
       "testing: poison the loss at this step", false, Echo::Never, &flag_range::debug_nan_at_step});
  return f;
}

// The shortest text that reads back as exactly v (0.1, 3e-04, 1e+300): a pasted command reruns the same config.
std::string exact_number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

}  // namespace

const std::vector<RecipeField>& recipe_fields() {
  static const std::vector<RecipeField> fields = make_fields();
  return fields;
}

const RecipeField* recipe_field(const std::string& name) {
  for (const RecipeField& f : recipe_fields())
    if (name == f.flag || name == f.key) return &f;
  return nullptr;
}

void set_choice(const RecipeField& f, RunConfig& c, const std::string& name) {
  const ChoiceMember& m = std::get<ChoiceMember>(f.member);
  if (!m.set(c, name))
    throw UsageError(std::string(f.flag) + " " + (name.empty() ? "''" : name), "the choices are " + m.list(),
                     "pass one of them");
}

nn::CheckpointSpec parse_checkpoint_flag(const std::string& text) {
  try {
    nn::CheckpointSpec s = nn::parse_checkpoint_spec(text);
    if (!s.on()) s = nn::CheckpointSpec::none();  // "" and "none" alike
    return s;
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what_part(), e.why(), e.fix());
  }
}

std::string field_text(const RecipeField& f, const RunConfig& c) {
  return std::visit(
      [&](const auto& m) -> std::string {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, ChoiceMember>) return m.get(c);
        else if constexpr (std::is_same_v<M, nn::CheckpointSpec RunConfig::*>) return (c.*m).text;
        else if constexpr (std::is_same_v<M, std::string RunConfig::*>) return c.*m;
        else if constexpr (std::is_same_v<M, bool RunConfig::*>) return c.*m ? "true" : "false";
        else if constexpr (std::is_same_v<M, double RunConfig::*>) return exact_number(c.*m);
        else return std::to_string(c.*m);  // integers in full: through a double a large seed would round
      },
      f.member);
}

bool field_is_default(const RecipeField& f, const RunConfig& c) {
  static const RunConfig defaults;
  return std::visit(
      [&](const auto& m) -> bool {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, ChoiceMember>) return m.get(c) == m.get(defaults);
        else return c.*m == defaults.*m;
      },
      f.member);
}

}  // namespace lt
