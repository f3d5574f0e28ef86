#pragma once
/// \brief Where training tokens come from (data.dir, resolved by the app layer): a dataset
/// directory made by `meshtrain prepare`, or synthetic random tokens (`data.dir = random`).

#include <string>

namespace meshtrain::data {

struct DataSource {
  enum class Kind { Dir, Random };
  Kind kind = Kind::Dir;
  std::string dir;  ///< Kind::Dir: the dataset directory (empty: data.dir not set)
  bool document_mask = false;  ///< data.document_mask: text windows masked per end-of-text document

  static DataSource random() { return {Kind::Random, "", false}; }
  static DataSource directory(std::string d) { return {Kind::Dir, std::move(d), false}; }
  bool is_random() const { return kind == Kind::Random; }
  /// data.dir as the user writes it: the directory, or "random".
  std::string text() const { return is_random() ? "random" : dir; }
};

}  // namespace meshtrain::data
