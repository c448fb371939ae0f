#include "topo/common/render.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace topo::common {

using core::DomainId;
using core::NodeId;

std::string FormatMetric(const std::optional<double>& value, int decimals) {
  if (!value.has_value()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, *value);
  return buf;
}

namespace {

char StageChar(int stage) {
  static const char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  return kDigits[stage % 36];
}

// Compresses sorted ranks into "0-7,16-23".
std::string Ranges(const std::vector<int>& sorted) {
  std::string out;
  size_t i = 0;
  while (i < sorted.size()) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(sorted[i]);
    if (j > i) out += "-" + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

bool AnyNodeOut(const core::ClusterState& state, const core::Domain& d) {
  for (NodeId n = d.node_begin; n < d.node_end; ++n) {
    if (state.node_state(n) == core::NodeState::kDown) return true;
  }
  return false;
}

}  // namespace

std::string RenderPlacementMap(const core::JobSpec& job, const core::ClusterState& state,
                               const core::Placement& placement, int width) {
  const core::Topology& topo = state.topology();
  const int hbd = topo.hbd_tier();
  const int leaf = std::min(topo.leaf_tier(), topo.root_tier());
  const int group = std::min(leaf + 1, topo.root_tier());
  core::RankLayout layout(job.parallelism);
  // Stage per HBD (-2: several stages).
  std::map<DomainId, int> stage_of;
  std::set<DomainId> groups_touched;
  for (size_t r = 0; r < placement.ranks.size(); ++r) {
    NodeId n = placement.ranks[r].node;
    DomainId h = topo.Ancestor(n, hbd);
    int stage = layout.Coord(static_cast<int>(r), core::Dim::kPp);
    auto [it, inserted] = stage_of.emplace(h, stage);
    if (!inserted && it->second != stage) it->second = -2;
    groups_touched.insert(topo.Ancestor(n, group));
  }
  std::set<DomainId> spare_hbds;
  for (NodeId n : placement.spares) spare_hbds.insert(topo.Ancestor(n, hbd));
  std::string out;
  for (DomainId g : groups_touched) {
    const core::Domain& gd = topo.domain(g);
    std::string header = topo.tier(gd.tier).name + " " + gd.name + ": ";
    std::string line = header;
    const std::string indent(header.size(), ' ');
    DomainId prev_leaf = core::kNoDomain;
    for (DomainId h = topo.Ancestor(gd.node_begin, hbd); h <= topo.Ancestor(gd.node_end - 1, hbd);
         ++h) {
      const core::Domain& hd = topo.domain(h);
      DomainId l = topo.Ancestor(hd.node_begin, leaf);
      if (prev_leaf != core::kNoDomain && l != prev_leaf) {
        if (static_cast<int>(line.size()) >= width) {
          out += line + "\n";
          line = indent;
        } else {
          line += ' ';
        }
      }
      prev_leaf = l;
      char c;
      auto it = stage_of.find(h);
      if (it != stage_of.end()) {
        c = it->second == -2 ? '*' : StageChar(it->second);
      } else if (spare_hbds.count(h)) {
        c = 's';
      } else if (state.failed_gpus(h) > 0 || AnyNodeOut(state, hd)) {
        c = 'x';
      } else if (state.busy_gpus(h) == 0) {
        c = '.';
      } else if (state.busy_gpus(h) + state.failed_gpus(h) >= hd.gpus) {
        c = '#';
      } else {
        c = '+';
      }
      line += c;
    }
    out += line + "\n";
  }
  out += "legend: 0-9a-z pipeline stage of the job in that " + topo.tier(hbd).name +
         ", * several stages, s spare, . free, + partly used, # full, x failed GPU or node " +
         "down; a space separates each " + topo.tier(leaf).name + "\n";
  return out;
}

std::string RenderLeafSummary(const core::JobSpec& job, const core::Topology& topology,
                              const core::Placement& placement, int max_lines) {
  const int hbd = topology.hbd_tier();
  const int leaf = std::min(topology.leaf_tier(), topology.root_tier());
  core::RankLayout layout(job.parallelism);
  struct LeafUse {
    std::set<DomainId> hbds;
    std::vector<int> ranks;
    std::set<int> stages;
  };
  std::map<DomainId, LeafUse> uses;
  for (size_t r = 0; r < placement.ranks.size(); ++r) {
    NodeId n = placement.ranks[r].node;
    LeafUse& u = uses[topology.Ancestor(n, leaf)];
    u.hbds.insert(topology.Ancestor(n, hbd));
    u.ranks.push_back(static_cast<int>(r));
    u.stages.insert(layout.Coord(static_cast<int>(r), core::Dim::kPp));
  }
  std::string out;
  int lines = 0;
  for (auto& [l, u] : uses) {
    if (lines++ == max_lines) {
      out += "... and " + std::to_string(uses.size() - max_lines) + " more\n";
      break;
    }
    std::sort(u.ranks.begin(), u.ranks.end());
    std::vector<int> stages(u.stages.begin(), u.stages.end());
    char head[160];
    std::snprintf(head, sizeof head, "%-10s %-14s %3zu %-5s ", topology.tier(leaf).name.c_str(),
                  topology.domain(l).name.c_str(), u.hbds.size(), topology.tier(hbd).name.c_str());
    std::string ranks = Ranges(u.ranks);
    if (ranks.size() > 60) ranks = ranks.substr(0, 57) + "...";
    out += std::string(head) + "stages " + Ranges(stages) + "  ranks " + ranks + "\n";
  }
  return out;
}

}  // namespace topo::common
