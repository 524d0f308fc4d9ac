// Modules: parameters and submodules registered under names, so every parameter has the dotted
// name PyTorch / Hugging Face give it ("transformer.h.3.attn.c_attn.weight") and every module a
// path ("transformer.h.3"). Checkpoint files, optimizers and activation checkpointing (which
// selects modules by regex over paths and wraps their forward) all key on these names.
//
// Parameters are created where they will live: on the target device, in the target dtype,
// inside MemoryCategoryScope(Category::Parameter), drawn by the counter-based generator on that
// device. No host copy, so building a model on `meta` costs nothing and on a GPU costs exactly
// its parameter bytes.
//
// The parameter store: a model's parameters (and buffers) are views into ONE flat allocation per
// (device, dtype), in registration order, each at a 512-byte-aligned offset. Modules register
// parameters one by one in their constructors, so the factory hands out slots first (shape,
// dtype, device, init and generator counters fixed at make()) and ParamFactory::materialize()
// then sizes, allocates and fills the flat buffer. A shard is an offset range into it.
//
// Trainable = requires_grad: set_trainable() switches parameters by name; frozen ones get no
// .grad and are never handed to the optimizer (Module::named_trainable_parameters()).
#pragma once
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "leantrain/ops.h"

namespace lt::nn {

// ---------------------------------------------------------------- parameter creation

struct DeferredSlot;

struct InitOptions {
  Device device = Device::cpu();
  DType dtype = DType::F32;
  uint64_t seed = 0;
  // true: one flat allocation per (device, dtype) holds every parameter (the parameter store);
  // false: one allocation per parameter (same values, the per-parameter build).
  bool flat = true;
  // false: parameters get their memory but no values, because a checkpoint is about to overwrite
  // every one (a model directory, --resume): no random draws for a model that is loaded. Buffers
  // are still filled (a checkpoint may lack them). Allocations are the same either way.
  bool fill = true;
  // Set (flat builds only): materialize() allocates nothing and appends the pending slots here,
  // for a feature that creates some of them its own way before the rest get their store
  // (--quantize: one layer's 16-bit weight at a time, never the whole model; quant/nf4_build.h).
  std::vector<DeferredSlot>* deferred = nullptr;
};

// How one parameter's initial values are drawn.
struct Init {
  enum class Kind { Normal, Uniform, Zeros, Ones } kind = Kind::Normal;
  double a = 0.02;  // Normal: std; Uniform: bound (values in [-a, a))
  // A row (of dim 0) set to zero after the draw, -1 for none: a table's padding row, as
  // transformers' padding_idx. Part of the init so that a deferred slot gets it too.
  int64_t zero_row = -1;
  Init with_zero_row(int64_t row) const {
    Init i = *this;
    i.zero_row = row;
    return i;
  }
  static Init normal(double std) { return {Kind::Normal, std}; }
  static Init uniform(double bound) { return {Kind::Uniform, bound}; }
  static Init xavier_uniform(int64_t fan_in, int64_t fan_out);
  static Init zeros() { return {Kind::Zeros, 0.0}; }
  static Init ones() { return {Kind::Ones, 0.0}; }
};

// Creates parameters (requires_grad, Category::Parameter) in construction order from one
// generator, so a model built with one seed has the same values on every device, flat or not.
//
// With InitOptions::flat, make() returns a tensor without memory yet: its generator counters are
// taken at once (so values do not depend on when it is filled) and materialize() gives every
// pending tensor its view of the flat buffer and its values. Models call materialize() at the
// end of their constructor; the destructor does it for whatever is still pending (so a module
// built around a local factory is complete when the factory goes out of scope). Using a
// parameter before then is a bug (it has no memory).
class ParamFactory {
 public:
  explicit ParamFactory(const InitOptions& o) : opts_(o), gen_(o.seed) {}
  ~ParamFactory() noexcept(false);
  ParamFactory(const ParamFactory&) = delete;
  ParamFactory& operator=(const ParamFactory&) = delete;

  // A trainable parameter in the factory's dtype.
  Tensor make(const Shape& shape, const Init& init) { return make(shape, init, opts_.dtype); }
  // A parameter of another dtype (e.g. u8 quantized weights): trainable only when floating.
  Tensor make(const Shape& shape, const Init& init, DType dtype);
  // A buffer (Module::register_buffer): stored with the parameters, never trainable.
  Tensor make_buffer(const Shape& shape, const Init& init, std::optional<DType> dtype = {});
  // Allocates the flat buffer of each (device, dtype) and fills every pending tensor, in
  // registration order. Idempotent; later make() calls start a new batch.
  void materialize();
  // A distinct seed for each dropout module (derived, does not consume parameter counters).
  uint64_t next_seed();
  Device device() const { return opts_.device; }
  DType dtype() const { return opts_.dtype; }

  // Bytes a tensor takes in the flat buffer: its size rounded up to the allocator's 512-byte
  // granule, so every view keeps the alignment a separate allocation would have.
  static int64_t flat_bytes(const Shape& shape, DType dtype);

 private:
  struct Pending {
    std::shared_ptr<TensorImpl> impl;
    Init init;
    uint64_t counter = 0;  // first generator counter (random kinds)
    bool buffer = false;
  };
  Tensor create(const Shape& shape, const Init& init, DType dtype, bool buffer);
  void fill(const Tensor& t, const Init& init, uint64_t counter);

  InitOptions opts_;
  Generator gen_;
  uint64_t seeds_ = 0;
  std::vector<Pending> pending_;
};

// A parameter slot left without memory by InitOptions::deferred: its tensor (shape, dtype,
// device, no storage yet) and how its values are drawn.
struct DeferredSlot {
  Tensor tensor;
  Init init;
  uint64_t seed = 0, counter = 0;  // the generator's seed and the slot's first counter
  bool buffer = false;
};

// The values a slot gets in a non-deferred build, written into `t` (the slot's shape and dtype,
// any device): what lets a deferred slot be created one at a time with the same values.
void fill_slot(const Tensor& t, const DeferredSlot& s);
// Gives `slots` their store (one flat allocation per (device, dtype), views in order, as
// ParamFactory::materialize does) and fills buffers always, parameters when `fill`.
void materialize_slots(const std::vector<DeferredSlot>& slots, bool fill);

// ---------------------------------------------------------------- Module

class Module;

// A child that its owner calls through the owner's registry (Module::register_child), so that
// Module::replace_module() changes what the owner calls. Resolves on every access (one index).
template <class M>
class Child {
 public:
  Child() = default;
  M* get() const;
  M* operator->() const { return get(); }
  M& operator*() const { return *get(); }
  explicit operator bool() const { return owner_ != nullptr; }

 private:
  friend class Module;
  Child(const Module* owner, size_t index) : owner_(owner), index_(index) {}
  const Module* owner_ = nullptr;
  size_t index_ = 0;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The reference class name ("Linear", "GPT2Block", ...): lets features select modules by kind.
  virtual const char* type_name() const { return "Module"; }

  // Parameters in registration order (own first, then children's), each tensor once: a tied
  // weight appears under its first name only, as in PyTorch's named_parameters().
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  // The parameters that train (requires_grad), in the same order: what optimizers and gradient
  // clipping take. Frozen parameters get no .grad and no optimizer state.
  std::vector<std::pair<std::string, Tensor>> named_trainable_parameters() const;
  std::vector<Tensor> trainable_parameters() const;
  // Freezes (on = false) or unfreezes every parameter whose full name matches `pattern` (an
  // ECMAScript regex over the whole name; a plain name matches itself). Freezing drops the
  // parameter's .grad. Returns how many matched; throws lt::Error when none does, or when a
  // non-floating parameter (e.g. u8 quantized weights) would be made trainable.
  int64_t set_trainable(const std::string& pattern, bool on);
  // Buffers: tensors saved and loaded with the module (safetensors, checkpoints) that never train,
  // e.g. running statistics. Named like parameters, in the same traversal order.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // The slots that hold the parameters, for features that replace a parameter (sharding,
  // quantization): assigning through a slot changes what the owning module uses.
  std::vector<std::pair<std::string, Tensor*>> named_parameter_slots();
  std::vector<std::pair<std::string, Tensor*>> named_buffer_slots();
  // Every module in pre-order with its path; the root's path is "".
  std::vector<std::pair<std::string, Module*>> named_modules();
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  Module* find_module(const std::string& path);  // nullptr when absent
  Tensor parameter(const std::string& name) const;  // throws lt::Error when absent
  int64_t num_parameters() const;
  int64_t parameter_bytes() const;

  // Puts `m` in place of the module at `path` (e.g. a quantized or LoRA-wrapped Linear): its
  // owner calls `m` from then on, named_parameters()/named_modules() list m's, and m takes the
  // old module's training mode. The old module's forward wrapper is not carried over (install
  // checkpointing after replacing). Throws lt::Error when no module is at `path`, when its owner
  // keeps it in a member of its own (registered with register_module, not register_child), or
  // when `m` is not of the kind the owner calls.
  void replace_module(const std::string& path, std::shared_ptr<Module> m);

  // Training mode (dropout on) for this module and all below it.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Forward wrapping: when set, the module's forward runs as wrapper(self, x, forward) instead
  // of forward(x). Other arguments (masks) are bound inside `forward`. Activation
  // checkpointing installs wrappers on the modules its regex selects.
  using ForwardFn = std::function<Tensor(const Tensor&)>;
  using ForwardWrapper = std::function<Tensor(Module& self, const Tensor& x, const ForwardFn& forward)>;
  // only_recomputes: the wrapper does nothing but recompute the module in the backward (a
  // checkpoint with no other wrapper inside); an op that recomputes this module anyway (a norm
  // or GELU folded into the linear after it) may then bypass the wrapper.
  void set_forward_wrapper(ForwardWrapper w, bool only_recomputes = false) {
    wrapper_ = std::move(w);
    wrapper_only_recomputes_ = wrapper_ && only_recomputes;
  }
  const ForwardWrapper& forward_wrapper() const { return wrapper_; }
  // No wrapper, or one that only recomputes (see set_forward_wrapper).
  bool recomputed_or_unwrapped() const { return !wrapper_ || wrapper_only_recomputes_; }

  // Maps a tensor name found in a checkpoint file to this module's parameter name ("" = skip
  // it). Models override it to accept reference checkpoints (e.g. GPT-2 files without the
  // "transformer." prefix, or with causal-mask buffers).
  virtual std::string checkpoint_key_to_name(const std::string& key) const { return key; }

 protected:
  // Registers a parameter; the returned reference stays valid for the module's lifetime.
  Tensor& register_parameter(const std::string& name, Tensor t);
  // Registers a buffer (requires_grad off); the reference stays valid for the module's lifetime.
  Tensor& register_buffer(const std::string& name, Tensor t);
  // A child the owner keeps a pointer to itself: replace_module refuses it (the owner would go
  // on calling the old one).
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m, nullptr);
    return m;
  }
  // A child the owner calls through the returned handle: replace_module may swap it for any
  // module that is an M.
  template <class M>
  Child<M> register_child(const std::string& name, std::shared_ptr<M> m) {
    if constexpr (std::is_same_v<M, Module>) add_child(name, m, [](const Module&) { return true; });
    else add_child(name, m, [](const Module& r) { return dynamic_cast<const M*>(&r) != nullptr; });
    return Child<M>(this, children_.size() - 1);
  }
  // Runs forward(x), through the wrapper if one is set. `forward` must capture by value: a
  // checkpointing wrapper keeps it to recompute during backward.
  Tensor call_forward(const Tensor& x, const ForwardFn& forward);

 private:
  template <class M>
  friend class Child;
  using Accepts = std::function<bool(const Module&)>;  // null: the owner holds the child itself
  void add_child(const std::string& name, std::shared_ptr<Module> m, Accepts accepts);
  void check_new_name(const std::string& name) const;
  void collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out);
  std::vector<std::pair<std::string, Tensor*>> named_slots(bool buffers);

  std::deque<std::pair<std::string, Tensor>> params_;  // deque: references stay valid
  std::deque<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<Accepts> accepts_;  // per child
  bool training_ = true;
  ForwardWrapper wrapper_;
  bool wrapper_only_recomputes_ = false;
};

template <class M>
M* Child<M>::get() const {
  return owner_ ? static_cast<M*>(owner_->children_[index_].second.get()) : nullptr;
}

// A module with one tensor in, one out; operator() goes through the forward wrapper.
class UnaryModule : public Module {
 public:
  Tensor operator()(const Tensor& x) {
    return call_forward(x, [this](const Tensor& in) { return forward(in); });
  }
  virtual Tensor forward(const Tensor& x) = 0;
};

// Children named "0", "1", ... (or given names, as torchvision's "encoder_layer_0").
class ModuleList : public Module {
 public:
  const char* type_name() const override { return "ModuleList"; }
  // Replaceable (the list's owner calls entries through at()), unless `owner_keeps_it`: the
  // owner calls that entry through a pointer of its own, so replace_module must refuse it.
  void append(std::shared_ptr<Module> m, const std::string& name = "", bool owner_keeps_it = false);
  size_t size() const { return children().size(); }
  Module& operator[](size_t i) const { return *children()[i].second; }
  // Entry i as an M; throws lt::Error when a replacement is of another kind.
  template <class M>
  M& at(size_t i) const {
    M* m = dynamic_cast<M*>(children()[i].second.get());
    if (!m) entry_kind_error(i);
    return *m;
  }

 private:
  [[noreturn]] void entry_kind_error(size_t i) const;
};

// ---------------------------------------------------------------- layers

// OutIn: torch.nn.Linear, weight [out, in]. InOut: Hugging Face Conv1D (GPT-2), weight [in, out].
enum class WeightLayout { OutIn, InOut };

struct LinearOptions {
  bool bias = true;
  WeightLayout layout = WeightLayout::OutIn;
  Init weight_init = Init::normal(0.02);
  Init bias_init = Init::zeros();
};

class Linear : public UnaryModule {
 public:
  Linear(ParamFactory& pf, int64_t in, int64_t out, const LinearOptions& o = {});
  // Wraps parameters made beforehand: weight [out, in] ([in, out] for InOut), bias [out] or
  // undefined. Lets a layer make several Linears' weights one after another, so that the store
  // places them back to back and one GEMM can use them as one weight (stacked_rows).
  Linear(Tensor weight, Tensor bias, WeightLayout layout = WeightLayout::OutIn);
  const char* type_name() const override { return layout_ == WeightLayout::InOut ? "Conv1D" : "Linear"; }
  Tensor forward(const Tensor& x) override;  // [..., in] -> [..., out]
  // forward(x) when nothing reads the result (a checkpointed block's recomputation, Note [Unread
  // region output]): the casts run, the product runs dry unless x must first be made contiguous
  // (the backward reads that copy). Bypasses the forward wrapper.
  Tensor forward_unread_output(const Tensor& x);
  // gelu(forward(x), Tanh) as one op (linear_gelu: the GELU in the GEMM's epilogue on the GPU).
  // Bypasses the forward wrapper: callers use it only when this module has none.
  Tensor forward_gelu_tanh(const Tensor& x);
  // {forward(x), gelu(forward(x))} (linear_gelu_parts; the GELU not recorded) and
  // forward(gelu(pre)) saving pre only (gelu_linear): an MLP's fc1 and fc2 when neither has a
  // forward wrapper. Both bypass the forward wrapper.
  LinearGelu forward_gelu_parts(const Tensor& x, GeluApprox approx);
  // keep_act: gelu_linear's keep_act (the GELU's output saved for the weight gradient).
  // output_unread: nothing reads the result (a checkpointed block's recomputation, Note [Unread
  // region output]): the casts run, the product runs dry (unless the GELU it would keep is
  // computed here).
  Tensor forward_after_gelu(const Tensor& pre, const Tensor& act, GeluApprox approx, bool keep_act = false,
                            bool output_unread = false);
  bool weight_in_out() const { return layout_ == WeightLayout::InOut; }
  const Tensor& weight() const { return *weight_; }
  Tensor bias() const { return bias_ ? *bias_ : Tensor(); }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  WeightLayout layout_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
};

class LayerNorm : public UnaryModule {
 public:
  LayerNorm(ParamFactory& pf, int64_t dim, double eps = 1e-5, bool bias = true);
  const char* type_name() const override { return "LayerNorm"; }
  Tensor forward(const Tensor& x) override;
  // {x + residual, forward(x + residual)} in one fused op (add_layer_norm). Bypasses the forward
  // wrapper: callers use it only when none is installed.
  AddNormResult forward_add(const Tensor& x, const Tensor& residual);
  // linear(forward(x), w, b) with the normalised rows recomputed in the backward instead of
  // saved (layer_norm_linear); w and b already in their compute dtype. When w's dtype is not
  // x's, the unfused norm then linear. Bypasses the forward wrapper.
  Tensor forward_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool weight_in_out);
  // forward_linear feeding a tanh GELU: layer_norm_linear_gelu (pre and, from the GEMM's
  // epilogue, act), or the unfused norm then linear (act undefined) when w's dtype is not x's.
  LinearGelu forward_linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b, bool weight_in_out);

 private:
  double eps_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
};

// `m` as a plain Linear (not a subclass, no forward wrapper), else nullptr: the fused paths
// that bypass a module's forward take only such modules.
Linear* plain_linear(UnaryModule* m);
// `m` as a plain LayerNorm (not a subclass; no forward wrapper, or a checkpoint's alone: the
// fold recomputes the norm anyway), else nullptr.
LayerNorm* plain_layer_norm(UnaryModule* m);
// The dtype autocast(w) would have (w itself outside autocast or when w is not f32).
DType compute_dtype_of(const Tensor& w);

class RMSNorm : public UnaryModule {
 public:
  // unit_offset: Gemma's RMSNorm, x * rstd * (1 + w) with w initialised to zeros.
  RMSNorm(ParamFactory& pf, int64_t dim, double eps = 1e-6, bool unit_offset = false);
  const char* type_name() const override { return "RMSNorm"; }
  Tensor forward(const Tensor& x) override;
  AddNormResult forward_add(const Tensor& x, const Tensor& residual);  // as LayerNorm's (add_rms_norm)
  bool unit_offset() const { return unit_offset_; }
  const Tensor& weight() const { return *weight_; }
  double eps() const { return eps_; }

 private:
  double eps_;
  bool unit_offset_ = false;
  Tensor* weight_ = nullptr;
};

// ids (i32/i64) [...] -> [..., dim].
class Embedding : public UnaryModule {
 public:
  // padding_idx: as torch's nn.Embedding(padding_idx), lookups of that id add nothing to the
  // table's gradient (-1: none). The row's initial value is the Init's (with_zero_row zeroes it).
  Embedding(ParamFactory& pf, int64_t num, int64_t dim, const Init& init = Init::normal(0.02), int64_t padding_idx = -1);
  const char* type_name() const override { return "Embedding"; }
  Tensor forward(const Tensor& ids) override;
  const Tensor& weight() const { return *weight_; }
  int64_t padding_idx() const { return padding_idx_; }

 private:
  Tensor* weight_ = nullptr;
  int64_t padding_idx_ = -1;
};

// Identity in eval mode or when p == 0. Each Dropout owns its generator, so a wrapper that
// recomputes a forward (checkpointing) can save and restore generator() to redraw one mask.
// A module that draws random numbers on each call (dropout's masks, BigBird's random key blocks).
// A checkpointed region rewinds its generator before recomputing, so the recomputation draws
// what the forward drew, and a run's checkpoint saves its offset (trainer_state.json).
class RandomSource {
 public:
  virtual ~RandomSource() = default;
  virtual Generator& generator() = 0;
};

class Dropout : public UnaryModule, public RandomSource {
 public:
  Dropout(double p, uint64_t seed) : p_(p), gen_(seed) {}
  const char* type_name() const override { return "Dropout"; }
  Tensor forward(const Tensor& x) override;
  Generator& generator() override { return gen_; }
  double p() const { return p_; }

 private:
  double p_;
  Generator gen_;
};

// Conv2d with kernel == stride == patch, as lt::patchify + a linear over the flattened kernel:
// images [B, C, H, W] -> [B, (H/p)(W/p), D]. weight [D, C, p, p], bias [D] (torch layout).
class PatchEmbedding : public UnaryModule {
 public:
  PatchEmbedding(ParamFactory& pf, int64_t channels, int64_t dim, int64_t patch, const Init& weight_init);
  const char* type_name() const override { return "Conv2d"; }
  Tensor forward(const Tensor& images) override;

 private:
  int64_t channels_, dim_, patch_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
};

// GELU as a module (Hugging Face's `act`, torchvision's MLP "1"), so that features can select
// it by path (e.g. a --checkpoint regex).
class Gelu : public UnaryModule {
 public:
  explicit Gelu(GeluApprox approx) : approx_(approx) {}
  const char* type_name() const override { return "GELU"; }
  Tensor forward(const Tensor& x) override { return gelu(x, approx_); }
  GeluApprox approx() const { return approx_; }

 private:
  GeluApprox approx_;
};

// fc1 -> GELU -> fc2 -> dropout, with the child names of the reference model.
struct MlpOptions {
  int64_t dim = 0, hidden = 0;
  GeluApprox approx = GeluApprox::Tanh;
  WeightLayout layout = WeightLayout::OutIn;
  Init fc1_init = Init::normal(0.02), fc2_init = Init::normal(0.02);
  double dropout = 0.0;
  std::string fc1_name = "c_fc", fc2_name = "c_proj", dropout_name = "dropout", act_name = "act";
};

class Mlp : public UnaryModule {
 public:
  Mlp(ParamFactory& pf, const MlpOptions& o);
  const char* type_name() const override { return "MLP"; }
  Tensor forward(const Tensor& x) override;
  // forward(ln(x)) with ln folded into fc1 (layer_norm_linear) when fc1, the GELU and fc2 are
  // plain modules and x has fc1's compute dtype; undefined when it cannot (call forward then).
  // output_unread as forward_unread_output's.
  Tensor forward_normed(const Tensor& x, LayerNorm& ln, bool output_unread = false);
  // The forward when nothing reads its output (a checkpointed block's recomputation, Note
  // [Unread region output]): fc2's product runs dry when fc2 is a plain linear after the fused
  // GELU and the dropout does nothing; the same graph, allocations and saved tensors.
  Tensor forward_unread_output(const Tensor& x) { return forward_impl(x, true); }
  // false: keep the GELU's output for fc2 (one elementwise pass less in backward, 4C more kept
  // per token); see set_lean_saves().
  void set_lean_saves(bool on) { lean_saves_ = on; }
  bool lean_saves() const { return lean_saves_; }

 private:
  Tensor forward_impl(const Tensor& x, bool output_unread);
  // Whether fc2's output may go unread: the dropout after it passes it through (no mask to draw).
  bool dropout_idle() const;
  Child<UnaryModule> fc1_, fc2_, act_, drop_;
  bool lean_saves_ = true;
};

// What a batch says about its tokens that attention must obey, handed from the model through
// the blocks to every attention core:
//   key_padding  u8 [B, T], 1 = a real token (a right-padded encoder batch), or undefined;
//   doc_pos      i32 [B, T], each token's position inside its document for rows that pack several
//                documents (0 at each document start): attention is block-diagonal causal
//                (AttentionMask::doc_pos) and the rotary or learned positions are these, not
//                0..T-1. Undefined: one sequence per row.
//   text         u8 [B, T], 1 = text, 0 = padding that attention already keeps away from the text
//                (a row's tail: after its text in a causal row, or a document of its own). Not
//                read by attention: only by statistics over the batch's tokens (the MoE
//                load-balancing loss, which transformers takes over attention_mask's tokens).
//                Undefined: every token that key_padding keeps.
// Converts from a Tensor (a key-padding mask), as the signatures took before packing.
struct TokenMask {
  Tensor key_padding, doc_pos, text;
  TokenMask() = default;
  TokenMask(Tensor key_padding_mask) : key_padding(std::move(key_padding_mask)) {}  // NOLINT: implicit on purpose
  TokenMask(Tensor key_padding_mask, Tensor document_positions)
      : key_padding(std::move(key_padding_mask)), doc_pos(std::move(document_positions)) {}
  static TokenMask documents(Tensor document_positions) { return TokenMask(Tensor(), std::move(document_positions)); }
};

// The attention core, without parameters: fused projection qkv [B, T, 3C] (q | k | v) ->
// lt::self_attention_packed (heads read and merged in place, no copies) -> [B, T, C]. A module of its
// own so that selective checkpointing can recompute it; the mask's key padding and documents apply.
// Grouped-query form: qkv [B, T, (heads + 2 kv_heads) * head_dim], kv_heads dividing heads ->
// [B, T, heads * head_dim] (query head h reads kv head h / (heads / kv_heads), in place).
class AttentionCore : public Module {
 public:
  AttentionCore(int64_t dim, int64_t heads, bool causal)
      : AttentionCore(heads, heads, heads > 0 ? dim / heads : 0, causal) {}
  // window > 0 (causal only): each query sees the `window` latest keys, itself included.
  AttentionCore(int64_t heads, int64_t kv_heads, int64_t head_dim, bool causal, double scale = 0.0, int64_t window = 0)
      : heads_(heads), kv_heads_(kv_heads), head_dim_(head_dim), causal_(causal), scale_(scale), window_(window) {}
  const char* type_name() const override { return "ScaledDotProductAttention"; }
  Tensor operator()(const Tensor& qkv, const TokenMask& mask = {}) {
    return call_forward(qkv, [this, mask](const Tensor& in) { return forward(in, mask); });
  }
  // Virtual: BigBird's block-sparse core (nn_encoder.h) attends to fewer keys.
  virtual Tensor forward(const Tensor& qkv, const TokenMask& mask) const;
  // Forward FLOPs for qkv of shape [B, T, W]: q k^T and p v, 2 B T^2 heads head_dim each (halved when causal).
  virtual double forward_flops(const Shape& qkv) const;

 protected:
  int64_t heads_, kv_heads_, head_dim_;
  bool causal_;
  double scale_ = 0.0;  // <= 0: 1 / sqrt(head_dim); Gemma: query_pre_attn_scalar^-0.5
  int64_t window_ = 0;  // sliding window (0: none)
};

// Multi-head self-attention over x [B, T, C] through lt::scaled_dot_product_attention, under the
// batch's TokenMask (key padding, packed documents).
class SelfAttention : public Module {
 public:
  SelfAttention(int64_t dim, int64_t heads, bool causal);
  Tensor operator()(const Tensor& x, const TokenMask& mask = {}) {
    return call_forward(x, [this, mask](const Tensor& in) { return forward(in, mask); });
  }
  virtual Tensor forward(const Tensor& x, const TokenMask& mask) = 0;
  int64_t heads() const { return heads_; }
  // forward(ln(x)) with ln folded into the input projection (layer_norm_linear) where the
  // projection allows it; undefined when it cannot (call forward(ln(x)) then). Bypasses the
  // forward wrappers of this module and its projection's: callers check there are none.
  virtual Tensor forward_normed(const Tensor& x, LayerNorm& ln, const TokenMask& mask) {
    (void)x, (void)ln, (void)mask;
    return Tensor();
  }

 protected:
  // Fused projection [B, T, 3C] (q | k | v) -> attended values [B, T, C], before the output projection.
  Tensor attend(const Tensor& qkv, const TokenMask& mask) const { return (*core_)(qkv, mask); }
  // proj(attend(qkv)) for forward_normed (lean saves): one attention_linear op, which recomputes
  // the attention output in its backward instead of keeping it (C per token less per block), when
  // the core and the projection are plain modules without wrappers, no selective region is
  // recording, and the sequence is no longer than the width (T <= C: attention's forward is then
  // at most a sixth of the block's matmul work). Else the two calls.
  Tensor attend_project(const Tensor& qkv, const TokenMask& mask, UnaryModule& proj) const;
  // Subclasses register the core (child "core") after their input projection.
  void register_core() { core_ = register_child("core", std::make_shared<AttentionCore>(dim_, heads_, causal_)); }
  int64_t dim_, heads_;
  bool causal_;
  Child<AttentionCore> core_;
};

// GPT-2 naming: c_attn (Conv1D [C, 3C]), c_proj (Conv1D [C, C]), resid_dropout.
class CausalSelfAttention : public SelfAttention {
 public:
  CausalSelfAttention(ParamFactory& pf, int64_t dim, int64_t heads, double resid_dropout, const Init& proj_init);
  const char* type_name() const override { return "GPT2Attention"; }
  Tensor forward(const Tensor& x, const TokenMask& mask) override;
  Tensor forward_normed(const Tensor& x, LayerNorm& ln, const TokenMask& mask) override;

 private:
  Child<UnaryModule> c_attn_, c_proj_, drop_;
};

// torch.nn.MultiheadAttention naming: in_proj_weight [3D, D], in_proj_bias [3D], out_proj (Linear).
class MultiheadSelfAttention : public SelfAttention {
 public:
  MultiheadSelfAttention(ParamFactory& pf, int64_t dim, int64_t heads, bool causal = false);
  const char* type_name() const override { return "MultiheadAttention"; }
  Tensor forward(const Tensor& x, const TokenMask& mask) override;
  Tensor forward_normed(const Tensor& x, LayerNorm& ln, const TokenMask& mask) override;

 private:
  Tensor* in_proj_weight_ = nullptr;
  Tensor* in_proj_bias_ = nullptr;
  Child<UnaryModule> out_proj_;
};

// Pre-norm transformer block: x += attn(ln_1(x)); x += mlp(ln_2(x)). Children keep the
// reference names (GPT-2: ln_1, attn, ln_2, mlp; torchvision: ln_1, self_attention, ln_2, mlp).
struct BlockNames {
  std::string ln_1 = "ln_1", attn = "attn", ln_2 = "ln_2", mlp = "mlp";
};

class PreNormBlock : public Module {
 public:
  PreNormBlock(const char* type, std::shared_ptr<UnaryModule> ln_1, std::shared_ptr<SelfAttention> attn,
               std::shared_ptr<UnaryModule> ln_2, std::shared_ptr<UnaryModule> mlp, const BlockNames& names = {});
  const char* type_name() const override { return type_; }
  Tensor operator()(const Tensor& x, const TokenMask& mask = {}) {
    return call_forward(x, [this, mask](const Tensor& in) { return forward(in, mask); });
  }
  Tensor forward(const Tensor& x, const TokenMask& mask);

  // Gemma's "sandwich" norms: post_attn normalises the attention's output and post_mlp the MLP's
  // before each residual add (x + post_attn(attn(ln_1(x))), then h + post_mlp(mlp(ln_2(h)))).
  // Registered as children `post_attn_name` and `post_mlp_name`, after the four.
  void set_post_norms(std::shared_ptr<UnaryModule> post_attn, std::shared_ptr<UnaryModule> post_mlp,
                      const std::string& post_attn_name, const std::string& post_mlp_name);

  // false: the norms' outputs are kept for the projections after them and ln_2 runs fused with
  // the residual add (faster backward, 2C more kept per token); see set_lean_saves().
  void set_lean_saves(bool on) { lean_saves_ = on; }

  // The block with its output left as two terms of the residual stream, out = h + m, so that the
  // next norm adds them in its own kernel (add_layer_norm), as ln_2 already does inside the block:
  // no separate add in the forward, and in the backward no separate sum of the two gradients that
  // reach the block's input. Takes its input the same way (m undefined: the input is h). Only
  // when splits_residual(): no forward wrapper on the block, ln_1 or ln_2 (both LayerNorms), and
  // lean saves off (the path whose ln_2 is fused already). The values are forward()'s: the
  // fused add rounds the same sum once, as the add did.
  bool splits_residual() const;
  std::pair<Tensor, Tensor> forward_split(const Tensor& h, const Tensor& m, const TokenMask& mask);

 private:
  Tensor forward_post_norms(const Tensor& x, const TokenMask& mask);
  const char* type_;
  Child<UnaryModule> ln_1_, ln_2_, mlp_;
  Child<UnaryModule> post_attn_, post_mlp_;  // set_post_norms only
  Child<SelfAttention> attn_;
  bool lean_saves_ = true;
};

// What pre-norm blocks keep for backward (docs/memory-model.md, "What a block keeps"). On (the
// default): LayerNorm outputs and the GELU's output are recomputed in backward from what the
// block keeps anyway, 10 C per token instead of 16. Off: they are kept, which saves one GELU and
// two norm passes per block in backward (about 6% of a GPT-2 124M step on an H100) for 6 C
// more per token. Sets every PreNormBlock and Mlp under `root`; returns how many it set.
int64_t set_lean_saves(Module& root, bool on);

}  // namespace lt::nn
