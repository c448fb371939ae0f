// The views of a job (api/job_view.hpp): the summary of the job list, the
// whole view of GET /v1/jobs/{id} with its history and incidents.

#include "daemon/api/job_view.hpp"

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <set>

#include "daemon/api/handlers.hpp"
#include "daemon/api/reads.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_chain.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/job_process.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/perf_model.hpp"

namespace topo::daemon {

using core::JobId;
using core::Result;
using core::TimeMs;

namespace {

Json TimeOrNull(TimeMs t) { return t < 0 ? Json(nullptr) : Json(t); }

}  // namespace

std::optional<JobId> ParseId(std::string_view text) {
  JobId id = 0;
  if (text.empty() || text.size() > 18) return std::nullopt;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || p != text.data() + text.size() || id <= 0) return std::nullopt;
  return id;
}

core::Status NoSuchJob(std::string_view id) {
  return NotFound("no job " + std::string(id.substr(0, 40)) +
                  " that you can see; `topo queue --all` lists yours");
}

namespace {

int CountNodes(const std::vector<core::GpuSlot>& ranks) {
  std::set<core::NodeId> nodes;
  for (const core::GpuSlot& s : ranks) nodes.insert(s.node);
  return static_cast<int>(nodes.size());
}

TimeMs TimeLimit(const ServiceState& s, TimeMs requested) {
  return requested > 0 ? requested : s.driver.scheduler_config().default_time_limit;
}

}  // namespace

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
  if (s.driver.core() != nullptr) {
    if (std::optional<TimeMs> start = s.driver.core()->EstimatedStart(j.id)) {
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

namespace {

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

}  // namespace

std::vector<store::RawEvent> JobEvents(const ServiceState& s, JobId id) {
  store::EventQuery q;
  q.job = id;
  q.limit = 1000;
  Result<std::vector<store::RawEvent>> events = s.driver.store().ListEvents(q);
  return events.ok() ? std::move(events).value() : std::vector<store::RawEvent>{};
}

namespace {

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
std::function<std::string(const store::RawEvent&)> ScopedActor(const ServiceState& s,
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
Json History(const ServiceState& s, const Caller& caller,
             const std::vector<store::RawEvent>& events, JobId id) {
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
          core::PredictPlacement(job.request.spec, *s.driver.topology(), job.ranks);
      if (p.ok()) c.value = p.value().slowdown;
    }
  }
  if (c.value < 0) return std::nullopt;
  return c.value;
}

void PruneSlowdowns(const ServiceState& s) {
  std::erase_if(s.slowdowns, [&](const auto& entry) {
    const core::JobRecord* j =
        s.driver.core() != nullptr ? s.driver.core()->job(entry.first) : nullptr;
    return j == nullptr ||
           (j->state != core::JobState::kRunning && j->state != core::JobState::kPreempting);
  });
}

namespace {

// The job's runs (job_runs) and GPU-hours into its detailed view; a
// finished job shows the node count of its newest run.
core::Status AddRuns(const ServiceState& s, JobId id, Json& out) {
  Result<std::vector<store::JobRunRow>> runs = s.driver.store().ListJobRuns(std::vector<JobId>{id});
  if (!runs.ok()) return runs.status();
  out["runs"] = JobRunsJson(runs.value(), s.driver.now());
  out["gpu_hours"] = JobGpuHours(runs.value(), s.driver.now());
  const std::optional<core::JobState> state = common::ParseJobState(out.value("state", ""));
  if (state && core::IsTerminal(*state) && out.value("nodes", 0) == 0 && !runs.value().empty()) {
    out["nodes"] = runs.value().back().nodes;
  }
  return core::Status::Ok();
}

}  // namespace

// A job in the caller's scope as JSON, or nullopt.
Result<std::optional<Json>> FindJob(const ServiceState& s, const Caller& caller, JobId id,
                                    bool detail) {
  if (const core::JobRecord* j = s.driver.core() != nullptr ? s.driver.core()->job(id) : nullptr) {
    if (!caller.InScope(j->request.tenant)) return std::optional<Json>();
    std::map<JobId, int> positions;
    if (detail && (j->state == core::JobState::kQueued))
      positions = QueuePositions(*s.driver.core());
    Json out = RecordSummary(s, *j, &positions);
    if (detail) {
      const core::Topology& topo = *s.driver.topology();
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
  Result<std::optional<store::JobRow>> row = s.driver.store().GetJob(id);
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

}  // namespace topo::daemon
