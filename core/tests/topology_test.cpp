#include <doctest/doctest.h>

#include "test_util.hpp"
#include "topo/core/cluster_state.hpp"
#include "topo/core/generators.hpp"

using namespace topo::core;

TEST_CASE("generators build the reference topologies of BENCHMARKS.md") {
  struct Expect {
    const char* name;
    int gpus, nodes, hbd_gpus, leaf_gpus, pod_gpus;
  };
  for (Expect e : {Expect{"tiny", 64, 8, 8, 16, 32}, Expect{"meta-24k", 24576, 3072, 8, 16, 3072},
                   Expect{"nvl72-64k", 64512, 16128, 72, 576, 9216},
                   Expect{"cm384-166k", 165888, 20736, 384, 1536, 18432}}) {
    CAPTURE(e.name);
    Result<Topology> t = GenerateTopology(e.name);
    REQUIRE(t.ok());
    const Topology& topo = t.value();
    CHECK(topo.total_gpus() == e.gpus);
    CHECK(topo.node_count() == e.nodes);
    CHECK(topo.max_domain_gpus(topo.hbd_tier()) == e.hbd_gpus);
    CHECK(topo.max_domain_gpus(topo.leaf_tier()) == e.leaf_gpus);
    CHECK(topo.max_domain_gpus(topo.pod_tier()) == e.pod_gpus);
  }
  CHECK_FALSE(GenerateTopology("nope").ok());
  CHECK(GenerateTopology("nope").message().find("tiny") != std::string::npos);
  Result<Topology> four = GenerateTopology("tiny", 4);
  REQUIRE(four.ok());
  CHECK(four.value().total_gpus() == 32);
}

TEST_CASE("mixed-10k: HGX H100 units, four NVL72 racks marked as HBDs and an A100 unit") {
  Result<Topology> t = GenerateTopology("mixed-10k");
  REQUIRE_MESSAGE(t.ok(), t.message());
  const Topology& topo = t.value();
  // 1,280 x 8 H100 + 4 x 18 x 4 GB200 + 32 x 8 A100.
  CHECK(topo.node_count() == 1280 + 72 + 32);
  CHECK(topo.total_gpus() == 10240 + 288 + 256);
  CHECK(topo.hbd_tier() == 0);
  CHECK(topo.tier_size(1) == 40 * 8 + 4 + 8);  // racks
  CHECK(topo.tier_size(2) == 40 + 2);          // leaves: 40 units, the NVL72 leaf, the A100 unit
  CHECK(topo.tier_size(3) == 6);               // spines
  REQUIRE(topo.part_count() == 3);
  struct Part {
    const char* model;
    int hbd, first, nodes, gpus;
  };
  const Part want[] = {
      {"H100", 0, 0, 1280, 10240}, {"GB200", 1, 1280, 72, 288}, {"A100", 0, 1352, 32, 256}};
  for (int p = 0; p < 3; ++p) {
    CAPTURE(p);
    CHECK(topo.part(p).gpu_model == want[p].model);
    CHECK(topo.part(p).hbd_tier == want[p].hbd);
    CHECK(topo.part(p).first_node == want[p].first);
    CHECK(topo.part(p).nodes == want[p].nodes);
    CHECK(topo.part(p).gpus == want[p].gpus);
    const Topology& view = topo.PartView(p);
    CHECK(view.total_gpus() == want[p].gpus);
    CHECK(view.FindTier("hbd").value() == want[p].hbd);
    CHECK(view.FindTier("leaf").value() == 2);  // the leaf switch, by name
    // Every part's leaf and spine are the fabric's (given, not positional).
    CHECK(view.tier(2).link == TierLink{50, 6});
    CHECK(view.tier(3).link == TierLink{50, 8});
    CHECK(view.tier(2).cost == 4);
    CHECK(view.tier(3).cost == 16);
  }
  const Topology& nvl = topo.PartView(1);
  CHECK(nvl.max_domain_gpus(nvl.hbd_tier()) == 72);
  CHECK(nvl.max_domain_gpus(2) == 288);
  CHECK(nvl.tier(0).link == TierLink{900, 3});
  CHECK(nvl.tier(1).link == TierLink{900, 3});
  CHECK(nvl.tier(1).cost == 1);
  const Topology& hgx = topo.PartView(0);
  CHECK(hgx.max_domain_gpus(0) == 8);
  CHECK(hgx.max_domain_gpus(2) == 256);   // a scalable unit
  CHECK(hgx.max_domain_gpus(3) == 2048);  // a spine of 8 units
  CHECK(hgx.tier(0).link == TierLink{450, 3});
  CHECK(hgx.tier(1).link == TierLink{50, 6});
  CHECK(topo.PartView(2).max_domain_gpus(3) == 256);  // its spine also holds the NVL72 leaf
  const DomainId rack = topo.FindDomain("nvl72-r2");
  REQUIRE(rack != kNoDomain);
  CHECK(topo.hbd_marked(rack));
  CHECK(topo.hbd_link(rack) == TierLink{900, 3});
  CHECK_FALSE(topo.hbd_marked(topo.FindDomain("su07-r3")));
  CHECK(topo.part_of(topo.FindNode("gb200-71")) == 1);
  CHECK(topo.part_of(topo.FindNode("a100-00")) == 2);
  CHECK(topo.node(topo.FindNode("h100-1279")).gpus == 8);
  Result<Topology> four = GenerateTopology("mixed-10k", 4);
  REQUIRE(four.ok());
  CHECK(four.value().total_gpus() == 1384 * 4);
}

TEST_CASE("HBD marks: the accessors, a mark given twice, views keep them") {
  TopologyBuilder b("m", {"node", "rack", "leaf"}, 0);
  const int leaf = b.AddDomain("l0", 2, TopologyBuilder::kTop);
  const int r0 = b.AddDomain("r0", 1, leaf);
  const int r1 = b.AddDomain("r1", 1, leaf);
  const int r2 = b.AddDomain("r2", 1, leaf);
  b.AddNode("a", r0, 4);
  b.AddNode("b", r1, 4);
  b.AddNode("c", r2, 4);
  b.MarkHbd(r2);
  b.MarkHbd(r1, TierLink{100, 1});
  b.MarkHbd(r1, TierLink{900, 3});  // the last link wins
  Result<Topology> t = std::move(b).Build();
  REQUIRE_MESSAGE(t.ok(), t.message());
  const Topology& topo = t.value();
  const DomainId d0 = topo.FindDomain("r0"), d1 = topo.FindDomain("r1"), d2 = topo.FindDomain("r2");
  CHECK_FALSE(topo.hbd_marked(d0));
  CHECK_FALSE(topo.hbd_link(d0).has_value());
  CHECK(topo.hbd_marked(d1));
  CHECK(topo.hbd_link(d1) == TierLink{900, 3});
  CHECK(topo.hbd_marked(d2));
  CHECK_FALSE(topo.hbd_link(d2).has_value());
  CHECK_FALSE(topo.hbd_marked(0));  // a node
  CHECK_FALSE(topo.hbd_marked(topo.root()));
  // Three parts: a (node HBD), b (rack, NVLink), c (rack, default link).
  REQUIRE(topo.part_count() == 3);
  CHECK(topo.part(1).hbd_tier == 1);
  CHECK(topo.part(2).hbd_tier == 1);
  for (int p = 0; p < 3; ++p) {
    CHECK(topo.PartView(p).hbd_marked(d1));
    CHECK(topo.PartView(p).hbd_link(d1) == TierLink{900, 3});
  }
  CHECK(topo.PartView(1).tier(1).link == TierLink{900, 3});
  CHECK(topo.PartView(2).tier(1).link == DefaultTierLink(1, 1));

  // One part, every node under a mark alike: the topology is that part and
  // keeps its marks.
  TopologyBuilder all("all", {"node", "rack", "leaf"}, 0);
  const int l = all.AddDomain("l0", 2, TopologyBuilder::kTop);
  const int r = all.AddDomain("r0", 1, l);
  all.AddNode("a", r, 4);
  all.MarkHbd(r, TierLink{900, 3});
  Result<Topology> one = std::move(all).Build();
  REQUIRE(one.ok());
  CHECK(one.value().part_count() == 1);
  CHECK(one.value().hbd_tier() == 1);
  CHECK(one.value().hbd_marked(one.value().FindDomain("r0")));

  // A mark inside a mark is refused.
  TopologyBuilder nested("n", {"node", "rack", "leaf"}, 0);
  const int nl = nested.AddDomain("l0", 2, TopologyBuilder::kTop);
  const int nr = nested.AddDomain("r0", 1, nl);
  nested.AddNode("a", nr, 4);
  nested.MarkHbd(nl);
  nested.MarkHbd(nr);
  Result<Topology> refused = std::move(nested).Build();
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.message().find("'r0' is marked as an HBD inside HBD 'l0'") != std::string::npos);
}

TEST_CASE("domains cover contiguous node ranges and ancestors agree") {
  Topology topo = testing::MakeRegular({"node", "hbd", "leaf", "spine"}, 1, {3, 2, 2}, 2, 4);
  CHECK(topo.node_count() == 24);
  CHECK(topo.tier_size(1) == 8);
  CHECK(topo.tier_size(2) == 4);
  CHECK(topo.tier_size(3) == 2);
  for (DomainId d = 0; d < topo.domain_count(); ++d) {
    const Domain& dom = topo.domain(d);
    CHECK(dom.node_end - dom.node_begin == (dom.gpus / 4));
    for (NodeId n = dom.node_begin; n < dom.node_end; ++n) CHECK(topo.Ancestor(n, dom.tier) == d);
  }
  CHECK(topo.Ancestor(0, topo.root_tier()) == topo.root());
  CHECK(topo.FindNode("n0") >= 0);
  CHECK(topo.FindNode("zzz") == -1);
}

TEST_CASE("tiers resolve by name and by role alias") {
  Topology topo =
      testing::MakeRegular({"node", "rack", "tor", "spine", "dc"}, 1, {2, 2, 2, 2}, 2, 4);
  CHECK(topo.FindTier("rack").value() == 1);
  CHECK(topo.FindTier("hbd").value() == 1);
  CHECK(topo.FindTier("leaf").value() == 2);
  CHECK(topo.FindTier("pod").value() == 3);
  CHECK(topo.FindTier("dc").value() == 4);
  CHECK(topo.FindTier("cluster").value() == 5);
  Result<int> bad = topo.FindTier("row");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("rack, tor, spine, dc") != std::string::npos);
}

TEST_CASE("tier costs default by position relative to the HBD") {
  Topology topo =
      testing::MakeRegular({"node", "hbd", "leaf", "spine", "dc"}, 1, {2, 2, 2, 2}, 2, 4);
  CHECK(topo.tier(0).cost == 1);
  CHECK(topo.tier(1).cost == 1);
  CHECK(topo.tier(2).cost == 4);
  CHECK(topo.tier(3).cost == 16);
  CHECK(topo.tier(4).cost == 64);
  CHECK(topo.tier(5).cost == 64);
}

TEST_CASE("builder rejects malformed trees with a message naming the problem") {
  SUBCASE("domain under the wrong tier") {
    TopologyBuilder b("t", {"node", "leaf", "spine"}, 0);
    int leaf = b.AddDomain("leaf0", 1, TopologyBuilder::kTop);
    b.AddNode("n0", leaf, 8);
    Result<Topology> t = std::move(b).Build();
    REQUIRE_FALSE(t.ok());
    CHECK(t.message().find("leaf0") != std::string::npos);
  }
  SUBCASE("empty domain") {
    TopologyBuilder b("t", {"node", "leaf"}, 0);
    int l0 = b.AddDomain("leaf0", 1, TopologyBuilder::kTop);
    b.AddDomain("leaf1", 1, TopologyBuilder::kTop);
    b.AddNode("n0", l0, 8);
    Result<Topology> t = std::move(b).Build();
    REQUIRE_FALSE(t.ok());
    CHECK(t.message().find("leaf1") != std::string::npos);
    CHECK(t.message().find("no nodes") != std::string::npos);
  }
  SUBCASE("duplicate node") {
    TopologyBuilder b("t", {"node", "leaf"}, 0);
    int l0 = b.AddDomain("leaf0", 1, TopologyBuilder::kTop);
    b.AddNode("n0", l0, 8);
    b.AddNode("n0", l0, 8);
    Result<Topology> t = std::move(b).Build();
    REQUIRE_FALSE(t.ok());
    CHECK(t.message().find("'n0' is used twice") != std::string::npos);
  }
  SUBCASE("bad gpu count") {
    TopologyBuilder b("t", {"node", "leaf"}, 0);
    int l0 = b.AddDomain("leaf0", 1, TopologyBuilder::kTop);
    b.AddNode("n0", l0, 65);
    CHECK_FALSE(std::move(b).Build().ok());
  }
  SUBCASE("hbd tier out of range") {
    TopologyBuilder b("t", {"node"}, 3);
    b.AddNode("n0", TopologyBuilder::kTop, 8);
    CHECK_FALSE(std::move(b).Build().ok());
  }
  SUBCASE("tier without domains") {
    TopologyBuilder b("t", {"node", "leaf", "spine"}, 0);
    b.AddNode("n0", TopologyBuilder::kTop, 8);
    CHECK_FALSE(std::move(b).Build().ok());
  }
}

TEST_CASE("cluster state counts usage per domain and rejects bad allocations atomically") {
  Topology topo = testing::MakeRegular({"node", "leaf"}, 0, {2}, 2, 4);
  ClusterState st(topo);
  CHECK(st.free_gpus(topo.root()) == 16);
  std::vector<GpuSlot> a = {{0, 0}, {0, 1}, {1, 3}};
  REQUIRE(st.Allocate(a).ok());
  CHECK(st.busy_gpus(topo.root()) == 3);
  CHECK(st.free_gpus(topo.Ancestor(0, 1)) == 5);
  // Overlap: nothing changes.
  std::vector<GpuSlot> b = {{2, 0}, {0, 1}};
  Status s = st.Allocate(b);
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("already allocated") != std::string::npos);
  CHECK(st.busy_gpus(topo.root()) == 3);
  CHECK(st.busy_mask(2) == 0);
  // Duplicates within one request.
  std::vector<GpuSlot> dup = {{3, 0}, {3, 0}};
  CHECK_FALSE(st.Allocate(dup).ok());
  CHECK(st.busy_mask(3) == 0);
  // Out of range.
  std::vector<GpuSlot> oob = {{0, 7}};
  CHECK_FALSE(st.Allocate(oob).ok());
  // Health and node state change what is usable, not what is busy.
  st.SetGpuHealth(2, 1, GpuHealth::kFailed);
  CHECK(st.free_gpus(topo.root()) == 12);
  CHECK(st.failed_gpus(topo.root()) == 1);
  st.SetNodeState(3, NodeState::kDrained);
  CHECK(st.free_gpus(topo.root()) == 8);
  st.SetNodeState(3, NodeState::kUp);
  st.SetGpuHealth(2, 1, GpuHealth::kHealthy);
  CHECK(st.free_gpus(topo.root()) == 13);
  REQUIRE(st.Release(a).ok());
  CHECK(st.busy_gpus(topo.root()) == 0);
  CHECK_FALSE(st.Release(a).ok());
}
