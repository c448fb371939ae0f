#include "commands/report.hpp"

#include <set>

#include "topo/common/render.hpp"

namespace topo::cli {

std::string Plural(const std::string& noun, size_t count) {
  if (count == 1) return noun;
  if (noun.size() > 1 && noun.back() == 'f') return noun.substr(0, noun.size() - 1) + "ves";
  return noun + "s";
}

std::string DescribeJob(const core::JobSpec& job) {
  const core::Parallelism& p = job.parallelism;
  std::string out = (job.name.empty() ? std::string() : job.name + ": ") +
                    std::to_string(job.gpus) + " GPUs (tp " + std::to_string(p.tp) + ", cp " +
                    std::to_string(p.cp) + ", ep " + std::to_string(p.ep) + ", pp " +
                    std::to_string(p.pp) + ", dp " + std::to_string(p.dp) + "; order " +
                    core::FormatRankOrder(p.order) + ")";
  if (job.gpus_per_node > 0) out += ", " + std::to_string(job.gpus_per_node) + " GPUs per node";
  if (job.spares > 0) out += ", " + std::to_string(job.spares) + " spare nodes";
  return out;
}

std::string DescribeSpan(const core::Topology& topo, const core::Placement& placement) {
  std::string out;
  for (int t = 0; t <= topo.root_tier(); ++t) {
    if (t > 0 && t != topo.hbd_tier() && t < topo.leaf_tier()) continue;
    std::set<core::DomainId> seen;
    for (const core::GpuSlot& s : placement.ranks) seen.insert(topo.Ancestor(s.node, t));
    if (!out.empty()) out += ", ";
    out += std::to_string(seen.size()) + " " + Plural(topo.tier(t).name, seen.size());
    if (seen.size() == 1 && t > topo.leaf_tier()) break;
  }
  return out;
}

std::string DescribeHistogram(const core::Topology& topo, const core::PlacementMetrics& m) {
  std::string out;
  for (core::GroupKind k : core::kAllGroupKinds) {
    const auto& h = m.tier_histogram[static_cast<int>(k)];
    std::string line;
    for (size_t t = 0; t < h.size(); ++t) {
      if (h[t] == 0) continue;
      line += " " + topo.tier(static_cast<int>(t)).name + " " + std::to_string(h[t]);
    }
    if (line.empty()) continue;
    out += "    " + std::string(core::GroupKindName(k)) + " groups by widest tier:" + line + "\n";
  }
  return out;
}

void PrintPlacementReport(std::ostream& out, const core::JobSpec& job,
                          const core::ClusterState& state, const core::Placement& placement,
                          std::string_view policy, bool show_map) {
  const core::Topology& topo = state.topology();
  out << "policy " << policy << ": " << core::PlaceOutcomeName(placement.outcome);
  if (!placement.placed()) {
    out << ": " << placement.reason << "\n";
    return;
  }
  out << " on " << DescribeSpan(topo, placement) << "\n";
  if (!placement.spares.empty()) {
    out << "spares:";
    for (core::NodeId n : placement.spares) out << " " << topo.node(n).name;
    out << "\n";
  }
  if (show_map) {
    out << "\n" << common::RenderPlacementMap(job, state, placement) << "\n";
    out << common::RenderLeafSummary(job, topo, placement, 12) << "\n";
  }
  core::PlacementMetrics m = core::Evaluate(job, topo, placement.ranks);
  using common::FormatMetric;
  out << "metrics: tp_in_hbd " << FormatMetric(m.tp_in_hbd) << "  ep_in_hbd "
      << FormatMetric(m.ep_in_hbd) << "  leaf_span_ratio " << FormatMetric(m.leaf_span_ratio)
      << " (" << m.leaves_spanned << " of min " << m.min_leaves << ")  pod_span_ratio "
      << FormatMetric(m.pod_span_ratio) << " (" << m.pods_spanned << " of min " << m.min_pods
      << ")  comm_cost_ratio " << FormatMetric(m.comm_cost_ratio) << "  required "
      << (m.required_met ? "met" : "VIOLATED") << "\n";
  out << DescribeHistogram(topo, m);
}

}  // namespace topo::cli
