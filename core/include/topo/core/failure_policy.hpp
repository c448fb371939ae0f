#pragma once
// FailurePolicy: what the brain does when a running job fails. One part of
// SchedulerCore; it decides, the scheduler carries the decision out.
//
// Failures are of two kinds.
//   - Infrastructure (a node lost, a GPU failed, a drain, a transient launch
//     failure): never fails the job. It restarts on healthy replacements that
//     keep its topology (FindReplacements; with preemption on, nodes of small
//     jobs may be taken, docs/architecture.md) or waits in the queue.
//   - Application (a rank exits non-zero): the k-th in a row without a new
//     checkpoint between them fails the job at max_app_failures; before that
//     the job waits out Backoff(k) in the queue, holding nothing, then
//     restarts.
// The second and later transient launch failures in a row wait the same way,
// one step behind (the first restarts at once, off the node that could not
// start it); a permanent launch failure (no node can run it) fails the job.
//
//   FailurePolicy policy(10, 10 * kSecond, 10 * kMinute);
//   policy.Backoff(1) == 10 s, Backoff(2) == 20 s, ... capped at 10 min
//   policy.AfterAppFailure(3) == {kBackoff, 40 s}
//
// Thread safety: const methods over plain values; safe from any thread.

#include <optional>
#include <set>
#include <span>
#include <vector>

#include "topo/core/cluster_state.hpp"
#include "topo/core/time.hpp"
#include "topo/core/topology.hpp"

namespace topo::core {

class FailurePolicy {
 public:
  // max_app_failures < 1 counts as 1. backoff_initial <= 0: no backoff
  // (restart at once); backoff_max below backoff_initial counts as it.
  FailurePolicy(int max_app_failures, TimeMs backoff_initial, TimeMs backoff_max);

  int max_app_failures() const { return max_app_failures_; }

  // The wait before the restart after the k-th failure in a row:
  // initial * 2^(k-1), at most max; 0 for k < 1 or without backoff.
  TimeMs Backoff(int k) const;

  struct Decision {
    enum class Action : uint8_t {
      kFail,        // the job ends, failed
      kRestartNow,  // restart at once (on healthy replacements)
      kBackoff,     // requeue, holding nothing, and restart after `delay`
    };
    Action action = Action::kRestartNow;
    TimeMs delay = 0;
    bool operator==(const Decision&) const = default;
  };
  // After the k-th application failure in a row (k >= 1).
  Decision AfterAppFailure(int failures_in_row) const;
  // After the k-th launch failure in a row (k >= 1); permanent ones fail.
  Decision AfterLaunchFailure(int failures_in_row, bool permanent) const;

 private:
  int max_app_failures_;
  TimeMs backoff_initial_;
  TimeMs backoff_max_;
};

// Replacements for the ranks of a running job on nodes it must leave.
//
// For each node in `leave` (ascending), the ranks on it move to one node: the
// nearest (sharing the lowest tier with the node left: same HBD, else leaf,
// ...) among the job's own `spares` and the free nodes, a spare before a free
// node at the same distance, then the lowest id. A candidate needs as many
// healthy (not failed, not degraded) GPUs as ranks move; a free node must
// also be up, hold nothing (no busy GPU, not a spare of any job:
// spare_owner[n] == 0) and have every GPU usable. The job's other nodes and
// nodes already taken are never chosen. Ranks take the new node's healthy
// GPUs lowest first, in rank order. With `node_cost` (one value per node;
// empty: all 0), free nodes at the same distance are taken cheapest first:
// the recovery that frees nodes by preempting their jobs prices each node
// by what stopping its jobs costs (SchedulerCore, docs/architecture.md).
struct Replacement {
  bool complete = false;            // every node left got a replacement
  std::vector<GpuSlot> ranks;       // the job's ranks with the moves made
  std::vector<NodeId> spares_left;  // `spares` minus those taken, in order
};
// REQUIRES: spare_owner.size() == topology.node_count(); every rank's node in
// the topology.
Replacement FindReplacements(const Topology& topology, const ClusterState& state,
                             std::span<const GpuSlot> ranks, const std::set<NodeId>& leave,
                             std::span<const NodeId> spares, std::span<const JobId> spare_owner,
                             std::span<const double> node_cost = {});

}  // namespace topo::core
