#pragma once
/// \brief The config keys whose value is one of a few words, as enums. config.cpp turns the
/// word into the enum once, when the config is parsed (an unknown word is a UserError that
/// lists the valid ones); everything after compares enums, and the effective config writes
/// the words back (choice_name).

#include <array>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace meshtrain {

enum class ModelFamily { Gpt2, Llama };                                           ///< model.family
enum class Precision { Fp32, Bf16 };                                              ///< train.precision
enum class StrategyChoice { Auto, FullShard, ShardGradOp, NoShard, HybridShard };  ///< parallel.strategy
enum class Backend { Auto, Mpi, Nccl };                                            ///< parallel.backend
enum class ReduceDtype { Fp32, Bf16 };                                             ///< parallel.reduce_dtype
enum class LrScheduleKind { Cosine, Constant };                                    ///< train.lr_schedule
enum class LogLevel { Debug, Info, Warn };                                         ///< output.log_level
enum class Objective { Sft, Dpo, Simpo };                                                 ///< train.objective
enum class AttentionChoice { Cudnn, Kokkos };                                      ///< gpu.attention
enum class NormFormChoice { Auto, Rows, Warps };                                   ///< gpu.norm_form
enum class BaseQuant { None, Nf4, Int8, Gguf };                                    ///< model.base_quant

/// The words of each choice, in the enum's order.
template <class E>
struct ChoiceWords;
template <>
struct ChoiceWords<ModelFamily> {
  static constexpr std::array<const char*, 2> words{"gpt2", "llama"};
};
template <>
struct ChoiceWords<Precision> {
  static constexpr std::array<const char*, 2> words{"fp32", "bf16"};
};
template <>
struct ChoiceWords<StrategyChoice> {
  static constexpr std::array<const char*, 5> words{"auto", "full_shard", "shard_grad_op", "no_shard",
                                                    "hybrid_shard"};
};
template <>
struct ChoiceWords<Backend> {
  static constexpr std::array<const char*, 3> words{"auto", "mpi", "nccl"};
};
template <>
struct ChoiceWords<ReduceDtype> {
  static constexpr std::array<const char*, 2> words{"fp32", "bf16"};
};
template <>
struct ChoiceWords<LrScheduleKind> {
  static constexpr std::array<const char*, 2> words{"cosine", "constant"};
};
template <>
struct ChoiceWords<LogLevel> {
  static constexpr std::array<const char*, 3> words{"debug", "info", "warn"};
};
template <>
struct ChoiceWords<Objective> {
  static constexpr std::array<const char*, 3> words{"sft", "dpo", "simpo"};
};
template <>
struct ChoiceWords<AttentionChoice> {
  static constexpr std::array<const char*, 2> words{"cudnn", "kokkos"};
};
template <>
struct ChoiceWords<NormFormChoice> {
  static constexpr std::array<const char*, 3> words{"auto", "rows", "warps"};
};
template <>
struct ChoiceWords<BaseQuant> {
  static constexpr std::array<const char*, 4> words{"none", "nf4", "int8", "gguf"};
};

template <class E, class = void>
struct is_choice : std::false_type {};
template <class E>
struct is_choice<E, std::void_t<decltype(ChoiceWords<E>::words)>> : std::true_type {};
template <class E>
inline constexpr bool is_choice_v = is_choice<E>::value;

template <class E>
const char* choice_name(E e) {
  return ChoiceWords<E>::words[static_cast<std::size_t>(e)];
}

template <class E>
std::optional<E> parse_choice(std::string_view word) {
  for (std::size_t i = 0; i < ChoiceWords<E>::words.size(); ++i)
    if (word == ChoiceWords<E>::words[i]) return static_cast<E>(i);
  return std::nullopt;
}

/// The enum of a word known to be valid (code and tests that build configs from words);
/// std::invalid_argument otherwise. User input goes through the config parser instead.
template <class E>
E choice_of(std::string_view word) {
  if (const std::optional<E> e = parse_choice<E>(word)) return *e;
  throw std::invalid_argument("not a valid choice: " + std::string(word));
}

/// "a, b, c", for messages.
template <class E>
std::string choice_list() {
  std::string out;
  for (const char* w : ChoiceWords<E>::words) out += std::string(out.empty() ? "" : ", ") + w;
  return out;
}

}  // namespace meshtrain
