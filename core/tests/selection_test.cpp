// Mixed clusters (per-subtree HBDs, parts and their views) and node
// selection (GPU types, features, nodelist, exclude, avoid), hand-computed.

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>

#include "test_util.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/perf_model.hpp"
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

// The ranks of outer-DP replica `j` of a placed job, in the order of the
// one-replica job (dp = ep) that SubJobOf gives.
JobSpec SubJobOf(const JobSpec& job) {
  JobSpec sub = job;
  sub.parallelism.dp = job.parallelism.ep;
  sub.gpus = job.gpus / (job.parallelism.dp / job.parallelism.ep);
  sub.spares = 0;
  return sub;
}
std::vector<GpuSlot> ReplicaRanks(const JobSpec& job, const Placement& p, int j) {
  const RankLayout whole(job.parallelism);
  const RankLayout sub(SubJobOf(job).parallelism);
  std::vector<GpuSlot> out(static_cast<size_t>(sub.world_size()));
  for (int r = 0; r < whole.world_size(); ++r) {
    if (whole.Coord(r, Dim::kDp) != j) continue;
    int to = 0;
    for (int d = 0; d < kDimCount; ++d) {
      if (static_cast<Dim>(d) == Dim::kDp) continue;
      to += whole.Coord(r, static_cast<Dim>(d)) * sub.dim_stride(static_cast<Dim>(d));
    }
    out[static_cast<size_t>(to)] = p.ranks[static_cast<size_t>(r)];
  }
  return out;
}

bool DistinctGpus(const Placement& p) {
  std::set<std::pair<NodeId, int>> seen;
  for (const GpuSlot& s : p.ranks) seen.insert({s.node, s.gpu});
  return seen.size() == p.ranks.size();
}

TEST_CASE("a job naming two types that no one part holds is split by whole DP replica") {
  const Topology t = Mixed();  // H100: 128 GPUs, HBD node; GB200: 144, HBD rack of 72
  auto placer = MakePlacer("toposched");
  // tp 8 x pp 16: replicas of 128 GPUs, 2 of them. The HGX part holds one
  // (16 nodes), the NVL72 part one (16 TP groups of 8 in 18 per two racks),
  // neither both.
  JobSpec job = MakeJob(256, 8, 16);
  job.selection.gpu_types = {"H100", "GB200"};
  for (const char* one : {"H100", "GB200"}) {
    JobSpec single = job;
    single.selection.gpu_types = {one};
    CHECK(placer->Place(single, ClusterState(t)).outcome == PlaceOutcome::kInfeasible);
  }
  Placement p = placer->Place(job, ClusterState(t));
  REQUIRE(p.placed());
  CHECK(p.reason.find("GB200 (HBD rack) 1 replica") != std::string::npos);
  CHECK(p.reason.find("H100 (HBD node) 1 replica") != std::string::npos);
  REQUIRE(p.ranks.size() == 256);
  CHECK(DistinctGpus(p));
  const RankLayout layout(job.parallelism);
  // Order tp-cp-ep-dp-pp: rank = tp + 8 x dp + 16 x pp. The NVL72 part is
  // predicted faster, so it holds replica 0 (ranks 0-7, 16-23, ...), HGX
  // replica 1 (ranks 8-15, 24-31, ...).
  CHECK(layout.dim_stride(Dim::kDp) == 8);
  CHECK(layout.dim_stride(Dim::kPp) == 16);
  for (int r = 0; r < 256; ++r) {
    CAPTURE(r);
    const std::string& model = t.node(p.ranks[r].node).gpu_model;
    CHECK(model == ((r / 8) % 2 == 0 ? "GB200" : "H100"));
    CHECK(layout.Coord(r, Dim::kDp) == (r / 8) % 2);
  }
  // Every TP group inside its part's HBD: one H100 node, or one NVL72 rack.
  for (int g = 0; g < layout.GroupCount(GroupKind::kTp); ++g) {
    const std::vector<int> m = layout.GroupMembers(GroupKind::kTp, g);
    const NodeId first = p.ranks[m[0]].node;
    const int hbd = t.PartView(t.part_of(first)).hbd_tier();
    for (int r : m) {
      CHECK(t.part_of(p.ranks[r].node) == t.part_of(first));
      CHECK(t.Ancestor(p.ranks[r].node, hbd) == t.Ancestor(first, hbd));
    }
  }
  // Every PP group in one part; every DP group (2 ranks) across both.
  for (int g = 0; g < layout.GroupCount(GroupKind::kPp); ++g) {
    std::set<int> parts;
    for (int r : layout.GroupMembers(GroupKind::kPp, g)) parts.insert(t.part_of(p.ranks[r].node));
    CHECK(parts.size() == 1);
  }
  for (int g = 0; g < layout.GroupCount(GroupKind::kDp); ++g) {
    std::set<int> parts;
    for (int r : layout.GroupMembers(GroupKind::kDp, g)) parts.insert(t.part_of(p.ranks[r].node));
    CHECK(parts.size() == 2);
  }
  // Each replica, alone, is a placement that keeps its part's constraints.
  const JobSpec sub = SubJobOf(job);
  for (int j = 0; j < 2; ++j) {
    const std::vector<GpuSlot> rr = ReplicaRanks(job, p, j);
    CHECK(Evaluate(sub, t.PartView(t.part_of(rr[0].node)), rr).required_met);
  }
  // The whole placement, judged group by group on each group's own part.
  CHECK(Evaluate(job, t, p.ranks).required_met);
  // The step runs at the slower model's rate.
  CHECK(SlowestRankRate(t, p.ranks) == SustainedFlops("H100"));
  CHECK(SlowestRankRate(t, p.ranks) < SustainedFlops("GB200"));

  // Busy: one H100 node taken, the HGX part cannot hold its replica now.
  ClusterState st(t);
  Occupy(st, t.FindNode("h0"));
  Placement busy = placer->Place(job, st);
  CHECK(busy.outcome == PlaceOutcome::kBusy);
  CHECK(busy.reason.find("1 of its 2 replicas") != std::string::npos);
  CHECK(busy.reason.find("GB200 (HBD rack) 1 replica") != std::string::npos);

  // Infeasible: 136-GPU replicas (tp 8 x pp 17) fit the NVL72 part only.
  JobSpec wide = MakeJob(272, 8, 17);
  wide.selection.gpu_types = {"H100", "GB200"};
  Placement never = placer->Place(wide, ClusterState(t));
  CHECK(never.outcome == PlaceOutcome::kInfeasible);
  CHECK(never.reason.find("1 of its 2 replicas") != std::string::npos);
  // And more replicas than both parts' GPUs.
  JobSpec more = MakeJob(384, 8, 16);
  more.selection.gpu_types = {"GB200", "H100"};
  CHECK(placer->Place(more, ClusterState(t)).outcome == PlaceOutcome::kInfeasible);

  // Spares go with the larger share (equal shares: the first, GB200).
  job.spares = 1;
  Placement sp = placer->Place(job, ClusterState(t));
  REQUIRE(sp.placed());
  REQUIRE(sp.spares.size() == 1);
  CHECK(t.node(sp.spares[0]).gpu_model == "GB200");
  for (const GpuSlot& s : sp.ranks) CHECK(s.node != sp.spares[0]);
}

TEST_CASE("a split needs several types named and no part holding the job") {
  const Topology t = Mixed();
  auto placer = MakePlacer("toposched");
  // Fits one part: stays there, though it names both types.
  JobSpec fits = MakeJob(128, 8, 8);
  fits.selection.gpu_types = {"H100", "GB200"};
  Placement p = placer->Place(fits, ClusterState(t));
  REQUIRE(p.placed());
  CHECK(Models(t, p).size() == 1);
  // Fits one part but that part is busy: Busy, not split over both.
  ClusterState st(t);
  for (NodeId n = 0; n < t.node_count(); ++n) {
    if (t.node(n).gpu_model == "GB200" && n % 2 == 0) Occupy(st, n);
  }
  Occupy(st, t.FindNode("h0"));
  JobSpec mid = MakeJob(128, 8, 8);  // 2 replicas of 64
  mid.selection.gpu_types = {"H100", "GB200"};
  CHECK(placer->Place(mid, st).outcome == PlaceOutcome::kBusy);
  // One type named, or none: never split (the untyped job as before).
  JobSpec big = MakeJob(256, 8, 16);
  big.selection.gpu_types = {"GB200"};
  CHECK(placer->Place(big, ClusterState(t)).outcome == PlaceOutcome::kInfeasible);
  big.selection.gpu_types = {};
  CHECK(placer->Place(big, ClusterState(t)).outcome == PlaceOutcome::kInfeasible);
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

TEST_CASE("property: on random mixed clusters toposched mixes parts only by DP replica") {
  int placed = 0, split = 0;
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
    // Some name two types, some of them larger: a split when no part holds them.
    const bool two = job.selection.gpu_types.empty() && rng.Below(3) == 0;
    if (two) {
      const int k = static_cast<int>(rng.Below(3));
      const char* models[] = {"H100", "A100", "GB200"};
      job = MakeJob(tp * dp * (1 + static_cast<int>(rng.Below(4))), tp, 1, ep);
      job.selection.gpu_types = {models[k], models[(k + 1) % 3]};
    }
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
    CHECK(DistinctGpus(p));
    for (const std::string& m : Models(t, p)) {
      if (job.selection.gpu_types.empty()) break;
      CHECK(std::any_of(job.selection.gpu_types.begin(), job.selection.gpu_types.end(),
                        [&](const std::string& w) { return SameGpuModel(w, m); }));
    }
    if (parts.size() > 1) {
      // Split: only a job naming two types that no one part, empty, holds;
      // each replica whole on one part, keeping that part's constraints.
      ++split;
      REQUIRE(two);
      for (const std::string& m : job.selection.gpu_types) {
        JobSpec single = job;
        single.selection.gpu_types = {m};
        CHECK_FALSE(MakePlacer("toposched")->Place(single, ClusterState(t)).placed());
      }
      const JobSpec sub = SubJobOf(job);
      for (int j = 0; j < job.parallelism.dp / job.parallelism.ep; ++j) {
        const std::vector<GpuSlot> rr = ReplicaRanks(job, p, j);
        std::set<int> in;
        for (const GpuSlot& s : rr) in.insert(t.part_of(s.node));
        CHECK(in.size() == 1);
        CHECK(Evaluate(sub, t.PartView(*in.begin()), rr).required_met);
      }
      CHECK(Evaluate(job, t, p.ranks).required_met);
      ClusterState copy = st;
      CHECK(copy.Allocate(p.ranks).ok());
      continue;
    }
    CHECK(Evaluate(job, t, p.ranks).required_met);
    if (job.selection.gpu_types.size() == 1) {
      CHECK(Models(t, p).size() == 1);
      CHECK((job.selection.gpu_types[0] == "H100") == (*Models(t, p).begin() == "H100"));
    }
    ClusterState copy = st;
    CHECK(copy.Allocate(p.ranks).ok());
  }
  MESSAGE("placed ", placed, " of 300, ", split, " split over parts");
  CHECK(placed > 50);
  CHECK(split > 0);
}

}  // namespace
}  // namespace topo::core
