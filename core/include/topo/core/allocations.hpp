#pragma once
// Allocations: which GPUs each running job holds. One part of SchedulerCore:
// the cluster's busy/free state, the jobs on each node, the spare nodes each
// job holds for fast recovery, and the set of jobs holding GPUs.
//
// "Allocate" and "Release" are GPU allocations; a user's hold on a queued job
// (JobHoldChanged) is another thing and never touches this part.
//
//   Allocations a(topology);
//   a.Allocate(7, placement.ranks, placement.spares);  // job 7 starts
//   a.jobs_on(n), a.spare_owner(n), a.running()
//   std::vector<NodeId> left = a.Release(7, ranks, spares);  // job 7 stops
//
// Thread safety: none; one owner (SchedulerCore).

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "topo/core/cluster_state.hpp"
#include "topo/core/time.hpp"
#include "topo/core/topology.hpp"

namespace topo::core {

struct SnapshotAccess;

class Allocations {
 public:
  // REQUIRES: topology outlives this.
  explicit Allocations(const Topology& topology);

  ClusterState& cluster() { return cluster_; }
  const ClusterState& cluster() const { return cluster_; }

  // The job takes `ranks` and every GPU of each spare node. Returns how many
  // GPUs it now holds. REQUIRES: those GPUs are free in cluster() and the job
  // holds nothing.
  int Allocate(JobId job, std::span<const GpuSlot> ranks, std::span<const NodeId> spares);
  // Gives back what Allocate took for the job (the same ranks and spares).
  // Returns the nodes it left: its ranks' nodes ascending, then its spares
  // in order (a node that finished draining is among them).
  std::vector<NodeId> Release(JobId job, std::span<const GpuSlot> ranks,
                              std::span<const NodeId> spares);
  // The job gives back one spare node n (REQUIRES: spare_owner(n) == job);
  // its allocation gets a new stamp. Returns the GPUs freed.
  int ReleaseSpare(JobId job, NodeId n);

  // Running jobs with ranks on node n, in the order they started there.
  const std::vector<JobId>& jobs_on(NodeId n) const { return node_jobs_[n]; }
  // The job holding n as a spare, or 0.
  JobId spare_owner(NodeId n) const { return spare_owner_[n]; }
  std::span<const JobId> spare_owners() const { return spare_owner_; }
  // Something holds n: a job's ranks or a spare.
  bool occupied(NodeId n) const { return !node_jobs_[n].empty() || spare_owner_[n] != 0; }
  // Jobs holding GPUs (running or being preempted), by id.
  const std::set<JobId>& holders() const { return holders_; }
  // A number that names the job's current allocation: a fresh one at every
  // Allocate, so a job that gave its GPUs back and took others has another.
  // 0 for a job allocated before a snapshot was restored, or holding none.
  uint64_t stamp(JobId job) const {
    auto it = stamps_.find(job);
    return it == stamps_.end() ? 0 : it->second;
  }

  // Every GPU of the spare nodes, node by node.
  std::vector<GpuSlot> SpareSlots(std::span<const NodeId> spares) const;
  // ranks, then SpareSlots(spares).
  std::vector<GpuSlot> Held(std::span<const GpuSlot> ranks, std::span<const NodeId> spares) const;

 private:
  // The core's snapshot (core/src/snapshot.cpp) writes and restores the
  // private state.
  friend struct SnapshotAccess;
  const Topology& topo_;
  ClusterState cluster_;
  std::vector<std::vector<JobId>> node_jobs_;
  std::vector<JobId> spare_owner_;
  std::set<JobId> holders_;
  // Not in the snapshot: a restored core starts with no plan that uses them.
  std::map<JobId, uint64_t> stamps_;
  uint64_t next_stamp_ = 0;
};

}  // namespace topo::core
