#pragma once
// Mutable usage and health of a cluster over a fixed Topology.
//
// Dense per-node bit masks (busy, failed, degraded GPUs) and per-domain
// counters, so a copy is a few flat vectors: a placement try can be made on a
// copy and thrown away. Not thread-safe; one owner mutates it.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "topo/core/status.hpp"
#include "topo/core/topology.hpp"

namespace topo::core {

enum class NodeState : uint8_t { kUp, kDraining, kDrained, kDown, kSuspect };
enum class GpuHealth : uint8_t { kHealthy, kDegraded, kFailed };

std::string_view NodeStateName(NodeState s);
std::string_view GpuHealthName(GpuHealth h);

struct GpuSlot {
  NodeId node = 0;
  int gpu = 0;
  friend bool operator==(const GpuSlot&, const GpuSlot&) = default;
};

class ClusterState {
 public:
  // Every node up, every GPU healthy and free.
  // REQUIRES: topology outlives this state.
  explicit ClusterState(const Topology& topology);

  const Topology& topology() const { return *topology_; }

  NodeState node_state(NodeId n) const { return node_state_[n]; }
  void SetNodeState(NodeId n, NodeState s);
  // Only kUp nodes take new work.
  bool NodeAcceptsWork(NodeId n) const { return node_state_[n] == NodeState::kUp; }

  GpuHealth gpu_health(NodeId n, int gpu) const;
  // REQUIRES: 0 <= gpu < topology().node(n).gpus
  void SetGpuHealth(NodeId n, int gpu, GpuHealth h);

  uint64_t busy_mask(NodeId n) const { return busy_[n]; }
  uint64_t failed_mask(NodeId n) const { return failed_[n]; }
  uint64_t degraded_mask(NodeId n) const { return degraded_[n]; }
  uint64_t all_mask(NodeId n) const { return all_[n]; }
  // GPUs of node n (a dense copy of topology().node(n).gpus).
  int node_gpus(NodeId n) const { return node_gpus_[n]; }
  // GPUs of node n that a new job may take: not busy, not failed, node up,
  // not fenced. Degraded GPUs are included; placers decide whether to use
  // them.
  uint64_t usable_free_mask(NodeId n) const {
    return node_state_[n] == NodeState::kUp ? open_[n] & ~busy_[n] & ~failed_[n] : 0;
  }
  // Whether node n is fenced off in this copy (Fenced).
  bool fenced(NodeId n) const { return open_[n] != all_[n]; }

  // A copy of this state over `view` (a part view of this state's topology,
  // or the topology itself: the same ids) in which only the nodes with
  // open[n] != 0 take new work: one job's try on the nodes it may use.
  // Busy and failed GPUs are unchanged, so a placement made on the copy
  // applies to this state. Cost: one copy plus a recount of each fenced node.
  // REQUIRES: open.size() == node count; view has this topology's ids.
  ClusterState Fenced(const Topology& view, std::span<const uint8_t> open) const;

  // Marks the slots busy. Fails, changing nothing, if a slot is out of range,
  // already busy, or listed twice.
  Status Allocate(std::span<const GpuSlot> slots);
  // Marks the slots free. Fails, changing nothing, if a slot is not busy.
  Status Release(std::span<const GpuSlot> slots);

  // Per-domain counters, any tier (tier-0 domain id == node id).
  int busy_gpus(DomainId d) const { return busy_gpus_[d]; }
  // GPUs that could take new work now (usable_free_mask summed).
  int free_gpus(DomainId d) const { return free_gpus_[d]; }
  int failed_gpus(DomainId d) const { return failed_gpus_[d]; }
  // Up nodes whose every GPU is free and not failed (degraded ones count):
  // an upper bound on what a whole-node job can use, kept incrementally.
  int whole_free_nodes(DomainId d) const { return whole_free_[d]; }
  // Whether some node under d has at least `gpus` free GPUs (usable_free_mask
  // counted), so a search for one node can skip domains without one.
  bool HasNodeWithFree(DomainId d, int gpus) const;
  int total_busy_gpus() const { return busy_gpus_.back(); }

  // How many times a node's state or a GPU's health changed: equal counts
  // on one state mean the same health (busy GPUs aside).
  uint64_t health_changes() const { return health_changes_; }

  // Whether both states (over the same topology) have the same node states,
  // busy, failed and degraded GPUs: every counter follows from those, so a
  // placer answers both alike.
  bool SameUsage(const ClusterState& other) const {
    return topology_ == other.topology_ && busy_ == other.busy_ && failed_ == other.failed_ &&
           degraded_ == other.degraded_ && node_state_ == other.node_state_ && open_ == other.open_;
  }

 private:
  void Recount(NodeId n);  // refreshes node n's counters and its ancestors'

  const Topology* topology_;
  std::vector<NodeState> node_state_;
  std::vector<uint64_t> all_;   // every GPU of the node
  std::vector<uint64_t> open_;  // all_, or 0 where the node is fenced
  std::vector<uint8_t> node_gpus_;
  std::vector<uint64_t> busy_;
  std::vector<uint64_t> failed_;
  std::vector<uint64_t> degraded_;
  std::vector<int32_t> busy_gpus_;
  std::vector<int32_t> free_gpus_;
  std::vector<int32_t> failed_gpus_;
  std::vector<int32_t> whole_free_;
  // Above the nodes: for domain d (id >= node count), how many of its nodes
  // have k free GPUs, at [(d - node count) * (max GPUs + 1) + k].
  std::vector<int32_t> nodes_by_free_;
  uint64_t health_changes_ = 0;
};

}  // namespace topo::core
