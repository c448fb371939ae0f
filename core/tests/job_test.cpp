#include <doctest/doctest.h>

#include <set>

#include "test_util.hpp"
#include "topo/core/job.hpp"

using namespace topo::core;

TEST_CASE("rank order parses and rejects unknown or repeated dimensions") {
  Result<std::vector<Dim>> o = ParseRankOrder("tp-cp-ep-dp-pp");
  REQUIRE(o.ok());
  CHECK(FormatRankOrder(o.value()) == "tp-cp-ep-dp-pp");
  CHECK(FormatRankOrder(ParseRankOrder("tp-pp-dp").value()) == "tp-pp-dp");
  Result<std::vector<Dim>> bad = ParseRankOrder("tp-xx-dp");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("'xx'") != std::string::npos);
  CHECK_FALSE(ParseRankOrder("tp-tp").ok());
  CHECK_FALSE(ParseRankOrder("").ok());
  CHECK_FALSE(ParseRankOrder("tp--dp").ok());
}

TEST_CASE("job validation names the field and the fix") {
  struct Case {
    const char* what;
    JobSpec job;
    const char* needle;
  };
  auto with = [](auto f) {
    JobSpec j = testing::MakeJob(64, 8, 2);
    f(j);
    return j;
  };
  std::vector<Case> cases = {
      {"zero gpus", with([](JobSpec& j) { j.gpus = 0; }), "at least 1 GPU"},
      {"product", with([](JobSpec& j) { j.parallelism.dp = 3; }), "make the product equal gpus"},
      {"ep divides dp", with([](JobSpec& j) { j.parallelism.ep = 3; }), "ep must divide dp"},
      {"negative tp", with([](JobSpec& j) { j.parallelism.tp = -8; }), "parallelism.tp"},
      {"order misses pp",
       with([](JobSpec& j) { j.parallelism.order = ParseRankOrder("tp-dp").value(); }),
       "leaves out 'pp'"},
      {"gpus_per_node", with([](JobSpec& j) { j.gpus_per_node = 100; }), "gpus_per_node"},
      {"spares", with([](JobSpec& j) { j.spares = -1; }), "spares"},
      {"constraint without tier", with([](JobSpec& j) {
         j.constraints[0] = {Strength::kRequired, ""};
       }),
       "names no tier"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Status s = ValidateJobSpec(c.job);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find(c.needle) != std::string::npos);
  }
  CHECK(ValidateJobSpec(testing::MakeJob(64, 8, 2)).ok());
  CHECK(ValidateJobSpec(testing::MakeJob(4096, 8, 4, 8)).ok());
}

TEST_CASE("rank layout: TP fastest, EP blocks are tp x cp x ep consecutive ranks") {
  JobSpec job = testing::MakeJob(256, 4, 2, 4, 2);  // tp4 cp2 ep4 pp2 dp16
  REQUIRE(ValidateJobSpec(job).ok());
  RankLayout l(job.parallelism);
  CHECK(l.world_size() == 256);
  CHECK(l.GroupSize(GroupKind::kTp) == 4);
  CHECK(l.GroupSize(GroupKind::kEp) == 32);
  CHECK(l.GroupSize(GroupKind::kDp) == 16);
  CHECK(l.GroupSize(GroupKind::kPp) == 2);
  CHECK(l.GroupSize(GroupKind::kCp) == 2);
  // TP groups: 0-3, 4-7, ...
  CHECK(l.GroupMembers(GroupKind::kTp, l.GroupOf(GroupKind::kTp, 5)) ==
        std::vector<int>{4, 5, 6, 7});
  // EP block of rank 40: ranks 32..63.
  std::vector<int> ep = l.GroupMembers(GroupKind::kEp, l.GroupOf(GroupKind::kEp, 40));
  CHECK(ep.front() == 32);
  CHECK(ep.back() == 63);
  // PP is slowest: stage 1 starts at rank 128.
  CHECK(l.Coord(127, Dim::kPp) == 0);
  CHECK(l.Coord(128, Dim::kPp) == 1);
  CHECK(l.GroupMembers(GroupKind::kPp, l.GroupOf(GroupKind::kPp, 3)) == std::vector<int>{3, 131});
  // Every kind partitions the ranks.
  for (GroupKind k : kAllGroupKinds) {
    std::set<int> seen;
    for (int g = 0; g < l.GroupCount(k); ++g) {
      for (int r : l.GroupMembers(k, g)) CHECK(seen.insert(r).second);
    }
    CHECK(static_cast<int>(seen.size()) == 256);
  }
}

TEST_CASE("a custom rank order changes which ranks share a group") {
  JobSpec job = testing::MakeJob(16, 2, 2);  // tp2 pp2 dp4
  job.parallelism.order = ParseRankOrder("tp-pp-dp").value();
  REQUIRE(ValidateJobSpec(job).ok());
  RankLayout l(job.parallelism);
  CHECK(l.GroupMembers(GroupKind::kPp, l.GroupOf(GroupKind::kPp, 0)) == std::vector<int>{0, 2});
  CHECK(l.GroupMembers(GroupKind::kDp, l.GroupOf(GroupKind::kDp, 0)) ==
        std::vector<int>{0, 4, 8, 12});
}
