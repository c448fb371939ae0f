#pragma once
// The fixed shape of a cluster: a tree of domains with named tiers.
//
// Tiers are data. Tier 0 is always the node tier (one domain per node); the
// tiers above it are listed innermost first ("hbd", "leaf", "spine", "pod",
// "dc", ...). One tier is the high-bandwidth domain (HBD, scale-up: NVLink,
// UB); it may be the node tier itself (8-GPU HGX nodes). The leaf tier is the
// first tier above the HBD, the pod tier the one above the leaf. Above the
// listed tiers there is always one implicit root domain ("cluster").
//
// Ids are dense: node ids and the ids of tier-0 domains coincide, the domains
// of each tier have contiguous ids, and nodes are numbered in depth-first
// order, so every domain covers the contiguous node range
// [node_begin, node_end). A Topology is immutable once built and safe to share
// between threads; mutable usage and health live in ClusterState.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "topo/core/status.hpp"

namespace topo::core {

using NodeId = int32_t;
using DomainId = int32_t;
inline constexpr DomainId kNoDomain = -1;
// GPU masks are 64 bits wide.
inline constexpr int kMaxGpusPerNode = 64;

// The fabric that joins the children of one domain of a tier, as one GPU
// sees it: the bandwidth one GPU can push across it when the fabric is not
// loaded, the latency of one message step, and the oversubscription (the
// fabric carries bandwidth x GPUs below / oversubscription at once; the
// simulator shares that among the jobs crossing it). Tier 0's fabric joins the GPUs of a node
// (NVLink/UB inside an 8-GPU HGX node); the HBD tier's is the scale-up domain; the tiers above are
// the NIC/leaf fabric and the spine layers. docs/perf-model.md lists the published figures of every
// reference topology.
struct TierLink {
  double bandwidth_gbs = 0;     // GB/s per GPU, one direction
  double latency_us = 0;        // microseconds per message step
  double oversubscription = 1;  // >= 1
};

struct Tier {
  std::string name;
  // Relative cost of a communication group whose widest span is this tier
  // (../shared/BENCHMARKS.md: hbd 1, leaf 4, pod 16, above 64).
  double cost = 1.0;
  TierLink link;
};

struct Domain {
  std::string name;
  int tier = 0;
  DomainId parent = kNoDomain;
  NodeId node_begin = 0;  // nodes covered: [node_begin, node_end)
  NodeId node_end = 0;
  int gpus = 0;             // GPUs of all nodes below
  int32_t child_begin = 0;  // children: child_ids()[child_begin, child_end)
  int32_t child_end = 0;
};

struct Node {
  std::string name;
  int gpus = 0;
  std::string gpu_model;
  std::vector<std::string> features;
};

class Topology {
 public:
  // --- tiers ---
  // Listed tiers, innermost first; tier_count() excludes the implicit root.
  int tier_count() const { return static_cast<int>(tiers_.size()); }
  // REQUIRES: 0 <= t <= tier_count(); t == tier_count() is the root tier.
  const Tier& tier(int t) const { return t < tier_count() ? tiers_[t] : root_tier_; }
  int hbd_tier() const { return hbd_tier_; }
  // First tier above the HBD (the root tier if the HBD is the top tier).
  int leaf_tier() const { return hbd_tier_ + 1; }
  // Tier above the leaf, capped at the root tier.
  int pod_tier() const { return leaf_tier() + 1 <= tier_count() ? leaf_tier() + 1 : tier_count(); }
  int root_tier() const { return tier_count(); }
  // Resolves a tier by its name or by a role alias ("node", "hbd", "leaf",
  // "pod", "cluster"). Error names the tiers that exist.
  Result<int> FindTier(std::string_view name) const;

  // --- domains ---
  int domain_count() const { return static_cast<int>(domains_.size()); }
  const Domain& domain(DomainId d) const { return domains_[d]; }
  DomainId root() const { return static_cast<DomainId>(domains_.size()) - 1; }
  // Ids of the domains of tier t, contiguous: [first, first + count).
  DomainId tier_first(int t) const { return tier_first_[t]; }
  int tier_size(int t) const { return tier_first_[t + 1] - tier_first_[t]; }
  std::span<const DomainId> children(DomainId d) const {
    const Domain& dom = domains_[d];
    return {child_ids_.data() + dom.child_begin, child_ids_.data() + dom.child_end};
  }
  // The domain of tier t that contains node n (t == 0 gives n itself).
  DomainId Ancestor(NodeId n, int t) const {
    return ancestors_[static_cast<size_t>(n) * (tiers_.size() + 1) + t];
  }
  // Largest GPU count of any domain of tier t.
  int max_domain_gpus(int t) const { return max_domain_gpus_[t]; }
  DomainId FindDomain(std::string_view name) const;  // kNoDomain if absent

  // --- nodes ---
  int node_count() const { return static_cast<int>(nodes_.size()); }
  const Node& node(NodeId n) const { return nodes_[n]; }
  NodeId FindNode(std::string_view name) const;  // -1 if absent
  int total_gpus() const { return domains_.back().gpus; }
  int max_node_gpus() const { return max_node_gpus_; }

  const std::string& name() const { return name_; }

 private:
  friend class TopologyBuilder;
  std::string name_;
  std::vector<Tier> tiers_;
  Tier root_tier_{"cluster", 64.0, {}};
  int hbd_tier_ = 0;
  std::vector<Domain> domains_;
  std::vector<DomainId> child_ids_;
  std::vector<DomainId> tier_first_;  // size tier_count() + 2
  std::vector<DomainId> ancestors_;   // node_count() x (tier_count() + 1)
  std::vector<int> max_domain_gpus_;  // per tier incl. root
  std::vector<Node> nodes_;
  std::unordered_map<std::string, NodeId> node_index_;
  std::unordered_map<std::string, DomainId> domain_index_;
  int max_node_gpus_ = 0;
};

// Default tier cost by the tier's position relative to the HBD.
double DefaultTierCost(int tier, int hbd_tier);
// Default link of a tier by its position relative to the HBD, for files that
// give none (docs/perf-model.md, "Defaults"): an H100 HGX node and a
// 400 Gb/s NDR fabric. Up to the HBD 450 GB/s and 3 us; the first tier above
// 50 GB/s and 6 us; the next 50 GB/s and 8 us (both non-blocking); higher
// tiers 50 GB/s, 12 us and an assumed 2:1 oversubscription. tier may be the root
// tier (one past the listed tiers).
TierLink DefaultTierLink(int tier, int hbd_tier);

// Builds a Topology from domains and nodes added in any order.
//
//   TopologyBuilder b("tiny", {"node", "leaf", "spine"}, /*hbd_tier=*/0);
//   int s = b.AddDomain("spine0", 2, TopologyBuilder::kTop);
//   int l = b.AddDomain("leaf0", 1, s);
//   b.AddNode("n0", l, 8);
//   Result<Topology> t = std::move(b).Build();
//
// Build() validates and reports the first problem: duplicate names, a domain
// whose parent is not exactly one tier up, a domain with no node below it, a
// tier with no domain, a node with 0 or more than kMaxGpusPerNode GPUs.
class TopologyBuilder {
 public:
  static constexpr int kTop = -1;  // parent of top-tier domains

  // tier_names: innermost first; tier_names[0] is the node tier.
  // Tier costs default to DefaultTierCost; SetTierCost overrides.
  // Links default to DefaultTierLink; SetTierLink overrides (tier ==
  // tier_names.size() sets the implicit root's link). Build() rejects a link
  // whose bandwidth or latency is not a positive finite number.
  TopologyBuilder(std::string name, std::vector<std::string> tier_names, int hbd_tier);
  void SetTierCost(int tier, double cost);
  void SetTierLink(int tier, TierLink link);

  // Adds a domain of tier (1 .. tier_count-1) under parent (a builder handle
  // from AddDomain, or kTop for the top tier). Returns its builder handle.
  int AddDomain(std::string name, int tier, int parent);
  // Adds a node under a tier-1 domain (or under kTop when the node tier is
  // the only tier). Returns its builder handle.
  int AddNode(std::string name, int parent, int gpus, std::string gpu_model = "",
              std::vector<std::string> features = {});

  Result<Topology> Build() &&;

 private:
  struct PendingDomain {
    std::string name;
    int tier;
    int parent;
  };
  struct PendingNode {
    Node node;
    int parent;
  };
  std::string name_;
  std::vector<Tier> tiers_;
  TierLink root_link_;
  int hbd_tier_;
  std::vector<PendingDomain> domains_;
  std::vector<PendingNode> nodes_;
};

}  // namespace topo::core
