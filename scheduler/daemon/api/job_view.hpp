#pragma once
// The one builder of job views (api::JobView, common/user_api.hpp): every
// answer that shows a job (the job list, the whole view, the history's rows,
// a submission's answer, an action's answer) builds it here, from the core's
// record while the core holds the job, else from the store's row, and writes
// it with the API's one writer. The caller's scope (scope.hpp) decides what
// is shown.
//
// "nodes" is one thing everywhere: how many nodes the job holds, or for a job
// that ended, how many its last run held (0 while it holds none); their names
// are the accounting part's "node_names".

#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "daemon/access/scope.hpp"
#include "daemon/service_state.hpp"
#include "store/store.hpp"
#include "topo/common/user_api.hpp"
#include "topo/core/scheduler.hpp"

namespace topo::daemon {

// A job id as the path gives it (1..), or nullopt.
std::optional<core::JobId> ParseId(std::string_view text);
// kNotFound: no such job that the caller can see.
core::Status NoSuchJob(std::string_view id);
// Queue position (1..) of every waiting job, in the core's order.
std::map<core::JobId, int> QueuePositions(const core::SchedulerCore& core);
// The job's events in the log (at most 1,000).
std::vector<store::RawEvent> JobEvents(const ServiceState& s, core::JobId id);

// The summary of a job the core holds; `positions` (QueuePositions) gives
// its queue position when queued. A job that ended shows its last run's
// node count, from the store (errors: the store's).
core::Result<api::JobView> RecordView(const ServiceState& s, const core::JobRecord& j,
                                      const std::map<core::JobId, int>* positions);
// The summary of a job from its row in the store; default_time_limit is the
// scheduler's, for a job that asked for none.
api::JobView RowView(const store::JobRow& r, core::TimeMs default_time_limit);
// The accounting part (runs, GPU-hours, the names of the nodes `nodes`
// counts) from the job's runs in start order; a run that has not ended
// counts up to now_ms.
void AddAccounting(api::JobView& view, std::span<const store::JobRunRow> runs, core::TimeMs now_ms);

// A job in the caller's scope: its summary, or with `whole` its whole view
// (accounting and detail); nullopt when there is none the caller may see.
// Errors: the store's.
core::Result<std::optional<api::JobView>> FindJob(const ServiceState& s, const Caller& caller,
                                                  core::JobId id, bool whole);

}  // namespace topo::daemon
