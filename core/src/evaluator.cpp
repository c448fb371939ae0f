#include "topo/core/evaluator.hpp"

#include <algorithm>
#include <functional>

#include "placer_internal.hpp"

namespace topo::core {

namespace {

// The lowest tier whose one domain holds every node of `nodes`.
int SpanTier(const Topology& topo, const std::vector<NodeId>& nodes) {
  int tier = 0;
  const NodeId first = nodes.front();
  for (NodeId n : nodes) {
    while (tier < topo.root_tier() && topo.Ancestor(n, tier) != topo.Ancestor(first, tier)) ++tier;
  }
  return tier;
}

int CountDistinct(const Topology& topo, std::span<const GpuSlot> ranks, int tier) {
  std::vector<DomainId> seen;
  seen.reserve(ranks.size());
  for (const GpuSlot& s : ranks) seen.push_back(topo.Ancestor(s.node, tier));
  std::sort(seen.begin(), seen.end());
  return static_cast<int>(std::unique(seen.begin(), seen.end()) - seen.begin());
}

}  // namespace

int MinDomainsForJob(const JobSpec& job, const Topology& topology, int tier) {
  Result<internal::JobShape> shape_or = internal::MakeJobShape(job, topology, PlacerOptions{});
  if (!shape_or.ok()) return 0;
  const internal::JobShape& shape = shape_or.value();
  ClusterState empty(topology);
  std::vector<int> cap = internal::ComputeCapacity(shape, empty);
  std::vector<int> caps(cap.begin() + topology.tier_first(tier),
                        cap.begin() + topology.tier_first(tier) + topology.tier_size(tier));
  std::sort(caps.begin(), caps.end(), std::greater<>());
  const int64_t need = shape.world / shape.unit[tier];
  int64_t sum = 0;
  for (size_t i = 0; i < caps.size(); ++i) {
    sum += caps[i];
    if (sum >= need) return static_cast<int>(i + 1);
  }
  return 0;  // the empty cluster cannot hold it
}

PlacementMetrics Evaluate(const JobSpec& job, const Topology& whole,
                          std::span<const GpuSlot> ranks) {
  // On a mixed cluster, the part the job runs on (its first rank's): its
  // HBD, aliases and domains.
  const Topology& topology = ranks.empty() ? whole : whole.ViewOf(ranks[0].node);
  PlacementMetrics m;
  const RankLayout layout(job.parallelism);
  const int root_tier = topology.root_tier();
  const int hbd = topology.hbd_tier();
  // Each group is held to its own part's constraints: a job split over
  // parts by replica (placer_select.cpp) has groups on several.
  std::vector<std::array<int, kGroupKindCount>> required(
      static_cast<size_t>(std::max(1, whole.part_count())));
  for (int p = 0; p < static_cast<int>(required.size()); ++p) {
    const Topology& view = whole.PartView(p);
    required[p].fill(-1);
    for (GroupKind k : kAllGroupKinds) {
      const TierConstraint& c = job.constraint(k);
      if (c.strength == Strength::kNone || !RankLayout::KindActive(k, job.parallelism)) continue;
      Result<int> t = view.FindTier(c.tier);
      if (!t.ok()) {
        if (c.strength != Strength::kPreferred) m.required_met = false;
        continue;
      }
      if (EffectiveStrength(c.strength, layout.GroupSize(k), view.max_domain_gpus(t.value())) ==
          Strength::kRequired) {
        required[p][static_cast<int>(k)] = t.value();
      }
    }
  }
  auto required_for = [&](NodeId n, int ki) {
    const int p = whole.part_of(n);
    return required[p < 0 || p >= static_cast<int>(required.size()) ? 0 : p][ki];
  };

  for (GroupKind k : kAllGroupKinds) {
    const int ki = static_cast<int>(k);
    m.tier_histogram[ki].assign(root_tier + 1, 0);
    if (!RankLayout::KindActive(k, job.parallelism)) continue;
    const int size = layout.GroupSize(k);
    const int count = layout.GroupCount(k);
    // Bucket ranks by group.
    std::vector<std::vector<NodeId>> groups(count);
    for (int r = 0; r < layout.world_size(); ++r) {
      groups[layout.GroupOf(k, r)].push_back(ranks[r].node);
    }
    int bound_tier = 0;
    while (bound_tier < root_tier && topology.max_domain_gpus(bound_tier) < size) ++bound_tier;
    int in_hbd = 0;
    for (const std::vector<NodeId>& g : groups) {
      int tier = SpanTier(topology, g);
      m.tier_histogram[ki][tier] += 1;
      m.comm_cost += GroupKindWeight(k) * topology.tier(tier).cost;
      m.comm_cost_bound += GroupKindWeight(k) * topology.tier(bound_tier).cost;
      if (tier <= hbd) ++in_hbd;
      const int need = required_for(g.front(), ki);
      if (need >= 0 && tier > need) m.required_met = false;
    }
    if (k == GroupKind::kTp) m.tp_in_hbd = static_cast<double>(in_hbd) / count;
    if (k == GroupKind::kEp) m.ep_in_hbd = static_cast<double>(in_hbd) / count;
  }
  if (m.comm_cost_bound > 0) m.comm_cost_ratio = m.comm_cost / m.comm_cost_bound;

  const int leaf = topology.leaf_tier();
  const int pod = topology.pod_tier();
  m.leaves_spanned = CountDistinct(topology, ranks, std::min(leaf, root_tier));
  m.pods_spanned = CountDistinct(topology, ranks, pod);
  if (leaf < root_tier) {
    m.min_leaves = MinDomainsForJob(job, topology, leaf);
    if (m.min_leaves > 0) m.leaf_span_ratio = static_cast<double>(m.leaves_spanned) / m.min_leaves;
  }
  if (pod < root_tier && pod > leaf) {
    m.min_pods = MinDomainsForJob(job, topology, pod);
    if (m.min_pods > 0) m.pod_span_ratio = static_cast<double>(m.pods_spanned) / m.min_pods;
  }
  return m;
}

}  // namespace topo::core
