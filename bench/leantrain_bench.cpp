// The leantrain side of the GPU benches (run by scripts under bench/, next to PyTorch peers).
//   parity     load weights + batches written by bench/peers/parity.py, write logits, loss,
//              every parameter gradient, and the loss curve of N AdamW steps; with --adapter DIR
//              (a PEFT LoRA adapter directory) the adapter goes on the model, the base stays frozen,
//              and the gradients and steps are the adapters' (named as leantrain names them);
//              with --train 1 the model runs in training mode (batch norm's batch statistics) and
//              its floating buffers after the first step are written too ("buffer.<name>")
//   throughput training steps of a language model preset (--model: GPT-2 or LLaMA family) on
//              random tokens; one JSON line with ms/step, tokens/s, MFU, peak allocated and
//              reserved bytes; --precision (e.g. bf16-mixed, the BENCHMARKS.md config) overrides
//              --dtype, --master-weights fp32 for the -true ones; --checkpoint as train's;
//              --lean-saves 0 as train's --no-lean-saves; --gemm-workspace BYTES as train's;
//              --loss-chunk N as train's (the head + loss N token rows at a time; 0, default: off);
//              --attention-kernel auto|leantrain|cudnn as train's (default leantrain)
//              --fused-step 1 as train's --fused-step (updates inside backward; bf16-mixed or true)
//   loader     host cost of synthetic ViT batches (default 64 x 3x224x224): a batch of get()s
//              on this thread, then DataLoader::next() with --workers N on --device (default
//              meta: no copy, so only the loader's own work counts); one JSON line of milliseconds.
//              On cuda, then one line each for pageable and pinned staging: ms per next() with
//              the workers ahead (a --gap-ms pause stands for the step), host time of the call
//              and until the copy has landed (next + synchronize), medians over --batches
//   tokenize   encode speed of a tokenizer.json (--tokenizer) on one core: every fortune of
//              --data (default /usr/share/games/fortunes) encoded one by one, twice (the second
//              pass finds its words in the BPE cache); one JSON line of MB/s and tokens
//   host_step  the CPU step of --offload optimizer (--optimizer adamw|lion|sgd: src/offload/host_*.h)
//              over --elements f32 master weights and states, a --grad (bf16|f16|f32) gradient and
//              a --out (bf16|f16|none) copy, on --threads (default: all cores) with --path
//              (best|avx512|avx2|scalar); median of --steps steps; one JSON line of ms/step and
//              GB/s (bytes each element reads and writes), and the single-threaded reference's ms
//   dpo        --objective dpo's loss on one batch of pairs written by bench/peers/dpo_torch.py
//              (--batch: input_ids and labels i64 [B, 2, T], labels -100 outside the completions):
//              with --adapter DIR (PEFT) the reference is the base with the adapters off, else the
//              model of --ref-weights (its log-probabilities computed first, then freed, as a full
//              fine-tune's first pass keeps them); writes loss, policy and reference log-probabilities
//              [B, 2], rewards [B] (chosen, rejected) and every trainable parameter's gradient;
//              --loss sigmoid|ipo|simpo, --beta, --label-smoothing, --simpo-gamma as train's
//   nf4        the QLoRA base layer (quant/nf4_linear.h) on --device (default cuda when there is
//              one): per --shapes OUTxIN (default 4096x4096,14336x4096,4096x14336), the dequantise
//              pass (ms, GB/s over the 0.5 + 1/64 + 2 bytes per weight it moves) and, for
//              --tokens rows of bf16 input (default 4096), nf4_linear forward + backward (input
//              gradient) against a bf16 linear of the same shape, frozen (input gradient) and
//              trained (input and weight gradients); medians of --iters (default 20); one JSON line each
//   grouped_gemm the MoE expert GEMMs alone (backend/moe_kernels.h) on --device (default cuda) in
//              bf16, on the shapes of one expert MLP: --tokens (4096) tokens routed uniformly at
//              random to --topk (8) of --experts (128), --hidden (2048), --ffn (768), LoRA --rank
//              (16): gate|up and down forward, their input gradients, an adapter's A and its
//              B product added in the epilogue, and an adapter's weight gradient, then the base
//              and the adapter's term as one pass (grouped_gemm_pair); medians of
//              --iters (20); one JSON line each with ms, TFLOP/s of the useful products and the
//              rows each expert got (min, max). The knobs LEANTRAIN_MOE_GEMM_* pick the kernel
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <new>
#include <optional>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/moe_kernels.h"
#include "core/knobs.h"
#include "data/host_bytes.h"
#include "data/synthetic.h"
#include "leantrain/data.h"
#include "leantrain/autocast.h"
#include "leantrain/autograd.h"
#include "leantrain/checkpoint.h"
#include "leantrain/cuda_info.h"
#include "offload/host_adamw.h"
#include "offload/host_lion.h"
#include "offload/host_sgd.h"
#include "leantrain/error.h"
#include "leantrain/fused_step.h"
#include "leantrain/models.h"
#include "leantrain/ops.h"
#include "leantrain/optim.h"
#include "autograd/forward_context.h"
#include "leantrain/ops_moe.h"
#include "leantrain/precision.h"
#include "leantrain/safetensors.h"
#include "text/tokenizer.h"
#include "models/llama.h"
#include "models/registry.h"
#include "quant/nf4.h"
#include "quant/nf4_linear.h"
#include "train/dpo.h"
#include "train/lora_setup.h"

using namespace lt;

namespace {

std::map<std::string, std::string> parse_flags(int argc, char** argv, int first) {
  std::map<std::string, std::string> f;
  for (int i = first; i < argc; ++i) {
    std::string k = argv[i];
    LT_CHECK(k.rfind("--", 0) == 0 && i + 1 < argc, "bad argument '" + k + "'", "flags are --name value",
             "see bench/leantrain_bench.cpp");
    f[k.substr(2)] = argv[++i];
  }
  return f;
}

std::string need(const std::map<std::string, std::string>& f, const std::string& k) {
  auto it = f.find(k);
  LT_CHECK(it != f.end(), "missing --" + k, "this mode needs it", "pass --" + k);
  return it->second;
}

std::string get(const std::map<std::string, std::string>& f, const std::string& k, const std::string& dflt) {
  auto it = f.find(k);
  return it == f.end() ? dflt : it->second;
}

std::string read_text(const std::string& path) {
  FILE* fp = std::fopen(path.c_str(), "rb");
  LT_CHECK(fp, "cannot open " + path, "fopen failed", "check the path");
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, fp)) > 0) s.append(buf, n);
  std::fclose(fp);
  return s;
}

// Batch i of a stacked [N, ...] tensor.
Tensor batch_at(const Tensor& stacked, int64_t i) { return contiguous(select(stacked, 0, i)); }

int parity(const std::map<std::string, std::string>& f) {
  const Device dev = Device::parse(get(f, "device", "cuda"));
  const DType dtype = parse_dtype(get(f, "dtype", "f32"));
  const int64_t steps = std::stoll(get(f, "steps", "0"));
  const double lr = std::stod(get(f, "lr", "1e-3"));
  std::string cfg = read_text(need(f, "config"));
  if (cfg.find("model_type") == std::string::npos) {  // tell the factory which family
    size_t brace = cfg.find('{');
    cfg.insert(brace + 1, "\"model_type\": \"" + need(f, "kind") + "\", ");
  }
  nn::InitOptions init{dev, dtype, 0};
  std::shared_ptr<models::Model> model;
  {
    MemoryCategoryScope s(Category::Parameter);
    model = models::create_model_from_json(cfg, init);
  }
  // Eval: dropout off (PyTorch side has p = 0 too). --train 1: training mode, for batch norm's
  // batch statistics and running-statistics update (ResNet); the buffers are written after the step.
  const bool train_mode = get(f, "train", "0") == "1";
  model->train(train_mode);
  const std::string weights = need(f, "weights");
  io::load_module(*model, weights);
  const std::string adapter = get(f, "adapter", "");
  if (!adapter.empty()) attach_peft_adapter(*model, adapter);  // the base frozen, the adapters trainable
  std::map<std::string, Tensor> data;
  {
    MemoryCategoryScope s(Category::Input);
    data = io::load_safetensors(need(f, "batches"), dev);
  }
  const bool gpt = models::family_of_type(model->model_type()).input() != models::InputKind::Images;  // token ids
  const Tensor& xs = gpt ? data.at("input_ids") : data.at("images");
  const Tensor& ys = data.at("labels");
  if (adapter.empty())
    for (auto& p : model->parameters()) p.set_requires_grad(true);

  std::vector<std::pair<std::string, Tensor>> out;
  {
    MemoryCategoryScope s(Category::Activation);
    Tensor x = batch_at(xs, 0), y = batch_at(ys, 0);
    Tensor logits = model->forward(x);
    Tensor loss = cross_entropy(reshape(logits, {-1, logits.size(-1)}), reshape(y, {-1}));
    // An MoE model with output_router_logits: + router_aux_loss_coef * the load-balancing loss.
    loss = moe_add_aux_loss(loss, take_pending_moe_aux(model.get()));
    loss.backward();
    out.push_back({"logits", cast(logits.detach(), DType::F32)});
    out.push_back({"loss", reshape(cast(loss.detach(), DType::F32), {1})});
  }
  for (auto& [name, p] : model->named_trainable_parameters()) {
    LT_CHECK(p.grad().defined(), "no gradient for " + name, "backward did not reach it", "check the model");
    out.push_back({"grad." + name, cast(p.grad(), DType::F32)});
  }
  if (train_mode)
    for (auto& [name, b] : model->named_buffers())
      if (is_floating(b.dtype())) out.push_back({"buffer." + name, cast(b, DType::F32)});
  if (steps > 0) {
    // The same start as PyTorch's fresh model (with an adapter only it has changed: the base is frozen).
    if (adapter.empty()) io::load_module(*model, weights);
    else load_lora_adapter(adapter, *model);
    zero_grad(model->trainable_parameters(), true);
    AdamWOptions o;
    o.lr = lr;
    o.weight_decay = 0.0;
    AdamW opt(model->named_trainable_parameters(), o);
    std::vector<float> curve;
    // --dump-step K: the parameters after K steps, and the gradients of step K-1, for finding
    // where a curve leaves PyTorch's (parity.py --dump-step).
    const int64_t dump_step = std::stoll(get(f, "dump-step", "0"));
    for (int64_t i = 0; i < steps; ++i) {
      Tensor loss;
      {
        MemoryCategoryScope s(Category::Activation);
        Tensor logits = model->forward(batch_at(xs, i));
        loss = cross_entropy(reshape(logits, {-1, logits.size(-1)}), reshape(batch_at(ys, i), {-1}));
        loss = moe_add_aux_loss(loss, take_pending_moe_aux(model.get()));
        loss.backward();
      }
      if (i + 1 == dump_step)
        for (auto& [name, p] : model->named_trainable_parameters())
          out.push_back({"stepgrad." + name, cast(p.grad(), DType::F32).clone()});  // cast may alias
      opt.step();
      opt.zero_grad(true);
      curve.push_back(float(loss.item()));
      if (i + 1 == dump_step)
        for (auto& [name, p] : model->named_trainable_parameters())
          out.push_back({"param." + name, cast(p.detach(), DType::F32).clone()});  // not the live tensor
    }
    out.push_back({"losses", from_vector(curve, {steps})});
  }
  io::save_safetensors(need(f, "out"), out);
  std::printf("parity: wrote %zu tensors to %s\n", out.size(), need(f, "out").c_str());
  return 0;
}

int dpo(const std::map<std::string, std::string>& f) {
  const Device dev = Device::parse(get(f, "device", "cuda"));
  const DType dtype = parse_dtype(get(f, "dtype", "f32"));
  const std::string cfg = read_text(need(f, "config"));
  nn::InitOptions init{dev, dtype, 0};
  auto build = [&](const std::string& weights) {
    std::shared_ptr<models::Model> m;
    {
      MemoryCategoryScope s(Category::Parameter);
      m = models::create_model_from_json(cfg, init);
    }
    m->train(false);  // dropout off, as the PyTorch side
    io::load_module(*m, weights);
    return m;
  };
  RunConfig rc;
  rc.objective = Objective::Dpo;
  rc.dpo_loss = *choice_named<DpoLoss>(get(f, "loss", "sigmoid"));
  rc.beta = std::stod(get(f, "beta", "0.1"));
  rc.label_smoothing = std::stod(get(f, "label-smoothing", "0"));
  rc.simpo_gamma = std::stod(get(f, "simpo-gamma", "0.5"));
  const std::string adapter = get(f, "adapter", "");
  rc.lora_rank = adapter.empty() ? 0 : 1;  // which reference (PreferenceObjective): adapters off, or precomputed
  std::map<std::string, Tensor> data;
  {
    MemoryCategoryScope s(Category::Input);
    data = io::load_safetensors(need(f, "batch"), dev);
  }
  Batch b;
  b.inputs = data.at("input_ids");
  b.targets = data.at("labels");
  const int64_t B = b.inputs.size(0), T = b.inputs.size(2);
  // aux [B, 4]: reference log-probabilities (a full fine-tune's, from --ref-weights), target counts.
  std::vector<int64_t> labels = b.targets.to(Device::cpu()).to_int_vector();
  std::vector<float> aux(size_t(4 * B), 0.f);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t k = 0; k < 2; ++k)
      for (int64_t t = 0; t < T; ++t) aux[size_t(4 * i + 2 + k)] += labels[size_t((2 * i + k) * T + t)] != -100;
  const bool simpo = rc.dpo_loss == DpoLoss::Simpo;
  if (adapter.empty() && !simpo) {
    auto ref = build(need(f, "ref-weights"));
    InferenceModeGuard inference;
    MemoryCategoryScope s(Category::Activation);
    std::vector<double> r =
        sequence_logps(*ref, reshape(b.inputs, {2 * B, T}), reshape(b.targets, {2 * B, T})).to_double_vector();
    for (int64_t i = 0; i < 2 * B; ++i) aux[size_t(4 * (i / 2) + i % 2)] = float(r[size_t(i)]);
  }
  b.aux = from_vector(aux, {B, 4}, DType::F32, dev);
  auto model = build(need(f, "weights"));
  if (!adapter.empty()) attach_peft_adapter(*model, adapter);  // the base frozen, the adapters trainable
  else
    for (auto& p : model->parameters()) p.set_requires_grad(true);
  PreferenceObjective objective(rc, nullptr, nullptr);
  std::vector<std::pair<std::string, Tensor>> out;
  {
    MemoryCategoryScope s(Category::Activation);
    Tensor loss = objective.loss(*model, b);
    loss.backward();
    out.push_back({"loss", reshape(cast(loss.detach(), DType::F32), {1})});
  }
  objective.take_metrics();
  // The log-probabilities again (no step was taken), to write them and the rewards per pair.
  Tensor pol, refl;
  {
    InferenceModeGuard inference;
    pol = reshape(sequence_logps(*model, reshape(b.inputs, {2 * B, T}), reshape(b.targets, {2 * B, T})), {B, 2});
    if (!adapter.empty() && !simpo) {
      nn::AdaptersOffScope off;
      refl = reshape(sequence_logps(*model, reshape(b.inputs, {2 * B, T}), reshape(b.targets, {2 * B, T})), {B, 2});
    } else if (!simpo) {
      refl = slice(b.aux, 1, 0, 2);
    }
    if (rc.dpo_loss != DpoLoss::Sigmoid) {
      Tensor counts = slice(b.aux, 1, 2, 4);
      pol = div(cast(pol, DType::F32), counts);
      if (refl.defined()) refl = div(cast(refl, DType::F32), counts);
    }
  }
  const std::vector<double> p = pol.to(Device::cpu()).to_double_vector();
  const std::vector<double> r = refl.defined() ? refl.to(Device::cpu()).to_double_vector() : std::vector<double>(p.size(), 0.0);
  std::vector<float> chosen, rejected;
  for (int64_t i = 0; i < B; ++i) {
    chosen.push_back(float(rc.beta * (p[size_t(2 * i)] - r[size_t(2 * i)])));
    rejected.push_back(float(rc.beta * (p[size_t(2 * i + 1)] - r[size_t(2 * i + 1)])));
  }
  out.push_back({"policy_logps", cast(pol, DType::F32)});
  if (refl.defined()) out.push_back({"reference_logps", cast(contiguous(refl), DType::F32)});
  out.push_back({"rewards_chosen", from_vector(chosen, {B})});
  out.push_back({"rewards_rejected", from_vector(rejected, {B})});
  for (auto& [name, prm] : model->named_trainable_parameters()) {
    LT_CHECK(prm.grad().defined(), "no gradient for " + name, "backward did not reach it", "check the model");
    out.push_back({"grad." + name, cast(prm.grad(), DType::F32)});
  }
  io::save_safetensors(need(f, "out"), out);
  std::printf("dpo: loss %.8g, wrote %zu tensors to %s\n", out[0].second.item(), out.size(), need(f, "out").c_str());
  return 0;
}

// The middle value of a non-empty list of timings.
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int throughput(const std::map<std::string, std::string>& f) {
  const Device dev = Device::parse(get(f, "device", "cuda"));
  // --precision NAME: the policy decides the parameter dtype, autocast and loss scaling.
  const bool has_policy = f.count("precision") > 0;
  const PrecisionPolicy policy = precision_policy(get(f, "precision", "32-true"));
  const DType dtype = has_policy ? policy.param_dtype : parse_dtype(get(f, "dtype", "bf16"));
  const int64_t B = std::stoll(get(f, "batch", "16")), T = std::stoll(get(f, "seq", "1024"));
  const int64_t warmup = std::stoll(get(f, "warmup", "5")), steps = std::stoll(get(f, "steps", "20"));
  LT_CHECK(warmup >= 0 && steps >= 1, "throughput: --warmup " + std::to_string(warmup) + " --steps " + std::to_string(steps),
           "the median needs at least one timed step", "pass --steps 1 or more and --warmup 0 or more");
  nn::InitOptions init{dev, dtype, 0};
  std::shared_ptr<models::Model> model;
  {
    MemoryCategoryScope s(Category::Parameter);
    model = models::create_model(get(f, "model", "gpt2-124m"), init);
  }
  model->eval();  // no dropout: the PyTorch peer runs with p = 0
  for (auto& p : model->parameters()) p.set_requires_grad(true);
  AdamWOptions o;
  o.lr = 3e-4;
  o.weight_decay = 0.1;
  o.state_dtype = DType::F32;
  AdamW opt(decay_groups(model->named_parameters()), o);
  opt.set_master_weights(get(f, "master-weights", "none") == "fp32");
  if (knob_on("LEANTRAIN_KEEP_CASTS") && policy.compute_dtype) opt.set_kept_casts(*policy.compute_dtype);
  GradScaler scaler;  // used by 16-mixed only
  // --fused-step 1: each parameter updated inside backward as its gradient completes (train's
  // --fused-step; with LEANTRAIN_OPT_STREAM=1 on the optimizer stream, beside the backward).
  std::unique_ptr<FusedStep> fused;
  if (get(f, "fused-step", "0") != "0") {
    LT_CHECK(!policy.loss_scaling, "throughput: --fused-step with " + policy.name,
             "the loss scale's overflow check needs the whole gradient before any update", "use bf16-mixed");
    fused = std::make_unique<FusedStep>(opt);
  }
  auto* lm = dynamic_cast<models::CausalLM*>(model.get());
  LT_CHECK(lm, "throughput: --model " + get(f, "model", "gpt2-124m") + " is not a language model",
           "the bench trains on random tokens", "pass a GPT-2 or LLaMA-family preset");
  const int64_t V = lm->vocab_size();
  // --lean-saves 0: blocks keep their norm and GELU outputs (train's --no-lean-saves).
  nn::set_lean_saves(*model, get(f, "lean-saves", "1") != "0");
  // --gemm-workspace BYTES: cuBLASLt's workspace, as train's (default 32 MiB).
  const int64_t ws = std::stoll(get(f, "gemm-workspace", std::to_string(kCublasWorkspaceBytes)));
  LT_CHECK(ws >= 0 && ws <= (int64_t(1) << 30), "throughput: --gemm-workspace " + std::to_string(ws),
           "it is 0 to 1 GiB, in bytes", "pass e.g. 33554432");
  set_gemm_workspace_bytes(ws);
  // --attention-kernel auto|leantrain|cudnn: as train's (default leantrain).
  {
    const std::string name = get(f, "attention-kernel", "leantrain");
    const std::optional<AttentionKernel> k = choice_named<AttentionKernel>(name);
    LT_CHECK(k.has_value(), "throughput: --attention-kernel " + name, "the choices are " + choice_list<AttentionKernel>(),
             "pass one of them");
    set_attention_kernel(*k);
  }
  // --checkpoint SPEC: as train's (e.g. blocks).
  if (get(f, "checkpoint", "none") != "none") nn::apply_checkpointing(*model, get(f, "checkpoint", "none"));
  const int64_t loss_chunk = std::stoll(get(f, "loss-chunk", "0"));
  LT_CHECK(loss_chunk >= 0, "throughput: --loss-chunk " + std::to_string(loss_chunk), "it is a number of rows",
           "pass 0 (off) or a positive number");
  model->set_loss_chunk(loss_chunk);
  // Layers and attention width for the attention term of the FLOPs per token.
  int64_t layers = 0, width = 0;
  if (auto* g = dynamic_cast<models::GPT2*>(model.get())) layers = g->config().n_layer, width = g->config().n_embd;
  if (auto* l = dynamic_cast<models::Llama*>(model.get()))
    layers = l->config().num_hidden_layers, width = l->config().num_attention_heads * l->config().head_size();
  std::mt19937_64 token_rng(7);
  Backend& be = backend_for(dev);
  // Host times from the step's start: when the loss, the backward and the whole step had been
  // enqueued. A step whose host_step_ms is close to ms_per_step waits for the host, not the GPU.
  std::vector<double> ms, host_loss, host_back, host_all;
  std::chrono::steady_clock::time_point t_loss;
  double last_loss = 0;
  for (int64_t i = 0; i < warmup + steps; ++i) {
    // A profiler started with --profile-from-start off records the timed steps only (with their
    // synthetic inputs: four small kernels a step), not the initialisation or the warm-up.
    if (i == warmup && dev.is_cuda()) cuda_profiler_range(true);
    Tensor x, y;
    {
      // Token ids drawn on the host and uploaded with their bytes kept there, as the data loader
      // does (Storage::host_copy): the loss checks the labels on the host, not by a read back
      // that would stall the step halfway (~0.13 ms on GPT-2).
      MemoryCategoryScope s(Category::Input);
      std::vector<int64_t> xs(size_t(B * T)), ys(size_t(B * T));
      for (int64_t b = 0; b < B; ++b) {
        int64_t prev = int64_t(token_rng() % uint64_t(V));
        for (int64_t t = 0; t < T; ++t) {
          const int64_t next = int64_t(token_rng() % uint64_t(V));
          xs[size_t(b * T + t)] = prev, ys[size_t(b * T + t)] = next, prev = next;
        }
      }
      x = from_ints(xs, {B, T}, DType::I64, dev);
      y = from_ints(ys, {B, T}, DType::I64, dev);
      if (dev.is_cuda()) {
        keep_host_bytes(x, xs.data());
        keep_host_bytes(y, ys.data());
      }
    }
    if (i == warmup) allocator_for(dev).reset_peak_stats();
    be.synchronize();
    auto t0 = std::chrono::steady_clock::now();
    Tensor loss;
    {
      MemoryCategoryScope s(Category::Activation);
      AutocastGuard autocast(policy.compute_dtype);
      loss = model->loss(x, y);
      t_loss = std::chrono::steady_clock::now();
      (policy.loss_scaling ? scale(loss, scaler.scale()) : loss).backward();
    }
    const auto t_back = std::chrono::steady_clock::now();
    if (fused) {
      fused->join();  // the updates ran inside backward
    } else if (policy.loss_scaling) {  // the trainer's scheme: the norm pass finds overflow, the step unscales
      GradNorm gn = clip_grad_norm(model->parameters(), 0.0, float(1.0 / scaler.scale()));
      if (gn.finite()) opt.step(gn.grad_scale);
      scaler.update(!gn.finite());
    } else {
      opt.step();
    }
    opt.zero_grad(true);
    const auto t_host = std::chrono::steady_clock::now();
    be.synchronize();
    auto t1 = std::chrono::steady_clock::now();
    auto since = [&](std::chrono::steady_clock::time_point t) { return std::chrono::duration<double, std::milli>(t - t0).count(); };
    if (i >= warmup) {
      ms.push_back(since(t1));
      host_loss.push_back(since(t_loss)), host_back.push_back(since(t_back)), host_all.push_back(since(t_host));
    }
    if (i + 1 == warmup + steps) last_loss = loss.item();
  }
  if (dev.is_cuda()) cuda_profiler_range(false);
  const double med = median(ms);
  const double n_params = double(model->num_parameters());
  const double flops_per_token = 6 * n_params + 12.0 * double(layers) * double(T) * double(width);
  const double tok_s = double(B * T) / (med / 1e3);
  MemoryStats st = allocator_for(dev).stats();
  std::printf(
      "{\"system\": \"leantrain\", \"precision\": \"%s\", \"dtype\": \"%s\", \"ms_per_step\": %.2f, \"tokens_per_s\": %.0f, \"mfu\": %.4f, "
      "\"peak_allocated\": %lld, \"peak_reserved\": %lld, \"final_loss\": %.4f, \"batch\": %lld, \"seq\": %lld, "
      "\"steps\": %lld, \"loss_chunk\": %lld, \"attention_kernel\": \"%s\", \"host_loss_ms\": %.2f, \"host_backward_ms\": %.2f, "
      "\"host_step_ms\": %.2f}\n",
      has_policy ? policy.name.c_str() : "", dtype_name(dtype), med, tok_s, tok_s * flops_per_token / 989e12, (long long)st.allocated_bytes.peak,
      (long long)st.reserved_bytes.peak, last_loss, (long long)B, (long long)T, (long long)steps, (long long)loss_chunk, name_of(attention_kernel()).c_str(), median(host_loss), median(host_back),
      median(host_all));
  return 0;
}

// Host time of synthetic image batches: what the training loop waits for when data is the bottleneck.
int loader(const std::map<std::string, std::string>& f) {
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
  const int64_t batch = std::stoll(get(f, "batch", "64")), size = std::stoll(get(f, "size", "224"));
  const int64_t batches = std::stoll(get(f, "batches", "8"));
  const int workers = std::stoi(get(f, "workers", "1"));
  auto ds = std::make_shared<SyntheticImages>(batch * batches, 3, size, 10, 0);
  std::vector<float> x(size_t(3 * size * size));
  int64_t y = 0;
  auto t = Clock::now();
  for (int64_t i = 0; i < batch; ++i) ds->get(i, x.data(), &y);
  const double serial_ms = ms_since(t);
  LoaderOptions o;
  o.batch_size = batch;
  o.drop_last = true;
  o.workers = workers;
  o.device = Device::parse(get(f, "device", "meta"));
  DataLoader dl(ds, o);
  t = Clock::now();
  dl.next();
  const double first_ms = ms_since(t);
  t = Clock::now();
  for (int64_t b = 1; b < batches; ++b) dl.next();
  const double steady_ms = ms_since(t) / double(batches - 1);
  std::printf("{\"mode\": \"loader\", \"batch\": %lld, \"size\": %lld, \"workers\": %d, \"serial_batch_ms\": %.1f, "
              "\"first_next_ms\": %.1f, \"steady_next_ms\": %.1f}\n",
              (long long)batch, (long long)size, workers, serial_ms, first_ms, steady_ms);
  if (!o.device.is_cuda()) return 0;
  // The copy alone: the workers get a pause per batch to be ahead (as during a training step),
  // so next() only allocates and copies.
  const double gap_ms = std::stod(get(f, "gap-ms", std::to_string(2.0 + 1.5 * serial_ms / workers)));
  Backend& be = backend_for(o.device);
  for (bool pin : {false, true}) {
    LoaderOptions po = o;
    po.pin_memory = pin;
    DataLoader pl(ds, po);
    pl.next();
    be.synchronize();
    std::vector<double> call, landed;
    for (int64_t b = 1; b < batches; ++b) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(gap_ms));
      const auto t0 = Clock::now();
      Batch x = pl.next();
      call.push_back(ms_since(t0));
      be.synchronize();
      landed.push_back(ms_since(t0));
    }
    std::sort(call.begin(), call.end());
    std::sort(landed.begin(), landed.end());
    std::printf("{\"mode\": \"loader_copy\", \"device\": \"%s\", \"pin_memory\": %s, \"pinned\": %s, \"batch_mib\": %.1f, "
                "\"gap_ms\": %.1f, \"next_ms\": %.2f, \"next_sync_ms\": %.2f}\n",
                o.device.str().c_str(), pin ? "true" : "false", pl.pinned() ? "true" : "false",
                double(batch * 3 * size * size * 4) / double(1 << 20), gap_ms, call[call.size() / 2],
                landed[landed.size() / 2]);
  }
  return 0;
}

int tokenize(const std::map<std::string, std::string>& f) {
  const std::string dir = get(f, "data", "/usr/share/games/fortunes");
  std::vector<std::string> docs;
  size_t bytes = 0;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    const std::string ext = p.extension().string();
    if (ext == ".dat" || ext == ".u8" || !std::filesystem::is_regular_file(p)) continue;
    for (std::string& d : parse_fortunes(read_text(p.string()))) {
      bytes += d.size();
      docs.push_back(std::move(d));
    }
  }
  auto tok = text::load_tokenizer_json(need(f, "tokenizer"));
  // The thread's CPU time, so that a machine busy with other work still shows one core's speed.
  auto cpu_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  double secs[2] = {0, 0}, cpu[2] = {0, 0};
  size_t tokens = 0;
  for (int pass = 0; pass < 2; ++pass) {
    tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    for (const std::string& d : docs) tokens += tok->encode(d, false).size();
    cpu[pass] = cpu_seconds() - c0;
    secs[pass] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double mb = double(bytes) / 1e6;
  std::printf("{\"mode\": \"tokenize\", \"kind\": \"%s\", \"documents\": %zu, \"mb\": %.2f, \"tokens\": %zu, "
              "\"first_pass_mb_s\": %.2f, \"cached_pass_mb_s\": %.2f, \"first_pass_mb_per_cpu_s\": %.2f, "
              "\"cached_pass_mb_per_cpu_s\": %.2f}\n",
              tok->kind().c_str(), docs.size(), mb, tokens, mb / secs[0], mb / secs[1], mb / cpu[0], mb / cpu[1]);
  return 0;
}

// 64-byte aligned vectors: the pinned state, gradient area and homes of --offload start on
// 64-byte lines (pages, in fact), which the streaming stores of the host step rely on.
template <class T> struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U> Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
  bool operator==(const Aligned64&) const { return true; }
};

int host_step(const std::map<std::string, std::string>& f) {
  using Clock = std::chrono::steady_clock;
  const int64_t n = std::stoll(get(f, "elements", "67108864"));
  const int threads = std::stoi(get(f, "threads", std::to_string(std::max(1u, std::thread::hardware_concurrency()))));
  const int steps = std::stoi(get(f, "steps", "10"));
  const std::string opt = get(f, "optimizer", "adamw");
  const std::string gname = get(f, "grad", "bf16"), oname = get(f, "out", "bf16"), pname = get(f, "path", "best");
  LT_CHECK(opt == "adamw" || opt == "lion" || opt == "sgd", "host_step: --optimizer " + opt, "no host step for it",
           "use adamw, lion or sgd");
  const DType gdt = parse_dtype(gname);
  const bool has_out = oname != "none";
  const DType odt = has_out ? parse_dtype(oname) : DType::BF16;
  offload::SimdPath path = offload::best_simd_path();
  if (pname == "avx512") path = offload::SimdPath::Avx512;
  else if (pname == "avx2") path = offload::SimdPath::Avx2;
  else if (pname == "scalar") path = offload::SimdPath::Scalar;
  else LT_CHECK(pname == "best", "host_step: --path " + pname, "not a path", "use best, avx512, avx2 or scalar");
  std::vector<float, Aligned64<float>> master(size_t(n), 0.5f), m(size_t(n), 0.0f), v(opt == "adamw" ? size_t(n) : 0, 0.0f),
      g32;
  std::vector<uint16_t, Aligned64<uint16_t>> g16, out(has_out ? size_t(n) : 0);
  if (gdt == DType::F32) g32.assign(size_t(n), 1e-3f);
  else g16.assign(size_t(n), gdt == DType::BF16 ? float_to_bf16(1e-3f) : float_to_half(1e-3f));
  const void* grad = g32.empty() ? static_cast<const void*>(g16.data()) : g32.data();
  void* copy = has_out ? out.data() : nullptr;
  // One step of the chosen optimizer: the host kernel (host = true) or the single-threaded
  // CpuBackend reference on f32 tensors of the same size.
  Tensor rp = full({n}, 0.5f), rg = full({n}, 1e-3f), rm = zeros({n}), rv = opt == "adamw" ? zeros({n}) : Tensor();
  auto one_step = [&](int t, bool host) {
    if (opt == "adamw") {
      AdamWArgs a{1e-4f, 0.9f, 0.999f, 1e-8f, 0.1f, t, 1.0f};
      if (host) offload::host_adamw_step({master.data(), m.data(), v.data(), grad, gdt, copy, odt, n}, a, threads, path);
      else backend_for(Device::cpu()).adamw_step({&rp, 1}, {&rg, 1}, {&rm, 1}, {&rv, 1}, a);
    } else if (opt == "lion") {
      LionArgs a{1e-4f, 0.9f, 0.99f, 0.1f, 1.0f};
      if (host) offload::host_lion_step({master.data(), m.data(), grad, gdt, copy, odt, n}, a, threads, path);
      else backend_for(Device::cpu()).lion_step({&rp, 1}, {&rg, 1}, {&rm, 1}, a);
    } else {
      SgdArgs a{1e-2f, 0.9f, 0.0f, 0.0f, false, t == 1, 1.0f};
      if (host) offload::host_sgd_step({master.data(), m.data(), grad, gdt, copy, odt, n}, a, threads, path);
      else backend_for(Device::cpu()).sgd_step({&rp, 1}, {&rg, 1}, {&rm, 1}, a);
    }
  };
  std::vector<double> ms;
  for (int t = 0; t <= steps; ++t) {  // step 0 warms the pages up and is not counted
    const auto t0 = Clock::now();
    one_step(t + 1, true);
    if (t > 0) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const double med = median(ms);
  // Bytes per element: master and each f32 state read and written, the gradient read, the copy written.
  const double states = opt == "adamw" ? 2.0 : 1.0;
  const double bytes = double(n) * (8.0 * (1.0 + states) + double(dtype_size(gdt)) + (has_out ? 2.0 : 0.0));
  one_step(1, false);  // the reference: its pages warmed up, then timed once
  const auto t0 = Clock::now();
  one_step(2, false);
  const double ref_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("{\"mode\": \"host_step\", \"optimizer\": \"%s\", \"elements\": %lld, \"threads\": %d, \"path\": \"%s\", "
              "\"grad\": \"%s\", \"out\": \"%s\", \"ms_per_step\": %.3f, \"gb_per_s\": %.2f, \"reference_1thread_ms\": %.3f}\n",
              opt.c_str(), (long long)n, threads, offload::simd_path_name(path), gname.c_str(), oname.c_str(), med,
              bytes / (med * 1e-3) / 1e9, ref_ms);
  return 0;
}

// Median milliseconds of fn over `iters` runs after one warm-up, each run synchronised.
double median_ms(Backend& be, int iters, const std::function<void()>& fn) {
  using Clock = std::chrono::steady_clock;
  fn();
  be.synchronize();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    fn();
    be.synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int nf4(const std::map<std::string, std::string>& f) {
  const Device dev = Device::parse(get(f, "device", cuda_available() ? "cuda" : "cpu"));
  const int64_t tokens = std::stoll(get(f, "tokens", "4096"));
  const int iters = std::stoi(get(f, "iters", "20"));
  Backend& be = backend_for(dev);
  auto time_ms = [&](const std::function<void()>& fn) { return median_ms(be, iters, fn); };
  std::string shapes = get(f, "shapes", "4096x4096,14336x4096,4096x14336");
  Generator gen(1);
  for (size_t start = 0; start < shapes.size();) {
    size_t end = shapes.find(',', start);
    if (end == std::string::npos) end = shapes.size();
    const std::string one = shapes.substr(start, end - start);
    start = end + 1;
    const size_t x = one.find('x');
    LT_CHECK(x != std::string::npos, "nf4: --shapes " + one, "a shape is OUTxIN", "e.g. 4096x14336");
    const int64_t out = std::stoll(one.substr(0, x)), in = std::stoll(one.substr(x + 1));
    const Tensor w = randn({out, in}, gen, 0.02f, DType::BF16, dev);
    const Nf4Weight q = nf4_quantize(w);
    const double deq_ms = time_ms([&] { (void)nf4_dequantize(q, DType::BF16); });
    const double n = double(out) * double(in);
    const double deq_bytes = n * (0.5 + 2.0) + double(q.absmax_codes.numel()) + 4.0 * double(q.nested_absmax.numel());
    Tensor xin = randn({tokens, in}, gen, 1.0f, DType::BF16, dev);
    xin.set_requires_grad(true);
    const Tensor dy = randn({tokens, out}, gen, 1.0f, DType::BF16, dev);
    auto fwd_bwd = [&](const std::function<Tensor()>& fwd) {
      return time_ms([&] {
        xin.set_grad(Tensor());
        fwd().backward(dy);
      });
    };
    const double nf4_ms = fwd_bwd([&] { return nf4_linear(xin, q); });
    Tensor wf = w.detach();
    const double frozen_ms = fwd_bwd([&] { return linear(xin, wf, Tensor()); });
    Tensor wt = w.detach();
    wt.set_requires_grad(true);
    const double trained_ms = fwd_bwd([&] {
      wt.set_grad(Tensor());
      return linear(xin, wt, Tensor());
    });
    const double gemm_flops = 2.0 * double(tokens) * n;
    std::printf("{\"mode\": \"nf4\", \"device\": \"%s\", \"out\": %lld, \"in\": %lld, \"tokens\": %lld, "
                "\"dequantize_ms\": %.4f, \"dequantize_gb_per_s\": %.1f, \"nf4_linear_fwd_bwd_ms\": %.3f, "
                "\"bf16_linear_frozen_fwd_bwd_ms\": %.3f, \"bf16_linear_trained_fwd_bwd_ms\": %.3f, "
                "\"nf4_over_bf16_frozen\": %.3f, \"nf4_tflops\": %.1f}\n",
                dev.str().c_str(), (long long)out, (long long)in, (long long)tokens, deq_ms,
                deq_bytes / (deq_ms * 1e-3) / 1e9, nf4_ms, frozen_ms, trained_ms, nf4_ms / frozen_ms,
                2.0 * gemm_flops / (nf4_ms * 1e-3) / 1e12);
    std::fflush(stdout);
  }
  return 0;
}


int grouped_gemm_bench(const std::map<std::string, std::string>& f) {
  const Device dev = Device::parse(get(f, "device", cuda_available() ? "cuda" : "cpu"));
  const int64_t tokens = std::stoll(get(f, "tokens", "4096")), k = std::stoll(get(f, "topk", "8"));
  const int64_t E = std::stoll(get(f, "experts", "128")), H = std::stoll(get(f, "hidden", "2048"));
  const int64_t F = std::stoll(get(f, "ffn", "768")), r = std::stoll(get(f, "rank", "16"));
  const int iters = std::stoi(get(f, "iters", "20"));
  LT_CHECK(tokens > 0 && k > 0 && k <= E && H > 0 && F > 0 && r > 0 && iters > 0,
           "grouped_gemm: a size is out of range", "tokens, topk <= experts, hidden, ffn, rank, iters > 0",
           "pass positive sizes");
  // Each token's k distinct experts uniformly at random: the counts a balanced router gives.
  std::mt19937_64 rng(7);
  std::vector<int64_t> counts(static_cast<size_t>(E), 0);
  std::vector<int64_t> pick(static_cast<size_t>(E));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(pick.begin(), pick.end(), 0);
    for (int64_t j = 0; j < k; ++j) {
      std::uniform_int_distribution<int64_t> u(j, E - 1);
      std::swap(pick[size_t(j)], pick[size_t(u(rng))]);
      ++counts[size_t(pick[size_t(j)])];
    }
  }
  std::vector<float> off(size_t(E) + 1, 0.f);
  for (int64_t e = 0; e < E; ++e) off[size_t(e) + 1] = off[size_t(e)] + float(counts[size_t(e)]);
  const Tensor offsets = to_device(from_vector(off, {E + 1}, DType::I32), dev);
  const int64_t R = tokens * k;
  const auto [mn, mx] = std::minmax_element(counts.begin(), counts.end());
  Generator gen(3);
  auto rnd = [&](const Shape& s) { return randn(s, gen, 0.02f, DType::BF16, dev); };
  MoeKernels& mk = moe_kernels_for(dev);
  Backend& be = backend_for(dev);
  auto time_ms = [&](const std::function<void()>& fn) { return median_ms(be, iters, fn); };
  auto report = [&](const char* name, double flops, const std::function<void()>& fn) {
    const double ms = time_ms(fn);
    std::printf("{\"mode\": \"grouped_gemm\", \"case\": \"%s\", \"rows\": %lld, \"experts\": %lld, "
                "\"rows_per_expert\": [%lld, %lld], \"ms\": %.4f, \"tflops\": %.1f}\n",
                name, (long long)R, (long long)E, (long long)*mn, (long long)*mx, ms, flops / (ms * 1e-3) / 1e12);
    std::fflush(stdout);
  };
  const Tensor x = rnd({R, H}), h = rnd({R, F}), gu = rnd({R, 2 * F}), gy = rnd({R, H});
  const Tensor w_gu = rnd({E, 2 * F, H}), w_down = rnd({E, H, F});
  const Tensor a_gu = rnd({E, r, H}), b_gu = rnd({E, 2 * F, r}), u = rnd({R, r});
  Tensor c_gu = rnd({R, 2 * F}), c_h = rnd({R, H}), c_f = rnd({R, F}), c_r = rnd({R, r});
  Tensor c_wg = Tensor::empty({E, r, H}, DType::F32, dev);
  const double rows = double(R);
  report("gate_up_fwd", 2 * rows * 2 * F * H, [&] { mk.grouped_gemm(c_gu, x, w_gu, true, offsets, 1.0f, false); });
  report("down_fwd", 2 * rows * H * F, [&] { mk.grouped_gemm(c_h, h, w_down, true, offsets, 1.0f, false); });
  report("gate_up_dgrad", 2 * rows * 2 * F * H, [&] { mk.grouped_gemm(c_h, gu, w_gu, false, offsets, 1.0f, false); });
  report("down_dgrad", 2 * rows * H * F, [&] { mk.grouped_gemm(c_f, gy, w_down, false, offsets, 1.0f, false); });
  report("lora_a_fwd", 2 * rows * r * H, [&] { mk.grouped_gemm(c_r, x, a_gu, true, offsets, 1.0f, false); });
  report("lora_b_epilogue", 2 * rows * 2 * F * r, [&] { mk.grouped_gemm(c_gu, u, b_gu, true, offsets, 2.0f, true); });
  report("lora_a_wgrad", 2 * rows * r * H, [&] { mk.grouped_gemm_wgrad(c_wg, u, x, offsets, 1.0f); });
  // The base and an adapter's term in one pass (grouped_gemm_pair): gate|up forward and input gradient.
  const Tensor b_gu_t = rnd({E, 2 * F, r});
  report("gate_up_fwd_lora_pair", 2 * rows * 2 * F * (H + r),
         [&] { mk.grouped_gemm_pair(c_gu, x, w_gu, true, u, b_gu_t, true, offsets); });
  report("gate_up_dgrad_lora_pair", 2 * rows * 2 * F * H + 2 * rows * r * H,
         [&] { mk.grouped_gemm_pair(c_h, gu, w_gu, false, u, a_gu, false, offsets); });
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    auto flags = parse_flags(argc, argv, 2);
    if (mode == "parity") return parity(flags);
    if (mode == "throughput") return throughput(flags);
    if (mode == "loader") return loader(flags);
    if (mode == "tokenize") return tokenize(flags);
    if (mode == "host_step") return host_step(flags);
    if (mode == "nf4") return nf4(flags);
    if (mode == "dpo") return dpo(flags);
    if (mode == "grouped_gemm") return grouped_gemm_bench(flags);
    std::fprintf(stderr, "usage: leantrain_bench parity|throughput|loader|tokenize|host_step|nf4|dpo|grouped_gemm --flag value ...\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "leantrain_bench: error: %s\n", e.what());
    return 1;
  }
}
