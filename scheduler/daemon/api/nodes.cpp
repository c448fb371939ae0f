// /v1/nodes: list, show, drain, resume; a GPU's health cleared.

#include <bit>
#include <charconv>
#include <set>

#include "daemon/api/handlers.hpp"
#include "daemon/pki/pki.hpp"
#include "topo/common/hostlist.hpp"
#include "topo/common/user_api.hpp"

namespace topo::daemon {
namespace {

using core::JobId;
using core::NodeId;
using core::Result;
using core::Status;

// GPU -> job id for every running job (0: free; -1: a job outside the
// caller's scope).
std::vector<std::vector<JobId>> GpuJobs(const ServiceState& s, const Caller& caller) {
  const core::Topology& topo = *s.driver.topology();
  std::vector<std::vector<JobId>> out(topo.node_count());
  for (NodeId n = 0; n < topo.node_count(); ++n) out[n].assign(topo.node(n).gpus, 0);
  for (const auto& [id, j] : s.driver.core()->jobs()) {
    if (j.ranks.empty()) continue;
    const JobId shown = caller.InScope(j.request.tenant) ? id : -1;
    for (const core::GpuSlot& slot : j.ranks) out[slot.node][slot.gpu] = shown;
  }
  return out;
}

// The node view (api::NodeView), built here for every answer that shows a
// node.
api::NodeView NodeViewOf(const ServiceState& s, NodeId n, const std::vector<JobId>& gpu_jobs) {
  const core::Topology& topo = *s.driver.topology();
  const core::ClusterState& cluster = s.driver.core()->cluster();
  const core::Node& node = topo.node(n);
  api::NodeView v;
  v.name = node.name;
  v.state = cluster.node_state(n);
  v.reason = s.driver.NodeReason(node.name);
  if (v.reason.empty() && v.state == core::NodeState::kDown) {
    v.reason = "not registered: an agent or `topo resume` brings it up";
  }
  v.gpus = node.gpus;
  v.free = std::popcount(cluster.usable_free_mask(n));
  v.gpu_model = node.gpu_model;
  v.features = node.features;
  // The node's part: its own HBD, leaf and pod on a mixed cluster.
  const core::Topology& view = topo.ViewOf(n);
  v.hbd = topo.domain(topo.Ancestor(n, view.hbd_tier())).name;
  v.leaf = topo.domain(topo.Ancestor(n, view.leaf_tier())).name;
  v.pod = topo.domain(topo.Ancestor(n, view.pod_tier())).name;
  for (int g = 0; g < node.gpus; ++g) v.gpu_health.push_back(cluster.gpu_health(n, g));
  v.gpu_jobs = gpu_jobs;
  const core::NodeSets& sets = s.driver.core()->node_sets();
  v.partitions = sets.PartitionsOf(n);
  if (const core::ReservationConfig* r = sets.ReservationOn(n, s.driver.now())) {
    v.reservation = r->name;
  }
  return v;
}

}  // namespace

Answer ListNodes(const ServiceState& s, const Caller& caller, const Route& route) {
  if (s.driver.core() == nullptr) return NoTopology();
  const core::Topology& topo = *s.driver.topology();
  if (Status e = UnknownParameter(route, {"domain", "gpu_type", "partition"}); !e.ok()) return e;
  // ?partition=NAME: only that partition's nodes.
  const core::PartitionConfig* partition = nullptr;
  if (auto it = route.query.find("partition"); it != route.query.end()) {
    if (Status v = core::ValidateNodeSetName(it->second, "partition"); !v.ok()) {
      return Invalid("partition must be a partition's name (1-64 bytes of A-Z a-z 0-9 . _ -)",
                     "partition");
    }
    partition = s.driver.core()->node_sets().partition(it->second);
    if (partition == nullptr) {
      return NotFound("no partition " + it->second + "; `topo partition list` lists them",
                      "partition");
    }
  }
  // ?gpu_type=MODEL: only the nodes of that accelerator model (as gpu_types
  // matches: ASCII case-insensitive).
  std::optional<std::string> gpu_type;
  if (auto it = route.query.find("gpu_type"); it != route.query.end()) {
    const std::string& want = it->second;
    if (want.empty() || want.size() > core::kMaxSelectionNameBytes) {
      return Invalid("gpu_type must be a GPU model of the cluster (1-64 bytes)", "gpu_type");
    }
    for (const std::string& m : topo.gpu_models()) {
      if (core::SameGpuModel(m, want)) gpu_type = m;
    }
    if (!gpu_type) {
      std::string known;
      for (const std::string& m : topo.gpu_models()) {
        known += (known.empty() ? "" : ", ") + (m.empty() ? std::string("(none)") : m);
      }
      return NotFound(
          "no node has GPU type \"" + want.substr(0, 64) + "\"; the cluster's: " + known,
          "gpu_type");
    }
  }
  // ?domain=NAME: only the nodes under that domain (a pod, leaf, HBD or one
  // node), so a page that drills into one part of a large cluster reads
  // only that part.
  NodeId begin = 0, end = topo.node_count();
  if (auto it = route.query.find("domain"); it != route.query.end()) {
    const std::string& name = it->second;
    if (name.empty() || name.size() > 255) {
      return Invalid("domain must be the name of a domain of the topology (1-255 bytes)", "domain");
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
      return NotFound("no domain named \"" + name.substr(0, 100) +
                          "\" below the root (GET /v1/cluster?by=domain lists them)",
                      "domain");
    }
  }
  std::vector<std::vector<JobId>> jobs = GpuJobs(s, caller);
  api::NodeList list;
  for (NodeId n = begin; n < end; ++n) {
    if (gpu_type && topo.node(n).gpu_model != *gpu_type) continue;
    if (partition != nullptr && !s.driver.core()->node_sets().InPartition(*partition, n)) continue;
    list.nodes.push_back(NodeViewOf(s, n, jobs[n]));
  }
  return TextAnswer(200, api::WriteNodeList(list));
}

Answer ShowNode(const ServiceState& s, const Caller& caller, const Route& route) {
  if (s.driver.core() == nullptr) return NoTopology();
  const std::string& name = route.param("name");
  const NodeId n = s.driver.topology()->FindNode(name);
  if (n < 0) return NotFound("no node named \"" + name.substr(0, 100) + "\"");
  std::vector<std::vector<JobId>> jobs = GpuJobs(s, caller);
  api::NodeView out = NodeViewOf(s, n, jobs[n]);
  Result<std::vector<store::GpuHealthRow>> history = s.driver.store().GpuHealthHistory(name);
  if (!history.ok()) return StoreFailed(history.status());
  out.gpu_history.emplace();
  for (const store::GpuHealthRow& row : history.value()) {
    out.gpu_history->push_back({row.seq, row.gpu, row.health, row.reason, row.time_ms});
  }
  return TextAnswer(200, api::WriteNodeView(out));
}

// Drains (in `mode`) or resumes the nodes, each a NodeStateRequested logged
// with the caller as its actor and a "[user@time]" stamp on the reason.
void RequestNodeStates(ServiceState& s, const Caller& caller, const std::vector<NodeId>& ids,
                       bool drain, const std::string& mode, const std::string& reason) {
  const core::Topology& topo = *s.driver.topology();
  // Who and when travel with the reason, as Slurm's "Reason=... [user@time]"
  // does: the core keeps a drain's reason until the node is resumed.
  const std::string stamp =
      " [" + caller.user.name + "@" + FormatUtc(s.driver.now() / core::kSecond) + "]";
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
            s.driver.now() + s.config.preempt_grace_s * core::kSecond, reason, {}};
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
}

namespace {

// POST /v1/nodes/drain and /v1/nodes/resume {"nodes": HOSTLIST, "reason",
// "mode" (drain only)}.
Answer DrainOrResume(ServiceState& s, const Caller& caller, const Route& route, bool drain) {
  if (!caller.cluster_admin()) return AdminOnly("draining or resuming nodes");
  if (s.driver.core() == nullptr) return NoTopology();
  const core::Topology& topo = *s.driver.topology();
  Result<Json> parsed = ParseBody(*route.request, false);
  if (!parsed.ok()) return parsed.status();
  const Json& body = parsed.value();
  if (Status e = UnknownField(body, {"nodes", "reason", "mode"}); !e.ok()) return e;
  std::string mode = "graceful";
  if (auto it = body.find("mode"); it != body.end()) {
    if (!drain || !it->is_string() || (*it != "graceful" && *it != "immediate" && *it != "wait")) {
      return Invalid(drain ? "mode must be \"graceful\" (checkpoint, stop, restart elsewhere), "
                             "\"immediate\" (stop now, restart from the last checkpoint) or "
                             "\"wait\" (let running jobs finish)"
                           : "mode is for drain only",
                     "mode");
    }
    mode = it->get<std::string>();
  }
  auto nodes_it = body.find("nodes");
  if (nodes_it == body.end() || !nodes_it->is_string() || nodes_it->get<std::string>().empty()) {
    return Invalid("nodes must be a hostlist string such as \"n[0-15],n20\"", "nodes");
  }
  std::string reason;
  if (Status e = ReasonField(body, reason); !e.ok()) return e;
  Result<std::vector<std::string>> names =
      common::ExpandHostlist(nodes_it->get<std::string>(), 100000);
  if (!names.ok()) return Invalid("nodes: " + names.message(), "nodes");
  std::vector<NodeId> ids;
  std::set<NodeId> seen;  // a node named twice is drained once, one event
  for (const std::string& name : names.value()) {
    const NodeId n = topo.FindNode(name);
    if (n < 0) {
      return Invalid("nodes: no node named \"" + name.substr(0, 100) +
                         "\" in the topology; nothing was changed (`topo nodes` lists them)",
                     "nodes");
    }
    if (seen.insert(n).second) ids.push_back(n);
  }
  if (reason.empty()) reason = drain ? "drained" : "resumed";
  RequestNodeStates(s, caller, ids, drain, mode, reason);
  std::vector<std::vector<JobId>> jobs = GpuJobs(s, caller);
  api::NodeList list;
  for (NodeId n : ids) list.nodes.push_back(NodeViewOf(s, n, jobs[n]));
  return TextAnswer(200, api::WriteNodeList(list));
}

}  // namespace

Answer DrainNodes(ServiceState& s, const Caller& caller, const Route& route) {
  return DrainOrResume(s, caller, route, true);
}

Answer ResumeNodes(ServiceState& s, const Caller& caller, const Route& route) {
  return DrainOrResume(s, caller, route, false);
}

// POST /v1/nodes/{name}/gpus/{gpu}/clear (cluster-admin): the GPU is healthy
// again (a kCleared GPU event, logged with the admin as its actor, and an
// audit row). Its node comes back up only where the core's rules let it:
// not when an admin drained it, nor while another GPU of it is failed.
Answer ClearGpu(ServiceState& s, const Caller& caller, const Route& route) {
  if (!caller.cluster_admin()) return AdminOnly("clearing a GPU's health");
  if (s.driver.core() == nullptr) return NoTopology();
  const core::Topology& topo = *s.driver.topology();
  const std::string& name = route.param("name");
  const NodeId n = topo.FindNode(name);
  if (n < 0) {
    return NotFound("no node named \"" + name.substr(0, 100) + "\" (`topo nodes` lists them)");
  }
  const int gpus = topo.node(n).gpus;
  const std::string& text = route.param("gpu");
  if (text.empty() || text.size() > 3 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return Invalid("the GPU must be an index, e.g. /v1/nodes/" + name.substr(0, 100) +
                   "/gpus/3/clear");
  }
  const int gpu = std::stoi(text);
  if (gpu >= gpus) {
    return NotFound("node " + name + " has GPUs 0.." + std::to_string(gpus - 1) + "; no GPU " +
                    std::to_string(gpu));
  }
  Result<Json> body = ParseBody(*route.request, true);
  if (!body.ok()) return body.status();
  if (Status e = UnknownField(body.value(), {"reason"}); !e.ok()) return e;
  std::string reason;
  if (Status e = ReasonField(body.value(), reason); !e.ok()) return e;
  const core::GpuHealth was = s.driver.core()->cluster().gpu_health(n, gpu);
  if (was == core::GpuHealth::kHealthy) {
    return Conflict(name + " GPU " + std::to_string(gpu) +
                    " is healthy; only a failed or degraded GPU is cleared");
  }
  s.driver.Step(core::GpuEvent{n, gpu, core::GpuEventKind::kCleared, 0}, s.Actor(caller));
  Json detail = {{"node", name}, {"gpu", gpu}, {"was", core::GpuHealthName(was)}};
  if (!reason.empty()) detail["reason"] = reason;
  s.Audit(caller, "gpu.clear", detail);
  std::vector<std::vector<JobId>> jobs = GpuJobs(s, caller);
  return TextAnswer(200, api::WriteNodeView(NodeViewOf(s, n, jobs[n])));
}

}  // namespace topo::daemon
