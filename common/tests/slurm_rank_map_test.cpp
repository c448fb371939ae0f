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

TEST_CASE("SlurmRankMap: consecutive whole nodes fold into one run at any size") {
  // A 4,096-node job of 8 GPUs per node: one map token, not 4,096.
  SlurmRankMap m;
  for (int n = 0; n < 4096; ++n) {
    m.nodes.push_back("gpu" + std::to_string(100000 + n));
    for (int g = 0; g < 8; ++g) m.ranks.push_back({n, g});
  }
  m.parallelism.tp = 8;
  m.parallelism.pp = 16;
  m.parallelism.dp = 256;
  const std::string text = FormatSlurmRankMap(m);
  CHECK(text.find(" map=0-4095:0-7 ") != std::string::npos);
  // What the plugin caps at 48 KiB is the map and the layout.
  CHECK(text.substr(text.find(" map=")).size() < 100);
  auto back = ParseSlurmRankMap(text);
  REQUIRE_MESSAGE(back.ok(), back.message());
  REQUIRE(back.value().ranks.size() == m.ranks.size());
  CHECK(back.value().ranks[4095 * 8 + 7].node == 4095);
  CHECK(back.value().ranks[4095 * 8 + 7].gpu == 7);
  // A break in the node order or in the GPUs starts a new run; the old
  // one-node form still reads.
  SlurmRankMap mixed;
  mixed.nodes = {"a", "b", "c", "d"};
  mixed.ranks = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {3, 0}, {3, 1}, {2, 1}, {2, 0}};
  mixed.parallelism.tp = 2;
  mixed.parallelism.dp = 4;
  const std::string t2 = FormatSlurmRankMap(mixed);
  CHECK(t2.find(" map=0-1:0-1/3:0-1/2:1,0 ") != std::string::npos);
  auto b2 = ParseSlurmRankMap(t2);
  REQUIRE_MESSAGE(b2.ok(), b2.message());
  for (size_t r = 0; r < mixed.ranks.size(); ++r) {
    CHECK(b2.value().ranks[r].node == mixed.ranks[r].node);
    CHECK(b2.value().ranks[r].gpu == mixed.ranks[r].gpu);
  }
  CHECK(ParseSlurmRankMap("ranks=a,b map=0:0-1/1:0-1 layout=tp:2,dp:2").ok());
}

TEST_CASE("SlurmRankMap: errors name the token") {
  CHECK(ParseSlurmRankMap("ranks=a,b map=1-0:0 layout=tp:1").message().find("map= run") !=
        std::string::npos);
  CHECK(ParseSlurmRankMap("ranks=a,b map=0-2:0 layout=tp:1").message().find("map= run") !=
        std::string::npos);
  CHECK(ParseSlurmRankMap("ranks=a map=0-0:0-99999999 layout=tp:2").message().find("more than") !=
        std::string::npos);
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

TEST_CASE("SlurmCheckpointSignal: the AdminComment's signal= token") {
  using S = SlurmCheckpointSignal;
  CHECK(FormatSlurmCheckpointSignal({10, false}) == "signal=10");
  CHECK(FormatSlurmCheckpointSignal({12, true}) == "signal=B:12");
  CHECK(ParseSlurmCheckpointSignal("toposched:3 signal=B:10 ranks=a map=0:0 layout=tp:1") ==
        S{10, true});
  CHECK(ParseSlurmCheckpointSignal("toposched:3 signal=64") == S{64, false});
  // None declared, or malformed: no signal (the job is never signalled).
  for (const char* text :
       {"toposched:3", "toposched:3 ranks=a", "signal=", "signal=B:", "signal=0", "signal=65",
        "signal=-1", "signal=USR1", "signal=R:10", "signal=10x", "signal=100", "xsignal=10"}) {
    CHECK_MESSAGE(!ParseSlurmCheckpointSignal(text).has_value(), text);
  }
  // The rank map ignores the token.
  auto m = ParseSlurmRankMap("signal=B:10 ranks=a map=0:0 layout=tp:1");
  CHECK_MESSAGE(m.ok(), m.message());
}

}  // namespace
}  // namespace topo::common
