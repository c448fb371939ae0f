// GroupByNode and MasterPorts (launch.hpp).

#include "topo/core/launch.hpp"

#include <algorithm>
#include <unordered_map>

namespace topo::core {

std::vector<NodeLaunch> GroupByNode(const std::vector<GpuSlot>& ranks) {
  std::vector<NodeLaunch> nodes;
  std::unordered_map<NodeId, size_t> index;
  // Ranks ascending: a node's first rank seen is its lowest, so nodes come
  // out ordered by their lowest rank and each node's ranks ascending.
  for (size_t r = 0; r < ranks.size(); ++r) {
    auto [it, added] = index.emplace(ranks[r].node, nodes.size());
    if (added) {
      NodeLaunch n;
      n.node = ranks[r].node;
      n.group_rank = static_cast<int>(nodes.size());
      nodes.push_back(std::move(n));
    }
    NodeLaunch& n = nodes[it->second];
    n.ranks.push_back(static_cast<int>(r));
    n.gpus.push_back(ranks[r].gpu);
  }
  return nodes;
}

MasterPorts::MasterPorts(int node_count, PortRange range)
    : range_(range), held_by_port_(static_cast<size_t>(std::max(0, node_count))) {}

int MasterPorts::Take(NodeId node, int64_t job) {
  if (node < 0 || static_cast<size_t>(node) >= held_by_port_.size() || range_.count <= 0) {
    return -1;
  }
  auto& held = held_by_port_[node];
  if (static_cast<int>(held.size()) >= range_.count) return -1;
  for (int tries = 0; tries < range_.count; ++tries) {
    const int port = range_.first + cursor_;
    cursor_ = (cursor_ + 1) % range_.count;
    if (held.emplace(port, job).second) return port;
  }
  return -1;
}

void MasterPorts::Release(NodeId node, int64_t job) {
  if (node < 0 || static_cast<size_t>(node) >= held_by_port_.size()) return;
  auto& held = held_by_port_[node];
  for (auto it = held.begin(); it != held.end();) {
    it = it->second == job ? held.erase(it) : std::next(it);
  }
}

int MasterPorts::held(NodeId node) const {
  if (node < 0 || static_cast<size_t>(node) >= held_by_port_.size()) return 0;
  return static_cast<int>(held_by_port_[node].size());
}

}  // namespace topo::core
