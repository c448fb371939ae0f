// Property tests: thousands of seeded random topologies, fills, failures and
// jobs. Every placement must be valid and keep the hard constraints; Busy and
// Infeasible must agree with the empty cluster; and on small instances the
// number of leaves toposched spans must equal a brute-force optimum.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <map>
#include <set>

#include "test_util.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/fill.hpp"
#include "topo/core/placement.hpp"
#include "topo/core/rng.hpp"
#include "topo/core/step_model.hpp"

using namespace topo::core;

namespace {

struct Instance {
  Topology topo;
  int leaves = 0;
};

Topology RandomTopology(Rng& rng) {
  const int above = static_cast<int>(rng.Range(1, 4));  // tiers above the node tier
  std::vector<std::string> tiers = {"node"};
  for (int t = 1; t <= above; ++t) tiers.push_back("t" + std::to_string(t));
  const int hbd = static_cast<int>(rng.Range(0, above));
  std::vector<int> fanout;
  for (int t = 0; t < above; ++t) fanout.push_back(static_cast<int>(rng.Range(1, t == 0 ? 4 : 3)));
  const int top = static_cast<int>(rng.Range(1, 3));
  const int gpus = std::array<int, 4>{1, 2, 4, 8}[rng.Below(4)];
  return testing::MakeRegular(tiers, hbd, fanout, top, gpus);
}

JobSpec RandomJob(Rng& rng, int max_gpus) {
  for (;;) {
    JobSpec job;
    Parallelism& p = job.parallelism;
    p.tp = std::array<int, 4>{1, 2, 4, 8}[rng.Below(4)];
    p.cp = rng.Below(4) == 0 ? 2 : 1;
    p.pp = std::array<int, 3>{1, 2, 4}[rng.Below(3)];
    p.ep = std::array<int, 3>{1, 2, 4}[rng.Below(3)];
    p.dp = p.ep * static_cast<int>(rng.Range(1, 4));
    job.gpus = p.tp * p.cp * p.pp * p.dp;
    if (job.gpus > max_gpus) continue;
    if (rng.Below(3) == 0) {
      // Some jobs are plain: a few GPUs, no layout.
      job = JobSpec{};
      job.gpus = static_cast<int>(rng.Range(1, std::min(max_gpus, 12)));
      job.parallelism.dp = job.gpus;
    }
    if (rng.Below(5) == 0) job.gpus_per_node = std::array<int, 3>{1, 2, 4}[rng.Below(3)];
    if (rng.Below(6) == 0) job.constraints[static_cast<int>(GroupKind::kTp)].tier = "node";
    if (rng.Below(6) == 0) {
      job.constraints[static_cast<int>(GroupKind::kPp)] = {Strength::kRequired, "leaf"};
    }
    if (rng.Below(8) == 0) job.spares = static_cast<int>(rng.Range(1, 2));
    REQUIRE(ValidateJobSpec(job).ok());
    return job;
  }
}

void Disturb(Rng& rng, ClusterState& st) {
  const Topology& topo = st.topology();
  FillCluster(st, rng.Uniform() * 0.9, rng.Next());
  for (int i = static_cast<int>(rng.Below(4)); i > 0; --i) {
    NodeId n = static_cast<NodeId>(rng.Below(topo.node_count()));
    int g = static_cast<int>(rng.Below(topo.node(n).gpus));
    st.SetGpuHealth(n, g, rng.Below(2) ? GpuHealth::kFailed : GpuHealth::kDegraded);
  }
  if (rng.Below(3) == 0) {
    st.SetNodeState(static_cast<NodeId>(rng.Below(topo.node_count())),
                    rng.Below(2) ? NodeState::kDrained : NodeState::kDown);
  }
}

// Independent check of every hard rule on a placed job.
// Whether a kind's constraint is required on this topology (kAuto decided
// by whether the largest domain of its tier holds a group).
bool RequiredHere(const JobSpec& job, GroupKind k, const Topology& topo) {
  const TierConstraint& c = job.constraint(k);
  if (!RankLayout::KindActive(k, job.parallelism)) return false;
  if (c.strength == Strength::kRequired) return true;
  if (c.strength != Strength::kAuto) return false;
  const int tier = topo.FindTier(c.tier).value();
  return RankLayout(job.parallelism).GroupSize(k) <= topo.max_domain_gpus(tier);
}

void CheckPlacement(const JobSpec& job, const ClusterState& st, const Placement& p,
                    bool toposched) {
  const Topology& topo = st.topology();
  REQUIRE(static_cast<int>(p.ranks.size()) == job.gpus);
  std::set<std::pair<int, int>> seen;
  for (const GpuSlot& s : p.ranks) {
    REQUIRE(s.node >= 0);
    REQUIRE(s.node < topo.node_count());
    CHECK(seen.insert({s.node, s.gpu}).second);
    CHECK(st.node_state(s.node) == NodeState::kUp);
    CHECK(st.gpu_health(s.node, s.gpu) != GpuHealth::kFailed);
    CHECK(((st.busy_mask(s.node) >> s.gpu) & 1) == 0);
    if (toposched && job.gpus > 8) CHECK(st.gpu_health(s.node, s.gpu) == GpuHealth::kHealthy);
  }
  if (job.gpus_per_node > 0) {
    std::map<NodeId, int> per_node;
    for (const GpuSlot& s : p.ranks) per_node[s.node]++;
    for (const auto& [n, c] : per_node) CHECK(c <= job.gpus_per_node);
  }
  for (NodeId spare : p.spares) {
    CHECK(st.busy_mask(spare) == 0);
    for (const GpuSlot& s : p.ranks) CHECK(s.node != spare);
  }
  if (!toposched) return;
  RankLayout layout(job.parallelism);
  for (GroupKind k : kAllGroupKinds) {
    const TierConstraint& c = job.constraint(k);
    if (!RequiredHere(job, k, topo)) continue;
    const int tier = topo.FindTier(c.tier).value();
    std::map<int, DomainId> domain_of_group;
    for (int r = 0; r < job.gpus; ++r) {
      DomainId d = topo.Ancestor(p.ranks[r].node, tier);
      auto [it, inserted] = domain_of_group.emplace(layout.GroupOf(k, r), d);
      CHECK_MESSAGE(it->second == d, "group of ", GroupKindName(k), " split across ", c.tier);
    }
  }
  CHECK(Evaluate(job, topo, p.ranks).required_met);
}

// GPUs node n offers the job, written independently of the placer.
int OfferedSlots(const JobSpec& job, const ClusterState& st, NodeId n) {
  if (st.node_state(n) != NodeState::kUp) return 0;
  uint64_t usable = st.all_mask(n) & ~st.busy_mask(n) & ~st.failed_mask(n);
  if (job.gpus > 8) usable &= ~st.degraded_mask(n);
  int free = std::popcount(usable);
  if (job.gpus_per_node > 0) return free >= job.gpus_per_node ? job.gpus_per_node : 0;
  if (job.gpus < st.topology().max_node_gpus()) return free;
  return usable == st.all_mask(n) ? free : 0;
}

// Fewest leaves that can hold the job, by trying every subset of leaves.
// Only for jobs whose required constraints sit at or below the HBD.
int BruteForceMinLeaves(const JobSpec& job, const ClusterState& st) {
  const Topology& topo = st.topology();
  const int leaf = topo.leaf_tier();
  RankLayout layout(job.parallelism);
  // Block size and tier: the union of required groups.
  int block_tier = -1;
  std::array<bool, kDimCount> dims{};
  for (GroupKind k : kAllGroupKinds) {
    const TierConstraint& c = job.constraint(k);
    if (!RequiredHere(job, k, topo)) continue;
    block_tier = std::max(block_tier, topo.FindTier(c.tier).value());
    for (int d = 0; d < kDimCount; ++d) dims[d] = dims[d] || RankLayout::InGroup(k, Dim(d));
  }
  const bool single_node = job.gpus_per_node == 0 && job.gpus < topo.max_node_gpus();
  int block = 1;
  for (int d = 0; d < kDimCount; ++d) {
    if (dims[d]) block *= layout.dim_size(static_cast<Dim>(d));
  }
  // Blocks each leaf can host: per domain of the block's tier (or per node).
  std::vector<int64_t> leaf_blocks(topo.tier_size(leaf), 0);
  if (single_node) {
    for (NodeId n = 0; n < topo.node_count(); ++n) {
      int idx = topo.Ancestor(n, leaf) - topo.tier_first(leaf);
      leaf_blocks[idx] += OfferedSlots(job, st, n) / job.gpus;
    }
  } else {
    const int t = std::max(block_tier, 0);
    for (DomainId d = topo.tier_first(t); d < topo.tier_first(t) + topo.tier_size(t); ++d) {
      const Domain& dom = topo.domain(d);
      int slots = 0;
      for (NodeId n = dom.node_begin; n < dom.node_end; ++n) slots += OfferedSlots(job, st, n);
      int idx = topo.Ancestor(dom.node_begin, leaf) - topo.tier_first(leaf);
      leaf_blocks[idx] += slots / block;
    }
  }
  const int64_t need = single_node ? 1 : job.gpus / block;
  const int leaves = topo.tier_size(leaf);
  int best = 0;
  for (uint32_t mask = 1; mask < (1u << leaves); ++mask) {
    int count = std::popcount(mask);
    if (best != 0 && count >= best) continue;
    int64_t sum = 0;
    for (int i = 0; i < leaves; ++i) {
      if (mask >> i & 1) sum += leaf_blocks[i];
    }
    if (sum >= need) best = count;
  }
  return best;
}

// Domains spanned per tier from the leaf up, weighted 4, 16, 64, ... (the
// toposched placer's tie-break, recomputed here from its definition).
int64_t SpanCostOf(const Topology& topo, const std::vector<GpuSlot>& ranks) {
  int64_t cost = 0, weight = 4;
  for (int t = topo.leaf_tier(); t < topo.root_tier(); ++t, weight *= 4) {
    std::set<DomainId> seen;
    for (const GpuSlot& g : ranks) seen.insert(topo.Ancestor(g.node, t));
    cost += weight * static_cast<int64_t>(seen.size());
  }
  return cost;
}

}  // namespace

TEST_CASE("property: random topologies, fills, failures and jobs") {
  int placed = 0, busy = 0, infeasible = 0, optimal_checked = 0, traded = 0, changed = 0;
  for (uint64_t seed = 1; seed <= 2500; ++seed) {
    CAPTURE(seed);
    Rng rng(seed);
    Topology topo = RandomTopology(rng);
    ClusterState st(topo);
    Disturb(rng, st);
    JobSpec job = RandomJob(rng, topo.total_gpus());
    for (const std::string& name : PlacerNames()) {
      CAPTURE(name);
      Placement p = MakePlacer(name)->Place(job, st);
      const bool toposched = name == "toposched";
      ClusterState empty(topo);
      if (p.placed()) {
        CheckPlacement(job, st, p, toposched);
        ClusterState copy = st;
        CHECK(copy.Allocate(p.ranks).ok());
      } else {
        CHECK_FALSE(p.reason.empty());
        CHECK(p.ranks.empty());
        Placement on_empty = MakePlacer(name)->Place(job, empty);
        // Busy: the empty cluster holds it. Infeasible: it does not.
        CHECK_MESSAGE(on_empty.placed() == (p.outcome == PlaceOutcome::kBusy), p.reason, " | ",
                      on_empty.reason, " | gpus ", job.gpus, " spares ", job.spares);
      }
      // The scheduler's reservation plan probes with choose_by_speed off and
      // no shortfall analysis (SchedulerCore's fitter): that must place
      // exactly where the placer does.
      PlacerOptions fit_only;
      fit_only.choose_by_speed = false;
      fit_only.explain_shortfall = false;
      CHECK(MakePlacer(name, fit_only)->Place(job, st).placed() == p.placed());
      if (!toposched) continue;
      placed += p.placed();
      busy += p.outcome == PlaceOutcome::kBusy;
      infeasible += p.outcome == PlaceOutcome::kInfeasible;
      const bool pp_required =
          job.constraint(GroupKind::kPp).strength == Strength::kRequired && job.parallelism.pp > 1;
      if (!p.placed()) continue;
      // Phases 1-3 alone take the fewest leaves.
      PlacerOptions leaves_only;
      leaves_only.choose_by_speed = false;
      Placement fewest = MakePlacer(name, leaves_only)->Place(job, st);
      REQUIRE(fewest.placed());
      if (!pp_required && topo.leaf_tier() < topo.root_tier() &&
          topo.tier_size(topo.leaf_tier()) <= 12) {
        PlacementMetrics m = Evaluate(job, topo, fewest.ranks);
        CHECK(m.leaves_spanned == BruteForceMinLeaves(job, st));
        ++optimal_checked;
      }
      // Phase 4 (the fewest-pods candidate, the stage-major map, the kept
      // preferences) only ever trades for a faster predicted step, or for a
      // smaller span at a step within 1 %.
      StepTimeModel steps(topo);
      const double mine = steps.StepSeconds(job, p.ranks, LinkLoad::kSaturated);
      const double base = steps.StepSeconds(job, fewest.ranks, LinkLoad::kSaturated);
      CHECK(mine <= base * 1.01 + 1e-12);
      changed += p.ranks != fewest.ranks;  // exercised by placement_test too
      if (p.ranks != fewest.ranks && mine >= base * 0.99) {
        CHECK(SpanCostOf(topo, p.ranks) < SpanCostOf(topo, fewest.ranks));
        ++traded;
      }
    }
  }
  // The generator must exercise every outcome.
  CHECK(placed > 500);
  CHECK(busy > 20);
  CHECK(infeasible > 20);
  CHECK(optimal_checked > 300);
  MESSAGE("placed ", placed, " busy ", busy, " infeasible ", infeasible, " optimality checked ",
          optimal_checked, " phase 4 changed ", changed, " (", traded, " for span alone)");
}
