#include "topo/core/generators.hpp"

#include <cstdio>
#include <string>

namespace topo::core {

namespace {

// A regular tree: `fanout[i]` children per domain of tier i+1 (fanout[0] is
// nodes per tier-1 domain), `top` domains at the top tier.
struct Regular {
  const char* name;
  std::vector<std::string> tiers;
  int hbd_tier;
  std::vector<int> fanout;
  int top;
  int gpus;
  const char* model;
  // One link per listed tier, then the implicit root's (docs/perf-model.md
  // gives the source of each figure).
  std::vector<TierLink> links;
};

std::string Label(const std::string& prefix, int index, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*d", width, index);
  return prefix + buf;
}

int Digits(int n) {
  int d = 1;
  while (n >= 10) {
    n /= 10;
    ++d;
  }
  return d;
}

Result<Topology> BuildRegular(const Regular& r, int gpus_override) {
  const int gpus = gpus_override > 0 ? gpus_override : r.gpus;
  TopologyBuilder b(r.name, r.tiers, r.hbd_tier);
  for (size_t t = 0; t < r.links.size(); ++t) b.SetTierLink(static_cast<int>(t), r.links[t]);
  const int tiers = static_cast<int>(r.tiers.size());
  // Totals per tier for zero-padded names.
  std::vector<int> total(tiers, 0);
  total[tiers - 1] = r.top;
  for (int t = tiers - 2; t >= 0; --t) total[t] = total[t + 1] * r.fanout[t];
  std::vector<int> counter(tiers, 0);
  // Depth-first construction keeps node numbering in topology order.
  auto build = [&](auto&& self, int parent, int tier) -> void {
    const int n = tier == tiers - 1 ? r.top : r.fanout[tier];
    for (int i = 0; i < n; ++i) {
      const int index = counter[tier]++;
      if (tier == 0) {
        b.AddNode(Label("n", index, Digits(total[0] - 1)), parent, gpus, r.model);
      } else {
        int h = b.AddDomain(Label(r.tiers[tier], index, Digits(total[tier] - 1)), tier, parent);
        self(self, h, tier - 1);
      }
    }
  };
  build(build, TopologyBuilder::kTop, tiers - 1);
  return std::move(b).Build();
}

// Link figures (GB/s per GPU one way, us per step), docs/perf-model.md:
//   NVLink 4 (H100 SXM): 900 GB/s bidirectional = 450 one way.
//   NVLink 5 (GB200 NVL72): 1.8 TB/s bidirectional = 900 one way, every GPU
//     of the 72-GPU rack at that rate through the NVLink switches.
//   UB (CloudMatrix384, Ascend 910C): 392 GB/s one way, non-blocking over the
//     384-NPU supernode.
//   400 Gb/s NDR InfiniBand / RoCE per GPU (ConnectX-7, and the CM384 RDMA
//     plane): 50 GB/s.
//   meta-24k above the pods: the Llama 3 paper's 1:7 aggregation-layer
//     oversubscription (50 GB/s per GPU unloaded, 1/7 of it at full load).
//   Latencies: 3 us per step inside the scale-up domain, 6 us through a leaf
//     switch, 8 us through the next layer, 12 us above (assumptions of the
//     order of nccl-tests' small-message times).
constexpr TierLink kNvlink4{450, 3};
constexpr TierLink kNvlink5{900, 3};
constexpr TierLink kUb{392, 3};
constexpr TierLink kNdrLeaf{50, 6};
constexpr TierLink kNdrSpine{50, 8};
constexpr TierLink kAboveSpine{50, 12, 2};  // assumption: 2:1 oversubscribed

const std::vector<Regular>& Catalog() {
  static const std::vector<Regular> kCatalog = {
      // 64 GPUs: nodes of 8, 2 nodes per leaf, 2 leaves per spine, 2 spines.
      {"tiny",
       {"node", "leaf", "spine"},
       0,
       {2, 2},
       2,
       8,
       "H100",
       {kNvlink4, kNdrLeaf, kNdrSpine, kAboveSpine}},
      // Llama 3 cluster: racks of 2 nodes (16 GPUs per ToR), pods of 192
      // racks (3,072 GPUs), 8 pods.
      {"meta-24k",
       {"node", "leaf", "pod"},
       0,
       {2, 192},
       8,
       8,
       "H100",
       {kNvlink4, kNdrLeaf, kNdrSpine, {50, 12, 7}}},
      // GB200 NVL72: racks of 18 x 4, leaves of 8 racks, spines of 16 leaves.
      {"nvl72-64k",
       {"node", "hbd", "leaf", "spine"},
       1,
       {18, 8, 16},
       7,
       4,
       "GB200",
       {kNvlink5, kNvlink5, kNdrLeaf, kNdrSpine, kAboveSpine}},
      // CloudMatrix384: supernodes of 48 x 8, leaves of 4, pods of 12 leaves.
      {"cm384-166k",
       {"node", "hbd", "leaf", "pod"},
       1,
       {48, 4, 12},
       9,
       8,
       "Ascend 910C",
       {kUb, kUb, kNdrLeaf, kNdrSpine, kAboveSpine}},
  };
  return kCatalog;
}

// A mixed cluster (docs/perf-model.md, "mixed-10k"): 1,280 HGX H100 nodes of
// 8 GPUs (HBD = node) in 40 scalable units of 32 nodes, one leaf each, five
// spines of 8 leaves; a sixth spine above one leaf of four GB200 NVL72 racks
// (18 nodes x 4 GPUs, each rack marked as its HBD with NVLink 5) and one
// older A100 unit of 32 HGX nodes (HBD = node). Racks hold 4 HGX nodes; the
// rack is the tier just above the node, so the leaf switch and the spine
// sit one tier higher than the node HBD's defaults put them: their links
// and costs are given. The A100 nodes share the node tier's NVLink 4 link
// (a link per subtree comes only with an HBD mark).
//
// Its homogeneous twin, "h100-10k" (the mixed-cluster benchmark's baseline
// of equal capacity, docs/sim.md): the same tree with every node an 8-GPU
// HGX H100 node (HBD = node), each NVL72 rack becoming a rack of 9 such
// nodes, so every rack, leaf and spine holds as many GPUs as in mixed-10k
// (10,784 in all), with one model and one HBD kind.
constexpr const char* kMixedName = "mixed-10k";
constexpr const char* kMixedTwinName = "h100-10k";

Result<Topology> BuildMixed(int gpus_override, bool homogeneous) {
  auto gpus = [&](int own) { return gpus_override > 0 ? gpus_override : own; };
  TopologyBuilder b(homogeneous ? kMixedTwinName : kMixedName, {"node", "rack", "leaf", "spine"},
                    0);
  b.SetTierLink(0, kNvlink4);
  b.SetTierLink(1, kNdrLeaf);  // HGX nodes of a rack meet at the leaf switch
  b.SetTierLink(2, kNdrLeaf);
  b.SetTierLink(3, kNdrSpine);
  b.SetTierLink(4, kAboveSpine);
  b.SetTierCost(2, 4.0);
  b.SetTierCost(3, 16.0);
  constexpr int kRackNodes = 4, kUnitRacks = 8, kSpineUnits = 8, kH100Spines = 5;
  int h100 = 0, a100 = 0;
  // One scalable unit: a leaf of 8 racks of 4 HGX nodes.
  auto unit = [&](const std::string& leaf_name, int spine, const char* node_prefix, int* counter,
                  int node_digits, const char* model) {
    const int leaf = b.AddDomain(leaf_name, 2, spine);
    for (int r = 0; r < kUnitRacks; ++r) {
      const int rack = b.AddDomain(leaf_name + "-r" + std::to_string(r), 1, leaf);
      for (int n = 0; n < kRackNodes; ++n) {
        b.AddNode(Label(node_prefix, (*counter)++, node_digits), rack, gpus(8), model);
      }
    }
  };
  for (int s = 0; s < kH100Spines; ++s) {
    const int spine = b.AddDomain("spine" + std::to_string(s), 3, TopologyBuilder::kTop);
    for (int u = 0; u < kSpineUnits; ++u) {
      unit(Label("su", s * kSpineUnits + u, 2), spine, "h100-", &h100, 4, "H100");
    }
  }
  const int spine = b.AddDomain("spine" + std::to_string(kH100Spines), 3, TopologyBuilder::kTop);
  // In the twin the NVL72 leaf and the A100 unit are units su40 and su41.
  const std::string nvl_leaf_name = homogeneous ? "su40" : "nvl-leaf";
  const int nvl_leaf = b.AddDomain(nvl_leaf_name, 2, spine);
  int gb200 = 0;
  for (int r = 0; r < 4; ++r) {
    const int rack = b.AddDomain(
        (homogeneous ? nvl_leaf_name + "-r" : std::string("nvl72-r")) + std::to_string(r), 1,
        nvl_leaf);
    if (homogeneous) {
      for (int n = 0; n < 9; ++n) b.AddNode(Label("h100-", h100++, 4), rack, gpus(8), "H100");
      continue;
    }
    b.MarkHbd(rack, kNvlink5);
    for (int n = 0; n < 18; ++n) b.AddNode(Label("gb200-", gb200++, 2), rack, gpus(4), "GB200");
  }
  if (homogeneous) {
    unit("su41", spine, "h100-", &h100, 4, "H100");
  } else {
    unit("a100-su", spine, "a100-", &a100, 2, "A100");
  }
  return std::move(b).Build();
}

}  // namespace

Result<Topology> GenerateTopology(std::string_view name, int gpus_per_node) {
  if (gpus_per_node < 0 || gpus_per_node > kMaxGpusPerNode) {
    return Status::Error("--gpus-per-node " + std::to_string(gpus_per_node) + " is outside 1.." +
                         std::to_string(kMaxGpusPerNode));
  }
  for (const Regular& r : Catalog()) {
    if (r.name == name) return BuildRegular(r, gpus_per_node);
  }
  if (name == kMixedName) return BuildMixed(gpus_per_node, false);
  if (name == kMixedTwinName) return BuildMixed(gpus_per_node, true);
  std::string known;
  for (const std::string& n : GeneratorNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::Error("no generator named '" + std::string(name) + "'; known: " + known +
                       " (crux-847 is read from its CSV)");
}

std::vector<std::string> GeneratorNames() {
  std::vector<std::string> names;
  for (const Regular& r : Catalog()) names.push_back(r.name);
  names.push_back(kMixedName);
  names.push_back(kMixedTwinName);
  return names;
}

}  // namespace topo::core
