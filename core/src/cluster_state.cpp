#include "topo/core/cluster_state.hpp"

#include <algorithm>
#include <bit>
#include <string>

namespace topo::core {

std::string_view NodeStateName(NodeState s) {
  switch (s) {
    case NodeState::kUp:
      return "up";
    case NodeState::kDraining:
      return "draining";
    case NodeState::kDrained:
      return "drained";
    case NodeState::kDown:
      return "down";
    case NodeState::kSuspect:
      return "suspect";
  }
  return "unknown";
}

std::string_view GpuHealthName(GpuHealth h) {
  switch (h) {
    case GpuHealth::kHealthy:
      return "healthy";
    case GpuHealth::kDegraded:
      return "degraded";
    case GpuHealth::kFailed:
      return "failed";
  }
  return "unknown";
}

ClusterState::ClusterState(const Topology& topology)
    : topology_(&topology),
      node_state_(topology.node_count(), NodeState::kUp),
      all_(topology.node_count(), 0),
      node_gpus_(topology.node_count(), 0),
      busy_(topology.node_count(), 0),
      failed_(topology.node_count(), 0),
      degraded_(topology.node_count(), 0),
      busy_gpus_(topology.domain_count(), 0),
      free_gpus_(topology.domain_count(), 0),
      failed_gpus_(topology.domain_count(), 0),
      whole_free_(topology.domain_count(), 0),
      nodes_by_free_(static_cast<size_t>(topology.domain_count() - topology.node_count()) *
                         (topology.max_node_gpus() + 1),
                     0) {
  const int width = topology.max_node_gpus() + 1;
  for (DomainId d = 0; d < topology.domain_count(); ++d) {
    free_gpus_[d] = topology.domain(d).gpus;
    const Domain& dom = topology.domain(d);
    whole_free_[d] = dom.node_end - dom.node_begin;
    if (d < topology.node_count()) continue;
    int32_t* row = &nodes_by_free_[static_cast<size_t>(d - topology.node_count()) * width];
    for (NodeId n = dom.node_begin; n < dom.node_end; ++n) ++row[topology.node(n).gpus];
  }
  for (NodeId n = 0; n < topology.node_count(); ++n) {
    int g = topology.node(n).gpus;
    all_[n] = g >= 64 ? ~uint64_t{0} : ((uint64_t{1} << g) - 1);
    node_gpus_[n] = static_cast<uint8_t>(g);
  }
  open_ = all_;
}

ClusterState ClusterState::Fenced(const Topology& view, std::span<const uint8_t> open) const {
  ClusterState out = *this;
  out.topology_ = &view;
  for (NodeId n = 0; n < static_cast<NodeId>(open.size()); ++n) {
    const uint64_t want = open[n] ? all_[n] : 0;
    if (out.open_[n] == want) continue;
    out.open_[n] = want;
    out.Recount(n);
  }
  return out;
}

GpuHealth ClusterState::gpu_health(NodeId n, int gpu) const {
  uint64_t bit = uint64_t{1} << gpu;
  if (failed_[n] & bit) return GpuHealth::kFailed;
  if (degraded_[n] & bit) return GpuHealth::kDegraded;
  return GpuHealth::kHealthy;
}

void ClusterState::SetNodeState(NodeId n, NodeState s) {
  if (node_state_[n] == s) return;
  ++health_changes_;
  node_state_[n] = s;
  Recount(n);
}

void ClusterState::SetGpuHealth(NodeId n, int gpu, GpuHealth h) {
  uint64_t bit = uint64_t{1} << gpu;
  if (gpu_health(n, gpu) == h) return;
  ++health_changes_;
  failed_[n] &= ~bit;
  degraded_[n] &= ~bit;
  if (h == GpuHealth::kFailed) failed_[n] |= bit;
  if (h == GpuHealth::kDegraded) degraded_[n] |= bit;
  Recount(n);
}

void ClusterState::Recount(NodeId n) {
  const Topology& t = *topology_;
  int busy = std::popcount(busy_[n]);
  int free = std::popcount(usable_free_mask(n));
  int failed = std::popcount(failed_[n]);
  int d_busy = busy - busy_gpus_[n];
  int d_free = free - free_gpus_[n];
  int d_failed = failed - failed_gpus_[n];
  int whole = usable_free_mask(n) == all_[n] ? 1 : 0;
  int d_whole = whole - whole_free_[n];
  if (d_busy == 0 && d_free == 0 && d_failed == 0 && d_whole == 0) return;
  const int old_free = free_gpus_[n];
  const size_t width = static_cast<size_t>(t.max_node_gpus()) + 1;
  for (int tier = 0; tier <= t.root_tier(); ++tier) {
    DomainId d = t.Ancestor(n, tier);
    busy_gpus_[d] += d_busy;
    free_gpus_[d] += d_free;
    failed_gpus_[d] += d_failed;
    whole_free_[d] += d_whole;
    if (tier > 0 && d_free != 0) {
      int32_t* row = &nodes_by_free_[static_cast<size_t>(d - t.node_count()) * width];
      --row[old_free];
      ++row[free];
    }
  }
}

bool ClusterState::HasNodeWithFree(DomainId d, int gpus) const {
  const Topology& t = *topology_;
  if (d < t.node_count()) return free_gpus_[d] >= gpus;
  const int width = t.max_node_gpus() + 1;
  if (gpus >= width) return false;
  const int32_t* row = &nodes_by_free_[static_cast<size_t>(d - t.node_count()) * width];
  for (int k = std::max(gpus, 0); k < width; ++k) {
    if (row[k] > 0) return true;
  }
  return false;
}

Status ClusterState::Allocate(std::span<const GpuSlot> slots) {
  const Topology& t = *topology_;
  // Mark as we check so duplicates within the list are caught; undo on error.
  auto undo = [&](size_t count) {
    for (size_t j = 0; j < count; ++j) busy_[slots[j].node] &= ~(uint64_t{1} << slots[j].gpu);
  };
  for (size_t i = 0; i < slots.size(); ++i) {
    const GpuSlot& s = slots[i];
    if (s.node < 0 || s.node >= t.node_count() || s.gpu < 0 || s.gpu >= t.node(s.node).gpus) {
      undo(i);
      return Status::Error("slot " + std::to_string(i) + " (node " + std::to_string(s.node) +
                           ", gpu " + std::to_string(s.gpu) + ") is outside the topology");
    }
    if (busy_[s.node] & (uint64_t{1} << s.gpu)) {
      undo(i);
      return Status::Error("GPU " + std::to_string(s.gpu) + " of node '" + t.node(s.node).name +
                           "' is already allocated");
    }
    busy_[s.node] |= uint64_t{1} << s.gpu;
  }
  for (const GpuSlot& s : slots) Recount(s.node);
  return Status::Ok();
}

Status ClusterState::Release(std::span<const GpuSlot> slots) {
  const Topology& t = *topology_;
  for (size_t i = 0; i < slots.size(); ++i) {
    const GpuSlot& s = slots[i];
    if (s.node < 0 || s.node >= t.node_count() || s.gpu < 0 || s.gpu >= t.node(s.node).gpus) {
      return Status::Error("slot " + std::to_string(i) + " is outside the topology");
    }
    if (!(busy_[s.node] & (uint64_t{1} << s.gpu))) {
      return Status::Error("GPU " + std::to_string(s.gpu) + " of node '" + t.node(s.node).name +
                           "' is not allocated");
    }
  }
  // Clear every bit first: a node's counts then change once, on its first
  // Recount, and the others find nothing to do.
  for (const GpuSlot& s : slots) busy_[s.node] &= ~(uint64_t{1} << s.gpu);
  for (const GpuSlot& s : slots) Recount(s.node);
  return Status::Ok();
}

}  // namespace topo::core
