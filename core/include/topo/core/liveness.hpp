#pragma once
// LivenessTracker: when each node was last heard from and when its silence
// makes it suspect, then down. It is the one liveness tracker of the system:
// the core's heartbeat path (SchedulerConfig::heartbeats_required, the
// nodes of core tests) and the daemon's agent registry (real agents over
// WebSockets, scheduler/daemon/agent_registry.hpp) both keep their deadlines
// here and differ only in which deadlines they set:
//   - the core: an up node is suspect heartbeat_suspect_after and down
//     heartbeat_down_after after its last heartbeat; any other node that is
//     not down only goes down (SchedulerCore::Impl::WatchNode);
//   - the registry: down missed_heartbeats_down intervals after the last
//     message, or a closed-connection limit after the connection closed, or
//     a grace after a daemon restart (AgentRegistry).
//
//   LivenessTracker t;
//   t.Heard(7, 1000);
//   t.Watch(7, {4000, 11000});        // suspect at 4 s, down at 11 s
//   t.Expire(5000) == {{7, kSuspect, 1000}}
//   t.Expire(12000) == {{7, kDown, 1000}}
//
// A node is a small non-negative integer (a NodeId, or an index the owner
// gives each agent); storage grows to the largest one used. Deadlines sit in
// an ordered set: Heard and Watch cost O(log n), Expire O(log n) per expired
// deadline, NextDeadline O(1), so a check does not scan every node.
//
// Deterministic: no clock; time comes in as arguments. Thread safety: none;
// one owner.

#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "topo/core/time.hpp"

namespace topo::core {

enum class Liveness : uint8_t { kSuspect, kDown };

class LivenessTracker {
 public:
  struct Deadlines {
    TimeMs suspect_at = kNever;  // kNever: no suspect step
    TimeMs down_at = kNever;     // kNever: not watched
    bool operator==(const Deadlines&) const = default;
  };
  struct Expiry {
    int node = 0;
    Liveness verdict = Liveness::kDown;
    TimeMs last_heard = -1;  // -1: never heard from
    bool operator==(const Expiry&) const = default;
  };

  // A sign of life at `now`. The deadlines stay as they are: the owner sets
  // the next ones with Watch (they depend on what the node is to it).
  // REQUIRES: node >= 0.
  void Heard(int node, TimeMs now);
  // -1 when the node was never heard from.
  TimeMs last_heard(int node) const;

  // Replaces the node's deadlines (both kNever: no longer watched).
  // REQUIRES: node >= 0; suspect_at < down_at or suspect_at == kNever.
  void Watch(int node, Deadlines deadlines);
  void Forget(int node) { Watch(node, {}); }
  Deadlines deadlines(int node) const;

  // Every deadline at or before `now`, each reported once and then cleared,
  // ordered by node. A node whose down deadline is due is reported down only
  // (its suspect step, due too, is skipped) and is no longer watched; one
  // reported suspect keeps its down deadline.
  std::vector<Expiry> Expire(TimeMs now);
  // The earliest deadline; kNever when none.
  TimeMs NextDeadline() const;

 private:
  struct Node {
    TimeMs last_heard = -1;
    Deadlines deadlines;
  };
  Node& At(int node);
  void Unqueue(int node, const Deadlines& d);
  std::vector<Node> nodes_;
  std::set<std::tuple<TimeMs, int, Liveness>> queue_;  // (when, node, verdict)
};

}  // namespace topo::core
