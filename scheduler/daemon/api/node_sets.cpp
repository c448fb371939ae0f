// /v1/partitions and /v1/reservations: the named node sets of the cluster
// (core/node_sets.hpp). Everyone signed in reads them, as the topology;
// cluster-admins change them, each change an event of the log and a row of
// the audit log. Every change is put to the core's CheckNodeSetChange before
// it is logged, so the log holds only changes the core takes.

#include <bit>

#include "daemon/api/handlers.hpp"
#include "daemon/pki/pki.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/hostlist.hpp"
#include "topo/common/node_name.hpp"
#include "topo/common/user_api.hpp"

namespace topo::daemon {
namespace {

using core::NodeId;
using core::Result;
using core::Status;
using core::TimeMs;

// The API's name of a field the core's node-set checks name: seconds and
// milliseconds carry their unit here ("max_time" is "max_time_s").
std::string ApiField(std::string_view core_field) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"max_time", "max_time_s"}, {"default_time", "default_time_s"},
      {"is_default", "default"},  {"start", "start_ms"},
      {"end", "end_ms"},          {"time_limit", "time_limit_s"}};
  for (const auto& [from, to] : kNames) {
    if (core_field == from) return std::string(to);
  }
  return std::string(core_field);
}

// A core error as the API answers it: its code and message, and the field it
// names (the Status's own, else the message's leading "field:") in the API's
// words.
Status Answered(const Status& st, std::string_view fallback_field) {
  std::string field = st.field();
  if (field.empty()) {
    const std::string& m = st.message();
    const size_t colon = m.find(':');
    if (colon != std::string::npos && colon > 0 && colon < 40 &&
        m.find_first_of(" \"'", 0) > colon) {
      field = m.substr(0, colon);
    }
  }
  if (field.empty()) field = std::string(fallback_field);
  return Status::Error(st.message(), st.code()).WithField(ApiField(field));
}

Result<std::string> NameOfPath(const Route& route, const char* kind) {
  const std::string& name = route.param("name");
  if (Status s = core::ValidateNodeSetName(name, "name"); !s.ok()) {
    return Invalid(std::string("\"") + common::ShownName(name) + "\" is not a " + kind +
                       " name: 1-64 bytes of A-Z a-z 0-9 . _ -, not starting with - or .",
                   "name");
  }
  return name;
}

// What of `nodes` is up and free now.
struct NodesNow {
  int up = 0, free_gpus = 0, gpus = 0;
};
NodesNow CountNodes(const ServiceState& s, const std::vector<std::string>& nodes) {
  NodesNow out;
  const core::Topology& topo = *s.driver.topology();
  const core::ClusterState& cluster = s.driver.core()->cluster();
  for (const std::string& name : nodes) {
    const NodeId n = topo.FindNode(name);
    if (n < 0) continue;
    out.gpus += topo.node(n).gpus;
    if (cluster.node_state(n) != core::NodeState::kUp) continue;
    ++out.up;
    out.free_gpus += std::popcount(cluster.usable_free_mask(n));
  }
  return out;
}

// The one partition view (api::PartitionView).
api::PartitionView PartitionViewOf(const ServiceState& s, const core::PartitionConfig& p) {
  const NodesNow now = CountNodes(s, p.nodes);
  api::PartitionView v;
  v.name = p.name;
  v.nodes = common::CompressHostlist(p.nodes);
  v.node_count = static_cast<int>(p.nodes.size());
  v.gpus = now.gpus;
  v.up_nodes = now.up;
  v.free_gpus = now.free_gpus;
  v.default_time_s = p.default_time / core::kSecond;
  v.max_time_s = p.max_time / core::kSecond;
  v.max_gpus = p.max_gpus;
  v.tenants = p.tenants;
  v.priority_tier = p.priority_tier;
  v.preemptible = p.preemptible;
  v.is_default = p.is_default;
  return v;
}

// The one reservation view (api::ReservationView): active from its start.
api::ReservationView ReservationViewOf(const ServiceState& s, const core::ReservationConfig& r) {
  api::ReservationView v;
  v.name = r.name;
  v.nodes = common::CompressHostlist(r.nodes);
  v.node_count = static_cast<int>(r.nodes.size());
  v.gpus = CountNodes(s, r.nodes).gpus;
  v.start_ms = r.start;
  v.end_ms = r.end;
  v.tenants = r.tenants;
  v.maintenance = r.maintenance;
  v.state =
      s.driver.now() >= r.start ? api::ReservationState::kActive : api::ReservationState::kPlanned;
  return v;
}

// The change as the core would take it, or its refusal; then logged.
Status CheckChange(const ServiceState& s, const core::Event& e, std::string_view field) {
  Status st = s.driver.core()->CheckNodeSetChange(e);
  return st.ok() ? st : Answered(st, field);
}

}  // namespace

// ---------------------------------------------------------------- partitions

Answer ListPartitions(const ServiceState& s, const Caller&, const Route&) {
  api::PartitionList list;
  if (s.driver.core() != nullptr) {
    for (const auto& [name, p] : s.driver.core()->node_sets().partitions()) {
      list.partitions.push_back(PartitionViewOf(s, p));
    }
  }
  return TextAnswer(200, api::WritePartitionList(list));
}

Answer ShowPartition(const ServiceState& s, const Caller&, const Route& route) {
  Result<std::string> name = NameOfPath(route, "partition");
  if (!name.ok()) return name.status();
  const core::PartitionConfig* p =
      s.driver.core() != nullptr ? s.driver.core()->node_sets().partition(name.value()) : nullptr;
  if (p == nullptr) {
    return NotFound("no partition " + name.value() + "; `topo partition list` lists them");
  }
  return TextAnswer(200, api::WritePartitionView(PartitionViewOf(s, *p)));
}

// POST /v1/partitions: adds one, or replaces the one of that name.
Answer CreatePartition(ServiceState& s, const Caller& caller, const Route& route) {
  if (!caller.cluster_admin()) return AdminOnly("configuring partitions");
  if (s.driver.core() == nullptr) return NoTopology();
  Result<Json> parsed = ParseBody(*route.request, false);
  if (!parsed.ok()) return parsed.status();
  std::string field;
  Result<api::PartitionRequest> read = api::ReadPartitionRequest(parsed.value(), &field);
  if (!read.ok()) return Invalid(read.message(), field);
  api::PartitionRequest& body = read.value();
  core::PartitionConfig p;
  p.name = body.name;
  p.nodes = std::move(body.nodes);
  p.default_time = body.default_time_s.value_or(0) * core::kSecond;
  p.max_time = body.max_time_s.value_or(0) * core::kSecond;
  p.max_gpus = body.max_gpus.value_or(0);
  p.tenants = body.tenants.value_or(std::vector<std::string>{});
  p.priority_tier = body.priority_tier.value_or(0);
  p.preemptible = body.preemptible.value_or(false);
  p.is_default = body.is_default.value_or(false);
  const bool existed = s.driver.core()->node_sets().partition(p.name) != nullptr;
  const core::Event e = core::PartitionConfigured{p};
  if (Status st = CheckChange(s, e, "nodes"); !st.ok()) return st;
  s.driver.Step(e, s.Actor(caller));
  const core::PartitionConfig* now = s.driver.core()->node_sets().partition(p.name);
  if (now == nullptr) {
    return Status::Error("the scheduler did not take partition " + p.name + "; nothing changed",
                         core::ErrorCode::kInternal);
  }
  s.Audit(caller, existed ? "partition.replace" : "partition.create",
          {{"partition", p.name}, {"config", common::PartitionConfigToJson(p)}});
  return TextAnswer(existed ? 200 : 201, api::WritePartitionView(PartitionViewOf(s, *now)));
}

// DELETE /v1/partitions/{name}: refused while a job names it (409).
Answer DeletePartition(ServiceState& s, const Caller& caller, const Route& route) {
  if (!caller.cluster_admin()) return AdminOnly("deleting partitions");
  if (s.driver.core() == nullptr) return NoTopology();
  Result<std::string> name = NameOfPath(route, "partition");
  if (!name.ok()) return name.status();
  const core::PartitionConfig* p = s.driver.core()->node_sets().partition(name.value());
  if (p == nullptr) {
    return NotFound("no partition " + name.value() + "; `topo partition list` lists them", "name");
  }
  const api::PartitionView was = PartitionViewOf(s, *p);
  const core::Event e = core::PartitionDeleted{name.value()};
  if (Status st = CheckChange(s, e, "name"); !st.ok()) return st;
  s.driver.Step(e, s.Actor(caller));
  s.Audit(caller, "partition.delete", {{"partition", name.value()}, {"nodes", was.nodes}});
  return TextAnswer(200, api::WritePartitionView(was));
}

// ---------------------------------------------------------------- reservations

Answer ListReservations(const ServiceState& s, const Caller&, const Route&) {
  api::ReservationList list;
  if (s.driver.core() != nullptr) {
    for (const auto& [name, r] : s.driver.core()->node_sets().reservations()) {
      list.reservations.push_back(ReservationViewOf(s, r));
    }
  }
  return TextAnswer(200, api::WriteReservationList(list));
}

Answer ShowReservation(const ServiceState& s, const Caller&, const Route& route) {
  Result<std::string> name = NameOfPath(route, "reservation");
  if (!name.ok()) return name.status();
  const core::ReservationConfig* r =
      s.driver.core() != nullptr ? s.driver.core()->node_sets().reservation(name.value()) : nullptr;
  if (r == nullptr) {
    return NotFound("no reservation " + name.value() +
                    " (one that ended is gone); `topo reservation list` lists them");
  }
  return TextAnswer(200, api::WriteReservationView(ReservationViewOf(s, *r)));
}

// POST /v1/reservations: adds one, or replaces the one of that name. With
// "gpus" the core chooses the nodes (whole up nodes of "partition", off
// other reservations of the window).
Answer CreateReservation(ServiceState& s, const Caller& caller, const Route& route) {
  if (!caller.cluster_admin()) return AdminOnly("configuring reservations");
  if (s.driver.core() == nullptr) return NoTopology();
  Result<Json> parsed = ParseBody(*route.request, false);
  if (!parsed.ok()) return parsed.status();
  std::string field;
  Result<api::ReservationRequest> read = api::ReadReservationRequest(parsed.value(), &field);
  if (!read.ok()) return Invalid(read.message(), field);
  api::ReservationRequest& body = read.value();
  const TimeMs now = s.driver.now();
  core::ReservationConfig r;
  r.name = body.name;
  r.start = body.start_ms.value_or(now);
  if (body.end_ms) {
    r.end = *body.end_ms;
    if (r.end <= r.start) {
      return Invalid("end_ms " + std::to_string(r.end) + " is not after the start (" +
                         std::to_string(r.start) + "): the window must end after it starts",
                     "end_ms");
    }
  } else {
    if (*body.duration_s > (api::kMaxTimeMs - r.start) / core::kSecond) {
      return Invalid("duration_s runs past the year 9999; give a shorter one", "duration_s");
    }
    r.end = r.start + *body.duration_s * core::kSecond;
  }
  if (r.end <= now) {
    return Invalid("the window ends in the past (end " + FormatUtc(r.end / core::kSecond) +
                       "): give a later start or a longer duration",
                   body.end_ms ? "end_ms" : "duration_s");
  }
  r.tenants = body.tenants.value_or(std::vector<std::string>{});
  r.maintenance = body.maintenance.value_or(false);
  if (body.nodes) {
    r.nodes = std::move(*body.nodes);
  } else {
    const std::string partition = body.partition.value_or("");
    if (!partition.empty() && s.driver.core()->node_sets().partition(partition) == nullptr) {
      return NotFound("no partition " + partition + " to choose the nodes from", "partition");
    }
    Result<std::vector<std::string>> chosen =
        s.driver.core()->ChooseReservationNodes(*body.gpus, r.start, r.end, partition);
    if (!chosen.ok()) return Answered(chosen.status(), "gpus");
    r.nodes = std::move(chosen).value();
  }
  const bool existed = s.driver.core()->node_sets().reservation(r.name) != nullptr;
  const core::Event e = core::ReservationConfigured{r};
  if (Status st = CheckChange(s, e, "nodes"); !st.ok()) return st;
  s.driver.Step(e, s.Actor(caller));
  const core::ReservationConfig* taken = s.driver.core()->node_sets().reservation(r.name);
  if (taken == nullptr) {
    return Status::Error("the scheduler did not take reservation " + r.name + "; nothing changed",
                         core::ErrorCode::kInternal);
  }
  s.Audit(caller, existed ? "reservation.replace" : "reservation.create",
          {{"reservation", r.name}, {"config", common::ReservationConfigToJson(r)}});
  return TextAnswer(existed ? 200 : 201, api::WriteReservationView(ReservationViewOf(s, *taken)));
}

// DELETE /v1/reservations/{name}: refused while a job names it (409).
Answer DeleteReservation(ServiceState& s, const Caller& caller, const Route& route) {
  if (!caller.cluster_admin()) return AdminOnly("deleting reservations");
  if (s.driver.core() == nullptr) return NoTopology();
  Result<std::string> name = NameOfPath(route, "reservation");
  if (!name.ok()) return name.status();
  const core::ReservationConfig* r = s.driver.core()->node_sets().reservation(name.value());
  if (r == nullptr) {
    return NotFound("no reservation " + name.value() +
                        " (one that ended is gone); `topo reservation list` lists them",
                    "name");
  }
  const api::ReservationView was = ReservationViewOf(s, *r);
  const core::Event e = core::ReservationDeleted{name.value()};
  if (Status st = CheckChange(s, e, "name"); !st.ok()) return st;
  s.driver.Step(e, s.Actor(caller));
  s.Audit(caller, "reservation.delete", {{"reservation", name.value()}, {"nodes", was.nodes}});
  return TextAnswer(200, api::WriteReservationView(was));
}

}  // namespace topo::daemon
