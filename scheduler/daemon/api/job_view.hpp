#pragma once
// The views of a job, built here and nowhere else: the summary the job list
// shows (GET /v1/jobs) and the whole view of one job (GET /v1/jobs/{id}: its
// spec, ranks, placement, metrics, prediction, runs, history and incidents),
// from the core's record while the core holds the job, else from the
// store's row. The caller's scope (scope.hpp) decides what is shown.

#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/access/scope.hpp"
#include "daemon/service_state.hpp"
#include "store/store.hpp"
#include "topo/core/scheduler.hpp"

namespace topo::daemon {

// A job id as the path gives it (1..), or nullopt.
std::optional<core::JobId> ParseId(std::string_view text);
// kNotFound: no such job that the caller can see.
core::Status NoSuchJob(std::string_view id);
// The summary of a job the core holds; `positions` (QueuePositions) gives
// its queue position when queued.
nlohmann::json RecordSummary(const ServiceState& s, const core::JobRecord& j,
                             const std::map<core::JobId, int>* positions);
// The summary of a job only the store holds (it ended).
nlohmann::json RowSummary(const ServiceState& s, const store::JobRow& r);
// Queue position (1..) of every waiting job, in the core's order.
std::map<core::JobId, int> QueuePositions(const core::SchedulerCore& core);
// The job's events in the log (at most 1,000).
std::vector<store::RawEvent> JobEvents(const ServiceState& s, core::JobId id);
// A job in the caller's scope: its summary, or with `detail` its whole view;
// nullopt when there is none the caller may see. Errors: the store's.
core::Result<std::optional<nlohmann::json>> FindJob(const ServiceState& s, const Caller& caller,
                                                    core::JobId id, bool detail);

}  // namespace topo::daemon
