// Mixed clusters (per-subtree HBDs, parts and their views) and node
// selection (GPU types, features, nodelist, exclude, avoid), hand-computed.

#include <doctest/doctest.h>

#include <set>
#include <string>

#include "test_util.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/placement.hpp"
#include "topo/core/rng.hpp"

namespace topo::core {
namespace {

using testing::MakeJob;

// Tiers node < rack < leaf < spine, file HBD = node. leaf0 and leaf1: two
// racks of four 8-GPU H100 HGX nodes each (racks are plain groupings:
// HBD = node); leaf2: two GB200 racks of 18 x 4 GPUs, each marked as its
// HBD with a 900 GB/s link. h100 nodes h0..h15 have feature "ib", h0..h3
// also "nvme".
Topology Mixed() {
  TopologyBuilder b("mixed", {"node", "rack", "leaf", "spine"}, 0);
  const int spine = b.AddDomain("spine0", 3, TopologyBuilder::kTop);
  int h = 0;
  for (int l = 0; l < 2; ++l) {
    const int leaf = b.AddDomain("leaf" + std::to_string(l), 2, spine);
    for (int r = 0; r < 2; ++r) {
      const int rack = b.AddDomain("hrack" + std::to_string(l * 2 + r), 1, leaf);
      for (int i = 0; i < 4; ++i, ++h) {
        std::vector<std::string> f = {"ib"};
        if (h < 4) f.push_back("nvme");
        b.AddNode("h" + std::to_string(h), rack, 8, "H100", f);
      }
    }
  }
  const int leaf = b.AddDomain("leaf2", 2, spine);
  int g = 0;
  for (int r = 0; r < 2; ++r) {
    const int rack = b.AddDomain("nvl" + std::to_string(r), 1, leaf);
    b.MarkHbd(rack, TierLink{900, 2, 1});
    for (int i = 0; i < 18; ++i) b.AddNode("g" + std::to_string(g++), rack, 4, "GB200");
  }
  return std::move(b).Build().value();
}

std::set<std::string> Models(const Topology& t, const Placement& p) {
  std::set<std::string> out;
  for (const GpuSlot& s : p.ranks) out.insert(t.node(s.node).gpu_model);
  return out;
}

void Occupy(ClusterState& st, NodeId n) {
  std::vector<GpuSlot> slots;
  for (int g = 0; g < st.node_gpus(n); ++g) slots.push_back({n, g});
  REQUIRE(st.Allocate(slots).ok());
}

TEST_CASE("a marked rack is the HBD of its nodes, the rest keep the file's HBD") {
  const Topology t = Mixed();
  REQUIRE(t.part_count() == 2);
  CHECK(t.part(0).gpu_model == "H100");
  CHECK(t.part(0).hbd_tier == 0);
  CHECK(t.part(0).nodes == 16);
  CHECK(t.part(0).gpus == 128);
  CHECK(t.part(1).gpu_model == "GB200");
  CHECK(t.part(1).hbd_tier == 1);
  CHECK(t.part(1).gpus == 144);
  const NodeId g0 = t.FindNode("g0");
  const NodeId h0 = t.FindNode("h0");
  CHECK(t.part_of(g0) == 1);
  CHECK(t.part_of(h0) == 0);
  const Topology& nvl = t.PartView(1);
  const Topology& hgx = t.PartView(0);
  CHECK(&t.ViewOf(g0) == &nvl);
  // Aliases per part: "hbd" is the rack on the NVL72 part, the node on HGX;
  // "leaf" is the tier named leaf on both.
  CHECK(nvl.FindTier("hbd").value() == 1);
  CHECK(hgx.FindTier("hbd").value() == 0);
  CHECK(nvl.FindTier("leaf").value() == 2);
  CHECK(hgx.FindTier("leaf").value() == 2);
  // Domain GPU counts count the part's nodes only.
  CHECK(nvl.total_gpus() == 144);
  CHECK(hgx.total_gpus() == 128);
  CHECK(nvl.domain(t.FindDomain("leaf0")).gpus == 0);
  CHECK(hgx.domain(t.FindDomain("leaf0")).gpus == 64);
  CHECK(nvl.max_domain_gpus(1) == 72);
  CHECK(hgx.max_domain_gpus(1) == 32);
  // The rack's own link covers every tier up to it; HGX keeps the defaults.
  CHECK(nvl.tier(0).link.bandwidth_gbs == 900);
  CHECK(nvl.tier(1).link.bandwidth_gbs == 900);
  CHECK(hgx.tier(0).link.bandwidth_gbs == DefaultTierLink(0, 0).bandwidth_gbs);
  CHECK(hgx.tier(1).link.bandwidth_gbs == DefaultTierLink(1, 0).bandwidth_gbs);
  CHECK(t.gpu_models() == std::vector<std::string>{"H100", "GB200"});
  CHECK(t.features() == std::vector<std::string>{"ib", "nvme"});
}

TEST_CASE("a topology whose every node is under a marked domain is that one part") {
  TopologyBuilder b("all-nvl", {"node", "rack", "leaf"}, 0);
  const int leaf = b.AddDomain("leaf0", 2, TopologyBuilder::kTop);
  for (int r = 0; r < 2; ++r) {
    const int rack = b.AddDomain("rack" + std::to_string(r), 1, leaf);
    b.MarkHbd(rack);
    for (int i = 0; i < 2; ++i) b.AddNode("n" + std::to_string(r * 2 + i), rack, 4, "GB200");
  }
  const Topology t = std::move(b).Build().value();
  CHECK(t.part_count() == 1);
  CHECK(t.hbd_tier() == 1);
  CHECK(&t.PartView(0) == &t);
}

TEST_CASE("EP auto: required in the rack on NVL72, preferred across nodes on HGX") {
  const Topology t = Mixed();
  auto placer = MakePlacer("toposched");
  // tp 4 x ep 8: 32-GPU EP blocks; 64 GPUs.
  JobSpec moe = MakeJob(64, 4, 1, 8);
  CHECK(moe.constraint(GroupKind::kEp).strength == Strength::kAuto);
  ClusterState st(t);
  Placement p = placer->Place(moe, st);
  REQUIRE(p.placed());
  // The racks hold a block inside NVLink: predicted faster, chosen.
  CHECK(Models(t, p) == std::set<std::string>{"GB200"});
  PlacementMetrics m = Evaluate(moe, t, p.ranks);
  CHECK(m.ep_in_hbd.value() == 1.0);
  CHECK(m.required_met);

  // Both racks busy: the job goes to the HGX part, EP blocks across nodes.
  for (NodeId n = 0; n < t.node_count(); ++n) {
    if (t.node(n).gpu_model == "GB200") Occupy(st, n);
  }
  Placement q = placer->Place(moe, st);
  REQUIRE(q.placed());
  CHECK(Models(t, q) == std::set<std::string>{"H100"});
  CHECK(Evaluate(moe, t, q.ranks).required_met);

  // Required means required wherever it runs: only the racks can, so Busy.
  moe.constraints[static_cast<int>(GroupKind::kEp)] = {Strength::kRequired, "hbd"};
  Placement r = placer->Place(moe, st);
  CHECK(r.outcome == PlaceOutcome::kBusy);
  CHECK(r.reason.find("H100 (HBD node)") != std::string::npos);
  CHECK(r.reason.find("GB200 (HBD rack)") != std::string::npos);
  // A block no part's HBD can hold, required: Infeasible on every part.
  JobSpec huge = MakeJob(128, 4, 1, 32);
  huge.constraints[static_cast<int>(GroupKind::kEp)] = {Strength::kRequired, "hbd"};
  CHECK(placer->Place(huge, ClusterState(t)).outcome == PlaceOutcome::kInfeasible);
}

TEST_CASE("a job larger than every part does not span two models") {
  const Topology t = Mixed();
  JobSpec big = MakeJob(256);  // 272 GPUs in all, 144 and 128 per part
  for (const std::string& name : PlacerNames()) {
    CAPTURE(name);
    Placement p = MakePlacer(name)->Place(big, ClusterState(t));
    if (name == "toposched") {
      CHECK(p.outcome == PlaceOutcome::kInfeasible);
    } else {
      // The baselines place over the whole tree, as Slurm does.
      CHECK(p.placed());
      CHECK(Models(t, p).size() == 2);
    }
  }
}

TEST_CASE("gpu_types: any of them, case-insensitive, an unknown one lists the cluster's") {
  const Topology t = Mixed();
  for (const std::string& name : PlacerNames()) {
    CAPTURE(name);
    auto placer = MakePlacer(name);
    JobSpec job = MakeJob(32);
    job.selection.gpu_types = {"h100"};
    Placement p = placer->Place(job, ClusterState(t));
    REQUIRE(p.placed());
    CHECK(Models(t, p) == std::set<std::string>{"H100"});
    job.selection.gpu_types = {"GB200"};
    p = placer->Place(job, ClusterState(t));
    REQUIRE(p.placed());
    CHECK(Models(t, p) == std::set<std::string>{"GB200"});
    job.selection.gpu_types = {"A100"};
    p = placer->Place(job, ClusterState(t));
    CHECK(p.outcome == PlaceOutcome::kInfeasible);
    CHECK(p.reason == "gpu_types: this cluster has no 'A100' GPUs; its GPU types are H100, GB200");
  }
}

TEST_CASE("features: every one, an unknown one is refused with the list") {
  const Topology t = Mixed();
  auto placer = MakePlacer("toposched");
  JobSpec job = MakeJob(32);
  job.selection.features = {"ib", "nvme"};  // h0..h3: exactly 32 GPUs
  Placement p = placer->Place(job, ClusterState(t));
  REQUIRE(p.placed());
  for (const GpuSlot& s : p.ranks) CHECK(s.node < 4);
  job.gpus = 40;
  job.parallelism.dp = 40;
  CHECK(placer->Place(job, ClusterState(t)).outcome == PlaceOutcome::kInfeasible);
  job.selection.features = {"ib", "gpu-direct"};
  p = placer->Place(job, ClusterState(t));
  CHECK(p.outcome == PlaceOutcome::kInfeasible);
  CHECK(p.reason.find("no node has feature 'gpu-direct'; the features here are ib, nvme") !=
        std::string::npos);
}

TEST_CASE("exclude keeps a job off nodes, nodelist is the whole allocation") {
  const Topology t = Mixed();
  for (const std::string& name : PlacerNames()) {
    CAPTURE(name);
    auto placer = MakePlacer(name);
    JobSpec job = MakeJob(32);
    job.selection.gpu_types = {"H100"};
    job.selection.exclude = {"h0", "h1", "h2", "h3"};
    Placement p = placer->Place(job, ClusterState(t));
    REQUIRE(p.placed());
    for (const GpuSlot& s : p.ranks) CHECK(s.node >= 4);

    JobSpec listed = MakeJob(16);
    listed.selection.nodelist = {"h9", "h14"};
    p = placer->Place(listed, ClusterState(t));
    REQUIRE(p.placed());
    std::set<NodeId> used;
    for (const GpuSlot& s : p.ranks) used.insert(s.node);
    CHECK(used == std::set<NodeId>{t.FindNode("h9"), t.FindNode("h14")});
    // One of them busy: wait for it.
    ClusterState st(t);
    Occupy(st, t.FindNode("h9"));
    CHECK(placer->Place(listed, st).outcome == PlaceOutcome::kBusy);

    listed.selection.nodelist = {"h9", "h14", "h15"};
    p = placer->Place(listed, ClusterState(t));
    CHECK(p.outcome == PlaceOutcome::kInfeasible);
    CHECK(p.reason.find("give the job 24 GPUs, and it takes 16") != std::string::npos);
    listed.selection.nodelist = {"h99"};
    p = placer->Place(listed, ClusterState(t));
    CHECK(p.outcome == PlaceOutcome::kInfeasible);
    CHECK(p.reason.find("nodelist: node 'h99' is not in the topology") != std::string::npos);
  }
}

TEST_CASE("avoided nodes are used only when nothing else fits, and the reason says so") {
  const Topology t = Mixed();
  auto placer = MakePlacer("toposched");
  JobSpec job = MakeJob(120);  // 15 of the 16 HGX nodes
  job.selection.gpu_types = {"H100"};
  job.selection.avoid = {"h5"};
  Placement p = placer->Place(job, ClusterState(t));
  REQUIRE(p.placed());
  for (const GpuSlot& s : p.ranks) CHECK(s.node != t.FindNode("h5"));
  CHECK(p.reason.empty());
  ClusterState st(t);
  Occupy(st, t.FindNode("h0"));
  p = placer->Place(job, st);
  REQUIRE(p.placed());
  bool on_h5 = false;
  for (const GpuSlot& s : p.ranks) on_h5 = on_h5 || s.node == t.FindNode("h5");
  CHECK(on_h5);
  CHECK(p.reason.find("failed this job before") != std::string::npos);
}

TEST_CASE("a selection is checked: both lists, bad bytes, long names") {
  JobSpec job = MakeJob(8);
  job.selection.nodelist = {"n1", "n2"};
  job.selection.exclude = {"n2"};
  CHECK(ValidateJobSpec(job).message() ==
        "node 'n2' is in both nodelist and exclude; leave it out of one of them");
  job.selection = {};
  job.selection.gpu_types = {"H100 SXM"};
  CHECK(ValidateJobSpec(job).message().find("gpu_types[0] holds a blank") == 0);
  job.selection.gpu_types = {std::string(65, 'a')};
  CHECK(ValidateJobSpec(job).message().find("gpu_types[0] must be 1..64 bytes") == 0);
  job.selection.gpu_types = {""};
  CHECK_FALSE(ValidateJobSpec(job).ok());
  job.selection.gpu_types = {};
  job.selection.features = {"a,b"};
  CHECK_FALSE(ValidateJobSpec(job).ok());
}

TEST_CASE("property: on random mixed clusters toposched never mixes parts") {
  int placed = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    CAPTURE(seed);
    Rng rng(seed);
    TopologyBuilder b("r", {"node", "rack", "leaf", "spine"}, 0);
    const int spines = 1 + static_cast<int>(rng.Below(2));
    int node = 0, dom = 0;
    for (int s = 0; s < spines; ++s) {
      const int sp = b.AddDomain("s" + std::to_string(dom++), 3, TopologyBuilder::kTop);
      for (int l = 0; l < 1 + static_cast<int>(rng.Below(3)); ++l) {
        const int leaf = b.AddDomain("l" + std::to_string(dom++), 2, sp);
        for (int r = 0; r < 1 + static_cast<int>(rng.Below(3)); ++r) {
          const int rack = b.AddDomain("r" + std::to_string(dom++), 1, leaf);
          const int kind = static_cast<int>(rng.Below(3));
          if (kind == 2) b.MarkHbd(rack, TierLink{900, 2, 1});
          const int gpus = kind == 2 ? 4 : 8;
          const char* model = kind == 0 ? "H100" : kind == 1 ? "A100" : "GB200";
          for (int i = 0; i < 1 + static_cast<int>(rng.Below(6)); ++i) {
            b.AddNode("n" + std::to_string(node++), rack, gpus, model);
          }
        }
      }
    }
    const Topology t = std::move(b).Build().value();
    ClusterState st(t);
    for (NodeId n = 0; n < t.node_count(); ++n) {
      if (rng.Below(4) == 0) Occupy(st, n);
    }
    const int tp = 1 << rng.Below(3);
    const int ep = 1 << rng.Below(3);
    const int dp = ep * (1 + static_cast<int>(rng.Below(4)));
    JobSpec job = MakeJob(tp * dp, tp, 1, ep);
    if (rng.Below(3) == 0) job.selection.gpu_types = {rng.Below(2) ? "H100" : "gb200"};
    Placement p = MakePlacer("toposched")->Place(job, st);
    if (!p.placed()) {
      CHECK_FALSE(p.reason.empty());
      continue;
    }
    ++placed;
    std::set<int> parts;
    for (const GpuSlot& s : p.ranks) {
      parts.insert(t.part_of(s.node));
      CHECK(st.busy_mask(s.node) == 0);
    }
    CHECK(parts.size() == 1);
    CHECK(Evaluate(job, t, p.ranks).required_met);
    if (!job.selection.gpu_types.empty()) {
      CHECK(Models(t, p).size() == 1);
      CHECK((job.selection.gpu_types[0] == "H100") == (*Models(t, p).begin() == "H100"));
    }
    ClusterState copy = st;
    CHECK(copy.Allocate(p.ranks).ok());
  }
  MESSAGE("placed ", placed, " of 300");
  CHECK(placed > 50);
}

}  // namespace
}  // namespace topo::core
