#pragma once
// Machinery shared by the placers and the evaluator (not a public header).
//
// A job's required constraints become nested "levels": at tier T, the ranks
// that must share one tier-T domain are those that agree on every coordinate
// outside D_T, the union of the dimensions of the kinds required at tiers
// <= T. Such a block has prod(sizes of D_T) ranks, blocks nest, and every
// domain's capacity is counted in whole blocks of its tier's unit.

#include <array>
#include <bit>
#include <string>
#include <vector>

#include "topo/core/cluster_state.hpp"
#include "topo/core/job.hpp"
#include "topo/core/placement.hpp"
#include "topo/core/topology.hpp"

namespace topo::core::internal {

struct JobShape {
  int world = 0;
  // Per tier 0..root: the block every domain of that tier counts in, as
  // ranks, and which dimensions vary inside it.
  std::vector<int> unit;
  std::vector<std::array<bool, kDimCount>> unit_dims;
  // Resolved tier of each kind's constraint (-1 when none or inactive).
  std::array<int, kGroupKindCount> required_tier{};
  std::array<int, kGroupKindCount> preferred_tier{};
  // Dimensions, fastest first, of the order in which ranks fill the chosen
  // GPUs (node id order): blocks stay contiguous, heavy groups adjacent.
  std::vector<Dim> sequence_order;
  bool single_node = false;  // a job smaller than a node stays on one node
  int gpus_per_node = 0;
  bool allow_degraded = false;
  bool explain_shortfall = true;
  RankLayout layout;

  explicit JobShape(const Parallelism& p) : layout(p) {}
};

// Where an auto constraint that a tier's domains cannot hold is preferred:
// the innermost tier from `tier` up whose largest domain holds `group_gpus`
// (the root when none does).
inline int AutoPreferredTier(const Topology& topo, int tier, int group_gpus) {
  while (tier < topo.root_tier() && topo.max_domain_gpus(tier) < group_gpus) ++tier;
  return tier;
}

// Resolves tiers and builds the levels. Fails (the reason of an Infeasible
// answer) on an unknown tier name.
Result<JobShape> MakeJobShape(const JobSpec& job, const Topology& topology,
                              const PlacerOptions& options);

// GPUs of node n the job may take now, as a mask, and how many slots the node
// offers (0 when the node is not eligible: whole-node jobs need every GPU).
inline uint64_t NodeUsableMask(const JobShape& shape, const ClusterState& state, NodeId n) {
  uint64_t mask = state.usable_free_mask(n);
  return shape.allow_degraded ? mask : mask & ~state.degraded_mask(n);
}
inline int NodeSlots(const JobShape& shape, const ClusterState& state, NodeId n) {
  uint64_t mask = NodeUsableMask(shape, state, n);
  if (mask == 0) return 0;
  if (shape.gpus_per_node == 0 && !shape.single_node) {
    // Whole nodes only; no bit counting on this hot path.
    return mask == state.all_mask(n) ? state.node_gpus(n) : 0;
  }
  int free = std::popcount(mask);
  if (shape.gpus_per_node > 0) return free >= shape.gpus_per_node ? shape.gpus_per_node : 0;
  return free;
}

// Capacity of every domain in units of its tier (JobShape::unit).
std::vector<int> ComputeCapacity(const JobShape& shape, const ClusterState& state);
// The same for `root` and the domains below it only; other entries of `cap`
// (sized domain_count()) are left as they are.
void ComputeSubtreeCapacity(const JobShape& shape, const ClusterState& state, DomainId root,
                            std::vector<int>& cap);

// Units the whole job needs at tier t.
inline int NeedAt(const JobShape& shape, int tier) { return shape.world / shape.unit[tier]; }

// Remaps ranks (a placement built from shape's sequence) so that every node
// holds one contiguous block of ranks, when the job takes the same number
// of GPUs on every node and the required groups still hold.
// sequence: SequenceRanks(shape).
void KeepNodeBlocksContiguous(const JobSpec& job, const JobShape& shape, const Topology& topo,
                              const std::vector<int>& sequence, std::vector<GpuSlot>& ranks);
// Rank that fills position p of the placement sequence.
int SequenceRank(const JobShape& shape, int p);
// SequenceRank(shape, p) for every p in 0..world-1.
std::vector<int> SequenceRanks(const JobShape& shape);

// Busy when the empty cluster could hold the job, Infeasible (with the reason)
// when it could not.
Placement ExplainShortfall(const JobSpec& job, const JobShape& shape, const ClusterState& state,
                           const std::vector<int>& capacity);

// Fills ranks from (node, slots) picks sorted by node id, then adds spares.
Placement BuildPlacement(const JobSpec& job, const JobShape& shape, const ClusterState& state,
                         std::vector<std::pair<NodeId, int>> picks);

// Ranks fill the chosen GPUs in rank order (rank r on the r-th GPU in node
// order), as a topology-unaware scheduler does.
void UseRankOrderSequence(JobShape& shape, const Parallelism& p);

std::string DimSetName(const std::array<bool, kDimCount>& dims);

}  // namespace topo::core::internal
