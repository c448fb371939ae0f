// The Crux/Lingjun topology CSV (alibaba/alibaba-lingjun-dataset-2023,
// data/topo.csv): one host per row, "ip,DSW,PSW,ASW".
//
// Mapping (docs/formats.md): node = host (hbd), leaf = the (PSW, ASW) pair
// named "PSW/ASW" (ASW names repeat across PSWs), pod = PSW, core = DSW.
// Domains and hosts keep the order in which they first appear in the file.

#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "json_util.hpp"
#include "topo/common/node_name.hpp"
#include "topo/common/topology_io.hpp"

namespace topo::common {
namespace {

using core::Result;
using core::Status;

constexpr std::array<std::string_view, 4> kColumns = {"ip", "DSW", "PSW", "ASW"};

std::string LineError(int line, std::string_view problem) {
  return "line " + std::to_string(line) + ": " + std::string(problem);
}
std::string Q(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    fields.push_back(
        Trim(line.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) return fields;
    start = comma + 1;
  }
}

bool SameIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    char y = b[i] >= 'A' && b[i] <= 'Z' ? static_cast<char>(b[i] - 'A' + 'a') : b[i];
    if (x != y) return false;
  }
  return true;
}

struct Group {
  std::string name;
  int line = 0;                  // first appearance
  std::string parent;            // the group it first appeared under
  std::vector<size_t> children;  // indices into the next level down (or hosts)
};

}  // namespace

Result<core::Topology> ParseCruxCsv(std::string_view text, int gpus_per_node, std::string name) {
  if (gpus_per_node < 1 || gpus_per_node > core::kMaxGpusPerNode) {
    return Status::Error("gpus per node must be 1.." + std::to_string(core::kMaxGpusPerNode) +
                         " (got " + std::to_string(gpus_per_node) + ")");
  }
  std::vector<Group> cores, pods, leaves;
  std::unordered_map<std::string, size_t> core_index, pod_index, leaf_index;
  std::vector<std::string> hosts;
  std::unordered_map<std::string, int> host_line;
  // Every name is one domain; a name in two columns would be two domains.
  std::unordered_map<std::string, std::pair<size_t, int>> name_column;  // -> (column, line)
  auto claim = [&](const std::string& value, size_t column, int line) -> Status {
    auto [it, inserted] = name_column.emplace(value, std::make_pair(column, line));
    if (inserted || it->second.first == column) return Status::Ok();
    return Status::Error(LineError(
        line, std::string(kColumns[column]) + " " + Q(value) + " is also used as " +
                  std::string(kColumns[it->second.first]) + " on line " +
                  std::to_string(it->second.second) + "; names must be distinct across columns"));
  };

  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 byte order mark
  int number = 0;
  bool header_seen = false;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = Trim(text.substr(start, end - start));
    start = end + 1;
    ++number;
    if (line.empty()) continue;
    std::vector<std::string_view> fields = Fields(line);
    if (!header_seen) {
      bool ok = fields.size() == kColumns.size();
      for (size_t i = 0; ok && i < fields.size(); ++i)
        ok = SameIgnoringCase(fields[i], kColumns[i]);
      if (!ok) {
        return Status::Error(
            LineError(number, "expected the header \"ip,DSW,PSW,ASW\", got " + Q(line)));
      }
      header_seen = true;
      continue;
    }
    if (fields.size() != kColumns.size()) {
      return Status::Error(LineError(
          number, "expected 4 columns (ip,DSW,PSW,ASW), got " + std::to_string(fields.size())));
    }
    for (size_t i = 0; i < fields.size(); ++i) {
      if (fields[i].empty()) {
        return Status::Error(LineError(number, "empty " + std::string(kColumns[i]) + " field"));
      }
      if (!internal::IsUtf8(fields[i])) {
        return Status::Error(LineError(
            number, std::string(kColumns[i]) + " field is not valid UTF-8 (names must be)"));
      }
    }
    std::string ip(fields[0]), dsw(fields[1]), psw(fields[2]), asw(fields[3]);
    // The ip is the node: a name an agent can register (node_name.hpp).
    if (Status st = CheckNodeName(ip); !st.ok()) {
      return Status::Error(LineError(number, "ip: " + st.message()));
    }
    if (auto [it, inserted] = host_line.emplace(ip, number); !inserted) {
      return Status::Error(LineError(
          number, "duplicate ip " + Q(ip) + " (first on line " + std::to_string(it->second) + ")"));
    }

    std::string leaf = psw + "/" + asw;
    for (auto [value, column] :
         {std::pair<const std::string&, size_t>{ip, 0}, {dsw, 1}, {psw, 2}, {leaf, 3}}) {
      if (Status st = claim(value, column, number); !st.ok()) return st;
    }
    auto [core_it, new_core] = core_index.emplace(dsw, cores.size());
    if (new_core) cores.push_back(Group{dsw, number, "", {}});
    auto [pod_it, new_pod] = pod_index.emplace(psw, pods.size());
    if (new_pod) {
      pods.push_back(Group{psw, number, dsw, {}});
      cores[core_it->second].children.push_back(pod_it->second);
    } else if (pods[pod_it->second].parent != dsw) {
      const Group& pod = pods[pod_it->second];
      return Status::Error(LineError(number, "PSW " + Q(psw) + " is under DSW " + Q(dsw) +
                                                 " here but under DSW " + Q(pod.parent) +
                                                 " on line " + std::to_string(pod.line)));
    }
    auto [leaf_it, new_leaf] = leaf_index.emplace(leaf, leaves.size());
    if (new_leaf) {
      leaves.push_back(Group{leaf, number, psw, {}});
      pods[pod_it->second].children.push_back(leaf_it->second);
    }
    leaves[leaf_it->second].children.push_back(hosts.size());
    hosts.push_back(std::move(ip));
  }
  if (!header_seen) return Status::Error("empty file: expected the header \"ip,DSW,PSW,ASW\"");
  if (hosts.empty()) return Status::Error("no hosts after the header");

  core::TopologyBuilder builder(std::move(name), {"node", "leaf", "pod", "core"}, /*hbd_tier=*/0);
  for (const Group& core_group : cores) {
    int c = builder.AddDomain(core_group.name, 3, core::TopologyBuilder::kTop);
    for (size_t p : core_group.children) {
      int pod = builder.AddDomain(pods[p].name, 2, c);
      for (size_t l : pods[p].children) {
        int leaf = builder.AddDomain(leaves[l].name, 1, pod);
        for (size_t h : leaves[l].children) builder.AddNode(hosts[h], leaf, gpus_per_node);
      }
    }
  }
  Result<core::Topology> topology = std::move(builder).Build();
  if (!topology.ok()) return Status::Error("crux csv: " + topology.message());
  return topology;
}

}  // namespace topo::common
