// /v1/topology: the cluster's map, read and imported.

#include "daemon/api/handlers.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/topology_io.hpp"

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

// PUT /v1/topology {"content", "format", "gpus_per_node", "name"}: a new
// epoch of the log on the new topology, while no job is queued, held or
// running.
Answer ImportTopology(ServiceState& s, const Caller& caller, const Route& route) {
  if (!caller.cluster_admin()) return AdminOnly("importing a topology");
  Result<Json> parsed = ParseBody(*route.request, false);
  if (!parsed.ok()) return parsed.status();
  const Json& body = parsed.value();
  if (Status e = UnknownField(body, {"format", "content", "gpus_per_node", "name"}); !e.ok()) {
    return e;
  }
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
      {"pods", topo.pod_tier() < topo.tier_count() ? topo.tier_size(topo.pod_tier()) : 1}};
  s.Audit(caller, "topology.import", summary);
  return JsonAnswer(200, summary);
}

}  // namespace topo::daemon
