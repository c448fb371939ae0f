// The one builder of job views (api/job_view.hpp): a job's summary from the
// core's record or the store's row, its accounting part from its runs, and
// the detail of GET /v1/jobs/{id} with its history and incidents.

#include "daemon/api/job_view.hpp"

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <set>

#include "daemon/api/handlers.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_chain.hpp"
#include "topo/common/job_io.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/perf_model.hpp"

namespace topo::daemon {

using core::JobId;
using core::Result;
using core::TimeMs;

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

std::map<JobId, int> QueuePositions(const core::SchedulerCore& core) {
  std::map<JobId, int> positions;
  int i = 0;
  for (JobId id : core.WaitingJobs()) positions[id] = ++i;
  return positions;
}

std::vector<store::RawEvent> JobEvents(const ServiceState& s, JobId id) {
  store::EventQuery q;
  q.job = id;
  q.limit = 1000;
  Result<std::vector<store::RawEvent>> events = s.driver.store().ListEvents(q);
  return events.ok() ? std::move(events).value() : std::vector<store::RawEvent>{};
}

namespace {

std::optional<int64_t> TimeOrEmpty(TimeMs t) {
  return t < 0 ? std::nullopt : std::optional<int64_t>(t);
}

int CountNodes(const std::vector<core::GpuSlot>& ranks) {
  std::set<core::NodeId> nodes;
  for (const core::GpuSlot& s : ranks) nodes.insert(s.node);
  return static_cast<int>(nodes.size());
}

// The distinct node names of a stored ranks JSON ([[node, gpu], ...]), in
// rank order.
std::vector<std::string> StoredNodes(const std::string& ranks_json) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  const Json ranks = Json::parse(ranks_json, nullptr, false);
  if (!ranks.is_array()) return out;
  for (const Json& slot : ranks) {
    if (slot.is_array() && !slot.empty() && slot[0].is_string() &&
        seen.insert(slot[0].get<std::string>()).second) {
      out.push_back(slot[0].get<std::string>());
    }
  }
  return out;
}

double Hours(int64_t gpu_ms) { return static_cast<double>(gpu_ms) / 3600000.0; }

}  // namespace

Result<api::JobView> RecordView(const ServiceState& s, const core::JobRecord& j,
                                const std::map<JobId, int>* positions) {
  api::JobView v;
  v.id = j.id;
  v.name = j.request.spec.name;
  v.tenant = j.request.tenant;
  v.user = j.request.user;
  v.state = j.state;
  v.reason = j.reason;
  v.gpus = j.request.spec.gpus;
  v.nodes = CountNodes(j.ranks);
  if (!j.ranks.empty() && s.driver.topology() != nullptr) {
    v.gpu_model = s.driver.topology()->node(j.ranks.front().node).gpu_model;
  }
  if (v.nodes == 0 && core::IsTerminal(j.state)) {
    // Its ranks are gone: the last run's, as the store keeps them.
    Result<std::optional<store::JobRow>> row = s.driver.store().GetJob(j.id);
    if (!row.ok()) return row.status();
    if (row.value()) v.nodes = row.value()->last_run_nodes;
  }
  v.priority = j.request.priority;
  v.submit_ms = j.submit_time;
  v.start_ms = TimeOrEmpty(j.first_start);
  v.end_ms = TimeOrEmpty(j.end_time);
  // The job's own limit, else its partition's default, else the scheduler's.
  const TimeMs fallback = s.driver.scheduler_config().default_time_limit;
  const TimeMs limit = s.driver.core() != nullptr
                           ? s.driver.core()->node_sets().BaseTimeLimit(j.request, fallback)
                       : j.request.time_limit > 0 ? j.request.time_limit
                                                  : fallback;
  v.time_limit_s = limit / core::kSecond;
  v.restarts = j.restarts;
  v.checkpoint_step = j.checkpoint_step;
  if (positions != nullptr) {
    if (auto it = positions->find(j.id); it != positions->end()) v.queue_position = it->second;
  }
  if (s.driver.core() != nullptr) v.estimated_start_ms = s.driver.core()->EstimatedStart(j.id);
  v.predicted_slowdown = PredictedSlowdown(s, j);
  if (!j.request.dependencies.empty()) {
    v.dependency = common::FormatDependencies(j.request.dependencies);
  }
  if (j.request.array_job != 0) {
    v.array = api::ArrayTask{j.request.array_job, j.request.array_task, j.request.array_throttle};
  }
  // The partition it runs in: the one it named, or the default one it got.
  if (s.driver.core() != nullptr) {
    if (const core::PartitionConfig* p = s.driver.core()->node_sets().PartitionOf(j.request)) {
      v.partition = p->name;
    }
  }
  if (!v.partition && !j.request.partition.empty()) v.partition = j.request.partition;
  if (!j.request.reservation.empty()) v.reservation = j.request.reservation;
  return v;
}

api::JobView RowView(const store::JobRow& r, TimeMs default_time_limit) {
  const Json spec = Json::parse(r.spec_json, nullptr, false);
  api::JobView v;
  v.id = r.id;
  if (spec.is_object()) {
    const Json& name = spec.value("name", Json());
    const Json& gpus = spec.value("gpus", Json());
    if (name.is_string()) v.name = name.get<std::string>();
    if (gpus.is_number_integer()) v.gpus = gpus.get<int>();
  }
  v.tenant = r.tenant;
  v.user = r.user;
  v.state = r.state;
  v.reason = r.reason;
  const int held = static_cast<int>(StoredNodes(r.ranks_json).size());
  // A job that ended shows where its last run was.
  v.nodes = held == 0 && core::IsTerminal(r.state) ? r.last_run_nodes : held;
  v.priority = r.priority;
  v.submit_ms = r.submit_ms;
  v.start_ms = TimeOrEmpty(r.start_ms);
  v.end_ms = TimeOrEmpty(r.end_ms);
  v.time_limit_s = (r.time_limit_ms > 0 ? r.time_limit_ms : default_time_limit) / core::kSecond;
  v.restarts = r.restarts;
  v.checkpoint_step = r.checkpoint_step;
  if (!r.partition.empty()) v.partition = r.partition;
  if (!r.reservation.empty()) v.reservation = r.reservation;
  return v;
}

void AddAccounting(api::JobView& view, std::span<const store::JobRunRow> runs, TimeMs now_ms) {
  api::JobAccounting a;
  int64_t gpu_ms = 0;
  for (const store::JobRunRow& r : runs) {
    api::RunView run;
    run.run = r.run;
    run.start_ms = r.start_ms;
    run.end_ms = TimeOrEmpty(r.end_ms);
    run.gpus = r.gpus;
    run.node_names = StoredNodes(r.ranks_json);
    run.nodes = static_cast<int>(run.node_names.size());
    if (r.end_ms >= 0) run.end_reason = r.end_reason;
    run.exit_code = r.exit_code;
    run.gpu_hours = Hours(r.GpuMsAt(now_ms));
    gpu_ms += r.GpuMsAt(now_ms);
    a.runs.push_back(std::move(run));
  }
  // The nodes `nodes` counts: those it holds (its current run's), or those
  // of its last run once it ended.
  if (view.nodes > 0 && !a.runs.empty()) a.node_names = a.runs.back().node_names;
  if (view.start_ms) {
    a.queue_wait_s = static_cast<double>(*view.start_ms - view.submit_ms) / 1000.0;
  }
  if (!runs.empty()) a.exit_code = runs.back().exit_code;
  a.gpu_hours = Hours(gpu_ms);
  view.accounting = std::move(a);
}

namespace {

std::vector<api::DomainGpus> PerTier(const core::Topology& topo,
                                     const std::vector<core::GpuSlot>& ranks, int tier) {
  std::map<core::DomainId, int> gpus;
  for (const core::GpuSlot& slot : ranks) gpus[topo.Ancestor(slot.node, tier)] += 1;
  std::vector<api::DomainGpus> out;
  for (const auto& [d, n] : gpus) out.push_back({topo.domain(d).name, n});
  return out;
}

api::PlacementView PlacementOf(const core::Topology& topo,
                               const std::vector<core::GpuSlot>& ranks) {
  return {CountNodes(ranks), PerTier(topo, ranks, topo.hbd_tier()),
          PerTier(topo, ranks, topo.leaf_tier()), PerTier(topo, ranks, topo.pod_tier())};
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
// its wait: -1 and empty while it waits), and the wall time of work lost: from
// the newest checkpoint stored before the failure, or from the run's start
// when that is later (the core's ProgressMark), to the failure. A rank's exit
// whose verdict waited (attribution_window) is the failure when it turned
// out an application failure (decided at a later tick: the cause is still
// rank_exited) and is named in the incident of the node whose loss took it
// over. A lost node's incident names the node.
std::vector<api::IncidentView> Incidents(
    const std::vector<store::RawEvent>& events, JobId id,
    const std::function<std::string(const store::RawEvent&)>& actor_of) {
  std::vector<api::IncidentView> out;
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
  auto slot_nodes = [](const Json& c) {
    std::set<std::string> nodes;
    for (const Json& slot : c.value("ranks", Json::array())) {
      if (slot.is_array() && !slot.empty() && slot[0].is_string()) nodes.insert(slot[0]);
    }
    return nodes;
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
        api::IncidentView& w = out[static_cast<size_t>(waiting)];
        w.restart_ms = e.time_ms - w.time_ms;
        w.checkpoint_step = c.value("checkpoint_step", int64_t{-1});
        w.restart_count = c.value("restart_count", 0);
        waiting = -1;
      }
      const std::set<std::string> previous_nodes = run_nodes;
      if (type == "start_job" || restart) run_nodes = slot_nodes(c);
      if (!restart && !requeue) {
        if (type == "start_job") {
          run_start = e.time_ms;
          held = Exit{};
        }
        continue;
      }
      api::IncidentView incident;
      incident.time_ms = e.time_ms;
      incident.cause = e.kind;
      incident.actor = actor_of(e);
      std::string& reason = incident.reason;
      reason = ev.value("reason", "");
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
        incident.cause = "rank_exited";
        incident.actor = actor_of(*held.event);
        reason = exit_text(held);
        failed_at = held.event->time_ms;
        std::string left;
        if (restart) {
          const std::set<std::string> now_on = slot_nodes(c);
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
      if (e.kind == "gpu_event") incident.detection_ms = 0;
      for (const std::string_view mark : {"silent for ", "disconnected for "}) {
        const size_t at = reason.find(mark);
        int64_t ms = 0;
        if (at == std::string::npos) continue;
        const char* from = reason.data() + at + mark.size();
        if (std::from_chars(from, reason.data() + reason.size(), ms).ec == std::errc()) {
          incident.detection_ms = ms;
        }
      }
      incident.checkpoint_step = restart ? c.value("checkpoint_step", int64_t{-1}) : -1;
      if (restart) {
        incident.restart_ms = 0;
        incident.restart_count = c.value("restart_count", 0);
      }
      incident.requeued = requeue;
      const int64_t since = std::max(run_start, newest_step_ms);
      incident.lost_work_s =
          since >= 0 ? static_cast<double>(std::max<int64_t>(0, failed_at - since)) / 1000.0 : 0.0;
      out.push_back(std::move(incident));
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
std::vector<api::JobEventView> History(const ServiceState& s, const Caller& caller,
                                       const std::vector<store::RawEvent>& events, JobId id) {
  const TenantOf tenant_of = [&](int64_t job) { return s.driver.JobTenant(job); };
  std::vector<api::JobEventView> out;
  for (const store::RawEvent& e : events) {
    Json body = Json::parse(e.body, nullptr, false);
    std::optional<ScopedEvent> seen = ScopeEvent(caller, body, e.actor, tenant_of);
    if (!seen) continue;
    api::JobEventView item{e.seq, e.time_ms, seen->actor, e.kind, std::nullopt, std::nullopt};
    if (body.is_object() && body.contains("commands")) {
      for (const Json& c : body["commands"]) {
        if (c.value("type", "") == "job_state_changed" && c.value("id", JobId{0}) == id) {
          item.state = common::ParseJobState(c.value("state", ""));
          item.reason = c.value("reason", "");
        }
      }
    }
    out.push_back(std::move(item));
  }
  return out;
}

// The accounting part from the job's runs in the store.
core::Status AddRuns(const ServiceState& s, api::JobView& view) {
  Result<std::vector<store::JobRunRow>> runs =
      s.driver.store().ListJobRuns(std::vector<JobId>{view.id});
  if (!runs.ok()) return runs.status();
  AddAccounting(view, runs.value(), s.driver.now());
  return core::Status::Ok();
}

api::JobDetail RecordDetail(const ServiceState& s, const core::JobRecord& j) {
  const core::Topology& topo = *s.driver.topology();
  api::JobDetail d;
  d.spec = j.request.spec;
  api::JobProcessView p;
  p.command = j.request.command;
  p.launch = j.request.process.launch;
  p.env = j.request.process.env;
  auto given = [](const std::string& v) {
    return v.empty() ? std::nullopt : std::optional<std::string>(v);
  };
  p.chdir = given(j.request.process.working_dir);
  p.output = given(j.request.process.output);
  p.error = given(j.request.process.error);
  p.limits = {j.request.memory_mb_per_node, j.request.cpu_millis_per_node / 1000.0};
  d.process = std::move(p);
  for (size_t r = 0; r < j.ranks.size(); ++r) {
    d.ranks.push_back({static_cast<int>(r), topo.node(j.ranks[r].node).name, j.ranks[r].gpu});
  }
  for (core::NodeId n : j.spares) d.spares.push_back(topo.node(n).name);
  if (!j.ranks.empty()) d.placement = PlacementOf(topo, j.ranks);
  if (static_cast<int>(j.ranks.size()) == j.request.spec.gpus) {
    d.metrics = api::MetricsViewOf(core::Evaluate(j.request.spec, topo, j.ranks), topo);
  }
  d.predicted = PredictionOf(topo, j);
  return d;
}

api::JobDetail RowDetail(const store::JobRow& r) {
  api::JobDetail d;
  Result<core::JobSpec> spec = common::ParseJobSpec(r.spec_json);
  if (spec.ok()) d.spec = std::move(spec).value();
  const Json stored = Json::parse(r.ranks_json, nullptr, false);
  if (stored.is_array()) {
    for (size_t i = 0; i < stored.size(); ++i) {
      const Json& slot = stored[i];
      if (!slot.is_array() || slot.size() != 2 || !slot[0].is_string() ||
          !slot[1].is_number_integer()) {
        continue;
      }
      d.ranks.push_back({static_cast<int>(i), slot[0].get<std::string>(), slot[1].get<int>()});
    }
  }
  const Json spares = Json::parse(r.spares_json, nullptr, false);
  if (spares.is_array()) {
    for (const Json& n : spares) {
      if (n.is_string()) d.spares.push_back(n.get<std::string>());
    }
  }
  return d;
}

}  // namespace

std::optional<api::PredictionView> PredictionOf(const core::Topology& topo,
                                                const core::JobRecord& job) {
  if (static_cast<int>(job.ranks.size()) != job.request.spec.gpus) return std::nullopt;
  core::Result<core::StepPrediction> p = core::PredictPlacement(job.request.spec, topo, job.ranks);
  if (!p.ok()) return std::nullopt;
  core::Result<core::ResolvedModel> m = core::ResolveModel(job.request.spec);
  const std::string model =
      m.ok() && !m.value().spec.preset.empty() ? m.value().spec.preset : "custom";
  return api::PredictionViewOf(p.value(), model);
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

Result<std::optional<api::JobView>> FindJob(const ServiceState& s, const Caller& caller, JobId id,
                                            bool whole) {
  using Found = std::optional<api::JobView>;
  api::JobView view;
  if (const core::JobRecord* j = s.driver.core() != nullptr ? s.driver.core()->job(id) : nullptr) {
    if (!caller.InScope(j->request.tenant)) return Found();
    std::map<JobId, int> positions;
    if (whole && j->state == core::JobState::kQueued) positions = QueuePositions(*s.driver.core());
    Result<api::JobView> record = RecordView(s, *j, &positions);
    if (!record.ok()) return record.status();
    view = std::move(record).value();
    if (whole) view.detail = RecordDetail(s, *j);
  } else {
    Result<std::optional<store::JobRow>> row = s.driver.store().GetJob(id);
    if (!row.ok()) return row.status();
    if (!row.value() || !caller.InScope(row.value()->tenant)) return Found();
    view = RowView(*row.value(), s.driver.scheduler_config().default_time_limit);
    if (whole) view.detail = RowDetail(*row.value());
  }
  if (whole) {
    if (core::Status st = AddRuns(s, view); !st.ok()) return st;
    const std::vector<store::RawEvent> events = JobEvents(s, id);
    view.detail->history = History(s, caller, events, id);
    view.detail->incidents = Incidents(events, id, ScopedActor(s, caller));
  }
  return Found(std::move(view));
}

}  // namespace topo::daemon
