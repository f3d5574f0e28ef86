#pragma once
/// \brief LaunchedKernels: which kernels a piece of code launched, by name (a Kokkos Tools
/// callback), so that a test can tell which variant of a kernel a call chose.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

namespace meshtrain::test {

/// \brief While alive, records the name of every parallel_for launched. One at a time.
class LaunchedKernels {
 public:
  LaunchedKernels() {
    EXPECT_EQ(active_, nullptr) << "LaunchedKernels: one recorder at a time";
    active_ = &names_;
    Kokkos::Tools::Experimental::set_begin_parallel_for_callback(&record);
  }
  ~LaunchedKernels() {
    Kokkos::Tools::Experimental::set_begin_parallel_for_callback(nullptr);
    active_ = nullptr;
  }
  LaunchedKernels(const LaunchedKernels&) = delete;
  LaunchedKernels& operator=(const LaunchedKernels&) = delete;

  /// How many launches had exactly this name.
  int count(const std::string& name) const {
    return static_cast<int>(std::count(names_.begin(), names_.end(), name));
  }
  /// How many launches had a name ending in `suffix`.
  int count_ending(const std::string& suffix) const {
    return static_cast<int>(std::count_if(names_.begin(), names_.end(), [&](const std::string& n) {
      return n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
    }));
  }
  const std::vector<std::string>& names() const { return names_; }

 private:
  static void record(const char* name, std::uint32_t, std::uint64_t*) {
    if (active_ != nullptr) active_->push_back(name);
  }
  inline static std::vector<std::string>* active_ = nullptr;
  std::vector<std::string> names_;
};

}  // namespace meshtrain::test
