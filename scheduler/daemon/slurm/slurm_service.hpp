#pragma once
// Slurm mode (docs/slurm.md) on the service's strand: the plugin's requests,
// the sync with what scontrol shows, the topology.conf import. The Slurm
// bridge (slurm_bridge.hpp) runs scontrol and the plugin's socket on its own
// threads and hands the results to these through Service (service.hpp).
//
// Thread safety: none; the strand owns the ServiceState.

#include <string>
#include <string_view>
#include <vector>

#include "daemon/service_state.hpp"
#include "daemon/slurm/slurm_types.hpp"
#include "topo/common/user_api.hpp"
#include "topo/core/status.hpp"

namespace topo::daemon {

// One request line of job_submit/topo (or a test/refresh client): the
// answer line without its newline ("PLACE id nodes", "HOLD id why",
// "REJECT why", "PASS why", "BUSY why" for op test). Submissions step the
// core and stage their entries like POST /v1/jobs; the caller commits
// before it answers. user: the submitter's name (from its uid). The line
// is read by the API's reader of it (api::ParseSlurmSubmitLine); one that
// does not read is answered "PASS" with why.
std::string SlurmRequest(ServiceState& s, std::string_view line, const std::string& user,
                         core::TimeMs now);
std::string SlurmRequest(ServiceState& s, const api::SlurmSubmitLine& line, const std::string& user,
                         core::TimeMs now);
// Brings the core's view in line with what scontrol showed: jobs that ended
// in Slurm free their capacity, nodes follow Slurm's state (nodes busy with
// jobs toposched did not place are drained with a "slurm:" reason), and
// returns what to do in Slurm: release held jobs the core has started,
// drain nodes the core took out for health, resume them.
std::vector<SlurmAction> SlurmSync(ServiceState& s, const SlurmSnapshot& snapshot,
                                   core::TimeMs now);
// Imports a topology.conf unless the store already holds the same topology;
// an error when it differs and jobs are still active.
core::Status SlurmImportTopology(ServiceState& s, const std::string& text, int gpus_per_node,
                                 core::TimeMs now);

}  // namespace topo::daemon
