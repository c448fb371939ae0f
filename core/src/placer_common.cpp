#include <algorithm>
#include <bit>
#include <numeric>
#include <string>

#include "placer_internal.hpp"

namespace topo::core::internal {

namespace {

constexpr std::array<const char*, kDimCount> kDimLabel = {"tp", "cp", "ep", "dp", "pp"};

std::vector<Dim> FullOrder(const Parallelism& p) {
  std::vector<Dim> order = p.order;
  for (int d = 0; d < kDimCount; ++d) {
    if (std::find(order.begin(), order.end(), static_cast<Dim>(d)) == order.end()) {
      order.push_back(static_cast<Dim>(d));
    }
  }
  return order;
}

}  // namespace

void UseRankOrderSequence(JobShape& shape, const Parallelism& p) {
  shape.sequence_order = FullOrder(p);
}

std::string DimSetName(const std::array<bool, kDimCount>& dims) {
  std::string out;
  for (int d = 0; d < kDimCount; ++d) {
    if (!dims[d]) continue;
    if (!out.empty()) out += " x ";
    out += kDimLabel[d];
  }
  return out;
}

Result<JobShape> MakeJobShape(const JobSpec& job, const Topology& topology,
                              const PlacerOptions& options) {
  JobShape shape(job.parallelism);
  shape.world = job.gpus;
  shape.gpus_per_node = job.gpus_per_node;
  shape.single_node = job.gpus_per_node == 0 && job.gpus < topology.max_node_gpus();
  shape.allow_degraded = job.gpus <= options.degraded_max_job_gpus;
  shape.explain_shortfall = options.explain_shortfall;
  const int root_tier = topology.root_tier();
  for (GroupKind k : kAllGroupKinds) {
    int i = static_cast<int>(k);
    shape.required_tier[i] = -1;
    shape.preferred_tier[i] = -1;
    const TierConstraint& c = job.constraint(k);
    if (c.strength == Strength::kNone || !RankLayout::KindActive(k, job.parallelism)) continue;
    Result<int> tier = topology.FindTier(c.tier);
    if (!tier.ok()) {
      return Status::Error("constraints." + std::string(GroupKindName(k)) + ": " + tier.message());
    }
    const int group = shape.layout.GroupSize(k);
    const Strength strength =
        EffectiveStrength(c.strength, group, topology.max_domain_gpus(tier.value()));
    if (strength == Strength::kRequired) {
      shape.required_tier[i] = tier.value();
    } else {
      shape.preferred_tier[i] = c.strength == Strength::kAuto
                                    ? AutoPreferredTier(topology, tier.value(), group)
                                    : tier.value();
    }
  }
  shape.unit.assign(root_tier + 1, 1);
  shape.unit_dims.assign(root_tier + 1, {});
  for (int t = 0; t <= root_tier; ++t) {
    std::array<bool, kDimCount> dims{};
    if (shape.single_node) dims.fill(true);
    for (GroupKind k : kAllGroupKinds) {
      int rt = shape.required_tier[static_cast<int>(k)];
      if (rt < 0 || rt > t) continue;
      for (int d = 0; d < kDimCount; ++d) dims[d] = dims[d] || RankLayout::InGroup(k, Dim(d));
    }
    int unit = 1;
    for (int d = 0; d < kDimCount; ++d) {
      if (dims[d]) unit *= shape.layout.dim_size(static_cast<Dim>(d));
    }
    shape.unit[t] = unit;
    shape.unit_dims[t] = dims;
  }

  // Sequence: required blocks innermost first, then preferred groups by
  // tier, then the rest with the heaviest traffic fastest.
  const std::vector<Dim> job_order = FullOrder(job.parallelism);
  std::array<bool, kDimCount> seen{};
  auto push = [&](Dim d) {
    if (!seen[static_cast<int>(d)]) {
      seen[static_cast<int>(d)] = true;
      shape.sequence_order.push_back(d);
    }
  };
  for (int t = 0; t <= root_tier; ++t) {
    for (Dim d : job_order) {
      if (shape.unit_dims[t][static_cast<int>(d)]) push(d);
    }
  }
  for (int t = 0; t <= root_tier; ++t) {
    for (GroupKind k :
         {GroupKind::kTp, GroupKind::kEp, GroupKind::kCp, GroupKind::kPp, GroupKind::kDp}) {
      if (shape.preferred_tier[static_cast<int>(k)] != t) continue;
      for (Dim d : job_order) {
        if (RankLayout::InGroup(k, d)) push(d);
      }
    }
  }
  for (Dim d : {Dim::kTp, Dim::kEp, Dim::kCp, Dim::kPp, Dim::kDp}) push(d);
  return shape;
}

void ComputeSubtreeCapacity(const JobShape& shape, const ClusterState& state, DomainId root,
                            std::vector<int>& cap) {
  const Topology& topo = state.topology();
  const Domain& top = topo.domain(root);
  const int unit0 = shape.unit[0];
  for (NodeId n = top.node_begin; n < top.node_end; ++n) {
    cap[n] = unit0 == 1 ? NodeSlots(shape, state, n) : NodeSlots(shape, state, n) / unit0;
  }
  for (int t = 1; t <= top.tier; ++t) {
    const int64_t below = shape.unit[t - 1];
    const int64_t unit = shape.unit[t];
    const DomainId first = topo.Ancestor(top.node_begin, t);
    const DomainId last = topo.Ancestor(top.node_end - 1, t);
    for (DomainId d = first; d <= last; ++d) {
      int64_t sum = 0;
      if (t == 1) {
        // Children of tier-1 domains are their contiguous nodes.
        const Domain& dom = topo.domain(d);
        for (NodeId n = dom.node_begin; n < dom.node_end; ++n) sum += cap[n];
      } else {
        for (DomainId c : topo.children(d)) sum += cap[c];
      }
      cap[d] = static_cast<int>(below == unit ? sum : sum * below / unit);
    }
  }
}

std::vector<int> ComputeCapacity(const JobShape& shape, const ClusterState& state) {
  std::vector<int> cap(state.topology().domain_count(), 0);
  ComputeSubtreeCapacity(shape, state, state.topology().root(), cap);
  return cap;
}

int SequenceRank(const JobShape& shape, int p) {
  int rank = 0;
  for (Dim d : shape.sequence_order) {
    int size = shape.layout.dim_size(d);
    rank += (p % size) * shape.layout.dim_stride(d);
    p /= size;
  }
  return rank;
}

std::vector<int> SequenceRanks(const JobShape& shape) {
  // An odometer over the sequence's digits, fastest first: one add per
  // position instead of a division per dimension.
  std::vector<int> out(shape.world);
  const size_t dims = shape.sequence_order.size();
  std::vector<int> size(dims), stride(dims), digit(dims, 0);
  for (size_t i = 0; i < dims; ++i) {
    size[i] = shape.layout.dim_size(shape.sequence_order[i]);
    stride[i] = shape.layout.dim_stride(shape.sequence_order[i]);
  }
  int rank = 0;
  for (int p = 0; p < shape.world; ++p) {
    out[p] = rank;
    for (size_t i = 0; i < dims; ++i) {
      if (++digit[i] < size[i]) {
        rank += stride[i];
        break;
      }
      rank -= (size[i] - 1) * stride[i];
      digit[i] = 0;
    }
  }
  return out;
}

namespace {

// Fewest nodes the job could use on the empty cluster.
int MinNodesOnEmpty(const JobShape& shape, const Topology& topo) {
  ClusterState empty(topo);
  std::vector<int> slots;
  for (NodeId n = 0; n < topo.node_count(); ++n) slots.push_back(NodeSlots(shape, empty, n));
  std::sort(slots.begin(), slots.end(), std::greater<>());
  int64_t sum = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    sum += shape.single_node ? (slots[i] >= shape.world ? shape.world : 0) : slots[i];
    if (sum >= shape.world) return static_cast<int>(i + 1);
  }
  return topo.node_count() + 1;
}

bool SparesNeverFit(const JobSpec& job, const JobShape& shape, const Topology& topo) {
  return job.spares > 0 && topo.node_count() - MinNodesOnEmpty(shape, topo) < job.spares;
}

std::string SparesNeverReason(const JobSpec& job, const Topology& topo) {
  return "the job and its " + std::to_string(job.spares) + " spare nodes need more than the " +
         std::to_string(topo.node_count()) + " nodes of this cluster; ask for fewer spares";
}

}  // namespace

Placement ExplainShortfall(const JobSpec& job, const JobShape& shape, const ClusterState& state,
                           const std::vector<int>& capacity) {
  const Topology& topo = state.topology();
  if (!shape.explain_shortfall) {
    return Placement{PlaceOutcome::kBusy,
                     "needs " + std::to_string(shape.world) + " GPUs in blocks of " +
                         std::to_string(shape.unit[topo.root_tier()]) + "; " +
                         std::to_string(capacity[topo.root()]) + " blocks free",
                     {},
                     {}};
  }
  const int root_tier = topo.root_tier();
  ClusterState empty(topo);
  std::vector<int> empty_cap = ComputeCapacity(shape, empty);
  std::string per_node = shape.gpus_per_node > 0
                             ? " taking " + std::to_string(shape.gpus_per_node) + " GPUs per node"
                             : "";
  Placement out;
  for (int t = 0; t <= root_tier; ++t) {
    if (t > 0 && shape.unit[t] == shape.unit[t - 1]) continue;
    if (shape.unit[t] == 1) continue;
    int best = 0;
    for (DomainId d = topo.tier_first(t); d < topo.tier_first(t) + topo.tier_size(t); ++d) {
      best = std::max(best, empty_cap[d]);
    }
    if (best > 0) continue;
    std::string kinds;
    for (GroupKind k : kAllGroupKinds) {
      if (shape.required_tier[static_cast<int>(k)] == t) {
        kinds += (kinds.empty() ? "" : "/") + std::string(GroupKindName(k));
      }
    }
    if (kinds.empty()) kinds = "the whole job";
    out.outcome = PlaceOutcome::kInfeasible;
    out.reason =
        "blocks of " + std::to_string(shape.unit[t]) + " GPUs (" + DimSetName(shape.unit_dims[t]) +
        ", from the required " + kinds + " constraint) must each sit inside one " +
        topo.tier(t).name + ", but no " + topo.tier(t).name +
        " of this topology can hold one (largest: " + std::to_string(topo.max_domain_gpus(t)) +
        " GPUs" + per_node + "); lower the parallel degrees or make the constraint preferred";
    return out;
  }
  const int need = NeedAt(shape, root_tier);
  const int unit = shape.unit[root_tier];
  auto describe = [&](int units) {
    return unit == 1 ? std::to_string(units) + " GPUs"
                     : std::to_string(units) + " blocks of " + std::to_string(unit) + " GPUs";
  };
  if (empty_cap[topo.root()] < need) {
    out.outcome = PlaceOutcome::kInfeasible;
    out.reason = "the job needs " + describe(need) + " but even the empty cluster offers only " +
                 describe(empty_cap[topo.root()]) + per_node +
                 (shape.single_node ? " on a single node" : "") +
                 "; ask for fewer GPUs or change gpus_per_node";
    return out;
  }
  if (SparesNeverFit(job, shape, topo)) {
    out.outcome = PlaceOutcome::kInfeasible;
    out.reason = SparesNeverReason(job, topo);
    return out;
  }
  out.outcome = PlaceOutcome::kBusy;
  out.reason = "needs " + describe(need) + per_node + (shape.single_node ? " on one node" : "") +
               "; " + std::to_string(capacity[topo.root()]) + " available now";
  return out;
}

namespace {

// Whether every group of a required kind sits inside one domain of its tier.
bool RequiredGroupsHold(const JobShape& shape, const Topology& topo,
                        const std::vector<GpuSlot>& ranks) {
  for (GroupKind k : kAllGroupKinds) {
    const int t = shape.required_tier[static_cast<int>(k)];
    if (t < 0) continue;
    std::vector<DomainId> domain(shape.layout.GroupCount(k), kNoDomain);
    for (int r = 0; r < shape.world; ++r) {
      const DomainId d = topo.Ancestor(ranks[r].node, t);
      DomainId& want = domain[shape.layout.GroupOf(k, r)];
      if (want == kNoDomain) want = d;
      if (want != d) return false;
    }
  }
  return true;
}

}  // namespace

// torchrun's ranks are contiguous per node (RANK == GROUP_RANK *
// LOCAL_WORLD_SIZE + LOCAL_RANK) and frameworks derive the device and the
// host-local mesh from that. When the job takes the same number G of GPUs on
// every node, hand each node one block of G consecutive ranks, keeping the
// nodes and GPUs chosen and putting the blocks in the order the sequence
// wanted their first ranks (pipelines stay together across nodes); keep the
// sequence's own mapping when that would break a required group.
void KeepNodeBlocksContiguous(const JobSpec& job, const JobShape& shape, const Topology& topo,
                              const std::vector<int>& sequence, std::vector<GpuSlot>& ranks) {
  (void)job;
  const int world = shape.world;
  if (world <= 1) return;
  // Nodes in the order the sequence filled them (one entry per run of
  // consecutive positions on one node), each run's GPUs flat in `gpus`.
  std::vector<NodeId> nodes;
  std::vector<int> gpus(world);
  int g = 0;  // GPUs of the first run; every run must have as many
  int run_start = 0;
  for (int p = 0; p < world; ++p) {
    const GpuSlot& slot = ranks[sequence[p]];
    if (nodes.empty() || nodes.back() != slot.node) {
      if (!nodes.empty()) {
        if (g == 0) g = p;
        if (p - run_start != g) return;
      }
      nodes.push_back(slot.node);
      run_start = p;
    }
    gpus[p] = slot.gpu;
  }
  if (g == 0) g = world;
  if (world - run_start != g) return;
  // Already contiguous: nothing to do.
  bool contiguous = true;
  for (int r = 0; r < world && contiguous; ++r) {
    contiguous = ranks[r].node == ranks[r - r % g].node;
  }
  if (contiguous) return;
  std::vector<int> position(world);
  for (int p = 0; p < world; ++p) position[sequence[p]] = p;
  std::vector<int> blocks(nodes.size());
  std::iota(blocks.begin(), blocks.end(), 0);
  std::stable_sort(blocks.begin(), blocks.end(),
                   [&](int a, int b) { return position[a * g] < position[b * g]; });
  std::vector<GpuSlot> remapped(world);
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (int j = 0; j < g; ++j) {
      remapped[static_cast<size_t>(blocks[i]) * g + j] = GpuSlot{nodes[i], gpus[i * g + j]};
    }
  }
  if (RequiredGroupsHold(shape, topo, remapped)) ranks = std::move(remapped);
}

Placement BuildPlacement(const JobSpec& job, const JobShape& shape, const ClusterState& state,
                         std::vector<std::pair<NodeId, int>> picks) {
  const Topology& topo = state.topology();
  std::sort(picks.begin(), picks.end());
  Placement out;
  out.outcome = PlaceOutcome::kPlaced;
  out.ranks.assign(shape.world, GpuSlot{});
  const std::vector<int> sequence = SequenceRanks(shape);
  int p = 0;
  for (const auto& [node, slots] : picks) {
    uint64_t mask = NodeUsableMask(shape, state, node);
    // Healthy GPUs before degraded ones, lowest index first.
    uint64_t healthy = mask & ~state.degraded_mask(node);
    uint64_t order[2] = {healthy, mask & ~healthy};
    int taken = 0;
    for (uint64_t m : order) {
      while (m != 0 && taken < slots && p < shape.world) {
        int gpu = std::countr_zero(m);
        m &= m - 1;
        out.ranks[sequence[p++]] = GpuSlot{node, gpu};
        ++taken;
      }
    }
  }
  if (p < shape.world) {
    // Capacity said yes; reaching here is a bug in a placer, not the job.
    return Placement{PlaceOutcome::kBusy, "internal: selection fell short", {}, {}};
  }
  KeepNodeBlocksContiguous(job, shape, topo, sequence, out.ranks);
  if (job.spares == 0) return out;

  // Spares: whole healthy free nodes, nearest first (same HBD, leaf, ...).
  const int root_tier = topo.root_tier();
  std::vector<char> used(topo.domain_count(), 0);
  for (const auto& [node, slots] : picks) {
    for (int t = 0; t <= root_tier; ++t) used[topo.Ancestor(node, t)] = 1;
  }
  std::vector<std::pair<int, NodeId>> candidates;
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    if (used[n] || !state.NodeAcceptsWork(n)) continue;
    if (state.usable_free_mask(n) != state.all_mask(n) || state.degraded_mask(n) != 0) continue;
    int t = 1;
    while (t < root_tier && !used[topo.Ancestor(n, t)]) ++t;
    candidates.push_back({t, n});
  }
  if (static_cast<int>(candidates.size()) < job.spares) {
    if (SparesNeverFit(job, shape, topo)) {
      return Placement{PlaceOutcome::kInfeasible, SparesNeverReason(job, topo), {}, {}};
    }
    return Placement{PlaceOutcome::kBusy,
                     "the job fits, but it asks for " + std::to_string(job.spares) +
                         " spare nodes and only " + std::to_string(candidates.size()) +
                         " whole healthy nodes are free beside it",
                     {},
                     {}};
  }
  std::partial_sort(candidates.begin(), candidates.begin() + job.spares, candidates.end());
  for (int i = 0; i < job.spares; ++i) out.spares.push_back(candidates[i].second);
  std::sort(out.spares.begin(), out.spares.end());
  return out;
}

}  // namespace topo::core::internal

namespace topo::core {

std::string_view PlaceOutcomeName(PlaceOutcome o) {
  switch (o) {
    case PlaceOutcome::kPlaced:
      return "placed";
    case PlaceOutcome::kBusy:
      return "busy";
    case PlaceOutcome::kInfeasible:
      return "infeasible";
  }
  return "unknown";
}

}  // namespace topo::core
