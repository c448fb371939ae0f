#pragma once
// Topology formats: the project's JSON (schema/topology.schema.json), Slurm's
// topology.conf (tree and block lines), and the Crux/Lingjun CSV. Parsers take
// text, not files, so they are easy to test and fuzz; errors name the line (or
// JSON path) and the problem.

#include <string>
#include <string_view>

#include "topo/core/status.hpp"
#include "topo/core/topology.hpp"

namespace topo::common {

// The most tiers (node tier included) a parsed topology may have. Real
// clusters have fewer than ten; the bound keeps a hostile file from nesting
// domains or chaining switches thousands deep (deep recursion, and JSON
// output that grows with the square of the depth).
inline constexpr int kMaxTiers = 64;

// Version 1; strict (unknown fields, duplicate keys, 8.0 for an integer are
// errors). ParseTopologyJson(TopologyToJson(t)) gives t back exactly.
core::Result<core::Topology> ParseTopologyJson(std::string_view text);
std::string TopologyToJson(const core::Topology& topology);

struct SlurmTopologyOptions {
  // GPUs per node; topology.conf does not say. Must be > 0.
  int gpus_per_node = 8;
  std::string name = "slurm";
};
// SwitchName=S Nodes=HOSTLIST | SwitchName=S Switches=HOSTLIST, optional
// LinkSpeed=..; BlockName=B Nodes=HOSTLIST (one HBD per block). '#' comments.
// Tiers: node, [hbd when there are blocks], leaf, spine, core, level4, ...
// Nodes in no block beside blocks make a mixed cluster: the tier above the
// node is "block", each block is marked as an HBD (TopologyBuilder::MarkHbd),
// the nodes of a leaf switch in no block form one domain "<leaf>.nodes" and
// keep the file's HBD, the node tier.
// A "#toposched: ..." comment written by TopologyToSlurm restores the name,
// tier names, the HBD tier, tier costs and links, GPU count and model, and
// the link inside blocks of a mixed file; it overrides options. Errors name
// the line.
core::Result<core::Topology> ParseSlurmTopology(std::string_view text,
                                                const SlurmTopologyOptions& options = {});
// Slurm 25.05's topology.yaml (a list of `- topology: NAME` entries with
// tree: {switches: [{switch, nodes | children}]}, block: {blocks: [{block,
// nodes}], block_sizes} or flat: true) as topology.conf text for
// ParseSlurmTopology: the cluster-default tree (else the first) and the
// cluster-default block topology (else the first) together, blocks becoming
// HBDs (beside nodes in no block, too: a mixed cluster). Strict: unknown
// keys are errors that name the entry and the key.
core::Result<std::string> SlurmTopologyYamlToConf(std::string_view text);
// Exact round trip through ParseSlurmTopology when the tiers below the leaf
// switches are the node tier and at most one HBD tier, and node GPU counts
// and models are uniform; otherwise the file says what was left out in a
// "# warning:" comment (docs/formats.md). HBD marks on the tier just below
// the leaf switches become blocks beside nodes in no block (a mixed file);
// that round trip is exact when each leaf's unmarked domain is one named
// "<leaf>.nodes" after its blocks and the marks share one link.
std::string TopologyToSlurm(const core::Topology& topology);

// Header ip,DSW,PSW,ASW; one 8-GPU host per row. Tiers node < leaf (the
// (PSW, ASW) pair, named "PSW/ASW") < pod (PSW) < core (DSW); the HBD is the
// node. Domains and hosts keep their order of first appearance. Errors name
// the line.
core::Result<core::Topology> ParseCruxCsv(std::string_view text, int gpus_per_node = 8,
                                          std::string name = "crux-847");

enum class TopologyFormat { kJson, kSlurm, kCrux };
core::Result<TopologyFormat> ParseTopologyFormat(std::string_view name);
// Guesses from content: '{' -> json, "ip,DSW" header -> crux, else slurm.
TopologyFormat SniffTopologyFormat(std::string_view text);

}  // namespace topo::common
