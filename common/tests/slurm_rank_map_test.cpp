#include "topo/common/slurm_rank_map.hpp"

#include <doctest/doctest.h>

#include <string>

namespace topo::common {
namespace {

TEST_CASE("SlurmRankMap: format and parse round-trip, node order kept") {
  SlurmRankMap m;
  m.nodes = {"gpu0006", "gpu0005"};
  for (int r = 0; r < 8; ++r) m.ranks.push_back({r < 4 ? 0 : 1, r < 4 ? r : (r == 7 ? 6 : r - 4)});
  m.parallelism.tp = 4;
  m.parallelism.pp = 2;
  const std::string text = FormatSlurmRankMap(m);
  CHECK(text ==
        "ranks=gpu0006,gpu0005 map=0:0-3/1:0-2,6 layout=tp:4,cp:1,ep:1,pp:2,dp:1,"
        "order:tp-cp-ep-dp-pp");
  auto back = ParseSlurmRankMap("toposched:17 " + text + " other=1");
  REQUIRE_MESSAGE(back.ok(), back.message());
  CHECK(back.value().nodes == m.nodes);
  REQUIRE(back.value().ranks.size() == 8);
  for (int r = 0; r < 8; ++r) {
    CHECK(back.value().ranks[r].node == m.ranks[r].node);
    CHECK(back.value().ranks[r].gpu == m.ranks[r].gpu);
  }
  CHECK(back.value().NodeOf(5) == "gpu0005");
  CHECK(back.value().parallelism.tp == 4);
  CHECK(back.value().parallelism.pp == 2);
}

TEST_CASE("SlurmRankMap: interleaved nodes make one run per change") {
  SlurmRankMap m;
  m.nodes = {"b", "a"};
  m.ranks = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
  m.parallelism.dp = 4;
  auto back = ParseSlurmRankMap(FormatSlurmRankMap(m));
  REQUIRE_MESSAGE(back.ok(), back.message());
  CHECK(back.value().NodeOf(2) == "b");
  CHECK(back.value().ranks[3].gpu == 1);
}

TEST_CASE("SlurmRankMap: errors name the token") {
  CHECK(ParseSlurmRankMap("toposched:3").message().find("no rank map") != std::string::npos);
  CHECK(ParseSlurmRankMap("ranks=a map=1:0 layout=tp:1").message().find("map= run") !=
        std::string::npos);
  CHECK(ParseSlurmRankMap("ranks=a map=0:3-1 layout=tp:1").message().find("map= GPUs") !=
        std::string::npos);
  CHECK(ParseSlurmRankMap("ranks=a map=0:0-1 layout=tq:2").message().find("layout= item") !=
        std::string::npos);
  CHECK(ParseSlurmRankMap("ranks=a map=0:0-1 layout=tp:4").message().find("layout= does not fit") !=
        std::string::npos);
  CHECK(ParseSlurmRankMap("ranks=a map=0:0-1 layout=tp:2,order:tp-xx").message().find("order") !=
        std::string::npos);
  CHECK(ParseSlurmRankMap("ranks=a map=0:0-99999999 layout=tp:2").message().find("more than") !=
        std::string::npos);
}

}  // namespace
}  // namespace topo::common
