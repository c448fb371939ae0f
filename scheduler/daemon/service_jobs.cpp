// /v1/jobs: submit, list, show, cancel, hold, release.

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <set>

#include "daemon/service_internal.hpp"
#include "topo/common/agent_protocol.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_chain.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/job_process.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/perf_model.hpp"

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
  return requested > 0 ? requested : s.driver.scheduler_config.default_time_limit;
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
              {"queue_position", nullptr},
              {"estimated_start_ms", nullptr},
              {"predicted_slowdown", nullptr},
              {"dependency", nullptr},
              {"array", nullptr}};
  if (!j.request.dependencies.empty()) {
    out["dependency"] = common::FormatDependencies(j.request.dependencies);
  }
  if (j.request.array_job != 0) {
    out["array"] = {{"job", j.request.array_job},
                    {"task", j.request.array_task},
                    {"throttle", j.request.array_throttle}};
  }
  if (std::optional<double> slow = PredictedSlowdown(s, j)) out["predicted_slowdown"] = *slow;
  if (s.driver.core != nullptr) {
    if (std::optional<TimeMs> start = s.driver.core->EstimatedStart(j.id)) {
      out["estimated_start_ms"] = *start;
    }
  }
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
  return Json{
      {"id", r.id},
      {"name", spec.is_object() ? spec.value("name", "") : ""},
      {"tenant", r.tenant},
      {"user", r.user},
      {"state", core::JobStateName(r.state)},
      {"reason", r.reason},
      {"gpus", spec.is_object() ? spec.value("gpus", 0) : 0},
      // A finished job shows where its newest run was.
      {"nodes", nodes.empty() && core::IsTerminal(r.state) ? r.last_run_nodes
                                                           : static_cast<int>(nodes.size())},
      {"priority", r.priority},
      {"submit_ms", r.submit_ms},
      {"start_ms", TimeOrNull(r.start_ms)},
      {"end_ms", TimeOrNull(r.end_ms)},
      {"time_limit_s", TimeLimit(s, r.time_limit_ms) / 1000},
      {"restarts", r.restarts},
      {"checkpoint_step", r.checkpoint_step},
      {"queue_position", nullptr},
      {"estimated_start_ms", nullptr},
      {"predicted_slowdown", nullptr}};
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

std::vector<store::RawEvent> JobEvents(ServiceState& s, JobId id) {
  store::EventQuery q;
  q.job = id;
  q.limit = 1000;
  Result<std::vector<store::RawEvent>> events = s.driver.store->ListEvents(q);
  return events.ok() ? std::move(events).value() : std::vector<store::RawEvent>{};
}

// Events whose restarts and requeues are infrastructure incidents.
bool InfrastructureEvent(const std::string& kind) {
  return kind == "gpu_event" || kind == "node_state_requested" || kind == "node_states_requested" ||
         kind == "node_evacuated" || kind == "job_launch_failed" || kind == "start_unacknowledged";
}

// The job's failures and moves, from its log: each restart (or requeue) with
// what caused it and when it was decided, how long the fault went unnoticed
// where the log says (a node silent for N ms; a GPU fault is reported at
// once), how long until the job was started again, the checkpoint step it
// resumed from and its restart count (a requeue's, from the start that ended
// its wait: -1 and null while it waits), and the wall time of work lost: from
// the newest checkpoint stored before the failure, or from the run's start
// when that is later (the core's ProgressMark), to the failure. A rank's exit
// whose verdict waited (attribution_window) is the failure when it turned
// out an application failure (decided at a later tick: the cause is still
// rank_exited) and is named in the incident of the node whose loss took it
// over. A lost node's incident names the node.
Json Incidents(const std::vector<store::RawEvent>& events, JobId id,
               const std::function<std::string(const store::RawEvent&)>& actor_of) {
  Json out = Json::array();
  int64_t newest_step_ms = -1;  // when the newest checkpoint so far was stored
  int64_t newest_step = -1;
  int64_t run_start = -1;
  std::set<std::string> run_nodes;  // of the current run
  int64_t waiting = -1;             // the incident that requeued the job: completed when it starts
  struct Exit {
    const store::RawEvent* event = nullptr;  // rank_exited, this run's first non-zero one
    int64_t rank = 0;
    int64_t status = 0;
  } held;
  auto exit_text = [&](const Exit& x) {
    return "rank " + std::to_string(x.rank) + " exited with status " + std::to_string(x.status);
  };
  auto node_text = [](const Json& r) {
    const std::string why = r.value("reason", "");
    return "node " + r.value("node", "") + " " + r.value("state", "") +
           (why.empty() ? "" : ": " + why);
  };
  for (const store::RawEvent& e : events) {
    Json body = Json::parse(e.body, nullptr, false);
    if (!body.is_object()) continue;
    const Json ev = body.value("event", Json::object());
    if (e.kind == "checkpoint_completed" && ev.value("id", JobId{0}) == id &&
        ev.value("step", int64_t{-1}) > newest_step) {
      newest_step = ev.value("step", int64_t{-1});
      newest_step_ms = e.time_ms;
    }
    if (e.kind == "rank_exited" && ev.value("id", JobId{0}) == id &&
        ev.value("exit_code", 0) != 0 && held.event == nullptr) {
      held = Exit{&e, ev.value("rank", int64_t{0}), ev.value("exit_code", int64_t{0})};
    }
    for (const Json& c : body.value("commands", Json::array())) {
      if (c.value("id", JobId{0}) != id) continue;
      const std::string type = c.value("type", "");
      const bool restart = type == "restart_job";
      const bool requeue = type == "job_state_changed" && c.value("state", "") == "queued" &&
                           c.value("reason", "").find("requeued") != std::string::npos;
      if (type == "start_job" && waiting >= 0) {
        // The start that ends a requeue's wait says where it resumed.
        Json& w = out[static_cast<size_t>(waiting)];
        w["restart_ms"] = e.time_ms - w["time_ms"].get<int64_t>();
        w["checkpoint_step"] = c.value("checkpoint_step", int64_t{-1});
        w["restart_count"] = c.value("restart_count", 0);
        waiting = -1;
      }
      const std::set<std::string> previous_nodes = run_nodes;
      if (type == "start_job" || restart) {
        run_nodes.clear();
        for (const Json& slot : c.value("ranks", Json::array())) {
          if (slot.is_array() && !slot.empty() && slot[0].is_string()) run_nodes.insert(slot[0]);
        }
      }
      if (!restart && !requeue) {
        if (type == "start_job") {
          run_start = e.time_ms;
          held = Exit{};
        }
        continue;
      }
      std::string cause = e.kind;
      std::string actor = actor_of(e);
      std::string reason = ev.value("reason", "");
      int64_t failed_at = e.time_ms;
      if (e.kind == "gpu_event") {
        reason = ev.value("kind", "") + " " + std::to_string(ev.value("code", 0)) + " on " +
                 ev.value("node", "") + " GPU " + std::to_string(ev.value("gpu", 0));
      } else if (e.kind == "node_state_requested") {
        reason = node_text(ev);
      } else if (e.kind == "node_states_requested") {
        reason.clear();
        for (const Json& r : ev.value("requests", Json::array())) {
          if (!previous_nodes.count(r.value("node", ""))) continue;
          reason += (reason.empty() ? "" : "; ") + node_text(r);
        }
      } else if (held.event != nullptr && !InfrastructureEvent(e.kind)) {
        // An application failure, decided at once or when its window ended
        // (the step of whatever event came then, a tick usually);
        // or, at once, a node's: the rank exited while a node of its job was
        // suspect or down (the restart leaves that node, the requeue says so).
        cause = "rank_exited";
        actor = actor_of(*held.event);
        reason = exit_text(held);
        failed_at = held.event->time_ms;
        std::string left;
        if (restart) {
          std::set<std::string> now_on;
          for (const Json& slot : c.value("ranks", Json::array())) {
            if (slot.is_array() && !slot.empty() && slot[0].is_string()) now_on.insert(slot[0]);
          }
          for (const std::string& n : previous_nodes) {
            if (!now_on.count(n)) left += (left.empty() ? "" : ", ") + n;
          }
        }
        if (!left.empty()) {
          reason += " while node(s) " + left + " were suspect or down";
        } else if (requeue && c.value("reason", "").find("after rank") == std::string::npos) {
          reason = c.value("reason", "");
        }
        held = Exit{};
      } else if (requeue) {
        reason = c.value("reason", "");
      }
      if (held.event != nullptr) {
        // A rank's exit just before this incident (its peers failed with
        // the node): part of it, and the work was lost from then.
        reason += " (" + exit_text(held) + " just before, on " + actor_of(*held.event) + ")";
        failed_at = held.event->time_ms;
        held = Exit{};
      }
      Json detection = nullptr;
      if (e.kind == "gpu_event") detection = 0;
      for (const std::string_view mark : {"silent for ", "disconnected for "}) {
        const size_t at = reason.find(mark);
        int64_t ms = 0;
        if (at == std::string::npos) continue;
        const char* from = reason.data() + at + mark.size();
        if (std::from_chars(from, reason.data() + reason.size(), ms).ec == std::errc()) {
          detection = ms;
        }
      }
      const int64_t step = restart ? c.value("checkpoint_step", int64_t{-1}) : -1;
      const int64_t since = std::max(run_start, newest_step_ms);
      out.push_back(
          {{"time_ms", e.time_ms},
           {"cause", cause},
           {"actor", actor},
           {"reason", reason},
           {"detection_ms", detection},
           {"restart_ms", restart ? Json(0) : Json(nullptr)},
           {"requeued", requeue},
           {"checkpoint_step", step},
           {"restart_count", restart ? Json(c.value("restart_count", 0)) : Json(nullptr)},
           {"lost_work_s", since >= 0 ? std::max<int64_t>(0, failed_at - since) / 1000.0 : 0.0}});
      if (requeue) waiting = static_cast<int64_t>(out.size()) - 1;
      if (restart) run_start = e.time_ms;
    }
  }
  return out;
}

// Who an event's actor is, as the caller may see it (scope.hpp).
std::function<std::string(const store::RawEvent&)> ScopedActor(ServiceState& s,
                                                               const Caller& caller) {
  return [&s, &caller](const store::RawEvent& e) {
    const TenantOf tenant_of = [&](int64_t job) { return s.driver.JobTenant(job); };
    std::optional<ScopedEvent> seen =
        ScopeEvent(caller, Json::parse(e.body, nullptr, false), e.actor, tenant_of);
    return seen ? seen->actor : std::string("another tenant");
  };
}

// The job's events as the caller may see them (scope.hpp): another tenant's
// job that preempted this one shows as that, without its user.
Json History(ServiceState& s, const Caller& caller, const std::vector<store::RawEvent>& events,
             JobId id) {
  const TenantOf tenant_of = [&](int64_t job) { return s.driver.JobTenant(job); };
  Json out = Json::array();
  for (const store::RawEvent& e : events) {
    Json body = Json::parse(e.body, nullptr, false);
    std::optional<ScopedEvent> seen = ScopeEvent(caller, body, e.actor, tenant_of);
    if (!seen) continue;
    Json item = {{"seq", e.seq},   {"time_ms", e.time_ms}, {"actor", seen->actor},
                 {"type", e.kind}, {"state", nullptr},     {"reason", nullptr}};
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

}  // namespace

Json PredictedJson(const core::Topology& topo, const core::JobRecord& job) {
  if (static_cast<int>(job.ranks.size()) != job.request.spec.gpus) return nullptr;
  core::Result<core::StepPrediction> p = core::PredictPlacement(job.request.spec, topo, job.ranks);
  if (!p.ok()) return nullptr;
  core::Result<core::ResolvedModel> m = core::ResolveModel(job.request.spec);
  const std::string model =
      m.ok() && !m.value().spec.preset.empty() ? m.value().spec.preset : "custom";
  return common::PredictionToJson(p.value(), model);
}

std::optional<double> PredictedSlowdown(const ServiceState& s, const core::JobRecord& job) {
  if (job.state != core::JobState::kRunning && job.state != core::JobState::kPreempting) {
    return std::nullopt;
  }
  ServiceState::Slowdown& c = s.slowdowns[job.id];
  if (c.start != job.last_start || c.restarts != job.restarts) {
    c.start = job.last_start;
    c.restarts = job.restarts;
    c.value = -1;
    if (static_cast<int>(job.ranks.size()) == job.request.spec.gpus) {
      core::Result<core::StepPrediction> p =
          core::PredictPlacement(job.request.spec, *s.driver.topology, job.ranks);
      if (p.ok()) c.value = p.value().slowdown;
    }
  }
  if (c.value < 0) return std::nullopt;
  return c.value;
}

void PruneSlowdowns(const ServiceState& s) {
  std::erase_if(s.slowdowns, [&](const auto& entry) {
    const core::JobRecord* j = s.driver.core != nullptr ? s.driver.core->job(entry.first) : nullptr;
    return j == nullptr ||
           (j->state != core::JobState::kRunning && j->state != core::JobState::kPreempting);
  });
}

namespace {

// The job's runs (job_runs) and GPU-hours into its detailed view; a
// finished job shows the node count of its newest run.
core::Status AddRuns(ServiceState& s, JobId id, Json& out) {
  Result<std::vector<store::JobRunRow>> runs = s.driver.store->ListJobRuns(std::vector<JobId>{id});
  if (!runs.ok()) return runs.status();
  out["runs"] = JobRunsJson(runs.value(), s.driver.now);
  out["gpu_hours"] = JobGpuHours(runs.value(), s.driver.now);
  const std::optional<core::JobState> state = common::ParseJobState(out.value("state", ""));
  if (state && core::IsTerminal(*state) && out.value("nodes", 0) == 0 && !runs.value().empty()) {
    out["nodes"] = runs.value().back().nodes;
  }
  return core::Status::Ok();
}

// A job in the caller's scope as JSON, or nullopt.
Result<std::optional<Json>> FindJob(ServiceState& s, const Caller& caller, JobId id, bool detail) {
  if (const core::JobRecord* j = s.driver.core != nullptr ? s.driver.core->job(id) : nullptr) {
    if (!caller.InScope(j->request.tenant)) return std::optional<Json>();
    std::map<JobId, int> positions;
    if (detail && (j->state == core::JobState::kQueued)) positions = QueuePositions(*s.driver.core);
    Json out = RecordSummary(s, *j, &positions);
    if (detail) {
      const core::Topology& topo = *s.driver.topology;
      out["spec"] = common::JobSpecToJson(j->request.spec);
      out["command"] = j->request.command;
      common::ProcessSpecToJson(j->request.process, &out, /*every_field=*/true);
      out["limits"] = {{"memory_mb_per_node", j->request.memory_mb_per_node},
                       {"cpus_per_node", j->request.cpu_millis_per_node / 1000.0}};
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
      out["predicted"] = PredictedJson(topo, *j);
      if (core::Status st = AddRuns(s, id, out); !st.ok()) return st;
      const std::vector<store::RawEvent> events = JobEvents(s, id);
      out["history"] = History(s, caller, events, id);
      out["incidents"] = Incidents(events, id, ScopedActor(s, caller));
    }
    return std::optional<Json>(std::move(out));
  }
  Result<std::optional<store::JobRow>> row = s.driver.store->GetJob(id);
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
    out["predicted"] = nullptr;
    if (core::Status st = AddRuns(s, id, out); !st.ok()) return st;
    const std::vector<store::RawEvent> events = JobEvents(s, id);
    out["history"] = History(s, caller, events, id);
    out["incidents"] = Incidents(events, id, ScopedActor(s, caller));
  }
  return std::optional<Json>(std::move(out));
}

// The answer to a submission whose client_request_id made `ids` already
// (ascending; one job, or the tasks of an array): 200 and the first answer's
// fields, with "duplicate": true. Nothing new is logged.
HttpResponse AlreadySubmitted(ServiceState& s, const std::vector<JobId>& ids) {
  const JobId first = ids.front();
  Json out = {{"id", first}, {"duplicate", true}};
  const core::JobRecord* j = s.driver.core->job(first);
  if (j != nullptr && j->request.array_job != 0) {
    Json tasks = Json::array();
    for (JobId id : ids) {
      const core::JobRecord* t = s.driver.core->job(id);
      if (t != nullptr) tasks.push_back(t->request.array_task);
    }
    out["array"] = {{"job", first}, {"throttle", j->request.array_throttle}};
    if (tasks.size() == ids.size()) out["array"]["tasks"] = std::move(tasks);
  }
  if (ids.size() > 1 || out.contains("array")) {
    out["ids"] = ids;
  } else if (j != nullptr) {
    out["state"] = core::JobStateName(j->state);
    out["reason"] = j->reason;
  } else {
    Result<std::optional<store::JobRow>> row = s.driver.store->GetJob(first);
    if (!row.ok()) return StoreFailed(row.status());
    if (row.value()) {
      out["state"] = core::JobStateName(row.value()->state);
      out["reason"] = row.value()->reason;
    }
  }
  return JsonResponse(200, out);
}

HttpResponse Submit(ServiceState& s, const Caller& caller, const Route& route) {
  Body b = ParseBody(*route.request, false);
  if (b.error) return *b.error;
  const Json& body = b.json;
  if (auto e = UnknownField(
          body, {"spec", "tenant", "priority", "time_limit_s", "checkpoint_interval_s",
                 "placement_wait_s", "command", "memory_mb_per_node", "cpus_per_node", "launch",
                 "env", "chdir", "output", "error", "dependency", "array", "client_request_id"})) {
    return *e;
  }
  if (s.driver.core == nullptr) return NoTopology();
  // The idempotency key: a retry of a submission that was made (its answer
  // lost, or sent to another replica) gets the jobs made the first time.
  std::string client_request_id;
  if (auto it = body.find("client_request_id"); it != body.end()) {
    if (!it->is_string()) {
      return Error(400, "client_request_id must be a string", "client_request_id");
    }
    client_request_id = it->get<std::string>();
    if (core::Status c = common::CheckClientRequestId(client_request_id); !c.ok()) {
      return Error(400, "client_request_id " + c.message(), "client_request_id");
    }
    Result<std::vector<JobId>> made =
        s.driver.JobsByClientRequest(caller.user.name, client_request_id);
    if (!made.ok()) return StoreFailed(made.status());
    if (!made.value().empty()) return AlreadySubmitted(s, made.value());
  }
  if (!body.contains("spec")) {
    return Error(400, "spec is missing: give the job spec v1, e.g. {\"spec\": {\"gpus\": 8}}",
                 "spec");
  }
  Result<core::JobSpec> spec = common::JobSpecFromJson(body["spec"]);
  if (!spec.ok()) return Error(400, "spec: " + spec.message(), "spec");
  core::JobRequest request;
  request.spec = std::move(spec).value();
  request.client_request_id = std::move(client_request_id);
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
  if (s.driver.core->tenant(request.tenant) == nullptr) {
    return Error(400,
                 "tenant " + request.tenant +
                     " does not exist; a cluster-admin creates it with `topo quota set " +
                     request.tenant + "`",
                 "tenant");
  }
  int64_t priority = 0, time_limit = 0, checkpoint = 0, placement_wait = 0;
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
  // -1: never wait for a faster placement; 0 (absent): the tenant's or the
  // cluster's bound.
  if (auto e = IntField(body, "placement_wait_s", -1, 7ll * 86400, placement_wait)) return *e;
  if (auto it = body.find("command"); it != body.end()) {
    // What exec accepts on Linux, and what fits in the agents' `start`.
    if (!it->is_array() || it->empty() || it->size() > proto::kMaxCommandArgs) {
      return Error(400,
                   "command must be a non-empty array of at most " +
                       std::to_string(proto::kMaxCommandArgs) + " strings (argv)",
                   "command");
    }
    size_t total = 0;
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& arg = (*it)[i];
      const std::string where = "command[" + std::to_string(i) + "]";
      if (!arg.is_string()) return Error(400, where + " must be a string", "command");
      const std::string& a = arg.get_ref<const std::string&>();
      if (a.size() > proto::kMaxArgBytes) {
        return Error(400,
                     where + " is " + std::to_string(a.size()) +
                         " bytes; Linux runs no argument longer than " +
                         std::to_string(proto::kMaxArgBytes) +
                         ": put a long script in a file the job reads",
                     "command");
      }
      if (a.find('\0') != std::string::npos) {
        return Error(400, where + " contains a NUL byte, which no argument can", "command");
      }
      total += a.size() + 1;
      request.command.push_back(a);
    }
    if (total > proto::kMaxCommandBytes || request.command[0].empty()) {
      return Error(400,
                   "command: the program (command[0]) must be given and the whole command must "
                   "stay under " +
                       std::to_string(proto::kMaxCommandBytes >> 10) + " KiB (it is " +
                       std::to_string(total >> 10) + " KiB)",
                   "command");
    }
  }
  if (request.command.empty()) {
    // Nothing would run: the agent has nothing to start.
    return Error(400,
                 "command is missing: say what every rank runs, as an argv array, e.g. "
                 "{\"spec\": {\"gpus\": 8}, \"command\": [\"python3\", \"train.py\"]} "
                 "(topo submit: -- CMD ARGS, --wrap 'CMD', or a batch script)",
                 "command");
  }
  {
    std::string field;
    Result<core::ProcessSpec> process = common::ProcessSpecFromJson(body, &field);
    if (!process.ok()) return Error(400, process.message(), field);
    request.process = std::move(process).value();
  }
  // An array (Slurm's 0-99%8): one job per task, logged together.
  common::ArraySpec array;
  if (auto it = body.find("array"); it != body.end()) {
    if (!it->is_string()) {
      return Error(400, "array must be a string like \"0-99%8\" or \"1,3,5-7\"", "array");
    }
    Result<common::ArraySpec> parsed = common::ParseArraySpec(it->get_ref<const std::string&>());
    if (!parsed.ok()) return Error(400, parsed.message(), "array");
    array = std::move(parsed).value();
  }
  const int64_t count = array.tasks.empty() ? 1 : static_cast<int64_t>(array.tasks.size());
  // Caps on waiting jobs, a tenant's quota and each user's, counting every
  // task of an array.
  if (const core::TenantConfig* t = s.driver.core->tenant(request.tenant);
      t != nullptr && t->max_queued_jobs > 0 &&
      s.driver.waiting().OfTenant(request.tenant) + count > t->max_queued_jobs) {
    const std::string waiting = std::to_string(s.driver.waiting().OfTenant(request.tenant));
    if (count > 1) {
      return Error(409,
                   "the array's " + std::to_string(count) + " tasks would take tenant " +
                       request.tenant + " (" + waiting +
                       " jobs waiting) past its max_queued_jobs (" +
                       std::to_string(t->max_queued_jobs) + "); submit fewer tasks",
                   "array");
    }
    return Error(409,
                 "tenant " + request.tenant + " has " + waiting +
                     " jobs waiting, its max_queued_jobs: wait for some to start, or cancel "
                     "some (topo queue --tenant " +
                     request.tenant + ")",
                 "tenant");
  }
  if (s.config.max_queued_jobs_per_user > 0 &&
      s.driver.waiting().OfUser(request.user) + count > s.config.max_queued_jobs_per_user) {
    const std::string waiting = std::to_string(s.driver.waiting().OfUser(request.user));
    if (count > 1) {
      return Error(409,
                   "the array's " + std::to_string(count) + " tasks would take user " +
                       request.user + " (" + waiting +
                       " jobs waiting) past the cluster's max_queued_jobs_per_user (" +
                       std::to_string(s.config.max_queued_jobs_per_user) + "); submit fewer tasks",
                   "array");
    }
    return Error(409,
                 "user " + request.user + " has " + waiting +
                     " jobs waiting, the cluster's max_queued_jobs_per_user: wait for some to "
                     "start, or cancel some (topo queue --me)",
                 "user");
  }
  // The ranks run as the submitter's Unix account (docs/jobs.md).
  request.unix_user = caller.user.unix_user.empty() ? caller.user.name : caller.user.unix_user;
  if (request.unix_user == "root" && !s.config.allow_root_jobs) {
    return Error(403,
                 "user " + caller.user.name +
                     " maps to the Unix account root, and jobs may not run as root on this "
                     "cluster: map the user to an unprivileged account (topo users set " +
                     caller.user.name + " --unix-user ACCOUNT), or set allow_root_jobs = true",
                 "unix_user");
  }
  // Limits of the job's cgroup on each node (docs/jobs.md).
  int64_t memory_mb = 0;
  if (auto e = IntField(body, "memory_mb_per_node", 1, int64_t{1} << 30, memory_mb)) return *e;
  request.memory_mb_per_node = memory_mb;
  if (auto it = body.find("cpus_per_node"); it != body.end()) {
    if (!it->is_number() || !(it->get<double>() >= 0.001) || it->get<double>() > 100000) {
      return Error(400, "cpus_per_node must be a number of CPUs, 0.001..100000 (e.g. 12 or 0.5)",
                   "cpus_per_node");
    }
    request.cpu_millis_per_node = static_cast<int>(it->get<double>() * 1000 + 0.5);
  }
  request.priority = static_cast<int>(priority);
  request.time_limit = time_limit * core::kSecond;
  request.checkpoint_interval = checkpoint < 0 ? -1 : checkpoint * core::kSecond;
  request.placement_wait = placement_wait < 0 ? -1 : placement_wait * core::kSecond;

  // Dependencies (Slurm's afterok:12:13,...): on jobs the caller may see;
  // one already met is dropped, one that can never be met is refused, the
  // rest wait in the core.
  if (auto it = body.find("dependency"); it != body.end()) {
    if (!it->is_string()) {
      return Error(400, "dependency must be a string like \"afterok:12:13,afterany:14\"",
                   "dependency");
    }
    Result<std::vector<core::Dependency>> deps =
        common::ParseDependencies(it->get_ref<const std::string&>());
    if (!deps.ok()) return Error(400, deps.message(), "dependency");
    for (const core::Dependency& d : deps.value()) {
      std::optional<core::JobState> ended;
      std::string tenant;
      if (const core::JobRecord* j = s.driver.core->job(d.job)) {
        tenant = j->request.tenant;
        if (core::IsTerminal(j->state)) ended = j->state;
      } else {
        Result<std::optional<store::JobRow>> row = s.driver.store->GetJob(d.job);
        if (!row.ok()) return StoreFailed(row.status());
        if (row.value()) {
          tenant = row.value()->tenant;
          ended = row.value()->state;
        }
      }
      // Another tenant's job reads as absent: its existence is not the
      // caller's to learn.
      if (tenant.empty() || !caller.InScope(tenant)) {
        return Error(400,
                     "dependency: job " + std::to_string(d.job) +
                         " does not exist (or is not yours to see); `topo queue --all` lists jobs",
                     "dependency");
      }
      if (ended && !core::IsTerminal(*ended)) ended.reset();  // a row of a live job
      if (!ended) {
        request.dependencies.push_back(d);
        continue;
      }
      if (!core::DependencyMet(d.kind, *ended)) {
        return Error(400,
                     "dependency: job " + std::to_string(d.job) + " " +
                         std::string(core::JobStateName(*ended)) + ", so " +
                         std::string(core::DependencyKindName(d.kind)) + ":" +
                         std::to_string(d.job) + " can never be met",
                     "dependency");
      }
    }
  }
  // Refuse what can never run here, before it is logged.
  if (request.spec.gpus > s.driver.topology->total_gpus()) {
    // As infeasible as any other job that cannot fit the empty cluster.
    return ErrorWithCode(400, "infeasible",
                         "spec.gpus: " + std::to_string(request.spec.gpus) +
                             " GPUs is more than the cluster has (" +
                             std::to_string(s.driver.topology->total_gpus()) + ")",
                         "spec.gpus");
  }
  core::Placement fit = s.driver.judge->Place(request.spec, *s.driver.empty);
  if (fit.outcome == core::PlaceOutcome::kInfeasible) {
    // Its own code, so a client tells "can never fit" from a malformed request.
    return ErrorWithCode(400, "infeasible",
                         "spec: the job can never be placed on this cluster: " + fit.reason,
                         "spec");
  }

  const std::string tenant = request.tenant;
  if (!array.tasks.empty()) {
    // Consecutive ids, the first one names the array; every task goes into
    // the same group commit, so the answer (after it) covers them all.
    const JobId first = s.driver.next_job_id;
    Json ids = Json::array();
    for (int task : array.tasks) {
      const JobId id = s.driver.next_job_id++;
      core::JobRequest r = request;
      r.array_job = first;
      r.array_task = task;
      r.array_throttle = array.throttle;
      s.driver.Step(core::JobSubmitted{id, std::move(r)}, s.Actor(caller));
      if (s.metrics != nullptr) s.metrics->Submission(tenant);
      ids.push_back(id);
    }
    return JsonResponse(
        201, {{"id", first},
              {"array", {{"job", first}, {"tasks", array.tasks}, {"throttle", array.throttle}}},
              {"ids", std::move(ids)}});
  }
  const JobId id = s.driver.next_job_id++;
  s.driver.Step(core::JobSubmitted{id, std::move(request)}, s.Actor(caller));
  if (s.metrics != nullptr) s.metrics->Submission(tenant);
  const core::JobRecord* j = s.driver.core->job(id);
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
  std::optional<std::string> user;
  if (auto it = q.find("user"); it != q.end()) {
    if (!ValidUserName(it->second)) {
      return Error(400,
                   "user: not a user name (1-64 of a-z 0-9 _ . -, '@' after the first); "
                   "`topo users` lists them",
                   "user");
    }
    user = it->second;
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
  auto wanted = [&](const std::string& job_tenant, const std::string& job_user,
                    core::JobState state) {
    if (!caller.InScope(job_tenant)) return false;
    if (tenant && job_tenant != *tenant) return false;
    if (user && job_user != *user) return false;
    if (!states.empty() && !states.count(std::string(core::JobStateName(state)))) return false;
    return all || !core::IsTerminal(state);
  };
  std::map<JobId, int> positions;
  if (s.driver.core != nullptr) positions = QueuePositions(*s.driver.core);
  Json jobs = Json::array();
  JobId last = after;
  bool more = false;
  if (!all && s.driver.core != nullptr) {
    for (auto it = s.driver.core->jobs().upper_bound(after); it != s.driver.core->jobs().end();
         ++it) {
      const core::JobRecord& j = it->second;
      if (!wanted(j.request.tenant, j.request.user, j.state)) continue;
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
      Result<std::vector<store::JobRow>> rows = s.driver.store->ListJobs(query);
      if (!rows.ok()) return Error(503, "the store failed: " + rows.message());
      if (rows.value().empty()) break;
      for (const store::JobRow& r : rows.value()) {
        query.after_id = r.id;
        const core::JobRecord* live = s.driver.core != nullptr ? s.driver.core->job(r.id) : nullptr;
        if (!wanted(r.tenant, r.user, live != nullptr ? live->state : r.state)) continue;
        if (static_cast<int64_t>(jobs.size()) == limit) {
          more = true;
          break;
        }
        Json summary = live != nullptr ? RecordSummary(s, *live, &positions) : RowSummary(s, r);
        const core::JobState state = live != nullptr ? live->state : r.state;
        if (core::IsTerminal(state) && summary.value("nodes", 0) == 0) {
          summary["nodes"] = r.last_run_nodes;
        }
        jobs.push_back(std::move(summary));
        last = r.id;
      }
    }
  }
  return JsonResponse(
      200, Json{{"jobs", std::move(jobs)}, {"next_after", more ? Json(last) : Json(nullptr)}});
}

// Where the rank of a job that holds no GPUs now (it ended, or waits after
// a requeue) last ran: the newest start or restart in its log ("" if none).
std::string LastRankNode(ServiceState& s, JobId id, int64_t rank) {
  std::string node;
  for (const store::RawEvent& e : JobEvents(s, id)) {
    Json body = Json::parse(e.body, nullptr, false);
    if (!body.is_object() || !body.contains("commands")) continue;
    for (const Json& c : body["commands"]) {
      const std::string type = c.value("type", "");
      if ((type != "start_job" && type != "restart_job") || c.value("id", JobId{0}) != id) continue;
      const Json& ranks = c.contains("ranks") ? c["ranks"] : Json();
      if (ranks.is_array() && rank < static_cast<int64_t>(ranks.size()) && ranks[rank].is_array() &&
          !ranks[rank].empty() && ranks[rank][0].is_string()) {
        node = ranks[rank][0];
      }
    }
  }
  return node;
}

// GET /v1/jobs/ID/logs?rank=N&offset=O&max=M: a piece of one rank's log,
// read by the agent of the node that runs (or last ran) the rank. Deferred:
// the agent's `logs` reply answers it (Service::TakeDeferredAnswers).
HttpResponse Logs(ServiceState& s, const Caller& caller, const Route& route,
                  std::optional<JobId> id) {
  if (!id) return NoSuchJob(route.path[1]);
  // What this needs of the job, without the full view (its metrics and
  // history): `topo logs --follow` asks every second.
  int64_t gpus = 0;
  std::string state;
  const core::JobRecord* live = s.driver.core != nullptr ? s.driver.core->job(*id) : nullptr;
  if (live != nullptr) {
    if (!caller.InScope(live->request.tenant)) return NoSuchJob(route.path[1]);
    gpus = live->request.spec.gpus;
    state = std::string(core::JobStateName(live->state));
  } else {
    Result<std::optional<store::JobRow>> row = s.driver.store->GetJob(*id);
    if (!row.ok()) return Error(503, "the store failed: " + row.message());
    if (!row.value() || !caller.InScope(row.value()->tenant)) return NoSuchJob(route.path[1]);
    const Json spec = Json::parse(row.value()->spec_json, nullptr, false);
    gpus = spec.is_object() ? spec.value("gpus", int64_t{0}) : 0;
    state = std::string(core::JobStateName(row.value()->state));
  }
  const auto& q = route.query;
  int64_t rank = 0;
  int64_t offset = 0;
  int64_t max = 64 << 10;
  auto number = [&](const char* key, int64_t lo, int64_t hi, int64_t& out) -> bool {
    auto it = q.find(key);
    if (it == q.end()) return true;
    const std::string& v = it->second;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    return ec == std::errc() && end == v.data() + v.size() && out >= lo && out <= hi;
  };
  if (!number("rank", 0, std::max<int64_t>(gpus - 1, 0), rank)) {
    return Error(400, "rank must be a rank of the job: 0.." + std::to_string(gpus - 1), "rank");
  }
  if (!number("offset", INT64_MIN / 2, INT64_MAX / 2, offset)) {
    return Error(400, "offset must be a byte offset (negative: that many bytes from the end)",
                 "offset");
  }
  if (!number("max", 1, proto::kMaxLogChunkBytes, max)) {
    return Error(400, "max must be 1.." + std::to_string(proto::kMaxLogChunkBytes) + " bytes",
                 "max");
  }
  std::string node;
  if (live != nullptr && rank < static_cast<int64_t>(live->ranks.size())) {
    node = s.driver.topology->node(live->ranks[rank].node).name;
  }
  if (node.empty()) node = LastRankNode(s, *id, rank);
  if (node.empty()) {
    return Error(409, "job " + std::to_string(*id) + " is " + state + " and rank " +
                          std::to_string(rank) + " has not run anywhere yet; no log to read");
  }
  Result<int64_t> req = s.agents->AskLogs(node, *id, static_cast<int>(rank), offset, max);
  if (!req.ok()) return Error(503, req.message());
  HttpResponse r;
  r.deferred = req.value();
  return r;
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
  const bool known = action == "cancel" || action == "hold" || action == "release" ||
                     action == "checkpoint" || action == "logs";
  r.route = "/v1/jobs/{id}/" + (known ? action : std::string("?"));
  if (!known) {
    HttpResponse e =
        Error(404, "no such route; jobs take /cancel, /hold, /release, /checkpoint or /logs");
    e.route = r.route;
    return e;
  }
  if (action == "logs") {
    HttpResponse x =
        m == "GET" ? Logs(s, caller, route, id) : Error(405, "use GET /v1/jobs/ID/logs");
    x.route = r.route;
    return x;
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
  const core::JobRecord* j = s.driver.core != nullptr ? s.driver.core->job(*id) : nullptr;
  const std::string state = (*job.value())["state"];
  if (j == nullptr || core::IsTerminal(j->state)) {
    return finish(Error(
        409, "job " + std::to_string(*id) + " is already " + state + "; nothing to " + action));
  }
  if (action == "checkpoint") {
    // Not a state change: the agents signal the ranks, and the step they
    // complete comes back as a logged checkpoint event.
    if (j->state != core::JobState::kRunning || j->ranks.empty()) {
      return finish(Error(409, "job " + std::to_string(*id) + " is " + state +
                                   "; only a running job can checkpoint"));
    }
    if (reason.empty()) reason = "requested by " + caller.user.name;
    std::vector<std::string> nodes;
    for (const core::NodeLaunch& n : core::GroupByNode(j->ranks)) {
      nodes.push_back(s.driver.topology->node(n.node).name);
    }
    s.agents->AskCheckpoint(nodes, *id, reason);
    Audit(s, caller, "job.checkpoint", {{"job", *id}, {"reason", reason}});
    return finish(JsonResponse(202, Json{{"id", *id},
                                         {"checkpoint_step", j->checkpoint_step},
                                         {"nodes", nodes.size()},
                                         {"reason", reason}}));
  }
  if (action == "cancel") {
    if (reason.empty()) reason = "cancelled by " + caller.user.name;
    s.driver.Step(core::JobCancelled{*id, reason}, s.Actor(caller));
  } else if (action == "hold") {
    if (j->state != core::JobState::kQueued) {
      return finish(Error(
          409, "job " + std::to_string(*id) + " is " + state + "; only a queued job can be held"));
    }
    s.driver.Step(core::JobHoldChanged{*id, true}, s.Actor(caller));
  } else {
    if (j->state != core::JobState::kHeld) {
      return finish(Error(
          409, "job " + std::to_string(*id) + " is " + state + ", not held; nothing to release"));
    }
    s.driver.Step(core::JobHoldChanged{*id, false}, s.Actor(caller));
  }
  Result<std::optional<Json>> after = FindJob(s, caller, *id, false);
  if (!after.ok() || !after.value()) return finish(JsonResponse(200, Json{{"id", *id}}));
  return finish(JsonResponse(200, *after.value()));
}

}  // namespace topo::daemon
