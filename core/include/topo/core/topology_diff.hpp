#pragma once
// What changes between two versions of a cluster's topology, node by node:
// a topology change applied while jobs run (`topo topology import` of a new
// version) is the new, immutable Topology plus this mapping, which the core
// applies to its state (SchedulerCore::SnapshotOnto). Pure.
//
//   TopologyDiff d = DiffTopologies(old_topology, new_topology);
//   d.added      // names only in the new one
//   d.to_new[n]  // old node n's id in the new one, -1 when removed

#include <string>
#include <vector>

#include "topo/core/topology.hpp"

namespace topo::core {

struct TopologyDiff {
  // Node names, each in the order of its topology.
  std::vector<std::string> added;    // only in the new topology
  std::vector<std::string> removed;  // only in the old one
  // In both, under other domains (a re-racked or re-cabled node: the names
  // of its ancestors differ); keeps its jobs and state.
  std::vector<std::string> moved;
  // In both with another GPU count: its state is not carried (as removed
  // and added), so no job may hold it.
  std::vector<std::string> resized;
  // In both with another GPU model or features (same GPU count): keeps its
  // state and jobs.
  std::vector<std::string> changed;
  std::vector<NodeId> to_new;  // by old node id: its new id, -1 removed or resized
  std::vector<NodeId> old_of;  // by new node id: its old id, -1 added or resized
  int domains_added = 0;       // domain names only in the new topology
  int domains_removed = 0;
  bool tiers_changed = false;  // other tier names, HBD or links

  bool empty() const {
    return added.empty() && removed.empty() && moved.empty() && resized.empty() &&
           changed.empty() && domains_added == 0 && domains_removed == 0 && !tiers_changed;
  }
};

TopologyDiff DiffTopologies(const Topology& from, const Topology& to);

}  // namespace topo::core
