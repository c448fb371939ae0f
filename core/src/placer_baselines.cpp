// Baseline placers, run through the same interface as toposched so that
// benchmarks compare policies on the same input in the same process.
//
//   first-fit   Slurm with no topology plugin: eligible nodes in node-index
//               order until the job fits; ranks in node order.
//   slurm-tree  Slurm's topology/tree as select/cons_tres does it in Slurm
//               22.05 (checked against the real thing by
//               tests/slurm/test_slurm_fidelity.py): under the top switch,
//               leaf switches one at a time, the nearest to those taken
//               first unless a farther one is better (one that holds the
//               rest alone, the tightest such; else the one whose parent
//               switch holds the rest, ...; else the larger), every free
//               node of a leaf in index order; ranks in node order.
//
// Both know nothing of HBDs or parallelism: they take whole nodes (or
// gpus_per_node, or one node for small jobs) and do not honour constraints.
// Slurm sees the tiers from the leaf up as switches; the implicit root stands
// for the top of the tree.

#include <algorithm>

#include "placer_internal.hpp"

namespace topo::core {
namespace {

using internal::JobShape;

Result<JobShape> UnawareShape(const JobSpec& job, const Topology& topo,
                              const PlacerOptions& options) {
  JobSpec plain = job;
  for (TierConstraint& c : plain.constraints) c = TierConstraint{};
  Result<JobShape> shape = internal::MakeJobShape(plain, topo, options);
  if (shape.ok()) {
    internal::UseRankOrderSequence(shape.value(), job.parallelism);
    // Slurm does not know GPU health below "up": degraded GPUs are used.
    shape.value().allow_degraded = true;
  }
  return shape;
}

Placement Shortfall(const JobSpec& job, const JobShape& shape, const ClusterState& state) {
  std::vector<int> cap = internal::ComputeCapacity(shape, state);  // what fits now, for the reason
  return internal::ExplainShortfall(job, shape, state, cap);
}

class FirstFitPlacer final : public Placer {
 public:
  explicit FirstFitPlacer(PlacerOptions options) : options_(options) {}
  std::string_view name() const override { return "first-fit"; }

  Placement Place(const JobSpec& job, const ClusterState& state) const override {
    const Topology& topo = state.topology();
    Result<JobShape> shape_or = UnawareShape(job, topo, options_);
    if (!shape_or.ok()) return Placement{PlaceOutcome::kInfeasible, shape_or.message(), {}, {}};
    const JobShape& shape = shape_or.value();
    std::vector<std::pair<NodeId, int>> picks;
    int got = 0;
    for (NodeId n = 0; n < topo.node_count() && got < shape.world; ++n) {
      int slots = internal::NodeSlots(shape, state, n);
      if (shape.single_node) {
        if (slots >= shape.world) {
          picks.push_back({n, shape.world});
          got = shape.world;
        }
        continue;
      }
      if (slots > 0) {
        picks.push_back({n, slots});
        got += slots;
      }
    }
    if (got < shape.world) return Shortfall(job, shape, state);
    return internal::BuildPlacement(job, shape, state, std::move(picks));
  }

 private:
  PlacerOptions options_;
};

class SlurmTreePlacer final : public Placer {
 public:
  explicit SlurmTreePlacer(PlacerOptions options) : options_(options) {}
  std::string_view name() const override { return "slurm-tree"; }

  Placement Place(const JobSpec& job, const ClusterState& state) const override {
    const Topology& topo = state.topology();
    Result<JobShape> shape_or = UnawareShape(job, topo, options_);
    if (!shape_or.ok()) return Placement{PlaceOutcome::kInfeasible, shape_or.message(), {}, {}};
    const JobShape& shape = shape_or.value();
    // Eligible slots and nodes per domain (single-node jobs count a node
    // only if it holds the whole job).
    std::vector<int> slots(topo.domain_count(), 0);
    std::vector<int> nodes(topo.domain_count(), 0);
    for (NodeId n = 0; n < topo.node_count(); ++n) {
      int s = internal::NodeSlots(shape, state, n);
      if (shape.single_node && s < shape.world) s = 0;
      if (s == 0) continue;
      for (int t = 0; t <= topo.root_tier(); ++t) {
        DomainId d = topo.Ancestor(n, t);
        slots[d] += shape.single_node ? shape.world : s;
        nodes[d] += 1;
      }
    }
    if (slots[topo.root()] < shape.world) return Shortfall(job, shape, state);
    // The top switch: the last switch of the highest switch tier that can
    // hold the job (the root of a single-rooted tree). A topology with
    // several top switches none of which can hold the job: the implicit
    // root (Slurm 22.05 would not place it at all).
    const int leaf = std::min(topo.leaf_tier(), topo.root_tier());
    const int top_tier = std::max(leaf, topo.root_tier() - 1);
    DomainId top = topo.root();
    for (DomainId d = topo.tier_first(top_tier);
         d < topo.tier_first(top_tier) + topo.tier_size(top_tier); ++d) {
      if (slots[d] >= shape.world) top = d;
    }
    // Its leaf switches with eligible nodes, in index order.
    std::vector<DomainId> leaves;
    const Domain& dom = topo.domain(top);
    for (DomainId l = topo.Ancestor(dom.node_begin, leaf);
         l <= topo.Ancestor(dom.node_end - 1, leaf); ++l) {
      if (slots[l] > 0) leaves.push_back(l);
    }
    // Leaves are taken one at a time. `dist` sums, over the leaves taken so
    // far, the hops from each leaf to them (2 per tier up to the lowest
    // common switch). A leaf replaces the best so far when it is nearer and
    // no worse, or as near and better, by Better: a leaf that holds the
    // rest alone wins, the smaller of two that do; when neither does, the
    // same question is asked of their parent switches (the counts of
    // switches above the leaves stay as they were at the start), and below
    // a common parent the larger wins.
    std::vector<int> dist(topo.domain_count(), 0);
    int rem = shape.world;
    auto better = [&](DomainId a, DomainId b) {
      while (true) {
        const bool af = slots[a] >= rem, bf = slots[b] >= rem;
        if (af && bf) {
          if (nodes[a] != nodes[b]) return nodes[a] < nodes[b] ? 1 : -1;
          break;
        }
        if (af) return 1;
        if (bf) return -1;
        const DomainId pa = topo.domain(a).parent, pb = topo.domain(b).parent;
        if (pa == pb || pa == kNoDomain || pb == kNoDomain) break;
        a = pa;
        b = pb;
      }
      return nodes[a] == nodes[b] ? 0 : nodes[a] > nodes[b] ? 1 : -1;
    };
    std::vector<std::pair<NodeId, int>> picks;
    while (rem > 0) {
      DomainId pick = kNoDomain;
      for (DomainId l : leaves) {
        if (slots[l] == 0) continue;  // taken
        if (pick == kNoDomain) {
          pick = l;
          continue;
        }
        const int cmp = better(l, pick);
        if ((dist[l] < dist[pick] && cmp >= 0) || (dist[l] == dist[pick] && cmp > 0)) pick = l;
      }
      if (pick == kNoDomain) break;
      const NodeId at = topo.domain(pick).node_begin;
      for (DomainId l : leaves) {
        const NodeId ln = topo.domain(l).node_begin;
        int t = leaf;
        while (t < topo.root_tier() && topo.Ancestor(ln, t) != topo.Ancestor(at, t)) ++t;
        dist[l] += 2 * (t - leaf);
      }
      const Domain& ld = topo.domain(pick);
      for (NodeId n = ld.node_begin; n < ld.node_end && rem > 0; ++n) {
        int s = internal::NodeSlots(shape, state, n);
        if (shape.single_node) {
          if (s < shape.world) continue;
          s = shape.world;
        }
        if (s == 0) continue;
        picks.push_back({n, std::min(s, rem)});
        rem -= std::min(s, rem);
      }
      slots[pick] = 0;
      nodes[pick] = 0;
    }
    if (rem > 0) return Shortfall(job, shape, state);
    return internal::BuildPlacement(job, shape, state, std::move(picks));
  }

 private:
  PlacerOptions options_;
};

}  // namespace

std::unique_ptr<Placer> MakeTopoSchedPlacer(const PlacerOptions& options);
// placer_select.cpp: node selection, and with per_part one part of a mixed
// cluster per job (the baselines, as Slurm does, place over the whole tree).
std::unique_ptr<Placer> MakeSelectingPlacer(std::unique_ptr<Placer> base, bool per_part,
                                            bool explain_shortfall);

std::unique_ptr<Placer> MakePlacer(std::string_view name, const PlacerOptions& options) {
  if (name == "toposched")
    return MakeSelectingPlacer(MakeTopoSchedPlacer(options), true, options.explain_shortfall);
  if (name == "slurm-tree") {
    return MakeSelectingPlacer(std::make_unique<SlurmTreePlacer>(options), false,
                               options.explain_shortfall);
  }
  if (name == "first-fit") {
    return MakeSelectingPlacer(std::make_unique<FirstFitPlacer>(options), false,
                               options.explain_shortfall);
  }
  return nullptr;
}

std::vector<std::string> PlacerNames() { return {"toposched", "slurm-tree", "first-fit"}; }

}  // namespace topo::core
