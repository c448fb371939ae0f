#pragma once
// What the reads of job runs show (`topo show`, history), shared by the
// routes served on the strand and off it (reads.cpp, reads_history.cpp).
//
// Thread safety: pure functions.

#include <span>

#include <nlohmann/json.hpp>
#include "store/store.hpp"
#include "topo/core/status.hpp"

namespace topo::daemon {

// The runs of one job as the API shows them (`topo show`, history): nodes,
// GPUs, start, end, why it ended, exit status, GPU-hours (a run that has
// not ended counts up to now_ms).
nlohmann::json JobRunsJson(std::span<const store::JobRunRow> runs, core::TimeMs now_ms);
double JobGpuHours(std::span<const store::JobRunRow> runs, core::TimeMs now_ms);

}  // namespace topo::daemon
