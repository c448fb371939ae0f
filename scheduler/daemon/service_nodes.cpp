// /v1/nodes: list, show, drain, resume; a GPU's health cleared.

#include <bit>
#include <charconv>
#include <set>

#include "daemon/pki.hpp"
#include "daemon/service_internal.hpp"
#include "topo/common/hostlist.hpp"

namespace topo::daemon {
namespace {

using core::JobId;
using core::NodeId;
using core::Result;

// GPU -> job id for every running job (0: free; -1: a job outside the
// caller's scope).
std::vector<std::vector<JobId>> GpuJobs(const ServiceState& s, const Caller& caller) {
  const core::Topology& topo = *s.driver.topology;
  std::vector<std::vector<JobId>> out(topo.node_count());
  for (NodeId n = 0; n < topo.node_count(); ++n) out[n].assign(topo.node(n).gpus, 0);
  for (const auto& [id, j] : s.driver.core->jobs()) {
    if (j.ranks.empty()) continue;
    const JobId shown = caller.InScope(j.request.tenant) ? id : -1;
    for (const core::GpuSlot& slot : j.ranks) out[slot.node][slot.gpu] = shown;
  }
  return out;
}

Json NodeView(const ServiceState& s, NodeId n, const std::vector<JobId>& gpu_jobs) {
  const core::Topology& topo = *s.driver.topology;
  const core::ClusterState& cluster = s.driver.core->cluster();
  const core::Node& node = topo.node(n);
  Json health = Json::array();
  for (int g = 0; g < node.gpus; ++g)
    health.push_back(core::GpuHealthName(cluster.gpu_health(n, g)));
  auto it = s.driver.node_reason.find(node.name);
  const core::NodeState state = cluster.node_state(n);
  std::string reason = it != s.driver.node_reason.end() ? it->second : "";
  if (reason.empty() && state == core::NodeState::kDown) {
    reason = "not registered: an agent or `topo resume` brings it up";
  }
  return Json{{"name", node.name},
              {"state", core::NodeStateName(state)},
              {"reason", reason},
              {"gpus", node.gpus},
              {"free", std::popcount(cluster.usable_free_mask(n))},
              {"hbd", topo.domain(topo.Ancestor(n, topo.hbd_tier())).name},
              {"leaf", topo.domain(topo.Ancestor(n, topo.leaf_tier())).name},
              {"pod", topo.domain(topo.Ancestor(n, topo.pod_tier())).name},
              {"gpu_health", std::move(health)},
              {"gpu_jobs", gpu_jobs}};
}

// POST /v1/nodes/{name}/gpus/{gpu}/clear (cluster-admin): the GPU is healthy
// again (a kCleared GPU event, logged with the admin as its actor, and an
// audit row). Its node comes back up only where the core's rules let it:
// not when an admin drained it, nor while another GPU of it is failed.
HttpResponse ClearGpu(ServiceState& s, const Caller& caller, const Route& route) {
  const auto& p = route.path;
  if (!caller.cluster_admin()) return AdminOnly("clearing a GPU's health");
  const core::Topology& topo = *s.driver.topology;
  const NodeId n = topo.FindNode(p[1]);
  if (n < 0) {
    return Error(404, "no node named \"" + p[1].substr(0, 100) + "\" (`topo nodes` lists them)");
  }
  const int gpus = topo.node(n).gpus;
  const std::string& text = p[3];
  if (text.empty() || text.size() > 3 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return Error(
        400, "the GPU must be an index, e.g. /v1/nodes/" + p[1].substr(0, 100) + "/gpus/3/clear");
  }
  const int gpu = std::stoi(text);
  if (gpu >= gpus) {
    return Error(404, "node " + p[1] + " has GPUs 0.." + std::to_string(gpus - 1) + "; no GPU " +
                          std::to_string(gpu));
  }
  Body b = ParseBody(*route.request, true);
  if (b.error) return *b.error;
  if (auto e = UnknownField(b.json, {"reason"})) return *e;
  std::string reason;
  if (auto it = b.json.find("reason"); it != b.json.end()) {
    if (!it->is_string() || it->get<std::string>().size() > 1000) {
      return Error(400, "reason must be a string of at most 1000 bytes", "reason");
    }
    reason = it->get<std::string>();
  }
  const core::GpuHealth was = s.driver.core->cluster().gpu_health(n, gpu);
  if (was == core::GpuHealth::kHealthy) {
    return Error(409, p[1] + " GPU " + std::to_string(gpu) +
                          " is healthy; only a failed or degraded GPU is cleared");
  }
  s.driver.Step(core::GpuEvent{n, gpu, core::GpuEventKind::kCleared, 0}, s.Actor(caller));
  Json detail = {{"node", p[1]}, {"gpu", gpu}, {"was", core::GpuHealthName(was)}};
  if (!reason.empty()) detail["reason"] = reason;
  Audit(s, caller, "gpu.clear", detail);
  std::vector<std::vector<JobId>> jobs = GpuJobs(s, caller);
  return JsonResponse(200, NodeView(s, n, jobs[n]));
}

}  // namespace

// ---------------------------------------------------------------- nodes

HttpResponse HandleNodes(ServiceState& s, const Caller& caller, const Route& route) {
  const auto& p = route.path;
  const std::string& m = route.method();
  if (s.driver.core == nullptr) return NoTopology();
  const core::Topology& topo = *s.driver.topology;
  if (p.size() == 1) {
    if (m != "GET") return Error(405, "use GET /v1/nodes");
    if (auto e = UnknownParameter(route, {"domain"})) return *e;
    // ?domain=NAME: only the nodes under that domain (a pod, leaf, HBD or one
    // node), so a page that drills into one part of a large cluster reads
    // only that part.
    NodeId begin = 0, end = topo.node_count();
    if (auto it = route.query.find("domain"); it != route.query.end()) {
      const std::string& name = it->second;
      if (name.empty() || name.size() > 255) {
        return Error(400, "domain must be the name of a domain of the topology (1-255 bytes)",
                     "domain");
      }
      const core::DomainId d = topo.FindDomain(name);
      const NodeId one = topo.FindNode(name);
      if (d != core::kNoDomain && d != topo.root()) {
        begin = topo.domain(d).node_begin;
        end = topo.domain(d).node_end;
      } else if (one >= 0) {
        begin = one;
        end = one + 1;
      } else {
        return Error(404, "no domain named \"" + name.substr(0, 100) +
                              "\" below the root (GET /v1/cluster?by=domain lists them)");
      }
    }
    std::vector<std::vector<JobId>> jobs = GpuJobs(s, caller);
    Json nodes = Json::array();
    for (NodeId n = begin; n < end; ++n) nodes.push_back(NodeView(s, n, jobs[n]));
    return JsonResponse(200, Json{{"nodes", std::move(nodes)}});
  }
  if (p.size() == 2 && m == "POST" && (p[1] == "drain" || p[1] == "resume")) {
    HttpResponse r;
    if (!caller.cluster_admin()) return AdminOnly("draining or resuming nodes");
    Body b = ParseBody(*route.request, false);
    if (b.error) return *b.error;
    if (auto e = UnknownField(b.json, {"nodes", "reason", "mode"})) return *e;
    std::string mode = "graceful";
    if (auto it = b.json.find("mode"); it != b.json.end()) {
      if (p[1] != "drain" || !it->is_string() ||
          (*it != "graceful" && *it != "immediate" && *it != "wait")) {
        return Error(400,
                     p[1] == "drain"
                         ? "mode must be \"graceful\" (checkpoint, stop, restart elsewhere), "
                           "\"immediate\" (stop now, restart from the last checkpoint) or "
                           "\"wait\" (let running jobs finish)"
                         : "mode is for drain only",
                     "mode");
      }
      mode = it->get<std::string>();
    }
    auto nodes_it = b.json.find("nodes");
    if (nodes_it == b.json.end() || !nodes_it->is_string() ||
        nodes_it->get<std::string>().empty()) {
      return Error(400, "nodes must be a hostlist string such as \"n[0-15],n20\"", "nodes");
    }
    std::string reason;
    if (auto it = b.json.find("reason"); it != b.json.end()) {
      if (!it->is_string() || it->get<std::string>().size() > 1000) {
        return Error(400, "reason must be a string of at most 1000 bytes", "reason");
      }
      reason = it->get<std::string>();
    }
    Result<std::vector<std::string>> names =
        common::ExpandHostlist(nodes_it->get<std::string>(), 100000);
    if (!names.ok()) return Error(400, "nodes: " + names.message(), "nodes");
    std::vector<NodeId> ids;
    std::set<NodeId> seen;  // a node named twice is drained once, one event
    for (const std::string& name : names.value()) {
      const NodeId n = topo.FindNode(name);
      if (n < 0) {
        return Error(400,
                     "nodes: no node named \"" + name.substr(0, 100) +
                         "\" in the topology; nothing was changed (`topo nodes` lists them)",
                     "nodes");
      }
      if (seen.insert(n).second) ids.push_back(n);
    }
    const bool drain = p[1] == "drain";
    // Who and when travel with the reason, as Slurm's "Reason=... [user@time]"
    // does: the core keeps a drain's reason until the node is resumed.
    const std::string stamp =
        " [" + caller.user.name + "@" + FormatUtc(s.driver.now / core::kSecond) + "]";
    if (reason.empty()) reason = drain ? "drained" : "resumed";
    for (NodeId n : ids) {
      s.agents->SetDrainMode(topo.node(n).name, drain ? mode : "");
      s.driver.Step(
          core::NodeStateRequested{
              n, drain ? core::NodeState::kDrained : core::NodeState::kUp,
              (drain && mode != "graceful" ? reason + " (" + mode + ")" : reason) + stamp},
          s.Actor(caller));
      if (!s.config.slurm_socket.empty()) {
        // Slurm mode, graceful: the Slurm bridge signals the jobs to
        // checkpoint and moves them when preempt_grace_s has passed
        // (SlurmSync). A resume or another mode ends it.
        if (drain && mode == "graceful") {
          s.slurm_drains[topo.node(n).name] = ServiceState::SlurmDrain{
              s.driver.now + s.config.preempt_grace_s * core::kSecond, reason};
        } else {
          s.slurm_drains.erase(topo.node(n).name);
        }
      }
      if (drain && mode == "immediate" && !s.config.slurm_socket.empty()) {
        // Slurm mode: no agent stops the ranks and reports the node evacuated;
        // the jobs leave at once and the Slurm bridge requeues them onto their
        // new nodes (docs/slurm.md).
        s.driver.Step(core::NodeEvacuated{n, reason + " (immediate)"}, s.Actor(caller));
      }
    }
    std::vector<std::vector<JobId>> jobs = GpuJobs(s, caller);
    Json out = Json::array();
    for (NodeId n : ids) out.push_back(NodeView(s, n, jobs[n]));
    r = JsonResponse(200, Json{{"nodes", std::move(out)}});
    r.route = "/v1/nodes/" + p[1];
    return r;
  }
  if (p.size() == 5 && p[2] == "gpus" && p[4] == "clear" && m == "POST") {
    HttpResponse r = ClearGpu(s, caller, route);
    r.route = "/v1/nodes/{name}/gpus/{gpu}/clear";
    return r;
  }
  if (p.size() == 2 && m == "GET") {
    const NodeId n = topo.FindNode(p[1]);
    if (n < 0) return Error(404, "no node named \"" + p[1].substr(0, 100) + "\"");
    std::vector<std::vector<JobId>> jobs = GpuJobs(s, caller);
    Json out = NodeView(s, n, jobs[n]);
    Result<std::vector<store::GpuHealthRow>> history = s.driver.store->GpuHealthHistory(p[1]);
    if (!history.ok()) return StoreFailed(history.status());
    Json h = Json::array();
    for (const store::GpuHealthRow& row : history.value()) {
      h.push_back({{"seq", row.seq},
                   {"gpu", row.gpu},
                   {"health", core::GpuHealthName(row.health)},
                   {"reason", row.reason},
                   {"time_ms", row.time_ms}});
    }
    out["gpu_history"] = std::move(h);
    HttpResponse r = JsonResponse(200, out);
    r.route = "/v1/nodes/{name}";
    return r;
  }
  return Error(p.size() == 2 ? 405 : 404,
               "use GET /v1/nodes[/NAME], POST /v1/nodes/drain, POST /v1/nodes/resume or POST "
               "/v1/nodes/NAME/gpus/GPU/clear");
}

}  // namespace topo::daemon
