// GET /metrics: Prometheus text, the caller's tenants' series only.

#include <map>

#include "daemon/api/handlers.hpp"
#include "topo/common/render.hpp"

namespace topo::daemon {
namespace {

using core::NodeId;

std::string RenderMetrics(const ServiceState& s, const Caller& caller) {
  std::string out;
  if (s.metrics != nullptr) {
    s.metrics->Render(out,
                      [&](std::string_view tenant) { return SeesTenantSeries(caller, tenant); });
  }
  out += "# HELP topo_event_log_seq The newest event in the durable log.\n";
  out += "# TYPE topo_event_log_seq gauge\ntopo_event_log_seq " +
         std::to_string(s.driver.store().LastSeq()) + "\n";
  out +=
      "# HELP topo_agent_messages_refused_total Agent messages refused (malformed, or about "
      "another node's jobs or GPUs).\n# TYPE topo_agent_messages_refused_total counter\n"
      "topo_agent_messages_refused_total " +
      std::to_string(s.agents->refused_messages()) + "\n";
  if (s.driver.core() == nullptr) return out;
  const core::Topology& topo = *s.driver.topology();
  GpuCounts g = CountGpus(s);
  out += "# HELP topo_gpus GPUs in the cluster by state.\n# TYPE topo_gpus gauge\n";
  for (auto [state, n] : {std::pair<const char*, int>{"allocated", g.allocated},
                          {"free", g.free},
                          {"failed", g.failed},
                          {"unavailable", g.unavailable}}) {
    out += std::string("topo_gpus{state=\"") + state + "\"} " + std::to_string(n) + "\n";
  }
  const core::ClusterState& cluster = s.driver.core()->cluster();
  out += "# HELP topo_domain_gpus GPUs per domain of each tier above the HBD, by state.\n";
  out += "# TYPE topo_domain_gpus gauge\n";
  for (int t = topo.leaf_tier(); t < topo.tier_count(); ++t) {
    if (topo.tier_size(t) > 4096) continue;
    const std::string tier = PromLabel(topo.tier(t).name);
    for (int i = 0; i < topo.tier_size(t); ++i) {
      const core::DomainId d = topo.tier_first(t) + i;
      const std::string labels = "tier=" + tier + ",domain=" + PromLabel(topo.domain(d).name);
      out += "topo_domain_gpus{" + labels + ",state=\"allocated\"} " +
             std::to_string(cluster.busy_gpus(d)) + "\n";
      out += "topo_domain_gpus{" + labels + ",state=\"free\"} " +
             std::to_string(cluster.free_gpus(d)) + "\n";
      out += "topo_domain_gpus{" + labels + ",state=\"failed\"} " +
             std::to_string(cluster.failed_gpus(d)) + "\n";
    }
  }
  std::map<std::string, std::map<std::string, int>> per_tenant;  // tenant -> state -> jobs
  for (const auto& [id, j] : s.driver.core()->jobs()) {
    if (!SeesTenantSeries(caller, j.request.tenant)) continue;
    per_tenant[j.request.tenant][std::string(core::JobStateName(j.state))] += 1;
  }
  out +=
      "# HELP toposched_job_predicted_slowdown A running job's predicted step time on its "
      "placement over its step at the ideal placement of the empty cluster (docs/perf-model.md).\n"
      "# TYPE toposched_job_predicted_slowdown gauge\n";
  for (const auto& [id, j] : s.driver.core()->jobs()) {
    if (j.state != core::JobState::kRunning || !SeesTenantSeries(caller, j.request.tenant)) {
      continue;
    }
    const std::optional<double> slow = PredictedSlowdown(s, j);
    if (!slow) continue;
    out += "toposched_job_predicted_slowdown{job=\"" + std::to_string(id) +
           "\",tenant=" + PromLabel(j.request.tenant) + "} " + common::FormatMetric(*slow, 4) +
           "\n";
  }
  PruneSlowdowns(s);
  out += "# HELP topo_queue_depth Queued jobs per tenant.\n# TYPE topo_queue_depth gauge\n";
  for (const auto& [tenant, states] : per_tenant) {
    auto it = states.find("queued");
    out += "topo_queue_depth{tenant=" + PromLabel(tenant) + "} " +
           std::to_string(it == states.end() ? 0 : it->second) + "\n";
  }
  out += "# HELP topo_jobs Jobs per tenant and state (not yet finished).\n";
  out += "# TYPE topo_jobs gauge\n";
  for (const auto& [tenant, states] : per_tenant) {
    for (const auto& [state, n] : states) {
      out += "topo_jobs{tenant=" + PromLabel(tenant) + ",state=" + PromLabel(state) + "} " +
             std::to_string(n) + "\n";
    }
  }
  std::map<std::string, int> node_states;
  for (NodeId n = 0; n < topo.node_count(); ++n) {
    node_states[std::string(core::NodeStateName(cluster.node_state(n)))] += 1;
  }
  out += "# HELP topo_nodes Nodes by state.\n# TYPE topo_nodes gauge\n";
  for (const auto& [state, n] : node_states) {
    out += "topo_nodes{state=" + PromLabel(state) + "} " + std::to_string(n) + "\n";
  }
  return out;
}

}  // namespace

Answer GetMetrics(const ServiceState& s, const Caller& caller, const Route&) {
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = RenderMetrics(s, caller);
  return r;
}

}  // namespace topo::daemon
