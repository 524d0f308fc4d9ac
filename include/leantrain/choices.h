// The technique choices of a run as enums, each with its one table of names. The command line,
// a checkpoint's saved config and the plan's echoed command read and write these names; every
// other file compares enums (docs/decisions.md, "One recipe table"). Adding a value: add it to
// the enum and to its names, in the same order.
#pragma once
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace lt {

enum class OptimizerKind { Sgd, AdamW, Lion, AdamW8bit, Lion8bit };
// Lightning's names (include/leantrain/precision.h says what each policy does).
enum class Precision { True32, Mixed16, MixedBf16, True16, TrueBf16 };
enum class MasterWeights { None, Fp32 };
// Optimizer moments: Auto keeps the parameter's dtype.
enum class StateDtype { Auto, F32, Bf16 };
enum class ScheduleKind { Constant, Cosine };
// none | optimizer (the f32 state and the step on the host) | params (that, and the checkpointed
// blocks' weights resting in pinned host memory).
enum class OffloadKind { None, Optimizer, Params };
enum class QuantizeKind { None, Nf4 };
enum class StrategyKind { Ddp, Zero1, Zero2, Fsdp };
// fsdp's all-gathers: in the compute dtype (bf16 under bf16-mixed), or f32 (for measuring).
enum class FsdpGather { Compute, F32 };
// How a language model's documents fill the rows of --seq-len (docs/user-guide.md, "Packing"):
// none: one document per row, the rest padding; docs: several whole documents per row, each
// attending only to itself with positions from 0 (padding-free packing); concat: the documents
// back to back, cut every seq_len tokens, attending across their boundaries.
enum class Packing { None, Docs, Concat };
// Which tokens carry the loss: the assistant's (a conversation's assistant turns, a pair's
// response; TRL's assistant-only / completion-only loss), or all of them.
enum class TrainOn { Assistant, All };
// What a language model's step minimises: next-token cross-entropy (sft), or a preference loss
// over chosen/rejected pairs (dpo; docs/user-guide.md, "Preference tuning").
enum class Objective { Sft, Dpo };
// The preference loss of --objective dpo, by TRL's loss_type names: sigmoid (DPO), ipo (IPO, on
// log-probabilities averaged over the completion's tokens), simpo (SimPO: averaged, no reference).
enum class DpoLoss { Sigmoid, Ipo, Simpo };

// ChoiceNames<E>::names[i] is the name of the enum value i; flag is the option that takes it.
template <class E>
struct ChoiceNames;
template <>
struct ChoiceNames<OptimizerKind> {
  static constexpr const char* flag = "--optimizer";
  static constexpr std::array<std::string_view, 5> names{"sgd", "adamw", "lion", "adamw8bit", "lion8bit"};
};
template <>
struct ChoiceNames<Precision> {
  static constexpr const char* flag = "--precision";
  static constexpr std::array<std::string_view, 5> names{"32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"};
};
template <>
struct ChoiceNames<MasterWeights> {
  static constexpr const char* flag = "--master-weights";
  static constexpr std::array<std::string_view, 2> names{"none", "fp32"};
};
template <>
struct ChoiceNames<StateDtype> {
  static constexpr const char* flag = "--state-dtype";
  static constexpr std::array<std::string_view, 3> names{"auto", "f32", "bf16"};
};
template <>
struct ChoiceNames<ScheduleKind> {
  static constexpr const char* flag = "--schedule";
  static constexpr std::array<std::string_view, 2> names{"constant", "cosine"};
};
template <>
struct ChoiceNames<OffloadKind> {
  static constexpr const char* flag = "--offload";
  static constexpr std::array<std::string_view, 3> names{"none", "optimizer", "params"};
};
template <>
struct ChoiceNames<QuantizeKind> {
  static constexpr const char* flag = "--quantize";
  static constexpr std::array<std::string_view, 2> names{"none", "nf4"};
};
template <>
struct ChoiceNames<StrategyKind> {
  static constexpr const char* flag = "--strategy";
  static constexpr std::array<std::string_view, 4> names{"ddp", "zero1", "zero2", "fsdp"};
};

template <>
struct ChoiceNames<FsdpGather> {
  static constexpr const char* flag = "--fsdp-gather";
  static constexpr std::array<std::string_view, 2> names{"compute", "f32"};
};

template <>
struct ChoiceNames<Packing> {
  static constexpr const char* flag = "--packing";
  static constexpr std::array<std::string_view, 3> names{"none", "docs", "concat"};
};
template <>
struct ChoiceNames<TrainOn> {
  static constexpr const char* flag = "--train-on";
  static constexpr std::array<std::string_view, 2> names{"assistant", "all"};
};
template <>
struct ChoiceNames<Objective> {
  static constexpr const char* flag = "--objective";
  static constexpr std::array<std::string_view, 2> names{"sft", "dpo"};
};
template <>
struct ChoiceNames<DpoLoss> {
  static constexpr const char* flag = "--dpo-loss";
  static constexpr std::array<std::string_view, 3> names{"sigmoid", "ipo", "simpo"};
};

template <class E>
constexpr std::string_view name_view(E e) {
  return ChoiceNames<E>::names[static_cast<size_t>(e)];
}
template <class E>
std::string name_of(E e) {
  return std::string(name_view(e));
}
// The value named s, or nothing.
template <class E>
constexpr std::optional<E> choice_named(std::string_view s) {
  for (size_t i = 0; i < ChoiceNames<E>::names.size(); ++i)
    if (ChoiceNames<E>::names[i] == s) return static_cast<E>(i);
  return std::nullopt;
}
// "sgd, adamw, lion, adamw8bit or lion8bit"
template <class E>
std::string choice_list() {
  std::string s;
  const auto& n = ChoiceNames<E>::names;
  for (size_t i = 0; i < n.size(); ++i) s += std::string(i == 0 ? "" : i + 1 == n.size() ? " or " : ", ") + std::string(n[i]);
  return s;
}

inline bool is_eight_bit(OptimizerKind k) { return k == OptimizerKind::AdamW8bit || k == OptimizerKind::Lion8bit; }

}  // namespace lt
