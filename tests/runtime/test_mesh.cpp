// resolve_mesh_shape: valid shapes (with -1 inference) and every class of invalid request,
// each of which must be a UserError whose message names the key to change.
// mesh_coord / mesh_rank: a bijection with tp fastest-varying.
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "runtime/mesh.hpp"

using namespace meshtrain;

namespace {

struct Valid {
  MeshRequest request;
  int world;
  std::optional<int> ranks_per_node;
  MeshShape expect;
};

TEST(ResolveMesh, ValidShapes) {
  const Valid cases[] = {
      // dp_shard inferred (the default request: 1 x -1 x 1)
      {{1, -1, 1}, 1, 1, {1, 1, 1}},
      {{1, -1, 1}, 4, 4, {1, 4, 1}},
      {{1, -1, 2}, 4, 4, {1, 2, 2}},
      {{1, -1, 4}, 4, 4, {1, 1, 4}},
      {{2, -1, 1}, 4, 4, {2, 2, 1}},
      {{2, -1, 2}, 8, 4, {2, 2, 2}},
      {{2, -1, 2}, 16, 8, {2, 4, 2}},
      // tp inferred
      {{1, 2, -1}, 8, 8, {1, 2, 4}},
      // dp_replicate inferred (hybrid sharding: one shard group per node)
      {{-1, 4, 1}, 16, 4, {4, 4, 1}},
      {{-1, 2, 2}, 8, 4, {2, 2, 2}},
      // nothing inferred
      {{1, 3, 1}, 3, 3, {1, 3, 1}},
      {{3, 1, 1}, 3, 3, {3, 1, 1}},
      {{1, 1, 1}, 1, std::nullopt, {1, 1, 1}},
      // odd world sizes
      {{1, -1, 1}, 7, 7, {1, 7, 1}},
      {{1, -1, 3}, 6, 6, {1, 2, 3}},
      // unknown ranks per node (plan for another machine): no node constraint
      {{1, -1, 8}, 16, std::nullopt, {1, 2, 8}},
      // tp equal to the node size is allowed
      {{1, -1, 4}, 8, 4, {1, 2, 4}},
  };
  for (const Valid& c : cases) {
    const MeshRequest& request = c.request;
    SCOPED_TRACE(testing::Message() << "request " << request.dp_replicate << "x" << request.dp_shard << "x"
                                    << request.tp << " on " << c.world << " ranks");
    const MeshShape s = resolve_mesh_shape(request, c.world, c.ranks_per_node);
    EXPECT_EQ(s.dp_replicate, c.expect.dp_replicate);
    EXPECT_EQ(s.dp_shard, c.expect.dp_shard);
    EXPECT_EQ(s.tp, c.expect.tp);
    EXPECT_EQ(s.world(), c.world);
    EXPECT_EQ(s.dp(), c.expect.dp_replicate * c.expect.dp_shard);
  }
}

struct Invalid {
  const char* what;
  MeshRequest request;
  int world;
  std::optional<int> ranks_per_node;
  std::vector<std::string> must_name;  // substrings the message must contain
};

TEST(ResolveMesh, EveryInvalidRequestNamesTheKeyToChange) {
  const Invalid cases[] = {
      {"tp does not divide the world (issue 2's example: plan --parallel.tp=3 on 4 ranks)",
       {1, -1, 3}, 4, 4, {"parallel.tp=3", "4 ranks", "parallel.dp_shard cannot be inferred", "{1, 2, 4}"}},
      {"dp_replicate does not divide the world", {3, -1, 1}, 4, 4,
       {"parallel.dp_replicate=3", "parallel.dp_replicate in {1, 2, 4}"}},
      {"product of two given dimensions does not divide the world", {2, -1, 3}, 8, 8,
       {"parallel.dp_replicate=2 x parallel.tp=3 = 6", "parallel.dp_replicate and parallel.tp", "8 ranks"}},
      {"dp_shard does not divide when dp_replicate is inferred", {-1, 3, 1}, 4, 4,
       {"parallel.dp_shard=3", "parallel.dp_replicate cannot be inferred"}},
      {"two dimensions to infer", {1, -1, -1}, 4, 4, {"parallel.dp_shard", "parallel.tp", "both -1"}},
      {"two dimensions to infer (replicate and shard)", {-1, -1, 1}, 4, 4,
       {"parallel.dp_replicate", "parallel.dp_shard"}},
      {"zero tp", {1, -1, 0}, 4, 4, {"parallel.tp", "positive integer or -1", "got 0"}},
      {"negative dp_shard other than -1", {1, -2, 1}, 4, 4, {"parallel.dp_shard", "got -2"}},
      {"zero dp_replicate", {0, -1, 1}, 4, 4, {"parallel.dp_replicate", "got 0"}},
      {"product does not match the world", {1, 2, 1}, 4, 4,
       {"parallel.dp_replicate x parallel.dp_shard x parallel.tp = 1 x 2 x 1 = 2", "4 ranks", "-1"}},
      {"product larger than the world", {2, 2, 2}, 4, 4, {"= 8", "4 ranks", "launch 8 ranks"}},
      {"tp larger than a node", {1, -1, 8}, 16, 4, {"parallel.tp=8", "larger than a node", "4 ranks per node", "parallel.tp <= 4"}},
      {"tp larger than a node (tp inferred)", {1, 1, -1}, 8, 4, {"parallel.tp=8", "larger than a node"}},
      {"tp does not divide the ranks per node", {1, -1, 4}, 12, 6,
       {"parallel.tp=4", "does not divide the 6 ranks per node", "straddle", "{1, 2, 3, 6}"}},
      {"tp does not divide an odd node", {1, -1, 2}, 6, 3, {"parallel.tp=2", "3 ranks per node"}},
  };
  for (const Invalid& c : cases) {
    SCOPED_TRACE(c.what);
    try {
      const MeshShape s = resolve_mesh_shape(c.request, c.world, c.ranks_per_node);
      ADD_FAILURE() << "accepted, resolved to " << s.str();
    } catch (const UserError& e) {
      const std::string msg = e.what();
      for (const std::string& part : c.must_name)
        EXPECT_NE(msg.find(part), std::string::npos) << "message lacks '" << part << "': " << msg;
      // One sentence for a person: no newlines.
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(ResolveMesh, WorldSizeMustBePositive) {
  EXPECT_THROW(resolve_mesh_shape({1, -1, 1}, 0, std::nullopt), UserError);
}

TEST(MeshCoord, RoundTripAndTpFastest) {
  for (const MeshShape& s : {MeshShape{1, 1, 1}, MeshShape{1, 4, 1}, MeshShape{1, 2, 2},
                             MeshShape{2, 2, 1}, MeshShape{2, 1, 2}, MeshShape{1, 1, 4},
                             MeshShape{2, 3, 4}, MeshShape{3, 5, 2}}) {
    SCOPED_TRACE(s.str());
    std::set<std::tuple<int, int, int>> seen;
    for (int r = 0; r < s.world(); ++r) {
      const MeshCoord c = mesh_coord(s, r);
      ASSERT_GE(c.tp, 0);
      ASSERT_LT(c.tp, s.tp);
      ASSERT_GE(c.shard, 0);
      ASSERT_LT(c.shard, s.dp_shard);
      ASSERT_GE(c.replicate, 0);
      ASSERT_LT(c.replicate, s.dp_replicate);
      EXPECT_EQ(mesh_rank(s, c), r);
      EXPECT_TRUE(seen.insert({c.replicate, c.shard, c.tp}).second) << "rank " << r << " reuses a coordinate";
      // tp fastest, then shard, then replicate (the documented layout).
      EXPECT_EQ(r, (c.replicate * s.dp_shard + c.shard) * s.tp + c.tp);
      // A tp group is tp consecutive ranks starting at a multiple of tp: inside a node.
      EXPECT_EQ(r / s.tp, c.replicate * s.dp_shard + c.shard);
    }
    EXPECT_EQ(static_cast<int>(seen.size()), s.world());
  }
}

TEST(DescribeMesh, ListsEveryRankWithItsGroups) {
  const std::string text = describe_mesh_shape(MeshShape{1, 2, 2}, nullptr);
  EXPECT_NE(text.find("1 (dp_replicate) x 2 (dp_shard) x 2 (tp) = 4 ranks"), std::string::npos) << text;
  // rank 2: shard 1, tp 0; tp group [2,3]; shard group [0,2]; replicate group [2].
  EXPECT_NE(text.find("[2,3]"), std::string::npos) << text;
  EXPECT_NE(text.find("[0,2]"), std::string::npos) << text;
  EXPECT_NE(text.find("[1,3]"), std::string::npos) << text;
}

}  // namespace
