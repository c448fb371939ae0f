// POST /v1/jobs: a submission, validated whole before it is logged.

#include <algorithm>

#include "daemon/api/handlers.hpp"
#include "daemon/api/job_view.hpp"
#include "daemon/api/unix_accounts.hpp"
#include "topo/common/agent_protocol.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_chain.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/job_process.hpp"
#include "topo/common/user_api.hpp"

namespace topo::daemon {

using core::JobId;
using core::Result;
using core::Status;
using core::TimeMs;

namespace {

// The answer to a submission: the first job's summary (an array's first
// task) and, for an array, every task's id and index.
Result<api::SubmitAnswer> AnswerOf(const ServiceState& s, const std::vector<JobId>& ids) {
  api::SubmitAnswer answer;
  const JobId first = ids.front();
  if (const core::JobRecord* j = s.driver.core()->job(first); j != nullptr) {
    Result<api::JobView> view = RecordView(s, *j, nullptr);
    if (!view.ok()) return view.status();
    answer.job = std::move(view).value();
  } else {
    Result<std::optional<store::JobRow>> row = s.driver.store().GetJob(first);
    if (!row.ok()) return row.status();
    if (!row.value()) {
      return Unavailable("job " + std::to_string(first) +
                         " of this request is neither scheduled nor stored; retry");
    }
    answer.job = RowView(*row.value(), s.driver.scheduler_config().default_time_limit);
  }
  if (ids.size() > 1 || answer.job.array) {
    answer.ids = ids;
    std::vector<int> tasks;
    for (JobId id : ids) {
      const core::JobRecord* t = s.driver.core()->job(id);
      if (t == nullptr) break;
      tasks.push_back(t->request.array_task);
    }
    if (tasks.size() == ids.size()) answer.tasks = std::move(tasks);
  }
  return answer;
}

// A submission whose client_request_id made `ids` already (ascending; one
// job, or the tasks of an array): 200 and the first answer, with
// "duplicate": true. Nothing new is logged.
Answer AlreadySubmitted(const ServiceState& s, const std::vector<JobId>& ids) {
  Result<api::SubmitAnswer> answer = AnswerOf(s, ids);
  if (!answer.ok()) return StoreFailed(answer.status());
  answer.value().duplicate = true;
  return TextAnswer(200, api::WriteSubmitAnswer(answer.value()));
}

// NodeSets::Admit's error as the API answers it: the field in the request's
// words ("time_limit" is "time_limit_s").
Status SubmissionError(const Status& st) {
  std::string field = st.field();
  if (field.empty()) {
    for (std::string_view f : {"partition", "reservation", "time_limit", "spec.gpus"}) {
      if (st.message().rfind(std::string(f) + ":", 0) == 0 ||
          st.message().rfind(std::string(f) + " ", 0) == 0) {
        field = std::string(f);
        break;
      }
    }
  }
  if (field == "time_limit") field = "time_limit_s";
  return Status::Error(st.message(), st.code()).WithField(field);
}

}  // namespace

Answer SubmitJob(ServiceState& s, const Caller& caller, const Route& route) {
  Result<Json> parsed = ParseBody(*route.request, false);
  if (!parsed.ok()) return parsed.status();
  // Every rule that needs no state: types, bounds, names, the job spec,
  // the process fields, dependency and array syntax (common/user_api.hpp).
  std::string field;
  Result<api::SubmitRequest> read = api::ReadSubmitRequest(parsed.value(), &field);
  if (!read.ok()) return Invalid(read.message(), field);
  api::SubmitRequest& body = read.value();
  if (s.driver.core() == nullptr) return NoTopology();
  // The idempotency key: a retry of a submission that was made (its answer
  // lost, or sent to another replica) gets the jobs made the first time.
  if (body.client_request_id) {
    Result<std::vector<JobId>> made =
        s.driver.JobsByClientRequest(caller.user.name, *body.client_request_id);
    if (!made.ok()) return StoreFailed(made.status());
    if (!made.value().empty()) return AlreadySubmitted(s, made.value());
  }
  core::JobRequest request;
  request.spec = std::move(body.spec);
  request.client_request_id = body.client_request_id.value_or("");
  request.user = caller.user.name;
  request.tenant = body.tenant.value_or(caller.user.tenant);
  if (!caller.InScope(request.tenant)) {
    return Forbidden("user " + caller.user.name + " (tenant " + caller.user.tenant +
                     ") may not submit to tenant " + request.tenant);
  }
  if (s.driver.core()->tenant(request.tenant) == nullptr) {
    return Invalid("tenant " + request.tenant +
                       " does not exist; a cluster-admin creates it with `topo quota set " +
                       request.tenant + "`",
                   "tenant");
  }
  request.priority = body.priority.value_or(0);
  if (request.priority > 0 && !caller.admin()) {
    return Forbidden("a priority above 0 needs a tenant-admin or cluster-admin")
        .WithField("priority");
  }
  request.time_limit = body.time_limit_s.value_or(0) * core::kSecond;
  const int64_t checkpoint = body.checkpoint_interval_s.value_or(0);
  request.checkpoint_interval = checkpoint < 0 ? -1 : checkpoint * core::kSecond;
  // -1: never wait for a faster placement; 0 (absent): the tenant's or the
  // cluster's bound.
  const int64_t placement_wait = body.placement_wait_s.value_or(0);
  request.placement_wait = placement_wait < 0 ? -1 : placement_wait * core::kSecond;
  request.command = std::move(body.command);
  request.process.launch = body.launch.value_or(core::LaunchMode::kRank);
  if (body.env) request.process.env = std::move(*body.env);
  request.process.working_dir = body.chdir.value_or("");
  request.process.output = body.output.value_or("");
  request.process.error = body.error.value_or("");
  // Limits of the job's cgroup on each node (docs/jobs.md).
  request.memory_mb_per_node = body.memory_mb_per_node.value_or(0);
  if (body.cpus_per_node) {
    request.cpu_millis_per_node = static_cast<int>(*body.cpus_per_node * 1000 + 0.5);
  }
  // An array (Slurm's 0-99%8): one job per task, logged together. The
  // reader checked the text.
  common::ArraySpec array;
  if (body.array) array = common::ParseArraySpec(*body.array).value();
  const int64_t count = array.tasks.empty() ? 1 : static_cast<int64_t>(array.tasks.size());
  // Caps on waiting jobs, a tenant's quota and each user's, counting every
  // task of an array.
  if (const core::TenantConfig* t = s.driver.core()->tenant(request.tenant);
      t != nullptr && t->max_queued_jobs > 0 &&
      s.driver.waiting().OfTenant(request.tenant) + count > t->max_queued_jobs) {
    const std::string waiting = std::to_string(s.driver.waiting().OfTenant(request.tenant));
    if (count > 1) {
      return Conflict("the array's " + std::to_string(count) + " tasks would take tenant " +
                          request.tenant + " (" + waiting +
                          " jobs waiting) past its max_queued_jobs (" +
                          std::to_string(t->max_queued_jobs) + "); submit fewer tasks",
                      "array");
    }
    return Conflict("tenant " + request.tenant + " has " + waiting +
                        " jobs waiting, its max_queued_jobs: wait for some to start, or cancel "
                        "some (topo queue --tenant " +
                        request.tenant + ")",
                    "tenant");
  }
  if (s.config.max_queued_jobs_per_user > 0 &&
      s.driver.waiting().OfUser(request.user) + count > s.config.max_queued_jobs_per_user) {
    const std::string waiting = std::to_string(s.driver.waiting().OfUser(request.user));
    if (count > 1) {
      return Conflict(
          "the array's " + std::to_string(count) + " tasks would take user " + request.user + " (" +
              waiting + " jobs waiting) past the cluster's max_queued_jobs_per_user (" +
              std::to_string(s.config.max_queued_jobs_per_user) + "); submit fewer tasks",
          "array");
    }
    return Conflict("user " + request.user + " has " + waiting +
                        " jobs waiting, the cluster's max_queued_jobs_per_user: wait for some to "
                        "start, or cancel some (topo queue --me)",
                    "user");
  }
  // The ranks run as the submitter's Unix account (docs/jobs.md).
  request.unix_user = caller.user.unix_user.empty() ? caller.user.name : caller.user.unix_user;
  // Root and the uid floor (api/unix_accounts.hpp).
  if (Status e = CheckJobAccount(s.config, caller.user.name, request.unix_user); !e.ok()) return e;
  // Dependencies (Slurm's afterok:12:13,...): on jobs the caller may see;
  // one already met is dropped, one that can never be met is refused, the
  // rest wait in the core.
  if (body.dependency) {
    const std::vector<core::Dependency> deps = common::ParseDependencies(*body.dependency).value();
    for (const core::Dependency& d : deps) {
      std::optional<core::JobState> ended;
      std::string tenant;
      if (const core::JobRecord* j = s.driver.core()->job(d.job)) {
        tenant = j->request.tenant;
        if (core::IsTerminal(j->state)) ended = j->state;
      } else {
        Result<std::optional<store::JobRow>> row = s.driver.store().GetJob(d.job);
        if (!row.ok()) return StoreFailed(row.status());
        if (row.value()) {
          tenant = row.value()->tenant;
          ended = row.value()->state;
        }
      }
      // Another tenant's job reads as absent: its existence is not the
      // caller's to learn.
      if (tenant.empty() || !caller.InScope(tenant)) {
        return Invalid(
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
        return Invalid("dependency: job " + std::to_string(d.job) + " " +
                           std::string(core::JobStateName(*ended)) + ", so " +
                           std::string(core::DependencyKindName(d.kind)) + ":" +
                           std::to_string(d.job) + " can never be met",
                       "dependency");
      }
    }
  }
  // Its partition and reservation (core/node_sets.hpp): they exist, admit
  // its tenant, and its GPUs and time limit are within their bounds.
  request.partition = body.partition.value_or("");
  request.reservation = body.reservation.value_or("");
  if (Status admit = s.driver.core()->node_sets().Admit(request, s.driver.now()); !admit.ok()) {
    return SubmissionError(admit);
  }
  // Refuse what can never run here, before it is logged (the core's own
  // verdict on the empty cluster).
  if (Status fit = s.driver.CheckFeasible(request.spec); !fit.ok()) return fit;

  const std::string tenant = request.tenant;
  std::vector<JobId> ids;
  if (!array.tasks.empty()) {
    // Consecutive ids, the first one names the array; every task goes into
    // the same group commit, so the answer (after it) covers them all.
    const JobId first = s.driver.NewJobId();
    for (size_t t = 0; t < array.tasks.size(); ++t) {
      const JobId id = t == 0 ? first : s.driver.NewJobId();
      core::JobRequest r = request;
      r.array_job = first;
      r.array_task = array.tasks[t];
      r.array_throttle = array.throttle;
      s.driver.Step(core::JobSubmitted{id, std::move(r)}, s.Actor(caller));
      if (s.metrics != nullptr) s.metrics->Submission(tenant);
      ids.push_back(id);
    }
  } else {
    ids.push_back(s.driver.NewJobId());
    s.driver.Step(core::JobSubmitted{ids.front(), std::move(request)}, s.Actor(caller));
    if (s.metrics != nullptr) s.metrics->Submission(tenant);
  }
  Result<api::SubmitAnswer> answer = AnswerOf(s, ids);
  if (!answer.ok()) return StoreFailed(answer.status());
  return TextAnswer(201, api::WriteSubmitAnswer(answer.value()));
}

}  // namespace topo::daemon
