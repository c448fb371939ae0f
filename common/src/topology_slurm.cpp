// Slurm topology.conf (tree and block lines) <-> core::Topology. The subset
// and the mapping are documented in docs/formats.md.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "json_util.hpp"
#include "topo/common/hostlist.hpp"
#include "topo/common/node_name.hpp"
#include "topo/common/topology_io.hpp"

namespace topo::common {
namespace {

using core::Result;
using core::Status;
using core::TopologyBuilder;

constexpr std::string_view kHeaderTag = "#toposched:";

struct SwitchDef {
  std::string name;
  int line = 0;
  bool leaf = false;               // lists Nodes= (level 0)
  std::vector<std::string> nodes;  // leaf switches
  std::vector<std::string> children;
  std::vector<int> child_ids;
  int parent = -1;
  int level = -1;
  int visit = 0;  // 0 new, 1 on the DFS path, 2 done
};

struct BlockDef {
  std::string name;
  int line = 0;
  std::vector<std::string> nodes;
  int leaf = -1;
};

struct Header {
  int line = 0;
  std::optional<std::string> name;
  std::optional<std::vector<std::string>> tiers;
  std::optional<std::string> hbd;
  std::optional<int> gpus;
  std::optional<std::string> model;
  std::optional<std::vector<double>> costs;
  std::optional<std::vector<core::TierLink>> links;  // per tier, then the cluster's
  std::optional<core::TierLink> block_link;          // of every block, in a mixed file
};

// The nodes of a leaf switch that are in no block, beside blocks, form one
// tier-1 domain of this name (the dot keeps it apart from hostlist names).
std::string GroupName(std::string_view leaf) { return std::string(leaf) + ".nodes"; }

// "GBPS:US[:OVERSUBSCRIPTION]" of the header's links= and blocklink=.
std::optional<core::TierLink> ParseHeaderLink(std::string_view item) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t at = item.find(':', start);
    parts.push_back(item.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  core::TierLink link;
  bool ok = parts.size() == 2 || parts.size() == 3;
  double* fields[] = {&link.bandwidth_gbs, &link.latency_us, &link.oversubscription};
  for (size_t i = 0; ok && i < parts.size(); ++i) {
    auto [end, ec] =
        std::from_chars(parts[i].data(), parts[i].data() + parts[i].size(), *fields[i]);
    ok = ec == std::errc() && end == parts[i].data() + parts[i].size() && *fields[i] > 0 &&
         *fields[i] < 1e9;
  }
  if (!ok || link.oversubscription < 1) return std::nullopt;
  return link;
}

std::string FormatHeaderLink(const core::TierLink& link) {
  std::string out =
      internal::FormatDouble(link.bandwidth_gbs) + ":" + internal::FormatDouble(link.latency_us);
  if (link.oversubscription != 1) out += ":" + internal::FormatDouble(link.oversubscription);
  return out;
}

std::string LineError(int line, std::string_view problem) {
  return "line " + std::to_string(line) + ": " + std::string(problem);
}
std::string Q(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::vector<std::string_view> SplitOn(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    parts.push_back(s.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

std::vector<std::string_view> Tokens(std::string_view s) {
  std::vector<std::string_view> tokens;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) ++i;
    size_t start = i;
    while (i < s.size() && s[i] != ' ' && s[i] != '\t' && s[i] != '\r') ++i;
    if (i > start) tokens.push_back(s.substr(start, i - start));
  }
  return tokens;
}

// Header values are percent-encoded where they hold whitespace, '%', ',',
// '=' or '#', so any name survives the round trip.
std::string EncodeHeaderValue(std::string_view s) {
  static const char* const kHex = "0123456789ABCDEF";
  std::string out;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u <= ' ' || u >= 0x7f || c == '%' || c == ',' || c == '=' || c == '#') {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> DecodeHeaderValue(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

class SlurmReader {
 public:
  Status ReadLine(std::string_view raw, int number);
  Result<core::Topology> Finish(const SlurmTopologyOptions& options);

 private:
  Status ReadHeader(std::string_view rest, int number);
  Status ComputeLevel(int s, std::vector<int>& path);
  void AddSwitch(TopologyBuilder& builder, int s, int parent, int tier_offset, int gpus,
                 const std::string& model) const;

  // Set by Finish: whether some node is in no block beside blocks (a mixed
  // file), and each node's block.
  bool mixed_ = false;
  std::unordered_map<std::string, int> node_block_;

  Header header_;
  std::vector<SwitchDef> switches_;
  std::vector<BlockDef> blocks_;
  std::unordered_map<std::string, int> switch_index_;
  std::unordered_map<std::string, int> block_index_;
};

Status SlurmReader::ReadHeader(std::string_view rest, int number) {
  if (header_.line != 0) {
    return Status::Error(LineError(number, "a second #toposched: line (the first is line " +
                                               std::to_string(header_.line) + ")"));
  }
  header_.line = number;
  for (std::string_view token : Tokens(rest)) {
    size_t eq = token.find('=');
    std::string key = Lower(token.substr(0, eq));
    std::string_view value = eq == std::string_view::npos ? "" : token.substr(eq + 1);
    if (eq == std::string_view::npos || value.empty()) {
      return Status::Error(LineError(number, "#toposched: expected key=value, got " + Q(token)));
    }
    auto decode = [&](std::string_view v) -> Result<std::string> {
      std::optional<std::string> d = DecodeHeaderValue(v);
      if (!d || d->empty() || !internal::IsUtf8(*d)) {
        return Status::Error(LineError(number, "#toposched: bad value " + Q(v) + " for " + key));
      }
      return *d;
    };
    if (key == "name") {
      Result<std::string> d = decode(value);
      if (!d.ok()) return d.status();
      header_.name = d.value();
    } else if (key == "tiers") {
      std::vector<std::string> tiers;
      for (std::string_view t : SplitOn(value, ',')) {
        if (t.empty()) return Status::Error(LineError(number, "#toposched: empty tier name"));
        Result<std::string> d = decode(t);
        if (!d.ok()) return d.status();
        if (std::find(tiers.begin(), tiers.end(), d.value()) != tiers.end()) {
          return Status::Error(LineError(number, "#toposched: tier " + Q(t) + " listed twice"));
        }
        tiers.push_back(d.value());
      }
      header_.tiers = std::move(tiers);
    } else if (key == "hbd") {
      Result<std::string> d = decode(value);
      if (!d.ok()) return d.status();
      header_.hbd = d.value();
    } else if (key == "gpus") {
      int gpus = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), gpus);
      if (ec != std::errc() || end != value.data() + value.size() || gpus < 1 ||
          gpus > core::kMaxGpusPerNode) {
        return Status::Error(LineError(number, "#toposched: gpus must be an integer 1.." +
                                                   std::to_string(core::kMaxGpusPerNode) +
                                                   " (got " + Q(value) + ")"));
      }
      header_.gpus = gpus;
    } else if (key == "model") {
      Result<std::string> d = decode(value);
      if (!d.ok()) return d.status();
      header_.model = d.value();
    } else if (key == "costs") {
      std::vector<double> costs;
      for (std::string_view c : SplitOn(value, ',')) {
        double cost = 0;
        auto [end, ec] = std::from_chars(c.data(), c.data() + c.size(), cost);
        if (ec != std::errc() || end != c.data() + c.size() || !std::isfinite(cost) || cost <= 0) {
          return Status::Error(
              LineError(number, "#toposched: costs must be positive numbers (got " + Q(c) + ")"));
        }
        costs.push_back(cost);
      }
      header_.costs = std::move(costs);
    } else if (key == "links") {
      std::vector<core::TierLink> links;
      for (std::string_view item : SplitOn(value, ',')) {
        std::optional<core::TierLink> link = ParseHeaderLink(item);
        if (!link) {
          return Status::Error(
              LineError(number,
                        "#toposched: links are GBPS:US pairs of positive numbers, one per tier "
                        "and one for the cluster (got " +
                            Q(item) + ")"));
        }
        links.push_back(*link);
      }
      header_.links = std::move(links);
    } else if (key == "blocklink") {
      std::optional<core::TierLink> link = ParseHeaderLink(value);
      if (!link) {
        return Status::Error(LineError(
            number,
            "#toposched: blocklink is one GBPS:US[:OVERSUBSCRIPTION] of positive numbers (got " +
                Q(value) + ")"));
      }
      header_.block_link = link;
    } else {
      return Status::Error(LineError(number, "#toposched: unknown key " + Q(key) +
                                                 "; allowed: name, tiers, hbd, gpus, model, "
                                                 "costs, links, blocklink"));
    }
  }
  return Status::Ok();
}

Status SlurmReader::ReadLine(std::string_view raw, int number) {
  size_t first = raw.find_first_not_of(" \t\r");
  if (first != std::string_view::npos && raw.substr(first).starts_with(kHeaderTag)) {
    return ReadHeader(raw.substr(first + kHeaderTag.size()), number);
  }
  std::string_view line = raw.substr(0, raw.find('#'));
  std::vector<std::string_view> tokens = Tokens(line);
  if (tokens.empty()) return Status::Ok();

  std::optional<std::string> switch_name, block_name, nodes_expr, switches_expr;
  std::vector<std::string> seen_keys;
  for (std::string_view token : tokens) {
    size_t eq = token.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return Status::Error(LineError(number, "expected Key=Value, got " + Q(token)));
    }
    std::string key = Lower(token.substr(0, eq));
    std::string value(token.substr(eq + 1));
    if (std::find(seen_keys.begin(), seen_keys.end(), key) != seen_keys.end()) {
      return Status::Error(LineError(number, Q(token.substr(0, eq)) + " is given twice"));
    }
    seen_keys.push_back(key);
    if ((key == "switchname" || key == "blockname" || key == "nodes" || key == "switches") &&
        !internal::IsUtf8(value)) {
      return Status::Error(LineError(number, "the value of " + Q(token.substr(0, eq)) +
                                                 " is not valid UTF-8 (names must be)"));
    }
    if (key == "switchname") {
      switch_name = value;
    } else if (key == "blockname") {
      block_name = value;
    } else if (key == "nodes") {
      nodes_expr = value;
    } else if (key == "switches") {
      switches_expr = value;
    } else if (key == "linkspeed" || key == "blocksizes") {
      // Ignored: link speeds do not change the tree; block sizes are Slurm's
      // scheduling granularity, not part of the topology.
    } else {
      return Status::Error(LineError(
          number, "unknown key " + Q(token.substr(0, eq)) +
                      "; allowed: SwitchName, Switches, Nodes, LinkSpeed, BlockName, BlockSizes"));
    }
  }
  if (switch_name && block_name) {
    return Status::Error(LineError(number, "a line is either SwitchName= or BlockName=, not both"));
  }
  if (!switch_name && !block_name) {
    if (nodes_expr || switches_expr) {
      return Status::Error(LineError(number, "Nodes=/Switches= without SwitchName= or BlockName="));
    }
    return Status::Ok();  // e.g. a lone BlockSizes= line
  }
  const std::string& name = switch_name ? *switch_name : *block_name;
  if (name.empty()) return Status::Error(LineError(number, "empty switch or block name"));

  auto expand = [&](const std::string& expr,
                    std::string_view key) -> Result<std::vector<std::string>> {
    Result<std::vector<std::string>> names = ExpandHostlist(expr);
    if (!names.ok()) {
      return Status::Error(LineError(number, std::string(key) + "=: " + names.message()));
    }
    if (names.value().empty()) {
      return Status::Error(LineError(number, std::string(key) + "= is empty"));
    }
    if (key == "Nodes") {
      // A name no agent could register, nor an API filter name (node_name.hpp).
      for (const std::string& n : names.value()) {
        if (Status st = CheckNodeName(n); !st.ok()) {
          return Status::Error(LineError(number, "Nodes=: " + st.message()));
        }
      }
    }
    return names;
  };

  if (block_name) {
    if (switches_expr)
      return Status::Error(LineError(number, "a block lists Nodes=, not Switches="));
    if (!nodes_expr) return Status::Error(LineError(number, "block " + Q(name) + " has no Nodes="));
    if (auto it = block_index_.find(name); it != block_index_.end()) {
      return Status::Error(LineError(number, "duplicate block " + Q(name) + " (first on line " +
                                                 std::to_string(blocks_[it->second].line) + ")"));
    }
    Result<std::vector<std::string>> nodes = expand(*nodes_expr, "Nodes");
    if (!nodes.ok()) return nodes.status();
    block_index_.emplace(name, static_cast<int>(blocks_.size()));
    blocks_.push_back(BlockDef{name, number, std::move(nodes).value(), -1});
    return Status::Ok();
  }

  if (nodes_expr && switches_expr) {
    return Status::Error(LineError(number, "switch " + Q(name) +
                                               " lists both Nodes= and Switches=; a switch holds "
                                               "either nodes (a leaf) or switches"));
  }
  if (!nodes_expr && !switches_expr) {
    return Status::Error(
        LineError(number, "switch " + Q(name) + " has neither Nodes= nor Switches="));
  }
  if (auto it = switch_index_.find(name); it != switch_index_.end()) {
    return Status::Error(LineError(number, "duplicate switch " + Q(name) + " (first on line " +
                                               std::to_string(switches_[it->second].line) + ")"));
  }
  Result<std::vector<std::string>> members =
      expand(nodes_expr ? *nodes_expr : *switches_expr, nodes_expr ? "Nodes" : "Switches");
  if (!members.ok()) return members.status();
  SwitchDef sw;
  sw.name = name;
  sw.line = number;
  sw.leaf = nodes_expr.has_value();
  (sw.leaf ? sw.nodes : sw.children) = std::move(members).value();
  switch_index_.emplace(name, static_cast<int>(switches_.size()));
  switches_.push_back(std::move(sw));
  return Status::Ok();
}

Status SlurmReader::ComputeLevel(int s, std::vector<int>& path) {
  SwitchDef& sw = switches_[s];
  if (sw.visit == 2) return Status::Ok();
  if (sw.visit == 1) {
    std::string cycle;
    auto start = std::find(path.begin(), path.end(), s);
    for (auto it = start; it != path.end(); ++it) cycle += switches_[*it].name + " -> ";
    return Status::Error(LineError(sw.line, "switches form a cycle: " + cycle + sw.name));
  }
  // Switch levels: kMaxTiers less the node tier and an HBD tier. Checked on
  // the way down too, so a long chain of switches cannot recurse deeply.
  constexpr int kMaxLevels = kMaxTiers - 2;
  auto too_deep = [&] {
    return Status::Error(LineError(sw.line, "switch " + Q(sw.name) + " is more than " +
                                                std::to_string(kMaxLevels) +
                                                " switch levels deep; a topology has at most " +
                                                std::to_string(kMaxTiers) + " tiers"));
  };
  if (path.size() >= static_cast<size_t>(kMaxLevels)) return too_deep();
  sw.visit = 1;
  path.push_back(s);
  int level = 0;
  if (!sw.leaf) {
    int first_child = -1;
    for (int c : sw.child_ids) {
      if (Status st = ComputeLevel(c, path); !st.ok()) return st;
      if (first_child < 0) {
        first_child = c;
      } else if (switches_[c].level != switches_[first_child].level) {
        return Status::Error(LineError(
            sw.line, "switch " + Q(sw.name) +
                         " has children at different levels: " + Q(switches_[first_child].name) +
                         " is at level " + std::to_string(switches_[first_child].level) + " but " +
                         Q(switches_[c].name) + " is at level " +
                         std::to_string(switches_[c].level) +
                         " (leaf switches are level 0); every child of a switch must be at the "
                         "same level"));
      }
    }
    level = switches_[first_child].level + 1;
    if (level >= kMaxLevels) return too_deep();
  }
  path.pop_back();
  switches_[s].level = level;
  switches_[s].visit = 2;
  return Status::Ok();
}

void SlurmReader::AddSwitch(TopologyBuilder& builder, int s, int parent, int tier_offset, int gpus,
                            const std::string& model) const {
  const SwitchDef& sw = switches_[s];
  int handle = builder.AddDomain(sw.name, tier_offset + sw.level, parent);
  if (!sw.leaf) {
    for (int c : sw.child_ids) AddSwitch(builder, c, handle, tier_offset, gpus, model);
    return;
  }
  if (blocks_.empty()) {
    for (const std::string& n : sw.nodes) builder.AddNode(n, handle, gpus, model);
    return;
  }
  for (const BlockDef& block : blocks_) {
    if (block.leaf != s) continue;
    int block_handle = builder.AddDomain(block.name, 1, handle);
    // Beside nodes in no block, each block is an HBD of its own.
    if (mixed_) builder.MarkHbd(block_handle, header_.block_link);
    for (const std::string& n : block.nodes) builder.AddNode(n, block_handle, gpus, model);
  }
  // The leaf's nodes in no block, after its blocks, in the leaf's order.
  int group = -1;
  for (const std::string& n : sw.nodes) {
    if (node_block_.count(n)) continue;
    if (group < 0) group = builder.AddDomain(GroupName(sw.name), 1, handle);
    builder.AddNode(n, group, gpus, model);
  }
}

Result<core::Topology> SlurmReader::Finish(const SlurmTopologyOptions& options) {
  if (options.gpus_per_node < 1 || options.gpus_per_node > core::kMaxGpusPerNode) {
    return Status::Error("gpus per node must be 1.." + std::to_string(core::kMaxGpusPerNode) +
                         " (got " + std::to_string(options.gpus_per_node) + ")");
  }
  if (switches_.empty()) {
    return Status::Error("no SwitchName= lines: topology.conf needs at least one switch");
  }

  // Names: one namespace for switches, blocks and nodes.
  std::unordered_map<std::string, int> node_leaf;  // node -> leaf switch
  for (size_t s = 0; s < switches_.size(); ++s) {
    const SwitchDef& sw = switches_[s];
    for (const std::string& n : sw.nodes) {
      auto [it, inserted] = node_leaf.emplace(n, static_cast<int>(s));
      if (!inserted) {
        const SwitchDef& other = switches_[it->second];
        return Status::Error(LineError(
            sw.line, it->second == static_cast<int>(s)
                         ? "node " + Q(n) + " is listed twice under switch " + Q(sw.name)
                         : "node " + Q(n) + " is under switch " + Q(other.name) + " (line " +
                               std::to_string(other.line) + ") and under switch " + Q(sw.name) +
                               "; a node hangs off one leaf switch"));
      }
      if (auto sw_it = switch_index_.find(n); sw_it != switch_index_.end()) {
        return Status::Error(
            LineError(sw.line, "node " + Q(n) + " has the name of switch " + Q(n) + " (line " +
                                   std::to_string(switches_[sw_it->second].line) + ")"));
      }
    }
  }
  for (const BlockDef& block : blocks_) {
    if (switch_index_.count(block.name) || node_leaf.count(block.name)) {
      return Status::Error(
          LineError(block.line, "block " + Q(block.name) + " has the name of a switch or node"));
    }
  }

  // Link parents and children.
  for (size_t s = 0; s < switches_.size(); ++s) {
    SwitchDef& sw = switches_[s];
    for (const std::string& child : sw.children) {
      auto it = switch_index_.find(child);
      if (it == switch_index_.end()) {
        return Status::Error(LineError(sw.line, "switch " + Q(sw.name) + " lists switch " +
                                                    Q(child) + ", which is never defined"));
      }
      SwitchDef& c = switches_[it->second];
      if (c.parent >= 0) {
        const SwitchDef& other = switches_[c.parent];
        return Status::Error(LineError(
            sw.line, c.parent == static_cast<int>(s)
                         ? "switch " + Q(child) + " is listed twice under switch " + Q(sw.name)
                         : "switch " + Q(child) + " is listed under switch " + Q(other.name) +
                               " (line " + std::to_string(other.line) + ") and under switch " +
                               Q(sw.name) + "; a switch has one parent"));
      }
      c.parent = static_cast<int>(s);
      sw.child_ids.push_back(it->second);
    }
  }

  std::vector<int> path;
  for (size_t s = 0; s < switches_.size(); ++s) {
    if (Status st = ComputeLevel(static_cast<int>(s), path); !st.ok()) return st;
  }
  std::vector<int> tops;
  int top_level = 0;
  for (size_t s = 0; s < switches_.size(); ++s) {
    if (switches_[s].parent < 0) tops.push_back(static_cast<int>(s));
    top_level = std::max(top_level, switches_[s].level);
  }
  for (int t : tops) {
    if (switches_[t].level != top_level) {
      return Status::Error(LineError(
          switches_[t].line, "switch " + Q(switches_[t].name) + " has no parent but is at level " +
                                 std::to_string(switches_[t].level) +
                                 " while the tree's top is level " + std::to_string(top_level) +
                                 "; every switch without a parent must be at the top level"));
    }
  }

  // Blocks: each sits under one leaf. Nodes in no block beside blocks make a
  // mixed file: the blocks are HBDs, the other nodes keep the file's HBD.
  std::unordered_map<std::string, int>& node_block = node_block_;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    BlockDef& block = blocks_[b];
    std::string first_node;
    for (const std::string& n : block.nodes) {
      auto it = node_leaf.find(n);
      if (it == node_leaf.end()) {
        return Status::Error(LineError(block.line, "block " + Q(block.name) + " lists node " +
                                                       Q(n) + ", which is under no switch"));
      }
      auto [bit, inserted] = node_block.emplace(n, static_cast<int>(b));
      if (!inserted) {
        return Status::Error(LineError(
            block.line, "node " + Q(n) + " is in block " + Q(blocks_[bit->second].name) +
                            " (line " + std::to_string(blocks_[bit->second].line) +
                            ") and in block " + Q(block.name) + "; a node is in one block"));
      }
      if (block.leaf < 0) {
        block.leaf = it->second;
        first_node = n;
      } else if (block.leaf != it->second) {
        return Status::Error(
            LineError(block.line, "block " + Q(block.name) + " spans switch " +
                                      Q(switches_[block.leaf].name) + " (node " + Q(first_node) +
                                      ") and switch " + Q(switches_[it->second].name) + " (node " +
                                      Q(n) + "); a block must sit under one leaf switch"));
      }
    }
  }
  if (!blocks_.empty()) {
    for (const SwitchDef& sw : switches_) {
      bool in_no_block = false;
      for (const std::string& n : sw.nodes) in_no_block = in_no_block || !node_block.count(n);
      if (!in_no_block) continue;
      mixed_ = true;
      const std::string group = GroupName(sw.name);
      std::string clash;
      if (auto it = switch_index_.find(group); it != switch_index_.end()) {
        clash = "switch " + Q(group) + " (line " + std::to_string(switches_[it->second].line) + ")";
      } else if (auto bit = block_index_.find(group); bit != block_index_.end()) {
        clash = "block " + Q(group) + " (line " + std::to_string(blocks_[bit->second].line) + ")";
      } else if (auto nit = node_leaf.find(group); nit != node_leaf.end()) {
        clash = "node " + Q(group) + " (line " + std::to_string(switches_[nit->second].line) + ")";
      }
      if (!clash.empty()) {
        return Status::Error(LineError(
            sw.line, "switch " + Q(sw.name) + " has nodes in no block, which toposched groups as " +
                         Q(group) + ", but that is the name of " + clash + "; rename that one"));
      }
    }
  }
  if (header_.block_link && !mixed_) {
    return Status::Error(
        LineError(header_.line,
                  "#toposched: blocklink is the link inside blocks beside nodes in no block; "
                  "this file has " +
                      std::string(blocks_.empty() ? "no blocks"
                                                  : "every node in a block (give the HBD "
                                                    "tier's link in links=)")));
  }

  // Tiers: node, [hbd, or block in a mixed file], then one per switch level.
  int tier_offset = blocks_.empty() ? 1 : 2;
  std::vector<std::string> tiers = {"node"};
  if (!blocks_.empty()) tiers.push_back(mixed_ ? "block" : "hbd");
  static const char* const kLevelNames[] = {"leaf", "spine", "core"};
  for (int level = 0; level <= top_level; ++level) {
    tiers.push_back(level < 3 ? kLevelNames[level] : "level" + std::to_string(level + 1));
  }
  int hbd = blocks_.empty() || mixed_ ? 0 : 1;
  int gpus = header_.gpus.value_or(options.gpus_per_node);
  std::string name = header_.name.value_or(options.name);
  if (header_.tiers) {
    if (header_.tiers->size() != tiers.size()) {
      return Status::Error(LineError(
          header_.line, "#toposched: tiers lists " + std::to_string(header_.tiers->size()) +
                            " tiers but the file defines " + std::to_string(tiers.size()) +
                            " (node" + (blocks_.empty() ? "" : ", block") + " and " +
                            std::to_string(top_level + 1) + " switch levels)"));
    }
    tiers = *header_.tiers;
  }
  if (header_.hbd) {
    auto it = std::find(tiers.begin(), tiers.end(), *header_.hbd);
    if (it == tiers.end()) {
      return Status::Error(LineError(
          header_.line, "#toposched: hbd " + Q(*header_.hbd) + " is not one of the tiers"));
    }
    hbd = static_cast<int>(it - tiers.begin());
  }
  if (header_.costs && header_.costs->size() != tiers.size()) {
    return Status::Error(
        LineError(header_.line, "#toposched: costs lists " + std::to_string(header_.costs->size()) +
                                    " values for " + std::to_string(tiers.size()) + " tiers"));
  }

  if (header_.links && header_.links->size() != tiers.size() + 1) {
    return Status::Error(
        LineError(header_.line, "#toposched: links lists " + std::to_string(header_.links->size()) +
                                    " values for " + std::to_string(tiers.size()) +
                                    " tiers and the cluster (" + std::to_string(tiers.size() + 1) +
                                    " expected)"));
  }

  TopologyBuilder builder(name, tiers, hbd);
  if (header_.links) {
    for (size_t t = 0; t < header_.links->size(); ++t) {
      builder.SetTierLink(static_cast<int>(t), (*header_.links)[t]);
    }
  }
  if (header_.costs) {
    for (size_t t = 0; t < tiers.size(); ++t) {
      builder.SetTierCost(static_cast<int>(t), (*header_.costs)[t]);
    }
  }
  std::string model = header_.model.value_or("");
  for (int t : tops) AddSwitch(builder, t, TopologyBuilder::kTop, tier_offset, gpus, model);
  Result<core::Topology> topology = std::move(builder).Build();
  if (!topology.ok()) return Status::Error("topology.conf: " + topology.message());
  return topology;
}

std::vector<std::string> NodeNames(const core::Topology& topology, const core::Domain& d) {
  std::vector<std::string> names;
  for (core::NodeId n = d.node_begin; n < d.node_end; ++n) {
    names.push_back(topology.node(n).name);
  }
  return names;
}

}  // namespace

Result<core::Topology> ParseSlurmTopology(std::string_view text,
                                          const SlurmTopologyOptions& options) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 byte order mark
  SlurmReader reader;
  int number = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    ++number;
    if (Status s = reader.ReadLine(text.substr(start, end - start), number); !s.ok()) return s;
    start = end + 1;
  }
  return reader.Finish(options);
}

std::string TopologyToSlurm(const core::Topology& topology) {
  const int tier_count = topology.tier_count();
  // Domains marked as HBDs (a mixed cluster), and whether they share a tier.
  std::vector<core::DomainId> marks;
  bool one_mark_tier = true;
  for (core::DomainId d = topology.node_count(); d < topology.root(); ++d) {
    if (!topology.hbd_marked(d)) continue;
    one_mark_tier = marks.empty() || topology.domain(d).tier == topology.domain(marks[0]).tier;
    marks.push_back(d);
    if (!one_mark_tier) break;
  }
  const int mark_tier = marks.empty() || !one_mark_tier ? -1 : topology.domain(marks[0]).tier;
  bool same_mark_links = true;
  for (core::DomainId d : marks) {
    same_mark_links = same_mark_links && topology.hbd_link(d) == topology.hbd_link(marks[0]);
  }
  // Every domain of one tier marked (nodes of several models, or HBD links
  // that differ, keep the topology from being that one part): that tier is
  // every node's HBD, and the tiers of a part's view say the rest.
  const bool all_marked =
      mark_tier >= 1 && static_cast<int>(marks.size()) == topology.tier_size(mark_tier);
  const core::Topology& tier_source =
      all_marked && topology.part_count() > 1 ? topology.PartView(0) : topology;
  const int hbd = all_marked ? mark_tier : topology.hbd_tier();
  // Marks on one tier between the node tier and the leaf switches, other
  // than the HBD tier, with some domain of that tier unmarked, are a mixed
  // file: the marked domains become BlockName= lines (each an HBD), the
  // nodes of the others are in no block (they keep the file's HBD), and the
  // reader groups those of a leaf as <leaf>.nodes. The file's HBD may not sit
  // between the node tier and the blocks (topology.conf leaves those tiers
  // out), and no name written may be a <leaf>.nodes the reader makes.
  bool mixed = mark_tier >= 1 && mark_tier < tier_count - 1 && !all_marked && mark_tier != hbd &&
               (hbd == 0 || hbd > mark_tier);
  for (int i = 0; mixed && i < topology.tier_size(mark_tier + 1); ++i) {
    const core::DomainId leaf = topology.tier_first(mark_tier + 1) + i;
    bool unmarked = false;
    for (core::DomainId c : topology.children(leaf)) unmarked = unmarked || !topology.hbd_marked(c);
    if (!unmarked) continue;
    const std::string group = GroupName(topology.domain(leaf).name);
    const core::DomainId named = topology.FindDomain(group);
    mixed = topology.FindNode(group) < 0 &&
            (named == core::kNoDomain || topology.domain(named).tier < mark_tier ||
             (topology.domain(named).tier == mark_tier && !topology.hbd_marked(named)));
  }
  // Otherwise an HBD between the node and the leaf switches becomes
  // BlockName= lines; an HBD at the node tier, or at the top, needs none
  // (the header's hbd= says which tier it is).
  const int block_tier = mixed ? mark_tier : hbd;
  const bool blocks = mixed || (hbd >= 1 && hbd < tier_count - 1);
  const int first_switch = blocks ? block_tier + 1 : 1;
  std::vector<int> kept = {0};
  if (blocks) kept.push_back(block_tier);
  for (int t = first_switch; t < tier_count; ++t) kept.push_back(t);
  const int kept_hbd = !mixed ? (blocks ? 1 : hbd) : hbd == 0 ? 0 : hbd - block_tier + 1;

  std::string tiers, costs, links;
  bool default_costs = true, default_links = true;
  kept.push_back(topology.root_tier());
  for (size_t i = 0; i < kept.size(); ++i) {
    const core::Tier& tier = tier_source.tier(kept[i]);
    const core::TierLink def = core::DefaultTierLink(static_cast<int>(i), kept_hbd);
    links += (i ? "," : "") + internal::FormatDouble(tier.link.bandwidth_gbs) + ":" +
             internal::FormatDouble(tier.link.latency_us);
    if (tier.link.oversubscription != 1) {
      links += ":" + internal::FormatDouble(tier.link.oversubscription);
    }
    default_links = default_links && tier.link.bandwidth_gbs == def.bandwidth_gbs &&
                    tier.link.latency_us == def.latency_us &&
                    tier.link.oversubscription == def.oversubscription;
    if (i + 1 == kept.size()) break;  // the root has no name or cost here
    tiers += (i ? "," : "") + EncodeHeaderValue(tier.name);
    costs += (i ? "," : "") + internal::FormatDouble(tier.cost);
    default_costs =
        default_costs && tier.cost == core::DefaultTierCost(static_cast<int>(i), kept_hbd);
  }
  std::string out = std::string(kHeaderTag) + " name=" + EncodeHeaderValue(topology.name()) +
                    " tiers=" + tiers + " hbd=" + EncodeHeaderValue(topology.tier(hbd).name);
  bool uniform_gpus = true, uniform_model = true;
  for (int n = 1; n < topology.node_count(); ++n) {
    uniform_gpus = uniform_gpus && topology.node(n).gpus == topology.node(0).gpus;
    uniform_model = uniform_model && topology.node(n).gpu_model == topology.node(0).gpu_model;
  }
  if (topology.node_count() > 0 && uniform_gpus) {
    out += " gpus=" + std::to_string(topology.node(0).gpus);
  }
  if (topology.node_count() > 0 && uniform_model && !topology.node(0).gpu_model.empty()) {
    out += " model=" + EncodeHeaderValue(topology.node(0).gpu_model);
  }
  if (!default_costs) out += " costs=" + costs;
  if (!default_links) out += " links=" + links;
  // One link inside every block; the reader gives it to each.
  if (mixed) {
    if (std::optional<core::TierLink> link = topology.hbd_link(marks[0])) {
      out += " blocklink=" + FormatHeaderLink(*link);
    }
  }
  out += "\n";
  if (blocks && block_tier > 1) {
    out += std::string("# warning: tiers between the node and the ") + (mixed ? "block" : "HBD") +
           " tier are not expressible in topology.conf and were left out:";
    for (int t = 1; t < block_tier; ++t) out += " " + topology.tier(t).name;
    out += "\n";
  }
  if (mixed) {
    if (!same_mark_links) {
      out +=
          "# warning: the blocks' HBD links differ, and topology.conf gives one for all "
          "(blocklink=, the first block's)\n";
    }
    // The reader groups a leaf's nodes in no block as one domain named
    // <leaf>.nodes after the leaf's blocks: other unmarked domains are lost.
    bool groups_kept = true;
    for (int i = 0; groups_kept && i < topology.tier_size(first_switch); ++i) {
      const core::DomainId leaf = topology.tier_first(first_switch) + i;
      std::span<const core::DomainId> kids = topology.children(leaf);
      for (size_t k = 0; groups_kept && k < kids.size(); ++k) {
        if (topology.hbd_marked(kids[k])) continue;
        groups_kept = k + 1 == kids.size() &&
                      topology.domain(kids[k]).name == GroupName(topology.domain(leaf).name);
      }
    }
    if (!groups_kept) {
      out += "# warning: domains of tier " + Q(topology.tier(block_tier).name) +
             " that are not HBDs are not expressible in topology.conf: their nodes are written in "
             "no block, and the reader groups them as one <leaf>.nodes domain per leaf switch, "
             "after its blocks\n";
    }
  } else if (all_marked) {
    // Every node's HBD is the marked tier: only differing links are lost.
    if (!same_mark_links) {
      out +=
          "# warning: the HBDs' links differ, and topology.conf gives one per tier (links=, "
          "those of the first part)\n";
    }
  } else if (!marks.empty()) {
    out +=
        "# warning: the HBD marks of this topology (per-subtree HBDs) are not expressible "
        "in topology.conf and were left out: every node has the HBD tier " +
        Q(topology.tier(hbd).name) + "\n";
  }
  if (topology.node_count() > 0 && !uniform_gpus) {
    out +=
        "# warning: nodes have different GPU counts, which topology.conf cannot say; the "
        "reader gives every node the same count\n";
  }
  bool features = false;
  for (int n = 0; n < topology.node_count(); ++n) {
    features = features || !topology.node(n).features.empty();
  }
  if (!uniform_model || features) {
    out +=
        "# warning: per-node GPU models and features are not expressible in topology.conf "
        "and were left out\n";
  }
  if (tier_count == 1) {
    out +=
        "# warning: this topology has only the node tier; topology.conf needs at least one "
        "switch\n";
  }
  if (blocks) {
    for (int i = 0; i < topology.tier_size(block_tier); ++i) {
      const core::DomainId id = topology.tier_first(block_tier) + i;
      if (mixed && !topology.hbd_marked(id)) continue;
      const core::Domain& d = topology.domain(id);
      out += "BlockName=" + d.name + " Nodes=" + CompressHostlist(NodeNames(topology, d)) + "\n";
    }
  }
  for (int t = first_switch; t < tier_count; ++t) {
    for (int i = 0; i < topology.tier_size(t); ++i) {
      core::DomainId id = topology.tier_first(t) + i;
      const core::Domain& d = topology.domain(id);
      if (t == first_switch) {
        out += "SwitchName=" + d.name + " Nodes=" + CompressHostlist(NodeNames(topology, d)) + "\n";
      } else {
        std::vector<std::string> children;
        for (core::DomainId c : topology.children(id)) children.push_back(topology.domain(c).name);
        out += "SwitchName=" + d.name + " Switches=" + CompressHostlist(children) + "\n";
      }
    }
  }
  return out;
}

}  // namespace topo::common
