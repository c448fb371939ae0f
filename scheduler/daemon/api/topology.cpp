// /v1/topology: the cluster's map, read and imported.

#include "daemon/api/handlers.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/topology_io.hpp"
#include "topo/core/topology_diff.hpp"

namespace topo::daemon {

using core::Result;
using core::Status;

Answer GetTopology(const ServiceState& s, const Caller&, const Route& route) {
  if (s.driver.topology() == nullptr) return NoTopology();
  std::string format = "json";
  if (auto it = route.query.find("format"); it != route.query.end()) format = it->second;
  if (format != "json" && format != "slurm")
    return Invalid("format must be json or slurm", "format");
  const core::Topology& topo = *s.driver.topology();
  return JsonAnswer(200, Json{{"format", format},
                              {"content", format == "json" ? common::TopologyToJson(topo)
                                                           : common::TopologyToSlurm(topo)}});
}

namespace {

// A TopologyDiff as the API shows it: node names (the first 1,000 of each
// list; the counts are whole).
Json DiffJson(const core::TopologyDiff& d) {
  auto names = [](const std::vector<std::string>& v) {
    Json out = Json::array();
    for (size_t i = 0; i < v.size() && i < 1000; ++i) out.push_back(v[i]);
    return out;
  };
  return Json{{"added", names(d.added)},
              {"removed", names(d.removed)},
              {"moved", names(d.moved)},
              {"resized", names(d.resized)},
              {"changed", names(d.changed)},
              {"counts",
               {{"added", d.added.size()},
                {"removed", d.removed.size()},
                {"moved", d.moved.size()},
                {"resized", d.resized.size()},
                {"changed", d.changed.size()},
                {"domains_added", d.domains_added},
                {"domains_removed", d.domains_removed}}},
              {"tiers_changed", d.tiers_changed}};
}

}  // namespace

// PUT /v1/topology {"content", "format", "gpus_per_node", "dry_run", "drain"}:
// a new epoch of the log on the new topology. With jobs, a change under them:
// the scheduler's state is carried over by node name (SnapshotOnto), refused
// (409) when a job holds a node the change removes. dry_run: the diff and
// whether it would apply, changing nothing. drain: when refused so, the nodes
// the change removes or resizes are drained (graceful: their jobs checkpoint
// and restart elsewhere) for an import once they are empty.
Answer ImportTopology(ServiceState& s, const Caller& caller, const Route& route) {
  if (!caller.cluster_admin()) return AdminOnly("importing a topology");
  Result<Json> parsed = ParseBody(*route.request, false);
  if (!parsed.ok()) return parsed.status();
  const Json& body = parsed.value();
  if (Status e =
          UnknownField(body, {"format", "content", "gpus_per_node", "name", "dry_run", "drain"});
      !e.ok()) {
    return e;
  }
  bool dry_run = false, drain = false;
  for (auto [key, out] : {std::pair<const char*, bool*>{"dry_run", &dry_run}, {"drain", &drain}}) {
    if (auto it = body.find(key); it != body.end()) {
      if (!it->is_boolean()) return Invalid(std::string(key) + " must be true or false", key);
      *out = it->get<bool>();
    }
  }
  if (dry_run && drain) return Invalid("drain and dry_run: choose one", "drain");
  if (!body.contains("content") || !body["content"].is_string()) {
    return Invalid("content is required: the topology file's text", "content");
  }
  const std::string content = body["content"];
  int64_t gpus_per_node = 0;
  if (Status e = IntField(body, "gpus_per_node", 1, 64, gpus_per_node); !e.ok()) return e;
  common::TopologyFormat format = common::SniffTopologyFormat(content);
  if (auto it = body.find("format"); it != body.end()) {
    Result<common::TopologyFormat> f =
        it->is_string() ? common::ParseTopologyFormat(it->get<std::string>())
                        : Result<common::TopologyFormat>(Status::Error("not a string"));
    if (!f.ok()) return Invalid("format must be json, slurm or crux", "format");
    format = f.value();
  }
  Result<core::Topology> topology = Status::Error("unparsed");
  switch (format) {
    case common::TopologyFormat::kJson:
      topology = common::ParseTopologyJson(content);
      break;
    case common::TopologyFormat::kSlurm: {
      common::SlurmTopologyOptions o;
      if (gpus_per_node > 0) o.gpus_per_node = static_cast<int>(gpus_per_node);
      topology = common::ParseSlurmTopology(content, o);
      break;
    }
    case common::TopologyFormat::kCrux:
      topology = common::ParseCruxCsv(content, gpus_per_node > 0 ? int(gpus_per_node) : 8);
      break;
  }
  if (!topology.ok()) return Invalid("content: " + topology.message(), "content");
  std::optional<Json> diff;
  if (s.driver.topology() != nullptr) {
    diff = DiffJson(core::DiffTopologies(*s.driver.topology(), topology.value()));
  }
  if (dry_run) {
    Json out = {{"dry_run", true}, {"diff", diff ? *diff : Json(nullptr)}, {"applies", true}};
    if (s.driver.core() != nullptr) {
      Result<std::string> onto = s.driver.core()->SnapshotOnto(topology.value());
      if (!onto.ok()) {
        out["applies"] = false;
        out["reason"] = onto.message();
      }
    }
    return JsonAnswer(200, out);
  }
  if (drain && s.driver.core() != nullptr) {
    Result<std::string> onto = s.driver.core()->SnapshotOnto(topology.value());
    if (!onto.ok() && onto.status().code() == core::ErrorCode::kConflict) {
      const core::Topology& now = *s.driver.topology();
      const core::TopologyDiff d = core::DiffTopologies(now, topology.value());
      std::vector<core::NodeId> ids;
      std::vector<std::string> names;
      for (const auto* list : {&d.removed, &d.resized}) {
        for (const std::string& name : *list) {
          const core::NodeId n = now.FindNode(name);
          if (n < 0) continue;
          const core::NodeState st = s.driver.core()->cluster().node_state(n);
          if (st == core::NodeState::kDrained || st == core::NodeState::kDraining) continue;
          ids.push_back(n);
          names.push_back(name);
        }
      }
      RequestNodeStates(s, caller, ids, true, "graceful",
                        "leaves the topology (import of " + topology.value().name() + ")");
      s.Audit(caller, "topology.import_drain",
              Json{{"name", topology.value().name()}, {"draining", names.size()}});
      return core::Status::Error(
                 onto.message() + "; draining " + std::to_string(names.size()) +
                     " node(s) the change removes or resizes now (graceful: their jobs "
                     "checkpoint and restart elsewhere): import again once `topo nodes` shows "
                     "them drained",
                 core::ErrorCode::kConflict)
          .WithField("drain");
    }
  }
  if (Status st = s.ImportTopology(std::make_unique<core::Topology>(std::move(topology).value()),
                                   s.Actor(caller));
      !st.ok()) {
    return st;
  }
  const core::Topology& topo = *s.driver.topology();
  Json summary = {
      {"name", topo.name()},
      {"nodes", topo.node_count()},
      {"gpus", topo.total_gpus()},
      {"hbds", topo.tier_size(topo.hbd_tier())},
      {"leaves", topo.tier_size(topo.leaf_tier())},
      {"pods", topo.pod_tier() < topo.tier_count() ? topo.tier_size(topo.pod_tier()) : 1},
      {"gpu_types", topo.gpu_models()},
      {"diff", diff ? *diff : Json(nullptr)}};
  Json audit = summary;
  audit.erase("diff");
  if (diff) audit["diff"] = (*diff)["counts"];  // the names are in the answer, not the audit log
  s.Audit(caller, "topology.import", audit);
  return JsonAnswer(200, summary);
}

}  // namespace topo::daemon
