// /v1/jobs: the list, one job's view, and what a user does to a job
// (cancel, hold, release, checkpoint). Submissions: jobs_submit.cpp; logs:
// job_logs.cpp; the views themselves: job_view.cpp.

#include <set>

#include "daemon/api/handlers.hpp"
#include "daemon/api/job_view.hpp"
#include "topo/common/event_json.hpp"
#include "topo/core/launch.hpp"

namespace topo::daemon {

using core::JobId;
using core::Result;
using core::Status;

Answer ListJobs(const ServiceState& s, const Caller& caller, const Route& route) {
  const auto& q = route.query;
  const bool all = q.count("all") && q.at("all") != "0" && q.at("all") != "false";
  std::optional<std::string> tenant;
  if (auto it = q.find("tenant"); it != q.end()) {
    if (!ValidTenantName(it->second)) return Invalid("tenant: not a tenant name", "tenant");
    tenant = it->second;
  }
  std::optional<std::string> user;
  if (auto it = q.find("user"); it != q.end()) {
    if (!ValidUserName(it->second)) {
      return Invalid(
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
        return Invalid("state: unknown job state \"" + name.substr(0, 40) +
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
    if (!a || *a < 0) return Invalid("after: must be a job id", "after");
    after = *a;
  }
  if (auto it = q.find("limit"); it != q.end()) {
    std::optional<JobId> l = ParseId(it->second);
    if (!l || *l > 10000) return Invalid("limit: must be 1..10000", "limit");
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
  if (s.driver.core() != nullptr) positions = QueuePositions(*s.driver.core());
  api::JobList list;
  JobId last = after;
  bool more = false;
  if (!all && s.driver.core() != nullptr) {
    for (auto it = s.driver.core()->jobs().upper_bound(after); it != s.driver.core()->jobs().end();
         ++it) {
      const core::JobRecord& j = it->second;
      if (!wanted(j.request.tenant, j.request.user, j.state)) continue;
      if (static_cast<int64_t>(list.jobs.size()) == limit) {
        more = true;
        break;
      }
      Result<api::JobView> view = RecordView(s, j, &positions);
      if (!view.ok()) return StoreFailed(view.status());
      list.jobs.push_back(std::move(view).value());
      last = j.id;
    }
  } else if (all) {
    store::JobQuery query;
    query.include_terminal = true;
    query.limit = 1000;
    query.after_id = after;
    while (!more) {
      Result<std::vector<store::JobRow>> rows = s.driver.store().ListJobs(query);
      if (!rows.ok()) return StoreFailed(rows.status());
      if (rows.value().empty()) break;
      for (const store::JobRow& r : rows.value()) {
        query.after_id = r.id;
        const core::JobRecord* live =
            s.driver.core() != nullptr ? s.driver.core()->job(r.id) : nullptr;
        if (!wanted(r.tenant, r.user, live != nullptr ? live->state : r.state)) continue;
        if (static_cast<int64_t>(list.jobs.size()) == limit) {
          more = true;
          break;
        }
        if (live != nullptr) {
          Result<api::JobView> view = RecordView(s, *live, &positions);
          if (!view.ok()) return StoreFailed(view.status());
          list.jobs.push_back(std::move(view).value());
        } else {
          list.jobs.push_back(RowView(r, s.driver.scheduler_config().default_time_limit));
        }
        last = r.id;
      }
    }
  }
  if (more) list.next_after = last;
  return TextAnswer(200, api::WriteJobList(list));
}

Answer ShowJob(const ServiceState& s, const Caller& caller, const Route& route) {
  const std::string& text = route.param("id");
  std::optional<JobId> id = ParseId(text);
  if (!id) return NoSuchJob(text);
  Result<std::optional<api::JobView>> job = FindJob(s, caller, *id, true);
  if (!job.ok()) return StoreFailed(job.status());
  if (!job.value()) return NoSuchJob(text);
  return TextAnswer(200, api::WriteJobView(*job.value()));
}

namespace {

// A job the caller may act on, not yet ended, with the request's reason.
struct Target {
  JobId id = 0;
  const core::JobRecord* job = nullptr;
  std::string state;
  std::string reason;
};

Result<Target> ActionTarget(const ServiceState& s, const Caller& caller, const Route& route,
                            std::string_view action) {
  Result<Json> body = ParseBody(*route.request, true);
  if (!body.ok()) return body.status();
  if (Status e = UnknownField(body.value(), {"reason"}); !e.ok()) return e;
  Target t;
  if (Status e = ReasonField(body.value(), t.reason); !e.ok()) return e;
  const std::string& text = route.param("id");
  std::optional<JobId> id = ParseId(text);
  if (!id) return NoSuchJob(text);
  Result<std::optional<api::JobView>> job = FindJob(s, caller, *id, false);
  if (!job.ok()) return StoreFailed(job.status());
  if (!job.value()) return NoSuchJob(text);
  t.id = *id;
  t.job = s.driver.core() != nullptr ? s.driver.core()->job(*id) : nullptr;
  t.state = core::JobStateName(job.value()->state);
  if (t.job == nullptr || core::IsTerminal(t.job->state)) {
    return Conflict("job " + std::to_string(*id) + " is already " + t.state + "; nothing to " +
                    std::string(action));
  }
  return t;
}

// The job's summary after the action.
Answer AfterAction(const ServiceState& s, const Caller& caller, JobId id) {
  Result<std::optional<api::JobView>> after = FindJob(s, caller, id, false);
  if (!after.ok()) return StoreFailed(after.status());
  if (!after.value()) return NoSuchJob(std::to_string(id));
  return TextAnswer(200, api::WriteJobView(*after.value()));
}

}  // namespace

Answer CancelJob(ServiceState& s, const Caller& caller, const Route& route) {
  Result<Target> t = ActionTarget(s, caller, route, "cancel");
  if (!t.ok()) return t.status();
  std::string reason = t.value().reason;
  if (reason.empty()) reason = "cancelled by " + caller.user.name;
  s.driver.Step(core::JobCancelled{t.value().id, reason}, s.Actor(caller));
  return AfterAction(s, caller, t.value().id);
}

Answer HoldJob(ServiceState& s, const Caller& caller, const Route& route) {
  Result<Target> t = ActionTarget(s, caller, route, "hold");
  if (!t.ok()) return t.status();
  if (t.value().job->state != core::JobState::kQueued) {
    return Conflict("job " + std::to_string(t.value().id) + " is " + t.value().state +
                    "; only a queued job can be held");
  }
  s.driver.Step(core::JobHoldChanged{t.value().id, true}, s.Actor(caller));
  return AfterAction(s, caller, t.value().id);
}

Answer ReleaseJob(ServiceState& s, const Caller& caller, const Route& route) {
  Result<Target> t = ActionTarget(s, caller, route, "release");
  if (!t.ok()) return t.status();
  if (t.value().job->state != core::JobState::kHeld) {
    return Conflict("job " + std::to_string(t.value().id) + " is " + t.value().state +
                    ", not held; nothing to release");
  }
  s.driver.Step(core::JobHoldChanged{t.value().id, false}, s.Actor(caller));
  return AfterAction(s, caller, t.value().id);
}

// Not a state change: the agents signal the ranks, and the step they
// complete comes back as a logged checkpoint event.
Answer CheckpointJob(ServiceState& s, const Caller& caller, const Route& route) {
  Result<Target> t = ActionTarget(s, caller, route, "checkpoint");
  if (!t.ok()) return t.status();
  const core::JobRecord& j = *t.value().job;
  if (j.state != core::JobState::kRunning || j.ranks.empty()) {
    return Conflict("job " + std::to_string(t.value().id) + " is " + t.value().state +
                    "; only a running job can checkpoint");
  }
  std::string reason = t.value().reason;
  if (reason.empty()) reason = "requested by " + caller.user.name;
  std::vector<std::string> nodes;
  for (const core::NodeLaunch& n : core::GroupByNode(j.ranks)) {
    nodes.push_back(s.driver.topology()->node(n.node).name);
  }
  s.agents->AskCheckpoint(nodes, t.value().id, reason);
  s.Audit(caller, "job.checkpoint", {{"job", t.value().id}, {"reason", reason}});
  return JsonAnswer(202, Json{{"id", t.value().id},
                              {"checkpoint_step", j.checkpoint_step},
                              {"nodes", nodes.size()},
                              {"reason", reason}});
}

}  // namespace topo::daemon
