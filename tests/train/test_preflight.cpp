// require_writable_dir: the start-up probe of output.dir and checkpoint.dir. It must refuse
// what cannot be written (a file, a path under a file, /proc) and leave no trace: no
// directory created, no probe file left behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "train/preflight.hpp"

using namespace meshtrain;
namespace fs = std::filesystem;

namespace {

class Preflight : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("meshtrain_preflight_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::size_t entries(const fs::path& p) const {
    return static_cast<std::size_t>(std::distance(fs::directory_iterator(p), fs::directory_iterator{}));
  }
  std::string error_of(const std::string& key, const std::string& dir) const {
    try {
      train::require_writable_dir(key, dir);
    } catch (const UserError& e) {
      return e.what();
    }
    return "accepted";
  }
  fs::path dir_;
};

TEST_F(Preflight, AnExistingDirectoryIsProbedAndLeftAsItWas) {
  std::ofstream(dir_ / "config.ini") << "x";
  EXPECT_NO_THROW(train::require_writable_dir("output.dir", dir_.string()));
  EXPECT_EQ(entries(dir_), 1u);  // the probe file is gone
}

TEST_F(Preflight, AMissingDirectoryIsNotCreated) {
  const fs::path target = dir_ / "a" / "b" / "run";
  EXPECT_NO_THROW(train::require_writable_dir("output.dir", target.string()));
  EXPECT_FALSE(fs::exists(dir_ / "a"));
  EXPECT_EQ(entries(dir_), 0u);
}

TEST_F(Preflight, WhatCannotBeWrittenIsAUserErrorNamingTheKey) {
  std::ofstream(dir_ / "file") << "x";
  const std::string file = (dir_ / "file").string();
  std::string e = error_of("output.dir", file);
  EXPECT_NE(e.find("output.dir=" + file + " cannot be used: " + file + " is not a directory"), std::string::npos) << e;
  e = error_of("checkpoint.dir", file + "/ckpt");
  EXPECT_NE(e.find("checkpoint.dir=" + file + "/ckpt cannot be created: " + file + " is not a directory"),
            std::string::npos)
      << e;
  // /proc refuses new files even to root, for whom access(W_OK) would say yes.
  e = error_of("checkpoint.dir", "/proc/meshtrain-preflight");
  EXPECT_NE(e.find("checkpoint.dir=/proc/meshtrain-preflight is not writable: cannot create a file in /proc"),
            std::string::npos)
      << e;
  EXPECT_EQ(entries(dir_), 1u);
}

}  // namespace
