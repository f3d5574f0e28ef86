#pragma once
/// \brief Where training tokens come from (data.dir, resolved by the app layer): a dataset
/// directory made by `meshtrain prepare`, or synthetic random tokens (`data.dir = random`).

#include <string>

namespace meshtrain::data {

struct DataSource {
  enum class Kind { Dir, Random };
  Kind kind = Kind::Dir;
  std::string dir;  ///< Kind::Dir: the dataset directory (empty: data.dir not set)

  static DataSource random() { return {Kind::Random, ""}; }
  static DataSource directory(std::string d) { return {Kind::Dir, std::move(d)}; }
  bool is_random() const { return kind == Kind::Random; }
  /// data.dir as the user writes it: the directory, or "random".
  std::string text() const { return is_random() ? "random" : dir; }
};

}  // namespace meshtrain::data
