#include "topo/core/topology.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace topo::core {

double DefaultTierCost(int tier, int hbd_tier) {
  if (tier <= hbd_tier) return 1.0;
  if (tier == hbd_tier + 1) return 4.0;
  if (tier == hbd_tier + 2) return 16.0;
  return 64.0;
}

TierLink DefaultTierLink(int tier, int hbd_tier) {
  if (tier <= hbd_tier) return {450.0, 3.0, 1.0};
  if (tier == hbd_tier + 1) return {50.0, 6.0, 1.0};
  if (tier == hbd_tier + 2) return {50.0, 8.0, 1.0};
  return {50.0, 12.0, 2.0};
}

Result<int> Topology::FindTier(std::string_view name) const {
  if (name == "node") return 0;
  if (name == "hbd") return hbd_tier_;
  if (name == "cluster") return root_tier();
  for (int t = 0; t < tier_count(); ++t) {
    if (tiers_[t].name == name) return t;
  }
  if (name == "leaf") return leaf_tier();
  if (name == "pod") return pod_tier();
  if (name == "cluster" || name == root_tier_.name) return root_tier();
  std::string known;
  for (const Tier& t : tiers_) known += (known.empty() ? "" : ", ") + t.name;
  return Status::Error("unknown tier '" + std::string(name) + "'; this topology has tiers " +
                       known + " (aliases: node, hbd, leaf, pod, cluster)");
}

int Topology::FindFeature(std::string_view feature) const {
  for (size_t i = 0; i < features_.size(); ++i) {
    if (features_[i] == feature) return static_cast<int>(i);
  }
  return -1;
}

bool Topology::hbd_marked(DomainId d) const {
  auto it = std::lower_bound(hbd_marks_.begin(), hbd_marks_.end(), d,
                             [](const auto& mark, DomainId id) { return mark.first < id; });
  return it != hbd_marks_.end() && it->first == d;
}

std::optional<TierLink> Topology::hbd_link(DomainId d) const {
  auto it = std::lower_bound(hbd_marks_.begin(), hbd_marks_.end(), d,
                             [](const auto& mark, DomainId id) { return mark.first < id; });
  return it != hbd_marks_.end() && it->first == d ? it->second : std::nullopt;
}

DomainId Topology::FindDomain(std::string_view name) const {
  auto it = domain_index_.find(std::string(name));
  return it == domain_index_.end() ? kNoDomain : it->second;
}

NodeId Topology::FindNode(std::string_view name) const {
  auto it = node_index_.find(std::string(name));
  return it == node_index_.end() ? -1 : it->second;
}

TopologyBuilder::TopologyBuilder(std::string name, std::vector<std::string> tier_names,
                                 int hbd_tier)
    : name_(std::move(name)), hbd_tier_(hbd_tier) {
  for (size_t t = 0; t < tier_names.size(); ++t) {
    tiers_.push_back(Tier{std::move(tier_names[t]), DefaultTierCost(static_cast<int>(t), hbd_tier),
                          DefaultTierLink(static_cast<int>(t), hbd_tier)});
  }
  root_link_ = DefaultTierLink(static_cast<int>(tiers_.size()), hbd_tier);
}

void TopologyBuilder::SetTierLink(int tier, TierLink link) {
  if (tier >= 0 && tier < static_cast<int>(tiers_.size())) tiers_[tier].link = link;
  if (tier == static_cast<int>(tiers_.size())) root_link_ = link;
}

void TopologyBuilder::SetTierCost(int tier, double cost) {
  if (tier >= 0 && tier < static_cast<int>(tiers_.size())) tiers_[tier].cost = cost;
}

int TopologyBuilder::AddDomain(std::string name, int tier, int parent) {
  domains_.push_back(PendingDomain{std::move(name), tier, parent});
  return static_cast<int>(domains_.size()) - 1;
}

void TopologyBuilder::MarkHbd(int domain, std::optional<TierLink> link) {
  hbd_marks_.emplace_back(domain, link);
}

int TopologyBuilder::AddNode(std::string name, int parent, int gpus, std::string gpu_model,
                             std::vector<std::string> features) {
  nodes_.push_back(
      PendingNode{Node{std::move(name), gpus, std::move(gpu_model), std::move(features)}, parent});
  return static_cast<int>(nodes_.size()) - 1;
}

Result<Topology> TopologyBuilder::Build() && {
  const int tiers = static_cast<int>(tiers_.size());
  if (tiers == 0) return Status::Error("topology '" + name_ + "' has no tiers");
  if (hbd_tier_ < 0 || hbd_tier_ >= tiers) {
    return Status::Error("hbd tier index " + std::to_string(hbd_tier_) + " is not one of the " +
                         std::to_string(tiers) + " tiers");
  }
  for (int t = 0; t < tiers; ++t) {
    if (tiers_[t].name.empty()) return Status::Error("tier " + std::to_string(t) + " has no name");
    for (int u = 0; u < t; ++u) {
      if (tiers_[u].name == tiers_[t].name) {
        return Status::Error("tier name '" + tiers_[t].name + "' is used twice");
      }
    }
    if (!(tiers_[t].cost > 0)) {
      return Status::Error("tier '" + tiers_[t].name + "' has a cost that is not positive");
    }
  }
  for (int t = 0; t <= tiers; ++t) {
    const TierLink& link = t < tiers ? tiers_[t].link : root_link_;
    auto positive = [](double v) { return v > 0 && v < 1e12; };
    if (!positive(link.bandwidth_gbs) || !positive(link.latency_us) ||
        !(link.oversubscription >= 1 && link.oversubscription < 1e6)) {
      return Status::Error("tier '" + (t < tiers ? tiers_[t].name : std::string("cluster")) +
                           "' has a link bandwidth or latency that is not a positive number, or "
                           "an oversubscription below 1");
    }
  }
  if (nodes_.empty()) return Status::Error("topology '" + name_ + "' has no nodes");

  // Children lists in insertion order; index domains_.size() is the root.
  const int pending_domains = static_cast<int>(domains_.size());
  const int root_handle = pending_domains;
  std::vector<std::vector<int>> child_domains(pending_domains + 1);
  std::vector<std::vector<int>> child_nodes(pending_domains + 1);
  for (int i = 0; i < pending_domains; ++i) {
    const PendingDomain& d = domains_[i];
    if (d.name.empty())
      return Status::Error("a domain of tier '" + tiers_[std::clamp(d.tier, 0, tiers - 1)].name +
                           "' has no name");
    if (d.tier < 1 || d.tier >= tiers) {
      return Status::Error("domain '" + d.name + "' has tier index " + std::to_string(d.tier) +
                           ", outside 1.." + std::to_string(tiers - 1));
    }
    int parent = d.parent == kTop ? root_handle : d.parent;
    if (d.parent != kTop && (d.parent < 0 || d.parent >= pending_domains)) {
      return Status::Error("domain '" + d.name + "' has an unknown parent");
    }
    int parent_tier = d.parent == kTop ? tiers : domains_[d.parent].tier;
    if (parent_tier != d.tier + 1) {
      std::string parent_desc = d.parent == kTop ? "the top"
                                                 : "'" + domains_[d.parent].name + "' (tier '" +
                                                       tiers_[parent_tier].name + "')";
      return Status::Error("domain '" + d.name + "' of tier '" + tiers_[d.tier].name +
                           "' sits under " + parent_desc +
                           "; a domain's parent must be exactly one tier up");
    }
    child_domains[parent].push_back(i);
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const PendingNode& n = nodes_[i];
    if (n.node.name.empty()) return Status::Error("a node has no name");
    if (n.node.gpus < 1 || n.node.gpus > kMaxGpusPerNode) {
      return Status::Error("node '" + n.node.name + "' has " + std::to_string(n.node.gpus) +
                           " GPUs; a node has 1.." + std::to_string(kMaxGpusPerNode));
    }
    int parent = n.parent == kTop ? root_handle : n.parent;
    if (n.parent != kTop && (n.parent < 0 || n.parent >= pending_domains)) {
      return Status::Error("node '" + n.node.name + "' has an unknown parent");
    }
    int parent_tier = n.parent == kTop ? tiers : domains_[n.parent].tier;
    if (parent_tier != 1) {
      return Status::Error("node '" + n.node.name + "' sits under a domain of tier '" +
                           (parent_tier < tiers ? tiers_[parent_tier].name : "cluster") +
                           "'; nodes belong under the tier just above the node tier ('" +
                           (tiers > 1 ? tiers_[1].name : std::string("cluster")) + "')");
    }
    child_nodes[parent].push_back(static_cast<int>(i));
  }

  Topology topo;
  topo.name_ = name_;
  topo.tiers_ = tiers_;
  topo.root_tier_.link = root_link_;
  topo.hbd_tier_ = hbd_tier_;
  const int node_total = static_cast<int>(nodes_.size());

  // Depth-first walk gives node order and the domain order within each tier.
  std::vector<int> node_order;
  node_order.reserve(node_total);
  std::vector<std::vector<int>> tier_order(tiers + 1);  // pending handles per tier
  tier_order[tiers].push_back(root_handle);
  std::vector<int> node_parent_handle(node_total, root_handle);
  {
    // Iterative pre-order that keeps children in insertion order.
    std::vector<std::pair<int, size_t>> walk = {{root_handle, 0}};
    while (!walk.empty()) {
      auto& [handle, next] = walk.back();
      const auto& kids = child_domains[handle];
      if (next == 0) {
        for (int n : child_nodes[handle]) {
          node_order.push_back(n);
          node_parent_handle[n] = handle;
        }
      }
      if (next < kids.size()) {
        int child = kids[next++];
        tier_order[domains_[child].tier].push_back(child);
        walk.push_back({child, 0});
      } else {
        walk.pop_back();
      }
    }
  }

  // Ids: tier 0 = nodes, then each tier's domains, root last.
  std::vector<DomainId> tier_first(tiers + 2, 0);
  tier_first[1] = node_total;
  for (int t = 1; t <= tiers; ++t) {
    tier_first[t + 1] = tier_first[t] + static_cast<int>(tier_order[t].size());
  }
  const int domain_total = tier_first[tiers + 1];
  std::vector<DomainId> id_of_handle(pending_domains + 1, kNoDomain);
  for (int t = 1; t <= tiers; ++t) {
    for (size_t i = 0; i < tier_order[t].size(); ++i) {
      id_of_handle[tier_order[t][i]] = tier_first[t] + static_cast<int>(i);
    }
    if (t < tiers && tier_order[t].empty()) {
      return Status::Error("tier '" + tiers_[t].name + "' has no domains");
    }
  }
  for (int i = 0; i < pending_domains; ++i) {
    if (id_of_handle[i] == kNoDomain) {
      return Status::Error("domain '" + domains_[i].name + "' is not connected to the top tier");
    }
  }

  topo.domains_.resize(domain_total);
  topo.nodes_.resize(node_total);
  for (int pos = 0; pos < node_total; ++pos) {
    PendingNode& pn = nodes_[node_order[pos]];
    topo.nodes_[pos] = std::move(pn.node);
    Domain& d = topo.domains_[pos];
    d.name = topo.nodes_[pos].name;
    d.tier = 0;
    d.parent = id_of_handle[node_parent_handle[node_order[pos]]];
    d.node_begin = pos;
    d.node_end = pos + 1;
    d.gpus = topo.nodes_[pos].gpus;
    topo.max_node_gpus_ = std::max(topo.max_node_gpus_, d.gpus);
  }
  for (int h = 0; h <= pending_domains; ++h) {
    DomainId id = id_of_handle[h];
    Domain& d = topo.domains_[id];
    if (h == root_handle) {
      d.name = "cluster";
      d.tier = tiers;
      d.parent = kNoDomain;
    } else {
      d.name = domains_[h].name;
      d.tier = domains_[h].tier;
      d.parent = id_of_handle[domains_[h].parent == kTop ? root_handle : domains_[h].parent];
    }
  }
  // Children: node children for tier-1 domains, domain children above.
  // Node ranges and GPU counts accumulate bottom-up, tier by tier.
  topo.child_ids_.reserve(domain_total);
  for (int t = 1; t <= tiers; ++t) {
    for (DomainId id = tier_first[t]; id < tier_first[t + 1]; ++id) {
      Domain& d = topo.domains_[id];
      d.child_begin = static_cast<int32_t>(topo.child_ids_.size());
      d.node_begin = node_total;
      d.node_end = 0;
      d.gpus = 0;
    }
  }
  // Fill children in id order of the parent so child ranges are contiguous.
  std::vector<std::vector<DomainId>> kids(domain_total);
  for (DomainId id = 0; id < domain_total - 1; ++id) kids[topo.domains_[id].parent].push_back(id);
  topo.child_ids_.clear();
  for (DomainId id = node_total; id < domain_total; ++id) {
    Domain& d = topo.domains_[id];
    d.child_begin = static_cast<int32_t>(topo.child_ids_.size());
    topo.child_ids_.insert(topo.child_ids_.end(), kids[id].begin(), kids[id].end());
    d.child_end = static_cast<int32_t>(topo.child_ids_.size());
    if (kids[id].empty()) {
      if (id == domain_total - 1) return Status::Error("topology '" + name_ + "' has no nodes");
      return Status::Error("domain '" + d.name + "' of tier '" + tiers_[d.tier].name +
                           "' has no nodes below it");
    }
  }
  for (DomainId id = node_total; id < domain_total; ++id) {
    Domain& d = topo.domains_[id];
    NodeId lo = node_total, hi = 0;
    int gpus = 0;
    for (DomainId c : kids[id]) {
      lo = std::min(lo, topo.domains_[c].node_begin);
      hi = std::max(hi, topo.domains_[c].node_end);
      gpus += topo.domains_[c].gpus;
    }
    d.node_begin = lo;
    d.node_end = hi;
    d.gpus = gpus;
  }

  topo.tier_first_ = tier_first;
  topo.max_domain_gpus_.assign(tiers + 1, 0);
  for (DomainId id = 0; id < domain_total; ++id) {
    int t = topo.domains_[id].tier;
    topo.max_domain_gpus_[t] = std::max(topo.max_domain_gpus_[t], topo.domains_[id].gpus);
  }
  topo.ancestors_.resize(static_cast<size_t>(node_total) * (tiers + 1));
  for (NodeId n = 0; n < node_total; ++n) {
    DomainId d = n;
    for (int t = 0; t <= tiers; ++t) {
      topo.ancestors_[static_cast<size_t>(n) * (tiers + 1) + t] = d;
      d = topo.domains_[d].parent;
    }
  }
  topo.node_index_.reserve(node_total);
  for (NodeId n = 0; n < node_total; ++n) {
    if (!topo.node_index_.emplace(topo.nodes_[n].name, n).second) {
      return Status::Error("node name '" + topo.nodes_[n].name + "' is used twice");
    }
  }
  for (DomainId id = node_total; id < domain_total - 1; ++id) {
    const std::string& nm = topo.domains_[id].name;
    if (topo.node_index_.count(nm) || !topo.domain_index_.emplace(nm, id).second) {
      return Status::Error("domain name '" + nm + "' is used twice");
    }
  }

  // Features and models.
  topo.feature_masks_.assign(node_total, 0);
  for (NodeId n = 0; n < node_total; ++n) {
    const Node& node = topo.nodes_[n];
    if (std::find(topo.gpu_models_.begin(), topo.gpu_models_.end(), node.gpu_model) ==
        topo.gpu_models_.end()) {
      topo.gpu_models_.push_back(node.gpu_model);
    }
    for (const std::string& f : node.features) {
      int i = topo.FindFeature(f);
      if (i < 0) {
        if (static_cast<int>(topo.features_.size()) == kMaxTopologyFeatures) {
          return Status::Error("node '" + node.name + "' has feature '" + f +
                               "', one more than the " + std::to_string(kMaxTopologyFeatures) +
                               " distinct features a topology may have");
        }
        topo.features_.push_back(f);
        i = static_cast<int>(topo.features_.size()) - 1;
      }
      topo.feature_masks_[n] |= uint64_t{1} << i;
    }
  }

  // Per-subtree HBDs: each node's HBD tier and scale-up link.
  std::vector<int> node_hbd(node_total, hbd_tier_);
  std::vector<std::optional<TierLink>> node_link(node_total);
  std::vector<uint8_t> marked(domain_total, 0);
  for (const auto& [handle, link] : hbd_marks_) {
    if (handle < 0 || handle >= pending_domains) {
      return Status::Error("an HBD mark names an unknown domain");
    }
    marked[id_of_handle[handle]] = 1;
  }
  for (const auto& [handle, link] : hbd_marks_) {
    const DomainId id = id_of_handle[handle];
    const Domain& d = topo.domains_[id];
    for (DomainId up = d.parent; up != kNoDomain; up = topo.domains_[up].parent) {
      if (marked[up]) {
        return Status::Error("domain '" + d.name + "' is marked as an HBD inside HBD '" +
                             topo.domains_[up].name + "'; mark one of them");
      }
    }
    if (link && (!(link->bandwidth_gbs > 0 && link->bandwidth_gbs < 1e12) ||
                 !(link->latency_us > 0 && link->latency_us < 1e12) ||
                 !(link->oversubscription >= 1 && link->oversubscription < 1e6))) {
      return Status::Error("HBD '" + d.name +
                           "' has a link bandwidth or latency that is not a positive number, or "
                           "an oversubscription below 1");
    }
    for (NodeId n = d.node_begin; n < d.node_end; ++n) {
      node_hbd[n] = d.tier;
      node_link[n] = link;
    }
  }
  // The marks by domain id (a domain marked twice keeps its last link).
  std::vector<std::pair<DomainId, std::optional<TierLink>>> marks;
  for (const auto& [handle, link] : hbd_marks_) marks.emplace_back(id_of_handle[handle], link);
  std::stable_sort(marks.begin(), marks.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& mark : marks) {
    if (!topo.hbd_marks_.empty() && topo.hbd_marks_.back().first == mark.first) {
      topo.hbd_marks_.back() = std::move(mark);
    } else {
      topo.hbd_marks_.push_back(std::move(mark));
    }
  }
  struct PartKey {
    std::string model;
    int hbd;
    std::optional<TierLink> link;
    bool operator==(const PartKey&) const = default;
  };
  std::vector<PartKey> keys;
  std::vector<int32_t> part_of(node_total, 0);
  for (NodeId n = 0; n < node_total; ++n) {
    PartKey key{topo.nodes_[n].gpu_model, node_hbd[n], node_link[n]};
    auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      keys.push_back(key);
      topo.parts_.push_back(TopologyPart{key.model, key.hbd, n, 0, 0});
      it = keys.end() - 1;
    }
    const int p = static_cast<int>(it - keys.begin());
    part_of[n] = p;
    ++topo.parts_[p].nodes;
    topo.parts_[p].gpus += topo.nodes_[n].gpus;
  }
  if (topo.parts_.size() == 1 && keys[0].hbd == hbd_tier_ && !keys[0].link) return topo;
  topo.part_of_ = std::move(part_of);
  if (topo.parts_.size() == 1) {
    // Every node in one marked kind of HBD: the topology is that part.
    Topology whole = topo.MakePartView(0, keys[0].link);
    whole.part_of_.clear();
    return whole;
  }
  std::vector<std::shared_ptr<const Topology>> views;
  for (int p = 0; p < topo.part_count(); ++p) {
    views.push_back(std::make_shared<const Topology>(topo.MakePartView(p, keys[p].link)));
  }
  topo.part_views_ = std::move(views);
  return topo;
}

Topology Topology::MakePartView(int p, const std::optional<TierLink>& hbd_link) const {
  Topology v;
  v.name_ = name_;
  v.tiers_ = tiers_;
  v.root_tier_ = root_tier_;
  v.domains_ = domains_;
  v.child_ids_ = child_ids_;
  v.tier_first_ = tier_first_;
  v.ancestors_ = ancestors_;
  v.nodes_ = nodes_;
  v.node_index_ = node_index_;
  v.domain_index_ = domain_index_;
  v.max_node_gpus_ = max_node_gpus_;
  v.gpu_models_ = {parts_[p].gpu_model};
  v.features_ = features_;
  v.feature_masks_ = feature_masks_;
  v.hbd_marks_ = hbd_marks_;
  v.parts_ = {parts_[p]};
  const int file_hbd = hbd_tier_;
  const int hbd = parts_[p].hbd_tier;
  v.hbd_tier_ = hbd;
  // Costs and links the file left at their defaults follow the part's HBD;
  // ones it gave stay, except that the part's own scale-up link covers every
  // tier up to its HBD.
  for (int t = 0; t <= tier_count(); ++t) {
    Tier& tier = t < tier_count() ? v.tiers_[t] : v.root_tier_;
    if (tier.cost == DefaultTierCost(t, file_hbd)) tier.cost = DefaultTierCost(t, hbd);
    const bool given = !(tier.link == DefaultTierLink(t, file_hbd));
    if (t <= hbd && hbd_link) {
      tier.link = *hbd_link;
    } else if (!given || (t <= hbd && t > file_hbd)) {
      tier.link = DefaultTierLink(t, hbd);
    }
  }
  v.part_of_.assign(nodes_.size(), -1);
  for (NodeId n = 0; n < node_count(); ++n) {
    if (part_of_[n] == p) v.part_of_[n] = 0;
  }
  // Domain GPU counts: the part's nodes only.
  for (Domain& d : v.domains_) d.gpus = 0;
  for (NodeId n = 0; n < node_count(); ++n) {
    if (v.part_of_[n] != 0) continue;
    for (int t = 0; t <= tier_count(); ++t) v.domains_[Ancestor(n, t)].gpus += nodes_[n].gpus;
  }
  v.max_domain_gpus_.assign(tier_count() + 1, 0);
  for (const Domain& d : v.domains_) {
    v.max_domain_gpus_[d.tier] = std::max(v.max_domain_gpus_[d.tier], d.gpus);
  }
  return v;
}

}  // namespace topo::core
