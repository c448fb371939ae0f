// Slurm 25.05's topology.yaml -> topology.conf text (topology_io.hpp). The
// block topology may cover some nodes only (a block topology beside the
// tree): ParseSlurmTopology then marks each block as an HBD and groups the
// other nodes of a leaf switch (docs/formats.md).

#include <yaml-cpp/yaml.h>

#include <set>

#include "topo/common/hostlist.hpp"
#include "topo/common/node_name.hpp"
#include "topo/common/topology_io.hpp"

namespace topo::common {
namespace {

using core::Result;
using core::Status;

constexpr size_t kMaxYamlBytes = 64u << 20;
constexpr size_t kMaxEntries = 1u << 20;

// A string scalar at map[key]; "" when absent. Errors name the entry.
Result<std::string> Scalar(const YAML::Node& map, const char* key, const std::string& where) {
  const YAML::Node v = map[key];
  if (!v) return std::string();
  if (!v.IsScalar()) {
    return Status::Error(where + ": " + key + " must be a string (a name or a hostlist)");
  }
  return v.Scalar();
}

Status CheckKeys(const YAML::Node& map, const std::set<std::string>& known,
                 const std::string& where) {
  for (const auto& kv : map) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
    if (!known.count(key)) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      return Status::Error(where + ": unknown key '" + key + "' (known: " + list + ")");
    }
  }
  return Status::Ok();
}

// The names of a `nodes` hostlist, each a node name (node_name.hpp); and
// every name written into topology.conf lines is one token there (no blank,
// control byte or '='), so no value starts a line or a key of its own.
Status CheckNames(const std::string& value, const char* key, bool nodes, const std::string& at) {
  for (unsigned char c : value) {
    if (c <= 0x20 || c == 0x7f || c == '=') {
      return Status::Error(at + ": " + key + " \"" + ShownName(value) +
                           "\" holds a blank, a control character or '='");
    }
  }
  if (!nodes || value.empty()) return Status::Ok();
  Result<std::vector<std::string>> names = ExpandHostlist(value);
  if (!names.ok()) return Status::Error(at + ": " + key + ": " + names.message());
  for (const std::string& n : names.value()) {
    if (Status st = CheckNodeName(n); !st.ok()) {
      return Status::Error(at + ": " + key + ": " + st.message());
    }
  }
  return Status::Ok();
}

Result<std::string> TreeLines(const YAML::Node& tree, const std::string& where) {
  if (!tree.IsMap()) return Status::Error(where + ": tree must be a map with switches");
  if (Status st = CheckKeys(tree, {"switches"}, where + ".tree"); !st.ok()) return st;
  const YAML::Node switches = tree["switches"];
  if (!switches || !switches.IsSequence() || switches.size() == 0) {
    return Status::Error(where + ".tree: switches must be a non-empty list");
  }
  std::string out;
  for (size_t i = 0; i < switches.size() && i < kMaxEntries; ++i) {
    const std::string at = where + ".tree.switches[" + std::to_string(i) + "]";
    const YAML::Node sw = switches[i];
    if (!sw.IsMap()) return Status::Error(at + " must be a map with switch and nodes or children");
    if (Status st = CheckKeys(sw, {"switch", "nodes", "children", "link_speed"}, at); !st.ok()) {
      return st;
    }
    auto name = Scalar(sw, "switch", at);
    auto nodes = Scalar(sw, "nodes", at);
    auto children = Scalar(sw, "children", at);
    if (!name.ok()) return name.status();
    if (!nodes.ok()) return nodes.status();
    if (!children.ok()) return children.status();
    if (name.value().empty()) return Status::Error(at + ": switch (its name) is missing");
    for (const Status& st : {CheckNames(name.value(), "switch", false, at),
                             CheckNames(nodes.value(), "nodes", true, at),
                             CheckNames(children.value(), "children", false, at)}) {
      if (!st.ok()) return st;
    }
    if (nodes.value().empty() == children.value().empty()) {
      return Status::Error(at + " (" + name.value() +
                           "): give exactly one of nodes (a leaf) or children (switches below)");
    }
    out += "SwitchName=" + name.value() +
           (nodes.value().empty() ? " Switches=" + children.value() : " Nodes=" + nodes.value()) +
           "\n";
  }
  return out;
}

Result<std::string> BlockLines(const YAML::Node& block, const std::string& where) {
  if (!block.IsMap()) return Status::Error(where + ": block must be a map with blocks");
  if (Status st = CheckKeys(block, {"blocks", "block_sizes"}, where + ".block"); !st.ok())
    return st;
  const YAML::Node blocks = block["blocks"];
  if (!blocks || !blocks.IsSequence() || blocks.size() == 0) {
    return Status::Error(where + ".block: blocks must be a non-empty list");
  }
  std::string out;
  for (size_t i = 0; i < blocks.size() && i < kMaxEntries; ++i) {
    const std::string at = where + ".block.blocks[" + std::to_string(i) + "]";
    const YAML::Node b = blocks[i];
    if (!b.IsMap()) return Status::Error(at + " must be a map with block and nodes");
    if (Status st = CheckKeys(b, {"block", "nodes"}, at); !st.ok()) return st;
    auto name = Scalar(b, "block", at);
    auto nodes = Scalar(b, "nodes", at);
    if (!name.ok()) return name.status();
    if (!nodes.ok()) return nodes.status();
    if (name.value().empty() || nodes.value().empty()) {
      return Status::Error(at + ": block (its name) and nodes are both needed");
    }
    for (const Status& st : {CheckNames(name.value(), "block", false, at),
                             CheckNames(nodes.value(), "nodes", true, at)}) {
      if (!st.ok()) return st;
    }
    out += "BlockName=" + name.value() + " Nodes=" + nodes.value() + "\n";
  }
  return out;
}

}  // namespace

Result<std::string> SlurmTopologyYamlToConf(std::string_view text) {
  if (text.size() > kMaxYamlBytes) {
    return Status::Error("topology.yaml is larger than 64 MiB");
  }
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Status::Error("topology.yaml line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (!root.IsSequence() || root.size() == 0) {
    return Status::Error(
        "topology.yaml must be a list of topologies (- topology: NAME, with tree:, block: or "
        "flat:)");
  }
  // The tree and the block topology toposched combines: the cluster default
  // of each kind, else the first.
  int tree = -1, block = -1;
  bool tree_default = false, block_default = false;
  for (size_t i = 0; i < root.size() && i < kMaxEntries; ++i) {
    const YAML::Node e = root[i];
    const std::string at = "topology.yaml entry " + std::to_string(i + 1);
    if (!e.IsMap()) return Status::Error(at + " must be a map (topology: NAME, ...)");
    if (Status st = CheckKeys(e, {"topology", "cluster_default", "tree", "block", "flat"}, at);
        !st.ok()) {
      return st;
    }
    auto name = Scalar(e, "topology", at);
    if (!name.ok()) return name.status();
    if (name.value().empty()) return Status::Error(at + ": topology (its name) is missing");
    const int kinds = (e["tree"] ? 1 : 0) + (e["block"] ? 1 : 0) + (e["flat"] ? 1 : 0);
    if (kinds != 1) {
      return Status::Error(at + " (" + name.value() +
                           "): give exactly one of tree:, block: or flat:");
    }
    bool is_default = false;
    if (const YAML::Node d = e["cluster_default"]) {
      if (!d.IsScalar() || (d.Scalar() != "true" && d.Scalar() != "false")) {
        return Status::Error(at + ": cluster_default must be true or false");
      }
      is_default = d.Scalar() == "true";
    }
    const int idx = static_cast<int>(i);
    if (e["tree"] && (tree < 0 || (is_default && !tree_default))) {
      tree = idx;
      tree_default = is_default;
    }
    if (e["block"] && (block < 0 || (is_default && !block_default))) {
      block = idx;
      block_default = is_default;
    }
  }
  if (tree < 0 && block < 0) {
    return Status::Error(
        "topology.yaml has only flat topologies: toposched needs a tree (switches) or blocks");
  }
  std::string out = "# from topology.yaml\n";
  if (tree >= 0) {
    auto lines = TreeLines(root[tree]["tree"], "topology.yaml entry " + std::to_string(tree + 1));
    if (!lines.ok()) return lines.status();
    out += lines.value();
  }
  if (block >= 0) {
    auto lines =
        BlockLines(root[block]["block"], "topology.yaml entry " + std::to_string(block + 1));
    if (!lines.ok()) return lines.status();
    out += lines.value();
  }
  return out;
}

}  // namespace topo::common
