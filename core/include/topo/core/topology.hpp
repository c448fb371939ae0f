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
// Mixed clusters: the HBD is a property of a subtree. A domain marked as an
// HBD (TopologyBuilder::MarkHbd; `"hbd": true` in the JSON format) is the HBD
// of every node below it, so HGX nodes (HBD = node) and NVL72 racks (HBD =
// rack) share one tree; nodes under no marked domain keep the topology's
// hbd tier. The nodes that share an accelerator model and an HBD kind form a
// part; each part has a view: a Topology with the same ids whose hbd tier,
// role aliases, tier links and costs are the part's, and whose domain GPU
// counts count the part's nodes only. Placers and the speed model work on a
// view as on any topology (a placement never mixes parts: placement.hpp);
// a topology of one part is its own view.
//
// Ids are dense: node ids and the ids of tier-0 domains coincide, the domains
// of each tier have contiguous ids, and nodes are numbered in depth-first
// order, so every domain covers the contiguous node range
// [node_begin, node_end). A Topology is immutable once built and safe to share
// between threads; mutable usage and health live in ClusterState.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
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
  bool operator==(const TierLink&) const = default;
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
  std::string gpu_model;  // the accelerator model ("H100", "GB200"; "" unknown)
  std::vector<std::string> features;
};

// Nodes that share an accelerator model and an HBD kind (see above).
struct TopologyPart {
  std::string gpu_model;
  int hbd_tier = 0;
  NodeId first_node = 0;  // the part's first node, by id
  int nodes = 0;
  int gpus = 0;
};

// Whether two accelerator model names are the same model: ASCII
// case-insensitive ("h100" is "H100"), the one rule for gpu_types and the
// API's filters.
inline bool SameGpuModel(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// At most this many distinct node features per topology (a 64-bit mask).
inline constexpr int kMaxTopologyFeatures = 64;

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
  // Resolves a tier by its name or by a role alias. "node", "hbd" and
  // "cluster" are always the roles (on a part's view, "hbd" is the part's
  // HBD tier); other names match a tier's name first, then the aliases
  // "leaf" (first tier above the HBD) and "pod" (the one above). Error names
  // the tiers that exist.
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

  // --- parts (mixed clusters) ---
  // Parts in order of their first node. A view has one part, itself.
  int part_count() const { return static_cast<int>(parts_.size()); }
  const TopologyPart& part(int p) const { return parts_[p]; }
  // The part of node n; on a view, -1 for a node outside it.
  int part_of(NodeId n) const { return part_of_.empty() ? 0 : part_of_[n]; }
  // REQUIRES: 0 <= p < part_count()
  const Topology& PartView(int p) const {
    return part_views_.empty() ? *this : *part_views_[static_cast<size_t>(p)];
  }
  // The view of node n's part (this topology for a single-part one).
  const Topology& ViewOf(NodeId n) const {
    const int p = part_of(n);
    return PartView(p < 0 ? 0 : p);
  }
  // Distinct accelerator models of the nodes, in order of first appearance
  // ("" included when some node names none).
  const std::vector<std::string>& gpu_models() const { return gpu_models_; }
  // Distinct node features, in order of first appearance, and node n's as
  // a mask over that list.
  const std::vector<std::string>& features() const { return features_; }
  uint64_t feature_mask(NodeId n) const { return feature_masks_[n]; }
  // Index of a feature in features(), -1 if no node has it.
  int FindFeature(std::string_view feature) const;

  // --- HBD marks (TopologyBuilder::MarkHbd), for writers ---
  // Whether domain d was marked as an HBD, and the link given with its mark
  // (nullopt when none was given or d is not marked). A view keeps the marks.
  bool hbd_marked(DomainId d) const;
  std::optional<TierLink> hbd_link(DomainId d) const;

 private:
  friend class TopologyBuilder;
  // The view of part p (an own copy whose hbd tier, links, costs and domain
  // GPU counts are the part's).
  Topology MakePartView(int p, const std::optional<TierLink>& hbd_link) const;

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
  std::vector<TopologyPart> parts_;
  std::vector<int32_t> part_of_;                             // empty when there is one part
  std::vector<std::shared_ptr<const Topology>> part_views_;  // empty when one part
  std::vector<std::string> gpu_models_;
  std::vector<std::string> features_;
  std::vector<uint64_t> feature_masks_;
  std::vector<std::pair<DomainId, std::optional<TierLink>>> hbd_marks_;  // by id
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
  // Makes a domain (a handle from AddDomain) the HBD of every node below it,
  // whatever the topology's hbd tier, and optionally gives the link of that
  // scale-up fabric (every tier up to the domain's own, as one GPU sees it;
  // left out: the HBD default, DefaultTierLink). Build() refuses a marked
  // domain inside another marked one.
  void MarkHbd(int domain, std::optional<TierLink> link = std::nullopt);

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
  std::vector<std::pair<int, std::optional<TierLink>>> hbd_marks_;
};

}  // namespace topo::core
