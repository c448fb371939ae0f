// Baseline placers, run through the same interface as toposched so that
// benchmarks compare policies on the same input in the same process.
//
//   first-fit   Slurm with no topology plugin: eligible nodes in node-index
//               order until the job fits; ranks in node order.
//   slurm-tree  Slurm's topology/tree as its documentation describes it:
//               the lowest-level switch that can hold the job (the one with
//               the fewest eligible nodes among those that can), then its
//               leaf switches best fit: a leaf that holds the rest alone (the
//               one with the fewest eligible nodes), else the leaf with the
//               most; nodes in index order within a leaf; ranks in node order.
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
    // The lowest-level switch that can hold the job.
    const int leaf = std::min(topo.leaf_tier(), topo.root_tier());
    DomainId top = kNoDomain;
    for (int t = leaf; t <= topo.root_tier() && top == kNoDomain; ++t) {
      for (DomainId d = topo.tier_first(t); d < topo.tier_first(t) + topo.tier_size(t); ++d) {
        if (slots[d] < shape.world) continue;
        if (top == kNoDomain || nodes[d] < nodes[top]) top = d;
      }
    }
    // Its leaf switches, best fit.
    std::vector<DomainId> leaves;
    const Domain& dom = topo.domain(top);
    for (DomainId l = topo.Ancestor(dom.node_begin, leaf);
         l <= topo.Ancestor(dom.node_end - 1, leaf); ++l) {
      if (slots[l] > 0) leaves.push_back(l);
    }
    std::vector<std::pair<NodeId, int>> picks;
    int rem = shape.world;
    std::vector<char> taken(topo.domain_count(), 0);
    while (rem > 0) {
      DomainId pick = kNoDomain;
      bool pick_fits = false;
      for (DomainId l : leaves) {
        if (taken[l]) continue;
        bool fits = slots[l] >= rem;
        if (pick == kNoDomain || (fits && !pick_fits) ||
            (fits && pick_fits && nodes[l] < nodes[pick]) ||
            (!fits && !pick_fits && nodes[l] > nodes[pick])) {
          pick = l;
          pick_fits = fits;
        }
      }
      if (pick == kNoDomain) break;
      taken[pick] = 1;
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
    }
    if (rem > 0) return Shortfall(job, shape, state);
    return internal::BuildPlacement(job, shape, state, std::move(picks));
  }

 private:
  PlacerOptions options_;
};

}  // namespace

std::unique_ptr<Placer> MakeTopoSchedPlacer(const PlacerOptions& options);

std::unique_ptr<Placer> MakePlacer(std::string_view name, const PlacerOptions& options) {
  if (name == "toposched") return MakeTopoSchedPlacer(options);
  if (name == "slurm-tree") return std::make_unique<SlurmTreePlacer>(options);
  if (name == "first-fit") return std::make_unique<FirstFitPlacer>(options);
  return nullptr;
}

std::vector<std::string> PlacerNames() { return {"toposched", "slurm-tree", "first-fit"}; }

}  // namespace topo::core
