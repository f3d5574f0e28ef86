// MESHTRAIN_FAULT parsing and firing (core/fault), and checked durable writes (core/file_io):
// which pass fires for rank/step/after, what a bad spec says, that an injected ENOSPC in
// replace_file leaves the old file and no .tmp, and which errno values are exit 74.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/file_io.hpp"

using namespace meshtrain;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::string& spec) {
  try {
    fault::configure(spec);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Disarm {
  ~Disarm() {
    fault::configure("");
    fault::set_step(0);
  }
};

TEST(Fault, UnsetOrEmptyArmsNothing) {
  Disarm d;
  fault::configure("");
  EXPECT_EQ(fault::armed_spec(), "");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(fault::pass(fault::Point::MetricsWrite), 0);
  EXPECT_EQ(fault::pass(fault::Point::None), 0);  // "no point" never fires
}

TEST(Fault, FiresOnceAtThePassAfterKThatMatchesStepAndRank) {
  Disarm d;
  fault::configure("metrics.write:step=3:after=2:action=enospc");
  EXPECT_EQ(fault::armed_spec(), "metrics.write:step=3:after=2:action=enospc");
  fault::set_step(2);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(fault::pass(fault::Point::MetricsWrite), 0) << "another step";
  fault::set_step(3);
  EXPECT_EQ(fault::pass(fault::Point::RecordWrite), 0) << "another point";
  EXPECT_EQ(fault::pass(fault::Point::MetricsWrite), 0);
  EXPECT_EQ(fault::pass(fault::Point::MetricsWrite), 0);
  EXPECT_EQ(fault::pass(fault::Point::MetricsWrite), ENOSPC);
  EXPECT_EQ(fault::pass(fault::Point::MetricsWrite), 0) << "fires once";
}

TEST(Fault, OtherRanksNeverFire) {
  Disarm d;
  fault::configure("record.write:rank=5:action=eio");  // this test runs as world rank 0
  for (int i = 0; i < 3; ++i) EXPECT_EQ(fault::pass(fault::Point::RecordWrite), 0);
  fault::configure("record.write:rank=0:action=eio");
  EXPECT_EQ(fault::pass(fault::Point::RecordWrite), EIO);
}

TEST(Fault, BadSpecsAreUserErrorsNamingTheProblem) {
  Disarm d;
  EXPECT_NE(error_of("save.nowhere").find("unknown fault point 'save.nowhere' (one of: save.dataset"), std::string::npos);
  EXPECT_NE(error_of("save.dataset:action=boom").find("unknown action 'boom'"), std::string::npos);
  EXPECT_NE(error_of("save.dataset:after=-1").find("after=-1 is not an integer >= 0"), std::string::npos);
  EXPECT_NE(error_of("save.dataset:rank=x").find("rank=x is not an integer"), std::string::npos);
  EXPECT_NE(error_of("save.dataset:when=3").find("unknown option 'when=3'"), std::string::npos);
  EXPECT_NE(error_of("collective:action=eio").find("action eio needs an I/O point; collective is not one"),
            std::string::npos);
  EXPECT_NE(error_of("pool.allocate:action=eio").find("action eio needs an I/O point; pool.allocate is not one"),
            std::string::npos);
  EXPECT_NE(error_of("save.dataset:action=enomem")
                .find("action enomem needs an allocation point (pool.allocate); save.dataset is not one"),
            std::string::npos);
  EXPECT_EQ(fault::armed_spec(), "") << "a bad spec arms nothing";
}

TEST(FileIo, ReplaceFileIsAtomicAndAnInjectedFullDiskKeepsTheOldFile) {
  Disarm d;
  const std::string dir = fs::temp_directory_path() / ("meshtrain_file_io_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = dir + "/summary.json";
  file_io::replace_file(path, "old\n", fault::Point::RecordWrite);
  EXPECT_EQ(read(path), "old\n");
  fault::configure("record.write:action=enospc");
  try {
    file_io::replace_file(path, "new\n", fault::Point::RecordWrite);
    ADD_FAILURE() << "the injected ENOSPC was not reported";
  } catch (const UserError& e) {
    EXPECT_EQ(e.exit_status(), kExitIoError);
    EXPECT_NE(std::string(e.what()).find("cannot write " + path + ": no space left on device (4 B needed, "),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(read(path), "old\n") << "the old file is kept whole";
  EXPECT_FALSE(fs::exists(path + ".tmp")) << "no temporary is left";
  fs::remove_all(dir);
}

TEST(FileIo, StorageErrorsExit74OtherErrorsExit2) {
  for (int err : {ENOSPC, EDQUOT, EIO, EFBIG}) EXPECT_EQ(file_io::write_error("/x/y", err).exit_status(), kExitIoError);
  for (int err : {EACCES, EROFS, ENOTDIR}) EXPECT_EQ(file_io::write_error("/x/y", err).exit_status(), kExitUserError);
  EXPECT_EQ(std::string(file_io::write_error("/x/y", EIO, 10, "checkpoint").what()),
            "cannot write checkpoint /x/y: input/output error");
}

}  // namespace
