#include "topo/core/topology_diff.hpp"

#include <string>

namespace topo::core {

namespace {

// The names of a node's domains from its parent up to the top tier.
std::vector<std::string> Ancestry(const Topology& t, NodeId n) {
  std::vector<std::string> out;
  for (int tier = 1; tier < t.root_tier(); ++tier)
    out.push_back(t.domain(t.Ancestor(n, tier)).name);
  return out;
}

bool TiersDiffer(const Topology& a, const Topology& b) {
  if (a.tier_count() != b.tier_count() || a.hbd_tier() != b.hbd_tier()) return true;
  for (int t = 0; t <= a.tier_count(); ++t) {
    const Tier& x = a.tier(t);
    const Tier& y = b.tier(t);
    if (x.name != y.name || x.cost != y.cost || !(x.link == y.link)) return true;
  }
  return false;
}

}  // namespace

TopologyDiff DiffTopologies(const Topology& from, const Topology& to) {
  TopologyDiff d;
  d.to_new.assign(from.node_count(), -1);
  d.old_of.assign(to.node_count(), -1);
  for (NodeId n = 0; n < from.node_count(); ++n) {
    const Node& old = from.node(n);
    const NodeId m = to.FindNode(old.name);
    if (m < 0) {
      d.removed.push_back(old.name);
      continue;
    }
    const Node& now = to.node(m);
    if (now.gpus != old.gpus) {
      d.resized.push_back(old.name);
      continue;
    }
    d.to_new[n] = m;
    d.old_of[m] = n;
    if (Ancestry(from, n) != Ancestry(to, m)) d.moved.push_back(old.name);
    if (now.gpu_model != old.gpu_model || now.features != old.features) {
      d.changed.push_back(old.name);
    }
  }
  for (NodeId m = 0; m < to.node_count(); ++m) {
    if (from.FindNode(to.node(m).name) < 0) d.added.push_back(to.node(m).name);
  }
  for (DomainId x = from.node_count(); x < from.root(); ++x) {
    if (to.FindDomain(from.domain(x).name) == kNoDomain) ++d.domains_removed;
  }
  for (DomainId x = to.node_count(); x < to.root(); ++x) {
    if (from.FindDomain(to.domain(x).name) == kNoDomain) ++d.domains_added;
  }
  d.tiers_changed = TiersDiffer(from, to);
  for (DomainId x = from.node_count(); x < from.root() && !d.tiers_changed; ++x) {
    const DomainId y = to.FindDomain(from.domain(x).name);
    if (y != kNoDomain &&
        (from.hbd_marked(x) != to.hbd_marked(y) || from.hbd_link(x) != to.hbd_link(y))) {
      d.tiers_changed = true;
    }
  }
  return d;
}

}  // namespace topo::core
