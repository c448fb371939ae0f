#include <doctest/doctest.h>

#include <set>

#include "../src/placer_internal.hpp"
#include "test_util.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/placement.hpp"
#include "topo/core/step_model.hpp"

using namespace topo::core;
using testing::MakeJob;
using testing::MakeRegular;

namespace {

// Racks (HBD) of 4 nodes x 4 GPUs, 2 racks per leaf, 2 leaves per spine, 2 spines.
Topology RackTopology() {
  return MakeRegular({"node", "hbd", "leaf", "spine"}, 1, {4, 2, 2}, 2, 4);
}

void Occupy(ClusterState& st, NodeId n) {
  std::vector<GpuSlot> s;
  for (int g = 0; g < st.topology().node(n).gpus; ++g) s.push_back({n, g});
  REQUIRE(st.Allocate(s).ok());
}

// Phases 1-3 only (PlacerOptions::choose_by_speed off): the fewest leaves.
Placement PlaceFewestLeaves(const JobSpec& job, const ClusterState& st) {
  PlacerOptions leaves_only;
  leaves_only.choose_by_speed = false;
  return MakePlacer("toposched", leaves_only)->Place(job, st);
}

// a's predicted step (oversubscribed links saturated) is more than 1 % shorter
// than b's: the margin the placer asks before it trades.
bool PredictedFaster(const JobSpec& job, const Topology& topo, const Placement& a,
                     const Placement& b) {
  StepTimeModel steps(topo);
  return steps.StepSeconds(job, a.ranks, LinkLoad::kSaturated) <
         0.99 * steps.StepSeconds(job, b.ranks, LinkLoad::kSaturated);
}

void CheckValid(const Placement& p, const ClusterState& st, int gpus) {
  REQUIRE(p.placed());
  REQUIRE(static_cast<int>(p.ranks.size()) == gpus);
  std::set<std::pair<int, int>> seen;
  for (const GpuSlot& s : p.ranks) {
    CHECK(seen.insert({s.node, s.gpu}).second);
    CHECK((st.usable_free_mask(s.node) >> s.gpu & 1) == 1);
  }
}

}  // namespace

TEST_CASE("toposched keeps every TP group inside one HBD where first-fit splits them") {
  Topology topo = RackTopology();
  ClusterState st(topo);
  // Rack 0 keeps 3 free nodes, rack 1 keeps 1: node order would pair a TP
  // group across racks.
  Occupy(st, 0);
  for (NodeId n : {4, 5, 6}) Occupy(st, n);
  JobSpec job = MakeJob(16, 8);  // 2 TP groups of 8 = 2 nodes each
  auto placer = MakePlacer("toposched");
  Placement p = placer->Place(job, st);
  CheckValid(p, st, 16);
  PlacementMetrics m = Evaluate(job, topo, p.ranks);
  CHECK(m.tp_in_hbd.value() == 1.0);
  CHECK(m.required_met);

  JobSpec job3 = MakeJob(16, 8);
  Placement ff = MakePlacer("first-fit")->Place(job3, st);
  CheckValid(ff, st, 16);
  CHECK(Evaluate(job3, topo, ff.ranks).tp_in_hbd.value() < 1.0);
}

TEST_CASE(
    "an EP block needs a whole HBD: Busy when none is free, Infeasible when none is big enough") {
  Topology topo = RackTopology();
  ClusterState st(topo);
  JobSpec moe = MakeJob(32, 4, 1, 4);  // EP block 16 = one whole rack
  auto placer = MakePlacer("toposched");
  Placement p = placer->Place(moe, st);
  CheckValid(p, st, 32);
  PlacementMetrics m = Evaluate(moe, topo, p.ranks);
  CHECK(m.ep_in_hbd.value() == 1.0);
  CHECK(m.leaves_spanned == 1);  // two racks of one leaf

  // One node taken in every rack: enough GPUs, no whole rack.
  for (NodeId n = 0; n < topo.node_count(); n += 4) Occupy(st, n);
  CHECK(st.free_gpus(topo.root()) >= 32);
  Placement busy = placer->Place(moe, st);
  CHECK(busy.outcome == PlaceOutcome::kBusy);
  CHECK_FALSE(busy.reason.empty());

  JobSpec huge = MakeJob(64, 4, 1, 8);  // EP block 32 > rack of 16
  // By default (auto) an EP block too big for any HBD is only preferred
  // there; asked as required, it can never be placed.
  CHECK(huge.constraint(GroupKind::kEp).strength == Strength::kAuto);
  CHECK(placer->Place(huge, ClusterState(topo)).placed());
  huge.constraints[static_cast<int>(GroupKind::kEp)] = {Strength::kRequired, "hbd"};
  Placement never = placer->Place(huge, st);
  CHECK(never.outcome == PlaceOutcome::kInfeasible);
  CHECK(never.reason.find("hbd") != std::string::npos);
  CHECK(never.reason.find("32 GPUs") != std::string::npos);

  // The same EP block is fine when the constraint is only preferred.
  huge.constraints[static_cast<int>(GroupKind::kEp)].strength = Strength::kPreferred;
  ClusterState empty(topo);
  CHECK(placer->Place(huge, empty).placed());
}

TEST_CASE("more GPUs than the cluster, or an unknown tier, is Infeasible") {
  Topology topo = RackTopology();
  ClusterState st(topo);
  auto placer = MakePlacer("toposched");
  Placement p = placer->Place(MakeJob(512, 8), st);
  CHECK(p.outcome == PlaceOutcome::kInfeasible);
  CHECK(p.reason.find("empty cluster") != std::string::npos);
  JobSpec job = MakeJob(16, 8, 2);
  job.constraints[static_cast<int>(GroupKind::kPp)] = {Strength::kRequired, "row"};
  Placement q = placer->Place(job, st);
  CHECK(q.outcome == PlaceOutcome::kInfeasible);
  CHECK(q.reason.find("constraints.pp") != std::string::npos);
  for (const std::string& name : PlacerNames()) {
    CAPTURE(name);
    CHECK(MakePlacer(name)->Place(MakeJob(512, 8), st).outcome == PlaceOutcome::kInfeasible);
  }
  CHECK(MakePlacer("nope") == nullptr);
}

TEST_CASE("failed GPUs, drained nodes and degraded GPUs") {
  Topology topo = MakeRegular({"node", "leaf"}, 0, {4}, 2, 8);
  ClusterState st(topo);
  st.SetGpuHealth(0, 3, GpuHealth::kFailed);
  st.SetNodeState(1, NodeState::kDrained);
  st.SetGpuHealth(2, 0, GpuHealth::kDegraded);
  auto placer = MakePlacer("toposched");
  // A 16-GPU gang takes whole healthy nodes only.
  Placement big = placer->Place(MakeJob(16, 8), st);
  CheckValid(big, st, 16);
  for (const GpuSlot& s : big.ranks) {
    CHECK(s.node != 0);
    CHECK(s.node != 1);
    CHECK(s.node != 2);
  }
  // A 4-GPU job may use the node with a failed GPU (7 usable), never the
  // failed GPU itself.
  ClusterState st2(topo);
  st2.SetGpuHealth(0, 3, GpuHealth::kFailed);
  Placement small = placer->Place(MakeJob(4), st2);
  CheckValid(small, st2, 4);
  for (const GpuSlot& s : small.ranks) CHECK_FALSE((s.node == 0 && s.gpu == 3));
  // Degraded GPUs: small jobs may use them, healthy ones first; gangs avoid them.
  ClusterState st3(topo);
  for (NodeId n = 0; n < topo.node_count(); ++n) st3.SetGpuHealth(n, 0, GpuHealth::kDegraded);
  CHECK(placer->Place(MakeJob(8), st3).placed());
  CHECK(placer->Place(MakeJob(16, 8), st3).outcome == PlaceOutcome::kBusy);
  Placement seven = placer->Place(MakeJob(7), st3);
  REQUIRE(seven.placed());
  for (const GpuSlot& s : seven.ranks) CHECK(s.gpu != 0);
}

TEST_CASE("small jobs go to the fullest node of the fullest domain that holds them") {
  Topology topo = MakeRegular({"node", "leaf"}, 0, {4}, 2, 8);
  ClusterState st(topo);
  std::vector<GpuSlot> six = {{5, 0}, {5, 1}, {5, 2}, {5, 3}, {5, 4}, {5, 5}};
  std::vector<GpuSlot> four = {{6, 0}, {6, 1}, {6, 2}, {6, 3}};
  REQUIRE(st.Allocate(six).ok());
  REQUIRE(st.Allocate(four).ok());
  auto placer = MakePlacer("toposched");
  Placement p = placer->Place(MakeJob(2), st);
  REQUIRE(p.placed());
  CHECK(p.ranks[0].node == 5);
  Placement q = placer->Place(MakeJob(3), st);
  REQUIRE(q.placed());
  CHECK(q.ranks[0].node == 6);
  std::set<NodeId> nodes;
  for (const GpuSlot& s : q.ranks) nodes.insert(s.node);
  CHECK(nodes.size() == 1);
}

TEST_CASE("spares are whole free nodes next to the job") {
  Topology topo = RackTopology();
  ClusterState st(topo);
  JobSpec job = MakeJob(8, 8);
  job.spares = 1;
  Placement p = MakePlacer("toposched")->Place(job, st);
  REQUIRE(p.placed());
  REQUIRE(p.spares.size() == 1);
  NodeId spare = p.spares[0];
  CHECK(topo.Ancestor(spare, topo.hbd_tier()) == topo.Ancestor(p.ranks[0].node, topo.hbd_tier()));
  for (const GpuSlot& s : p.ranks) CHECK(s.node != spare);
  job.spares = 100;
  CHECK(MakePlacer("toposched")->Place(job, st).outcome == PlaceOutcome::kInfeasible);
  job.spares = 30;  // 32 nodes, the job takes 1: 30 spares fit
  CHECK(MakePlacer("toposched")->Place(job, st).placed());
  Occupy(st, 15);
  Occupy(st, 14);
  CHECK(MakePlacer("toposched")->Place(job, st).outcome == PlaceOutcome::kBusy);
}

TEST_CASE("a job fits one leaf when one leaf can hold it, and pipelines stay together") {
  Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {4, 4}, 2, 8);  // leaves of 32 GPUs
  ClusterState st(topo);
  // Leave leaf 1 fully free, others partly used.
  for (NodeId n : {0, 1, 8, 9, 10, 13}) Occupy(st, n);
  JobSpec job = MakeJob(32, 8, 4);  // tp8 pp4 dp1: one pipeline
  Placement p = MakePlacer("toposched")->Place(job, st);
  REQUIRE(p.placed());
  PlacementMetrics m = Evaluate(job, topo, p.ranks);
  CHECK(m.leaves_spanned == 1);
  CHECK(m.tier_histogram[static_cast<int>(GroupKind::kPp)][topo.leaf_tier()] == 8);
  // TP: 4 groups x 16 x hbd 1; PP: 8 groups x 2 x leaf 4. The bound puts
  // each PP group of 4 GPUs inside a node (cost 1): (64 + 64) / (64 + 16).
  CHECK(m.comm_cost == doctest::Approx(128));
  CHECK(m.comm_cost_ratio.value() == doctest::Approx(1.6));
}

TEST_CASE("placement is deterministic and does not touch the state") {
  Topology topo = RackTopology();
  ClusterState st(topo);
  Occupy(st, 3);
  Occupy(st, 9);
  JobSpec job = MakeJob(32, 8, 2);
  for (const std::string& name : PlacerNames()) {
    auto placer = MakePlacer(name);
    Placement a = placer->Place(job, st);
    Placement b = placer->Place(job, st);
    REQUIRE(a.placed());
    CHECK(a.ranks == b.ranks);
    CHECK(st.busy_gpus(topo.root()) == 8);
  }
}

TEST_CASE("slurm-tree: the last top switch that holds the job, then its leaves as Slurm 22.05") {
  // No switch above the spines (Slurm's topology.conf without a root
  // switch): the job stays under one spine, the last that can hold it.
  Topology topo = MakeRegular({"node", "leaf", "spine"}, 0, {4, 2}, 2, 8);
  ClusterState st(topo);
  // Free nodes: leaf 0 {3}, leaf 1 {6, 7} (spine 0: 3), leaf 2 {10, 11},
  // leaf 3 {14, 15} (spine 1: 4). Real Slurm 22.05 on the same shape
  // (tests/slurm, docs/slurm.md) picks the same nodes.
  for (NodeId n : {0, 1, 2, 4, 5, 8, 9, 12, 13}) Occupy(st, n);
  auto tree = MakePlacer("slurm-tree");
  // 3 nodes: both spines hold it, the last wins; neither leaf holds it and
  // they are as large: the first, then the next.
  Placement p = tree->Place(MakeJob(24, 8), st);
  REQUIRE(p.placed());
  std::set<NodeId> nodes;
  for (const GpuSlot& s : p.ranks) nodes.insert(s.node);
  CHECK(nodes == std::set<NodeId>{10, 11, 14});
  // Ranks follow node order.
  CHECK(p.ranks[0].node == 10);
  CHECK(p.ranks[23].node == 14);
  // 2 nodes: leaf 2 holds it alone.
  Placement q = tree->Place(MakeJob(16, 8), st);
  REQUIRE(q.placed());
  CHECK(q.ranks[0].node == 10);
  CHECK(q.ranks[15].node == 11);
  // first-fit simply walks node order.
  Placement f = MakePlacer("first-fit")->Place(MakeJob(16, 8), st);
  REQUIRE(f.placed());
  CHECK(f.ranks[0].node == 3);
  CHECK(f.ranks[15].node == 6);
}

TEST_CASE("slurm-tree: the nearest leaf first unless a farther one holds the rest") {
  // One root switch over two spines of two 4-node leaves.
  Topology topo = MakeRegular({"node", "leaf", "spine", "top"}, 0, {4, 2, 2}, 1, 8);
  ClusterState st(topo);
  auto chosen = [&](int count) {
    Placement p = MakePlacer("slurm-tree")->Place(MakeJob(8 * count, 8), st);
    REQUIRE(p.placed());
    std::set<NodeId> nodes;
    for (const GpuSlot& s : p.ranks) nodes.insert(s.node);
    return nodes;
  };
  // Free: leaf 0 {0, 1, 3}, leaf 1 {4, 7}, leaf 2 {8, 10, 11}, leaf 3 {14}
  // (tests/slurm fidelity scenario: Slurm takes 0, 1, 3, 4, 7, 14).
  for (NodeId n : {2, 5, 6, 9, 12, 13, 15}) Occupy(st, n);
  CHECK(chosen(6) == std::set<NodeId>{0, 1, 3, 4, 7, 14});
}

TEST_CASE("gpus_per_node spreads a job over more nodes") {
  Topology topo = MakeRegular({"node", "leaf"}, 0, {4}, 2, 8);
  ClusterState st(topo);
  JobSpec job = MakeJob(16, 4);
  job.gpus_per_node = 4;
  Placement p = MakePlacer("toposched")->Place(job, st);
  REQUIRE(p.placed());
  std::set<NodeId> nodes;
  for (const GpuSlot& s : p.ranks) nodes.insert(s.node);
  CHECK(nodes.size() == 4);
  job.gpus_per_node = 2;  // TP 4 cannot sit on one node with 2 GPUs per node
  job.constraints[0].tier = "node";
  Placement q = MakePlacer("toposched")->Place(job, st);
  CHECK(q.outcome == PlaceOutcome::kInfeasible);
  CHECK(q.reason.find("gpus_per_node") == std::string::npos);
  CHECK(q.reason.find("2 GPUs per node") != std::string::npos);
}

TEST_CASE("toposched trades leaves for pods when the predicted step allows (phase 4)") {
  // Nodes of 8 GPUs, leaves of 2 nodes, pods of 4 leaves, 4 pods: node id
  // = pod * 8 + leaf * 2 + node.
  Topology topo = MakeRegular({"node", "leaf", "pod"}, 0, {2, 4}, 4, 8);
  ClusterState st(topo);
  // Pods 0-2: one empty leaf each. Pod 3: one free node in every leaf.
  for (int pod = 0; pod < 3; ++pod) {
    for (NodeId n = pod * 8 + 2; n < pod * 8 + 8; ++n) Occupy(st, n);
  }
  for (NodeId n = 24; n < 32; n += 2) Occupy(st, n);
  const JobSpec job = MakeJob(48, 8);
  auto spans = [&](const Placement& p, int tier) {
    std::set<DomainId> d;
    for (const GpuSlot& g : p.ranks) d.insert(topo.Ancestor(g.node, tier));
    return d.size();
  };
  // The fewest leaves: the three empty ones, in three pods.
  Placement fewest = PlaceFewestLeaves(job, st);
  CheckValid(fewest, st, 48);
  CHECK(spans(fewest, 1) == 3);
  CHECK(spans(fewest, 2) == 3);
  // With phase 4: pod 3's four half leaves and one empty leaf, two pods
  // (span cost 5 x 4 + 2 x 16 = 52 against 3 x 4 + 3 x 16 = 60), because its
  // predicted step is no slower.
  Placement chosen = MakePlacer("toposched")->Place(job, st);
  CheckValid(chosen, st, 48);
  CHECK(spans(chosen, 1) == 5);
  CHECK(spans(chosen, 2) == 2);
  StepTimeModel steps(topo);
  CHECK(steps.StepSeconds(job, chosen.ranks, LinkLoad::kSaturated) <=
        1.01 * steps.StepSeconds(job, fewest.ranks, LinkLoad::kSaturated));
  // Every TP group still sits in one node.
  CHECK(Evaluate(job, topo, chosen.ranks).required_met);
}

// Nodes of 8 H100s, leaves of 2 nodes, pods of 4 leaves, 4 pods (node id =
// pod * 8 + leaf * 2 + node); NVLink inside a node, 50 GB/s per GPU up to the
// pod, and 7:1 oversubscribed above the pods (meta-24k's tiers, scaled down).
Topology OversubscribedPods() {
  TopologyBuilder b("pods", {"node", "leaf", "pod"}, 0);
  b.SetTierLink(0, {450, 3});
  b.SetTierLink(1, {50, 6});
  b.SetTierLink(2, {50, 8});
  b.SetTierLink(3, {50, 12, 7});
  int node = 0;
  for (int pod = 0; pod < 4; ++pod) {
    const int p = b.AddDomain("pod" + std::to_string(pod), 2, TopologyBuilder::kTop);
    for (int leaf = 0; leaf < 4; ++leaf) {
      const int l = b.AddDomain("leaf" + std::to_string(pod * 4 + leaf), 1, p);
      for (int i = 0; i < 2; ++i) b.AddNode("n" + std::to_string(node++), l, 8, "H100");
    }
  }
  return std::move(b).Build().value();
}

TEST_CASE("toposched keeps a preferred EP block inside one pod when that is faster (phase 4c)") {
  Topology topo = OversubscribedPods();
  ClusterState st(topo);
  // Pod 0: 3 empty leaves; pod 1: 1; pod 2: 2; pod 3: none.
  for (NodeId n : {6, 7, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23}) Occupy(st, n);
  for (NodeId n = 24; n < 32; ++n) Occupy(st, n);
  // 64 GPUs, TP 8 x EP 4: an EP block is 4 nodes, more than the HBD (a
  // node), so it is preferred in a pod, as the replay workloads ask.
  JobSpec job = MakeJob(64, 8, 1, 4);
  job.constraints[static_cast<int>(GroupKind::kEp)] = {Strength::kPreferred, "pod"};
  const int root = topo.root_tier();
  const auto ep = static_cast<int>(GroupKind::kEp);
  // Phases 1-3: the fewest leaves (pod 0's three and pod 1's one) split the
  // second EP block across the two pods, so its all-to-all crosses the
  // oversubscribed fabric.
  Placement fewest = PlaceFewestLeaves(job, st);
  CheckValid(fewest, st, 64);
  PlacementMetrics split = Evaluate(job, topo, fewest.ranks);
  CHECK(split.leaves_spanned == 4);
  CHECK(split.tier_histogram[ep][root] > 0);
  // Phase 4c: with the preference made required, whole blocks in pods 0 and 2
  // (still 4 leaves), and no EP group above a pod.
  Placement kept = MakePlacer("toposched")->Place(job, st);
  CheckValid(kept, st, 64);
  PlacementMetrics whole = Evaluate(job, topo, kept.ranks);
  CHECK(whole.tier_histogram[ep][root] == 0);
  CHECK(whole.required_met);
  CHECK(PredictedFaster(job, topo, kept, fewest));
  // Where the preference cannot be kept now (no pod with 4 free nodes), the
  // job still starts, as asked.
  ClusterState sparse(topo);
  const std::set<NodeId> free_nodes = {0, 2, 4, 8, 10, 12, 16, 18};
  for (NodeId n = 0; n < 32; ++n) {
    if (!free_nodes.count(n)) Occupy(sparse, n);
  }
  Placement anyway = MakePlacer("toposched")->Place(job, sparse);
  CheckValid(anyway, sparse, 64);
}

TEST_CASE(
    "toposched puts pipeline stages, not data-parallel groups, across pods when faster (phase "
    "4b)") {
  Topology topo = OversubscribedPods();
  ClusterState st(topo);
  // Pods 0 and 1 keep two empty leaves each; pods 2 and 3 are full.
  for (NodeId n : {4, 5, 6, 7, 12, 13, 14, 15}) Occupy(st, n);
  for (NodeId n = 16; n < 32; ++n) Occupy(st, n);
  // 64 GPUs, TP 8 x PP 2 x DP 4: a pipeline is 2 nodes (one leaf). A 70B
  // model on short sequences: the gradient all-reduce outlasts the backward
  // pass it overlaps, so where DP groups sit shows in the step.
  JobSpec job = MakeJob(64, 8, 2);
  job.model = ModelSpec{};
  job.model->preset = "llama3-70b";
  job.model->sequence = 512;
  const int root = topo.root_tier();
  const auto dp = static_cast<int>(GroupKind::kDp);
  const auto pp = static_cast<int>(GroupKind::kPp);
  // Pipelines contiguous (pp preferred in a leaf): every pipeline in a leaf,
  // and every one of the 16 DP groups across both pods.
  Placement contiguous = PlaceFewestLeaves(job, st);
  CheckValid(contiguous, st, 64);
  PlacementMetrics a = Evaluate(job, topo, contiguous.ranks);
  CHECK(a.tier_histogram[dp][root] == 16);
  CHECK(a.tier_histogram[pp][root] == 0);
  // Stage-major: each stage's DP groups inside one pod, the pipelines'
  // point-to-point traffic across: predicted faster, so chosen.
  Placement chosen = MakePlacer("toposched")->Place(job, st);
  CheckValid(chosen, st, 64);
  PlacementMetrics b = Evaluate(job, topo, chosen.ranks);
  CHECK(b.tier_histogram[dp][root] == 0);
  CHECK(b.tier_histogram[pp][root] == 32);
  CHECK(b.required_met);
  CHECK(PredictedFaster(job, topo, chosen, contiguous));
  // Inside one pod the order is not worth changing: the pipelines stay
  // contiguous.
  ClusterState one_pod(topo);
  for (NodeId n = 8; n < 32; ++n) Occupy(one_pod, n);
  Placement inside = MakePlacer("toposched")->Place(job, one_pod);
  CheckValid(inside, one_pod, 64);
  PlacementMetrics c = Evaluate(job, topo, inside.ranks);
  CHECK(c.tier_histogram[pp][1] == 32);
  CHECK(c.tier_histogram[pp][2] == 0);
}

TEST_CASE("the placement sequence's odometer gives SequenceRank's rank at every position") {
  Topology topo = RackTopology();
  struct Case {
    int gpus, tp, pp, ep, cp;
  };
  for (const Case& c : {Case{1, 1, 1, 1, 1}, Case{8, 4, 1, 1, 1}, Case{32, 4, 2, 1, 1},
                        Case{64, 2, 4, 2, 1}, Case{48, 2, 3, 1, 2}, Case{64, 8, 1, 8, 1}}) {
    JobSpec job = MakeJob(c.gpus, c.tp, c.pp, c.ep, c.cp);
    for (const char* order : {"tp-cp-ep-dp-pp", "pp-dp-ep-cp-tp"}) {
      auto parsed = ParseRankOrder(order);
      REQUIRE(parsed.ok());
      job.parallelism.order = parsed.value();
      auto shape = topo::core::internal::MakeJobShape(job, topo, PlacerOptions{});
      REQUIRE(shape.ok());
      const std::vector<int> seq = topo::core::internal::SequenceRanks(shape.value());
      REQUIRE(static_cast<int>(seq.size()) == c.gpus);
      std::set<int> seen(seq.begin(), seq.end());
      CHECK(static_cast<int>(seen.size()) == c.gpus);  // a permutation of the ranks
      for (int p = 0; p < c.gpus; ++p) {
        const int want = topo::core::internal::SequenceRank(shape.value(), p);
        const int got = seq[p];
        INFO("gpus ", c.gpus, " order ", order, " position ", p);
        CHECK(got == want);
      }
    }
  }
}

TEST_CASE("SameUsage compares busy, failed and degraded GPUs and node states") {
  Topology topo = RackTopology();
  ClusterState a(topo);
  ClusterState b(topo);
  CHECK(a.SameUsage(b));
  REQUIRE(a.Allocate(std::vector<GpuSlot>{{3, 1}}).ok());
  CHECK(!a.SameUsage(b));
  REQUIRE(b.Allocate(std::vector<GpuSlot>{{3, 1}}).ok());
  CHECK(a.SameUsage(b));
  a.SetGpuHealth(5, 0, GpuHealth::kDegraded);
  CHECK(!a.SameUsage(b));
  b.SetGpuHealth(5, 0, GpuHealth::kDegraded);
  CHECK(a.SameUsage(b));
  b.SetNodeState(7, NodeState::kDrained);
  CHECK(!a.SameUsage(b));
}

TEST_CASE("health_changes counts changes of node state and GPU health, not allocations") {
  Topology topo = RackTopology();
  ClusterState st(topo);
  const uint64_t start = st.health_changes();
  REQUIRE(st.Allocate(std::vector<GpuSlot>{{3, 1}}).ok());
  REQUIRE(st.Release(std::vector<GpuSlot>{{3, 1}}).ok());
  CHECK(st.health_changes() == start);
  st.SetNodeState(2, NodeState::kUp);  // already up: no change
  st.SetGpuHealth(2, 0, GpuHealth::kHealthy);
  CHECK(st.health_changes() == start);
  st.SetNodeState(2, NodeState::kDown);
  CHECK(st.health_changes() == start + 1);
  st.SetGpuHealth(2, 0, GpuHealth::kDegraded);
  st.SetGpuHealth(2, 0, GpuHealth::kFailed);
  CHECK(st.health_changes() == start + 3);
  // A copy carries the count; changing it leaves the original's alone.
  ClusterState copy = st;
  copy.SetNodeState(2, NodeState::kUp);
  CHECK(copy.health_changes() == start + 4);
  CHECK(st.health_changes() == start + 3);
}

TEST_CASE("HasNodeWithFree follows allocations, releases, failures and node states") {
  Topology topo = RackTopology();  // 4-GPU nodes, racks of 4 nodes
  ClusterState st(topo);
  const DomainId rack = topo.Ancestor(0, 1);
  CHECK(st.HasNodeWithFree(rack, 4));
  CHECK(!st.HasNodeWithFree(rack, 5));
  // Take 3 GPUs of every node of the rack: no node keeps 2 free.
  const Domain& dom = topo.domain(rack);
  for (NodeId n = dom.node_begin; n < dom.node_end; ++n) {
    REQUIRE(st.Allocate(std::vector<GpuSlot>{{n, 0}, {n, 1}, {n, 2}}).ok());
  }
  CHECK(st.HasNodeWithFree(rack, 1));
  CHECK(!st.HasNodeWithFree(rack, 2));
  CHECK(st.HasNodeWithFree(topo.root(), 4));  // other racks are empty
  REQUIRE(st.Release(std::vector<GpuSlot>{{dom.node_begin, 1}}).ok());
  CHECK(st.HasNodeWithFree(rack, 2));
  st.SetGpuHealth(dom.node_begin, 3, GpuHealth::kFailed);
  CHECK(!st.HasNodeWithFree(rack, 2));
  st.SetGpuHealth(dom.node_begin, 3, GpuHealth::kHealthy);
  st.SetNodeState(dom.node_begin, NodeState::kDrained);
  CHECK(!st.HasNodeWithFree(rack, 2));
  CHECK(st.HasNodeWithFree(rack, 1));
}
