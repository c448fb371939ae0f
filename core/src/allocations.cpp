// Allocations (allocations.hpp).

#include "topo/core/allocations.hpp"

#include <algorithm>

namespace topo::core {

Allocations::Allocations(const Topology& topology)
    : topo_(topology),
      cluster_(topology),
      node_jobs_(topology.node_count()),
      spare_owner_(topology.node_count(), 0) {}

std::vector<GpuSlot> Allocations::SpareSlots(std::span<const NodeId> spares) const {
  std::vector<GpuSlot> slots;
  for (NodeId n : spares) {
    for (int g = 0; g < topo_.node(n).gpus; ++g) slots.push_back({n, g});
  }
  return slots;
}

std::vector<GpuSlot> Allocations::Held(std::span<const GpuSlot> ranks,
                                       std::span<const NodeId> spares) const {
  std::vector<GpuSlot> all(ranks.begin(), ranks.end());
  std::vector<GpuSlot> spare_slots = SpareSlots(spares);
  all.insert(all.end(), spare_slots.begin(), spare_slots.end());
  return all;
}

int Allocations::Allocate(JobId job, std::span<const GpuSlot> ranks,
                          std::span<const NodeId> spares) {
  const std::vector<GpuSlot> all = Held(ranks, spares);
  Status s = cluster_.Allocate(all);
  (void)s;  // placements come from this state; a failure here is a bug caught by tests
  std::set<NodeId> nodes;
  for (const GpuSlot& slot : ranks) nodes.insert(slot.node);
  for (NodeId n : nodes) node_jobs_[n].push_back(job);
  for (NodeId n : spares) spare_owner_[n] = job;
  holders_.insert(job);
  stamps_[job] = ++next_stamp_;
  return static_cast<int>(all.size());
}

std::vector<NodeId> Allocations::Release(JobId job, std::span<const GpuSlot> ranks,
                                         std::span<const NodeId> spares) {
  Status s = cluster_.Release(Held(ranks, spares));
  (void)s;
  std::set<NodeId> nodes;
  for (const GpuSlot& slot : ranks) nodes.insert(slot.node);
  std::vector<NodeId> left(nodes.begin(), nodes.end());
  for (NodeId n : nodes) {
    auto& v = node_jobs_[n];
    v.erase(std::remove(v.begin(), v.end(), job), v.end());
  }
  for (NodeId n : spares) {
    spare_owner_[n] = 0;
    left.push_back(n);
  }
  holders_.erase(job);
  stamps_.erase(job);
  return left;
}

int Allocations::ReleaseSpare(JobId job, NodeId n) {
  const std::vector<GpuSlot> slots = SpareSlots(std::span<const NodeId>(&n, 1));
  Status s = cluster_.Release(slots);
  (void)s;
  spare_owner_[n] = 0;
  stamps_[job] = ++next_stamp_;
  return static_cast<int>(slots.size());
}

}  // namespace topo::core
