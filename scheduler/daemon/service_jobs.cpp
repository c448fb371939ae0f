// /v1/jobs: submit, list, show, cancel, hold, release.

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "daemon/service_internal.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_io.hpp"
#include "topo/core/evaluator.hpp"

namespace topo::daemon {
namespace {

using core::JobId;
using core::Result;
using core::TimeMs;

Json TimeOrNull(TimeMs t) { return t < 0 ? Json(nullptr) : Json(t); }

std::optional<JobId> ParseId(std::string_view text) {
  JobId id = 0;
  if (text.empty() || text.size() > 18) return std::nullopt;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || p != text.data() + text.size() || id <= 0) return std::nullopt;
  return id;
}

HttpResponse NoSuchJob(std::string_view id) {
  return Error(404, "no job " + std::string(id.substr(0, 40)) +
                        " that you can see; `topo queue --all` lists yours");
}

int CountNodes(const std::vector<core::GpuSlot>& ranks) {
  std::set<core::NodeId> nodes;
  for (const core::GpuSlot& s : ranks) nodes.insert(s.node);
  return static_cast<int>(nodes.size());
}

TimeMs TimeLimit(const ServiceState& s, TimeMs requested) {
  return requested > 0 ? requested : s.scheduler_config.default_time_limit;
}

Json RecordSummary(const ServiceState& s, const core::JobRecord& j,
                   const std::map<JobId, int>* positions) {
  Json out = {{"id", j.id},
              {"name", j.request.spec.name},
              {"tenant", j.request.tenant},
              {"user", j.request.user},
              {"state", core::JobStateName(j.state)},
              {"reason", j.reason},
              {"gpus", j.request.spec.gpus},
              {"nodes", CountNodes(j.ranks)},
              {"priority", j.request.priority},
              {"submit_ms", j.submit_time},
              {"start_ms", TimeOrNull(j.first_start)},
              {"end_ms", TimeOrNull(j.end_time)},
              {"time_limit_s", TimeLimit(s, j.request.time_limit) / 1000},
              {"restarts", j.restarts},
              {"checkpoint_step", j.checkpoint_step},
              {"queue_position", nullptr}};
  if (positions != nullptr) {
    if (auto it = positions->find(j.id); it != positions->end()) out["queue_position"] = it->second;
  }
  return out;
}

Json RowSummary(const ServiceState& s, const store::JobRow& r) {
  Json spec = Json::parse(r.spec_json, nullptr, false);
  Json ranks = Json::parse(r.ranks_json, nullptr, false);
  std::set<std::string> nodes;
  if (ranks.is_array()) {
    for (const Json& slot : ranks) {
      if (slot.is_array() && !slot.empty() && slot[0].is_string()) nodes.insert(slot[0]);
    }
  }
  return Json{{"id", r.id},
              {"name", spec.is_object() ? spec.value("name", "") : ""},
              {"tenant", r.tenant},
              {"user", r.user},
              {"state", core::JobStateName(r.state)},
              {"reason", r.reason},
              {"gpus", spec.is_object() ? spec.value("gpus", 0) : 0},
              {"nodes", nodes.size()},
              {"priority", r.priority},
              {"submit_ms", r.submit_ms},
              {"start_ms", TimeOrNull(r.start_ms)},
              {"end_ms", TimeOrNull(r.end_ms)},
              {"time_limit_s", TimeLimit(s, r.time_limit_ms) / 1000},
              {"restarts", r.restarts},
              {"checkpoint_step", r.checkpoint_step},
              {"queue_position", nullptr}};
}

std::map<JobId, int> QueuePositions(const core::SchedulerCore& core) {
  std::map<JobId, int> positions;
  int i = 0;
  for (JobId id : core.WaitingJobs()) positions[id] = ++i;
  return positions;
}

Json PlacementSummary(const core::Topology& topo, const std::vector<core::GpuSlot>& ranks) {
  auto per_tier = [&](int tier) {
    std::map<core::DomainId, int> gpus;
    for (const core::GpuSlot& slot : ranks) gpus[topo.Ancestor(slot.node, tier)] += 1;
    Json out = Json::array();
    for (const auto& [d, n] : gpus) out.push_back({{"name", topo.domain(d).name}, {"gpus", n}});
    return out;
  };
  return Json{{"nodes", CountNodes(ranks)},
              {"hbds", per_tier(topo.hbd_tier())},
              {"leaves", per_tier(topo.leaf_tier())},
              {"pods", per_tier(topo.pod_tier())}};
}

Json History(ServiceState& s, JobId id) {
  Json out = Json::array();
  store::EventQuery q;
  q.job = id;
  q.limit = 1000;
  Result<std::vector<store::RawEvent>> events = s.store->ListEvents(q);
  if (!events.ok()) return out;
  for (const store::RawEvent& e : events.value()) {
    Json item = {{"seq", e.seq},   {"time_ms", e.time_ms}, {"actor", e.actor},
                 {"type", e.kind}, {"state", nullptr},     {"reason", nullptr}};
    Json body = Json::parse(e.body, nullptr, false);
    if (body.is_object() && body.contains("commands")) {
      for (const Json& c : body["commands"]) {
        if (c.value("type", "") == "job_state_changed" && c.value("id", JobId{0}) == id) {
          item["state"] = c.value("state", "");
          item["reason"] = c.value("reason", "");
        }
      }
    }
    out.push_back(std::move(item));
  }
  return out;
}

// A job in the caller's scope as JSON, or nullopt.
Result<std::optional<Json>> FindJob(ServiceState& s, const Caller& caller, JobId id, bool detail) {
  if (const core::JobRecord* j = s.core != nullptr ? s.core->job(id) : nullptr) {
    if (!caller.InScope(j->request.tenant)) return std::optional<Json>();
    std::map<JobId, int> positions;
    if (detail && (j->state == core::JobState::kQueued)) positions = QueuePositions(*s.core);
    Json out = RecordSummary(s, *j, &positions);
    if (detail) {
      const core::Topology& topo = *s.topology;
      out["spec"] = common::JobSpecToJson(j->request.spec);
      out["command"] = j->request.command;
      Json ranks = Json::array();
      for (size_t r = 0; r < j->ranks.size(); ++r) {
        ranks.push_back(
            {{"rank", r}, {"node", topo.node(j->ranks[r].node).name}, {"gpu", j->ranks[r].gpu}});
      }
      out["ranks"] = std::move(ranks);
      out["spares"] = common::NodeListToJson(j->spares, topo);
      out["placement"] = j->ranks.empty() ? Json(nullptr) : PlacementSummary(topo, j->ranks);
      out["metrics"] = nullptr;
      if (static_cast<int>(j->ranks.size()) == j->request.spec.gpus) {
        out["metrics"] =
            common::MetricsToJson(core::Evaluate(j->request.spec, topo, j->ranks), topo);
      }
      out["history"] = History(s, id);
    }
    return std::optional<Json>(std::move(out));
  }
  Result<std::optional<store::JobRow>> row = s.store->GetJob(id);
  if (!row.ok()) return row.status();
  if (!row.value() || !caller.InScope(row.value()->tenant)) return std::optional<Json>();
  Json out = RowSummary(s, *row.value());
  if (detail) {
    out["spec"] = Json::parse(row.value()->spec_json, nullptr, false);
    Json ranks = Json::array();
    Json stored = Json::parse(row.value()->ranks_json, nullptr, false);
    if (stored.is_array()) {
      for (size_t r = 0; r < stored.size(); ++r) {
        ranks.push_back({{"rank", r}, {"node", stored[r][0]}, {"gpu", stored[r][1]}});
      }
    }
    out["ranks"] = std::move(ranks);
    out["spares"] = Json::parse(row.value()->spares_json, nullptr, false);
    out["placement"] = nullptr;
    out["metrics"] = nullptr;
    out["history"] = History(s, id);
  }
  return std::optional<Json>(std::move(out));
}

HttpResponse Submit(ServiceState& s, const Caller& caller, const Route& route) {
  Body b = ParseBody(*route.request, false);
  if (b.error) return *b.error;
  const Json& body = b.json;
  if (auto e = UnknownField(body, {"spec", "tenant", "priority", "time_limit_s",
                                   "checkpoint_interval_s", "command"})) {
    return *e;
  }
  if (s.core == nullptr) return s.NoTopology();
  if (!body.contains("spec")) {
    return Error(400, "spec is missing: give the job spec v1, e.g. {\"spec\": {\"gpus\": 8}}",
                 "spec");
  }
  Result<core::JobSpec> spec = common::JobSpecFromJson(body["spec"]);
  if (!spec.ok()) return Error(400, "spec: " + spec.message(), "spec");
  core::JobRequest request;
  request.spec = std::move(spec).value();
  request.user = caller.user.name;
  request.tenant = caller.user.tenant;
  if (auto it = body.find("tenant"); it != body.end()) {
    if (!it->is_string()) return Error(400, "tenant must be a string", "tenant");
    request.tenant = it->get<std::string>();
    if (!ValidTenantName(request.tenant)) {
      return Error(400,
                   "tenant \"" + request.tenant.substr(0, 130) +
                       "\" is not a tenant name (segments of a-z 0-9 _ . - joined by /)",
                   "tenant");
    }
  }
  if (!caller.InScope(request.tenant)) {
    return Error(403, "user " + caller.user.name + " (tenant " + caller.user.tenant +
                          ") may not submit to tenant " + request.tenant);
  }
  if (s.core->tenant(request.tenant) == nullptr) {
    return Error(400,
                 "tenant " + request.tenant +
                     " does not exist; a cluster-admin creates it with `topo quota set " +
                     request.tenant + "`",
                 "tenant");
  }
  int64_t priority = 0, time_limit = 0, checkpoint = 0;
  if (auto e = IntField(body, "priority", -100, 100, priority)) return *e;
  if (priority > 0 && !caller.admin()) {
    return Error(403, "a priority above 0 needs a tenant-admin or cluster-admin");
  }
  if (auto e = IntField(body, "time_limit_s", 1, 30ll * 86400, time_limit)) return *e;
  if (auto e = IntField(body, "checkpoint_interval_s", -1, 7ll * 86400, checkpoint)) return *e;
  if (checkpoint == 0 && body.contains("checkpoint_interval_s")) {
    return Error(400, "checkpoint_interval_s must be -1 (never) or 60..604800",
                 "checkpoint_interval_s");
  }
  if (checkpoint > 0 && checkpoint < 60) {
    return Error(400,
                 "checkpoint_interval_s " + std::to_string(checkpoint) +
                     " is below the minimum of 60 (or -1 for never)",
                 "checkpoint_interval_s");
  }
  if (auto it = body.find("command"); it != body.end()) {
    size_t total = 0;
    if (!it->is_array() || it->empty() || it->size() > 1024) {
      return Error(400, "command must be a non-empty array of at most 1024 strings (argv)",
                   "command");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& arg = (*it)[i];
      if (!arg.is_string()) {
        return Error(400, "command[" + std::to_string(i) + "] must be a string", "command");
      }
      total += arg.get<std::string>().size();
      request.command.push_back(arg.get<std::string>());
    }
    if (total > 256 * 1024 || request.command[0].empty()) {
      return Error(400,
                   "command: the program (command[0]) must be given and the whole "
                   "command must stay under 256 KiB",
                   "command");
    }
  }
  request.priority = static_cast<int>(priority);
  request.time_limit = time_limit * core::kSecond;
  request.checkpoint_interval = checkpoint < 0 ? -1 : checkpoint * core::kSecond;

  // Refuse what can never run here, before it is logged.
  if (request.spec.gpus > s.topology->total_gpus()) {
    return Error(400,
                 "spec.gpus: " + std::to_string(request.spec.gpus) +
                     " GPUs is more than the cluster has (" +
                     std::to_string(s.topology->total_gpus()) + ")",
                 "spec.gpus");
  }
  core::Placement fit = s.judge->Place(request.spec, *s.empty);
  if (fit.outcome == core::PlaceOutcome::kInfeasible) {
    return Error(400, "spec: the job can never be placed on this cluster: " + fit.reason, "spec");
  }

  const JobId id = s.next_job_id++;
  const std::string tenant = request.tenant;
  s.Step(core::JobSubmitted{id, std::move(request)}, s.Actor(caller));
  if (s.metrics != nullptr) s.metrics->Submission(tenant);
  const core::JobRecord* j = s.core->job(id);
  Json out = {{"id", id}};
  if (j != nullptr) {
    out["state"] = core::JobStateName(j->state);
    out["reason"] = j->reason;
  }
  return JsonResponse(201, out);
}

HttpResponse List(ServiceState& s, const Caller& caller, const Route& route) {
  const auto& q = route.query;
  const bool all = q.count("all") && q.at("all") != "0" && q.at("all") != "false";
  std::optional<std::string> tenant;
  if (auto it = q.find("tenant"); it != q.end()) {
    if (!ValidTenantName(it->second)) return Error(400, "tenant: not a tenant name", "tenant");
    tenant = it->second;
  }
  std::set<std::string> states;
  if (auto it = q.find("state"); it != q.end()) {
    size_t i = 0;
    const std::string& v = it->second;
    while (i <= v.size()) {
      size_t end = v.find(',', i);
      if (end == std::string::npos) end = v.size();
      std::string name = v.substr(i, end - i);
      if (!common::ParseJobState(name)) {
        return Error(400,
                     "state: unknown job state \"" + name.substr(0, 40) +
                         "\"; use queued, held, running, preempting, completed, failed, "
                         "cancelled, rejected",
                     "state");
      }
      states.insert(name);
      i = end + 1;
    }
  }
  JobId after = 0;
  int64_t limit = 1000;
  if (auto it = q.find("after"); it != q.end()) {
    std::optional<JobId> a = it->second == "0" ? JobId{0} : ParseId(it->second).value_or(-1);
    if (!a || *a < 0) return Error(400, "after: must be a job id", "after");
    after = *a;
  }
  if (auto it = q.find("limit"); it != q.end()) {
    std::optional<JobId> l = ParseId(it->second);
    if (!l || *l > 10000) return Error(400, "limit: must be 1..10000", "limit");
    limit = *l;
  }
  auto wanted = [&](const std::string& job_tenant, core::JobState state) {
    if (!caller.InScope(job_tenant)) return false;
    if (tenant && job_tenant != *tenant) return false;
    if (!states.empty() && !states.count(std::string(core::JobStateName(state)))) return false;
    return all || !core::IsTerminal(state);
  };
  std::map<JobId, int> positions;
  if (s.core != nullptr) positions = QueuePositions(*s.core);
  Json jobs = Json::array();
  JobId last = after;
  bool more = false;
  if (!all && s.core != nullptr) {
    for (auto it = s.core->jobs().upper_bound(after); it != s.core->jobs().end(); ++it) {
      const core::JobRecord& j = it->second;
      if (!wanted(j.request.tenant, j.state)) continue;
      if (static_cast<int64_t>(jobs.size()) == limit) {
        more = true;
        break;
      }
      jobs.push_back(RecordSummary(s, j, &positions));
      last = j.id;
    }
  } else if (all) {
    store::JobQuery query;
    query.include_terminal = true;
    query.limit = 1000;
    query.after_id = after;
    while (!more) {
      Result<std::vector<store::JobRow>> rows = s.store->ListJobs(query);
      if (!rows.ok()) return Error(503, "the store failed: " + rows.message());
      if (rows.value().empty()) break;
      for (const store::JobRow& r : rows.value()) {
        query.after_id = r.id;
        const core::JobRecord* live = s.core != nullptr ? s.core->job(r.id) : nullptr;
        if (!wanted(r.tenant, live != nullptr ? live->state : r.state)) continue;
        if (static_cast<int64_t>(jobs.size()) == limit) {
          more = true;
          break;
        }
        jobs.push_back(live != nullptr ? RecordSummary(s, *live, &positions) : RowSummary(s, r));
        last = r.id;
      }
    }
  }
  return JsonResponse(
      200, Json{{"jobs", std::move(jobs)}, {"next_after", more ? Json(last) : Json(nullptr)}});
}

}  // namespace

HttpResponse HandleJobs(ServiceState& s, const Caller& caller, const Route& route) {
  const auto& p = route.path;
  const std::string& m = route.method();
  if (p.size() == 1) {
    HttpResponse r;
    if (m == "POST") {
      r = Submit(s, caller, route);
    } else if (m == "GET") {
      r = List(s, caller, route);
    } else {
      r = Error(405, "use GET /v1/jobs to list or POST /v1/jobs to submit");
    }
    r.route = "/v1/jobs";
    return r;
  }
  std::optional<JobId> id = ParseId(p[1]);
  HttpResponse r;
  if (p.size() == 2) {
    r.route = "/v1/jobs/{id}";
    if (m != "GET") {
      r = Error(405, "use GET /v1/jobs/ID, or POST /v1/jobs/ID/cancel|hold|release");
    } else if (!id) {
      r = NoSuchJob(p[1]);
    } else {
      Result<std::optional<Json>> job = FindJob(s, caller, *id, true);
      if (!job.ok()) {
        r = Error(503, "the store failed: " + job.message());
      } else if (!job.value()) {
        r = NoSuchJob(p[1]);
      } else {
        r = JsonResponse(200, *job.value());
      }
    }
    r.route = "/v1/jobs/{id}";
    return r;
  }
  const std::string action = p.size() == 3 ? p[2] : "";
  r.route =
      "/v1/jobs/{id}/" +
      (action == "cancel" || action == "hold" || action == "release" ? action : std::string("?"));
  if (r.route.back() == '?') {
    HttpResponse e = Error(404, "no such route; jobs take /cancel, /hold or /release");
    e.route = r.route;
    return e;
  }
  if (m != "POST") {
    HttpResponse e = Error(405, "use POST /v1/jobs/ID/" + action);
    e.route = r.route;
    return e;
  }
  auto finish = [&](HttpResponse x) {
    x.route = r.route;
    return x;
  };
  Body b = ParseBody(*route.request, true);
  if (b.error) return finish(*b.error);
  if (auto e = UnknownField(b.json, {"reason"})) return finish(*e);
  std::string reason;
  if (auto it = b.json.find("reason"); it != b.json.end()) {
    if (!it->is_string() || it->get<std::string>().size() > 1000) {
      return finish(Error(400, "reason must be a string of at most 1000 bytes", "reason"));
    }
    reason = it->get<std::string>();
  }
  if (!id) return finish(NoSuchJob(p[1]));
  Result<std::optional<Json>> job = FindJob(s, caller, *id, false);
  if (!job.ok()) return finish(Error(503, "the store failed: " + job.message()));
  if (!job.value()) return finish(NoSuchJob(p[1]));
  const core::JobRecord* j = s.core != nullptr ? s.core->job(*id) : nullptr;
  const std::string state = (*job.value())["state"];
  if (j == nullptr || core::IsTerminal(j->state)) {
    return finish(Error(
        409, "job " + std::to_string(*id) + " is already " + state + "; nothing to " + action));
  }
  if (action == "cancel") {
    if (reason.empty()) reason = "cancelled by " + caller.user.name;
    s.Step(core::JobCancelled{*id, reason}, s.Actor(caller));
  } else if (action == "hold") {
    if (j->state != core::JobState::kQueued) {
      return finish(Error(
          409, "job " + std::to_string(*id) + " is " + state + "; only a queued job can be held"));
    }
    s.Step(core::JobHoldChanged{*id, true}, s.Actor(caller));
  } else {
    if (j->state != core::JobState::kHeld) {
      return finish(Error(
          409, "job " + std::to_string(*id) + " is " + state + ", not held; nothing to release"));
    }
    s.Step(core::JobHoldChanged{*id, false}, s.Actor(caller));
  }
  Result<std::optional<Json>> after = FindJob(s, caller, *id, false);
  if (!after.ok() || !after.value()) return finish(JsonResponse(200, Json{{"id", *id}}));
  return finish(JsonResponse(200, *after.value()));
}

}  // namespace topo::daemon
