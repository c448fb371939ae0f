// PlacementScorer: core::Evaluate's leaf_span_ratio, comm_cost_ratio and
// required_met, with the per-shape bounds cached (see sim.hpp).

#include <algorithm>
#include <string>

#include "topo/core/sim.hpp"

namespace topo::core {

PlacementScorer::PlacementScorer(const Topology& topology)
    : topology_(&topology), stamp_(topology.domain_count(), 0) {}

const PlacementScorer::Shape& PlacementScorer::ShapeOf(const JobSpec& job, int part) {
  const Parallelism& p = job.parallelism;
  std::string key = std::to_string(part) + "@" + std::to_string(job.gpus) + "/" +
                    std::to_string(job.gpus_per_node) + "/" + std::to_string(p.tp) + "." +
                    std::to_string(p.cp) + "." + std::to_string(p.ep) + "." + std::to_string(p.pp) +
                    "." + std::to_string(p.dp) + "/" + FormatRankOrder(p.order);
  for (const TierConstraint& c : job.constraints) {
    key += "/" + std::to_string(static_cast<int>(c.strength)) + c.tier;
  }
  auto it = shapes_.find(key);
  if (it != shapes_.end()) return it->second;

  const Topology& topo = topology_->PartView(part);
  Shape shape;
  const int root = topo.root_tier();
  const int leaf = topo.leaf_tier();
  if (leaf < root) shape.min_leaves = MinDomainsForJob(job, topo, leaf);
  const RankLayout layout(p);
  for (GroupKind k : kAllGroupKinds) {
    const int ki = static_cast<int>(k);
    shape.required[ki] = -1;
    shape.bound_tier[ki] = 0;
    if (!RankLayout::KindActive(k, p)) continue;
    const TierConstraint& c = job.constraint(k);
    const int size = layout.GroupSize(k);
    if (c.strength == Strength::kRequired || c.strength == Strength::kAuto) {
      Result<int> t = topo.FindTier(c.tier);
      if (!t.ok()) {
        shape.unknown_required_tier = true;
      } else if (EffectiveStrength(c.strength, size, topo.max_domain_gpus(t.value())) ==
                 Strength::kRequired) {
        shape.required[ki] = t.value();
      }
    }
    int bound = 0;
    while (bound < root && topo.max_domain_gpus(bound) < size) ++bound;
    shape.bound_tier[ki] = bound;
  }
  return shapes_.emplace(std::move(key), shape).first->second;
}

PlacementScorer::Score PlacementScorer::Evaluate(const JobSpec& job,
                                                 std::span<const GpuSlot> ranks) {
  const int part = ranks.empty() ? 0 : std::max(0, topology_->part_of(ranks[0].node));
  const Topology& topo = topology_->PartView(part);
  const Shape& shape = ShapeOf(job, part);
  Score score;
  score.required_met = !shape.unknown_required_tier;
  const RankLayout layout(job.parallelism);
  const int root = topo.root_tier();
  double cost = 0;
  double bound = 0;
  for (GroupKind k : kAllGroupKinds) {
    if (!RankLayout::KindActive(k, job.parallelism)) continue;
    const int ki = static_cast<int>(k);
    const int count = layout.GroupCount(k);
    group_first_.assign(count, -1);
    group_tier_.assign(count, 0);
    for (int r = 0; r < layout.world_size(); ++r) {
      const int g = layout.GroupOf(k, r);
      const NodeId n = ranks[r].node;
      if (group_first_[g] < 0) {
        group_first_[g] = n;
        continue;
      }
      int& tier = group_tier_[g];
      while (tier < root && topo.Ancestor(n, tier) != topo.Ancestor(group_first_[g], tier)) ++tier;
    }
    const double weight = GroupKindWeight(k);
    const double bound_cost = topo.tier(shape.bound_tier[ki]).cost;
    for (int g = 0; g < count; ++g) {
      const int tier = group_tier_[g];
      cost += weight * topo.tier(tier).cost;
      bound += weight * bound_cost;
      // Each group is held to its own part's constraints (a job split over
      // parts by replica has groups on several).
      const int own = std::max(0, topology_->part_of(group_first_[g]));
      const int need = own == part ? shape.required[ki] : ShapeOf(job, own).required[ki];
      if (need >= 0 && tier > need) score.required_met = false;
    }
  }
  if (bound > 0) score.comm_cost_ratio = cost / bound;

  const int leaf = topo.leaf_tier();
  if (leaf < root && shape.min_leaves > 0) {
    if (++stamp_now_ == 0) {  // wrapped: forget every old stamp
      std::fill(stamp_.begin(), stamp_.end(), 0);
      stamp_now_ = 1;
    }
    int leaves = 0;
    for (const GpuSlot& s : ranks) {
      const DomainId d = topo.Ancestor(s.node, leaf);
      if (stamp_[d] != stamp_now_) {
        stamp_[d] = stamp_now_;
        ++leaves;
      }
    }
    score.leaf_span_ratio = static_cast<double>(leaves) / shape.min_leaves;
  }
  return score;
}

}  // namespace topo::core
