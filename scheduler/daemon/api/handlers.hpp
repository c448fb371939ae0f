#pragma once
// One handler per route of the API (docs/api.md); routes.cpp's table names
// which serves which, and applies authentication, the storage floor, the
// HA replication of users and tokens and the route's metric name once for
// all of them. A handler neither dispatches on the method or path again nor
// picks an HTTP status for an error: it returns the Status (route.hpp).
//
// Three kinds, by what they may touch:
//   Write:     the service's state; stages core events through the driver.
//   Read:      the same, read-only (the strand's view of the core).
//   OffStrand: only a read-only store connection (reads.hpp), on an I/O thread.

#include <optional>
#include <string>

#include "daemon/access/scope.hpp"
#include "daemon/api/route.hpp"
#include "daemon/service_state.hpp"
#include "store/store.hpp"
#include "topo/common/user_api.hpp"
#include "topo/core/scheduler.hpp"
#include "topo/core/topology.hpp"

namespace topo::daemon {

using WriteHandler = Answer (*)(ServiceState&, const Caller&, const Route&);
using ReadHandler = Answer (*)(const ServiceState&, const Caller&, const Route&);
// What a read off the strand knows besides its store connection: copies
// taken when it starts.
struct ReadContext {
  core::TimeMs now = 0;
  core::TimeMs default_time_limit = 0;  // the scheduler's, for jobs that name none
};
using OffStrandHandler = Answer (*)(store::Store&, const Caller&, const Route&, const ReadContext&);

// ---- jobs (jobs.cpp, jobs_submit.cpp, job_logs.cpp)
Answer SubmitJob(ServiceState& s, const Caller& caller, const Route& route);
Answer ListJobs(const ServiceState& s, const Caller& caller, const Route& route);
Answer ShowJob(const ServiceState& s, const Caller& caller, const Route& route);
Answer CancelJob(ServiceState& s, const Caller& caller, const Route& route);
Answer HoldJob(ServiceState& s, const Caller& caller, const Route& route);
Answer ReleaseJob(ServiceState& s, const Caller& caller, const Route& route);
Answer CheckpointJob(ServiceState& s, const Caller& caller, const Route& route);
// Deferred: the node's agent answers (Service::TakeDeferredAnswers).
Answer JobLogs(ServiceState& s, const Caller& caller, const Route& route);

// ---- nodes (nodes.cpp)
Answer ListNodes(const ServiceState& s, const Caller& caller, const Route& route);
Answer ShowNode(const ServiceState& s, const Caller& caller, const Route& route);
Answer DrainNodes(ServiceState& s, const Caller& caller, const Route& route);
// Drains (in `mode`: graceful, immediate or wait) or resumes nodes, as
// POST /v1/nodes/drain and /resume do (nodes.cpp); the topology import's
// `drain` uses it too.
void RequestNodeStates(ServiceState& s, const Caller& caller, const std::vector<core::NodeId>& ids,
                       bool drain, const std::string& mode, const std::string& reason);
Answer ResumeNodes(ServiceState& s, const Caller& caller, const Route& route);
Answer ClearGpu(ServiceState& s, const Caller& caller, const Route& route);

// ---- tenants (tenants.cpp), users and tokens (users.cpp)
Answer ListTenants(const ServiceState& s, const Caller& caller, const Route& route);
Answer ShowTenant(const ServiceState& s, const Caller& caller, const Route& route);
Answer PutTenant(ServiceState& s, const Caller& caller, const Route& route);
Answer ListUsers(const ServiceState& s, const Caller& caller, const Route& route);
Answer CreateUser(ServiceState& s, const Caller& caller, const Route& route);
Answer UpdateUser(ServiceState& s, const Caller& caller, const Route& route);
Answer DeleteUser(ServiceState& s, const Caller& caller, const Route& route);
Answer ListTokens(const ServiceState& s, const Caller& caller, const Route& route);
Answer CreateToken(ServiceState& s, const Caller& caller, const Route& route);
Answer RevokeToken(ServiceState& s, const Caller& caller, const Route& route);
// Whether the tenant exists ("default" always does); false when the store
// cannot say.
bool TenantExists(const ServiceState& s, const std::string& name);

// ---- partitions and reservations (node_sets.cpp)
Answer ListPartitions(const ServiceState& s, const Caller& caller, const Route& route);
Answer ShowPartition(const ServiceState& s, const Caller& caller, const Route& route);
Answer CreatePartition(ServiceState& s, const Caller& caller, const Route& route);
Answer DeletePartition(ServiceState& s, const Caller& caller, const Route& route);
Answer ListReservations(const ServiceState& s, const Caller& caller, const Route& route);
Answer ShowReservation(const ServiceState& s, const Caller& caller, const Route& route);
Answer CreateReservation(ServiceState& s, const Caller& caller, const Route& route);
Answer DeleteReservation(ServiceState& s, const Caller& caller, const Route& route);

// ---- the cluster (topology.cpp, cluster.cpp, policy.cpp, metrics_page.cpp)
Answer GetTopology(const ServiceState& s, const Caller& caller, const Route& route);
Answer ImportTopology(ServiceState& s, const Caller& caller, const Route& route);
Answer GetCluster(const ServiceState& s, const Caller& caller, const Route& route);
Answer GetUtilization(const ServiceState& s, const Caller& caller, const Route& route);
Answer GetPolicy(const ServiceState& s, const Caller& caller, const Route& route);
Answer SetPolicy(ServiceState& s, const Caller& caller, const Route& route);
Answer GetMetrics(const ServiceState& s, const Caller& caller, const Route& route);

// ---- off the strand (reads.cpp, reads_history.cpp)
Answer ReadEvents(store::Store& store, const Caller& caller, const Route& route,
                  const ReadContext& context);
Answer ReadAudit(store::Store& store, const Caller& caller, const Route& route,
                 const ReadContext& context);
Answer ReadWhoami(store::Store& store, const Caller& caller, const Route& route,
                  const ReadContext& context);
Answer ReadHistory(store::Store& store, const Caller& caller, const Route& route,
                   const ReadContext& context);
Answer ReadUsage(store::Store& store, const Caller& caller, const Route& route,
                 const ReadContext& context);

// ---- shared by the views
// The job's predicted step on its placement (docs/perf-model.md), as the job
// view's "predicted" (and `topo place`'s); nullopt without a whole placement
// or when its model cannot be resolved.
std::optional<api::PredictionView> PredictionOf(const core::Topology& topo,
                                                const core::JobRecord& job);
// The slowdown of PredictionOf for a running or preempting job, cached per
// start in s.slowdowns; nullopt when there is none.
std::optional<double> PredictedSlowdown(const ServiceState& s, const core::JobRecord& job);
// Drops the cached slowdowns of jobs that no longer run.
void PruneSlowdowns(const ServiceState& s);
// GPUs of the whole cluster by state, as GET /v1/cluster and /metrics show
// them: allocated (held by a job, failed or not), failed (not held), free (on
// up nodes), unavailable (on nodes not up); they sum to total.
struct GpuCounts {
  int total = 0, allocated = 0, failed = 0, unavailable = 0, free = 0;
};
GpuCounts CountGpus(const ServiceState& s);

}  // namespace topo::daemon
