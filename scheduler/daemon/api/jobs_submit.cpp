// POST /v1/jobs: a submission, validated whole before it is logged.

#include <algorithm>

#include "daemon/api/handlers.hpp"
#include "daemon/api/unix_accounts.hpp"
#include "topo/common/agent_protocol.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_chain.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/job_process.hpp"

namespace topo::daemon {

using core::JobId;
using core::Result;
using core::Status;
using core::TimeMs;

namespace {

// The answer to a submission whose client_request_id made `ids` already
// (ascending; one job, or the tasks of an array): 200 and the first answer's
// fields, with "duplicate": true. Nothing new is logged.
Answer AlreadySubmitted(const ServiceState& s, const std::vector<JobId>& ids) {
  const JobId first = ids.front();
  Json out = {{"id", first}, {"duplicate", true}};
  const core::JobRecord* j = s.driver.core()->job(first);
  if (j != nullptr && j->request.array_job != 0) {
    Json tasks = Json::array();
    for (JobId id : ids) {
      const core::JobRecord* t = s.driver.core()->job(id);
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
    Result<std::optional<store::JobRow>> row = s.driver.store().GetJob(first);
    if (!row.ok()) return StoreFailed(row.status());
    if (row.value()) {
      out["state"] = core::JobStateName(row.value()->state);
      out["reason"] = row.value()->reason;
    }
  }
  return JsonAnswer(200, out);
}

}  // namespace

Answer SubmitJob(ServiceState& s, const Caller& caller, const Route& route) {
  Result<Json> parsed = ParseBody(*route.request, false);
  if (!parsed.ok()) return parsed.status();
  const Json& body = parsed.value();
  if (Status e = UnknownField(
          body, {"spec", "tenant", "priority", "time_limit_s", "checkpoint_interval_s",
                 "placement_wait_s", "command", "memory_mb_per_node", "cpus_per_node", "launch",
                 "env", "chdir", "output", "error", "dependency", "array", "client_request_id"});
      !e.ok()) {
    return e;
  }
  if (s.driver.core() == nullptr) return NoTopology();
  // The idempotency key: a retry of a submission that was made (its answer
  // lost, or sent to another replica) gets the jobs made the first time.
  std::string client_request_id;
  if (auto it = body.find("client_request_id"); it != body.end()) {
    if (!it->is_string()) {
      return Invalid("client_request_id must be a string", "client_request_id");
    }
    client_request_id = it->get<std::string>();
    if (core::Status c = common::CheckClientRequestId(client_request_id); !c.ok()) {
      return Invalid("client_request_id " + c.message(), "client_request_id");
    }
    Result<std::vector<JobId>> made =
        s.driver.JobsByClientRequest(caller.user.name, client_request_id);
    if (!made.ok()) return StoreFailed(made.status());
    if (!made.value().empty()) return AlreadySubmitted(s, made.value());
  }
  if (!body.contains("spec")) {
    return Invalid("spec is missing: give the job spec v1, e.g. {\"spec\": {\"gpus\": 8}}", "spec");
  }
  Result<core::JobSpec> spec = common::JobSpecFromJson(body["spec"]);
  if (!spec.ok()) return Invalid("spec: " + spec.message(), "spec");
  core::JobRequest request;
  request.spec = std::move(spec).value();
  request.client_request_id = std::move(client_request_id);
  request.user = caller.user.name;
  request.tenant = caller.user.tenant;
  if (auto it = body.find("tenant"); it != body.end()) {
    if (!it->is_string()) return Invalid("tenant must be a string", "tenant");
    request.tenant = it->get<std::string>();
    if (!ValidTenantName(request.tenant)) {
      return Invalid("tenant \"" + request.tenant.substr(0, 130) +
                         "\" is not a tenant name (segments of a-z 0-9 _ . - joined by /)",
                     "tenant");
    }
  }
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
  int64_t priority = 0, time_limit = 0, checkpoint = 0, placement_wait = 0;
  if (Status e = IntField(body, "priority", -100, 100, priority); !e.ok()) return e;
  if (priority > 0 && !caller.admin()) {
    return Forbidden("a priority above 0 needs a tenant-admin or cluster-admin");
  }
  if (Status e = IntField(body, "time_limit_s", 1, 30ll * 86400, time_limit); !e.ok()) return e;
  if (Status e = IntField(body, "checkpoint_interval_s", -1, 7ll * 86400, checkpoint); !e.ok())
    return e;
  if (checkpoint == 0 && body.contains("checkpoint_interval_s")) {
    return Invalid("checkpoint_interval_s must be -1 (never) or 60..604800",
                   "checkpoint_interval_s");
  }
  if (checkpoint > 0 && checkpoint < 60) {
    return Invalid("checkpoint_interval_s " + std::to_string(checkpoint) +
                       " is below the minimum of 60 (or -1 for never)",
                   "checkpoint_interval_s");
  }
  // -1: never wait for a faster placement; 0 (absent): the tenant's or the
  // cluster's bound.
  if (Status e = IntField(body, "placement_wait_s", -1, 7ll * 86400, placement_wait); !e.ok())
    return e;
  if (auto it = body.find("command"); it != body.end()) {
    // What exec accepts on Linux, and what fits in the agents' `start`.
    if (!it->is_array() || it->empty() || it->size() > proto::kMaxCommandArgs) {
      return Invalid("command must be a non-empty array of at most " +
                         std::to_string(proto::kMaxCommandArgs) + " strings (argv)",
                     "command");
    }
    size_t total = 0;
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& arg = (*it)[i];
      const std::string where = "command[" + std::to_string(i) + "]";
      if (!arg.is_string()) return Invalid(where + " must be a string", "command");
      const std::string& a = arg.get_ref<const std::string&>();
      if (a.size() > proto::kMaxArgBytes) {
        return Invalid(where + " is " + std::to_string(a.size()) +
                           " bytes; Linux runs no argument longer than " +
                           std::to_string(proto::kMaxArgBytes) +
                           ": put a long script in a file the job reads",
                       "command");
      }
      if (a.find('\0') != std::string::npos) {
        return Invalid(where + " contains a NUL byte, which no argument can", "command");
      }
      total += a.size() + 1;
      request.command.push_back(a);
    }
    if (total > proto::kMaxCommandBytes || request.command[0].empty()) {
      return Invalid(
          "command: the program (command[0]) must be given and the whole command must "
          "stay under " +
              std::to_string(proto::kMaxCommandBytes >> 10) + " KiB (it is " +
              std::to_string(total >> 10) + " KiB)",
          "command");
    }
  }
  if (request.command.empty()) {
    // Nothing would run: the agent has nothing to start.
    return Invalid(
        "command is missing: say what every rank runs, as an argv array, e.g. "
        "{\"spec\": {\"gpus\": 8}, \"command\": [\"python3\", \"train.py\"]} "
        "(topo submit: -- CMD ARGS, --wrap 'CMD', or a batch script)",
        "command");
  }
  {
    std::string field;
    Result<core::ProcessSpec> process = common::ProcessSpecFromJson(body, &field);
    if (!process.ok()) return Invalid(process.message(), field);
    request.process = std::move(process).value();
  }
  // An array (Slurm's 0-99%8): one job per task, logged together.
  common::ArraySpec array;
  if (auto it = body.find("array"); it != body.end()) {
    if (!it->is_string()) {
      return Invalid("array must be a string like \"0-99%8\" or \"1,3,5-7\"", "array");
    }
    Result<common::ArraySpec> parsed = common::ParseArraySpec(it->get_ref<const std::string&>());
    if (!parsed.ok()) return Invalid(parsed.message(), "array");
    array = std::move(parsed).value();
  }
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
  // Limits of the job's cgroup on each node (docs/jobs.md).
  int64_t memory_mb = 0;
  if (Status e = IntField(body, "memory_mb_per_node", 1, int64_t{1} << 30, memory_mb); !e.ok())
    return e;
  request.memory_mb_per_node = memory_mb;
  if (auto it = body.find("cpus_per_node"); it != body.end()) {
    if (!it->is_number() || !(it->get<double>() >= 0.001) || it->get<double>() > 100000) {
      return Invalid("cpus_per_node must be a number of CPUs, 0.001..100000 (e.g. 12 or 0.5)",
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
      return Invalid("dependency must be a string like \"afterok:12:13,afterany:14\"",
                     "dependency");
    }
    Result<std::vector<core::Dependency>> deps =
        common::ParseDependencies(it->get_ref<const std::string&>());
    if (!deps.ok()) return Invalid(deps.message(), "dependency");
    for (const core::Dependency& d : deps.value()) {
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
  // Refuse what can never run here, before it is logged (the core's own
  // verdict on the empty cluster).
  if (Status fit = s.driver.CheckFeasible(request.spec); !fit.ok()) return fit;

  const std::string tenant = request.tenant;
  if (!array.tasks.empty()) {
    // Consecutive ids, the first one names the array; every task goes into
    // the same group commit, so the answer (after it) covers them all.
    const JobId first = s.driver.NewJobId();
    Json ids = Json::array();
    for (size_t t = 0; t < array.tasks.size(); ++t) {
      const int task = array.tasks[t];
      const JobId id = t == 0 ? first : s.driver.NewJobId();
      core::JobRequest r = request;
      r.array_job = first;
      r.array_task = task;
      r.array_throttle = array.throttle;
      s.driver.Step(core::JobSubmitted{id, std::move(r)}, s.Actor(caller));
      if (s.metrics != nullptr) s.metrics->Submission(tenant);
      ids.push_back(id);
    }
    return JsonAnswer(
        201, {{"id", first},
              {"array", {{"job", first}, {"tasks", array.tasks}, {"throttle", array.throttle}}},
              {"ids", std::move(ids)}});
  }
  const JobId id = s.driver.NewJobId();
  s.driver.Step(core::JobSubmitted{id, std::move(request)}, s.Actor(caller));
  if (s.metrics != nullptr) s.metrics->Submission(tenant);
  const core::JobRecord* j = s.driver.core()->job(id);
  Json out = {{"id", id}};
  if (j != nullptr) {
    out["state"] = core::JobStateName(j->state);
    out["reason"] = j->reason;
  }
  return JsonAnswer(201, out);
}

}  // namespace topo::daemon
