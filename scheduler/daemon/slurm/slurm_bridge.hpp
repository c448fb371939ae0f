#pragma once
// The Slurm bridge of topo-scheduler's Slurm mode (docs/slurm.md).
//
// Two threads of its own, never the service strand:
//   - the listener: a unix stream socket (slurm_socket) where job_submit/topo
//     sends one JSON line per submission; the request is handed to the strand
//     (Service::SlurmRequest), committed with the next group, and only then
//     answered. Peers must be root, slurm_user or the daemon's own user
//     (SO_PEERCRED).
//   - the poller: every slurm_poll_interval_ms (and on demand) it runs
//     `scontrol show node -o` and `squeue --json`, hands the snapshot to the
//     strand (Service::SlurmSync), and after the commit carries out what
//     that asked for in Slurm (`scontrol update JobId=.. ReqNodeList=..` +
//     `scontrol release`, `scontrol hold`, `scontrol requeuehold`,
//     `scancel --signal`, `scontrol update NodeName=.. State=DRAIN`).
//     Jobs come as JSON because a job's one-line form cannot be split
//     safely: its name, comment and paths are its user's text and may hold
//     " AdminComment=toposched:7".
// Neither ever runs inside slurmctld's job_submit call: the plugin is
// answered from the cached view.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/config.hpp"
#include "daemon/http.hpp"
#include "daemon/slurm/slurm_types.hpp"
#include "topo/common/user_api.hpp"
#include "topo/core/status.hpp"
#include "topo/core/time.hpp"

namespace topo::daemon {

// Runs work on the service strand, commits, then calls done with its answer
// (a 5xx answer when the commit failed). Server::Post.
using StrandPost = std::function<void(std::function<HttpResponse(core::TimeMs)> work,
                                      std::function<void(HttpResponse)> done)>;

// What the bridge asks of the service, on the strand (Service::SlurmRequest
// and Service::SlurmSync).
struct SlurmCalls {
  std::function<std::string(const api::SlurmSubmitLine& line, const std::string& user,
                            core::TimeMs now)>
      request;
  std::function<std::vector<SlurmAction>(const SlurmSnapshot& snapshot, core::TimeMs now)> sync;
};

class SlurmBridge {
 public:
  SlurmBridge(const DaemonConfig& config, SlurmCalls calls, StrandPost post);
  ~SlurmBridge();  // Stop()

  // Binds the socket and starts both threads. The listener answers only
  // after the first sync (until then the plugin fails open).
  core::Status Start();
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- parsing Slurm's output (exposed for tests)
// `KEY=VALUE KEY=VALUE ...`; a token without '=' continues the previous value.
std::vector<std::pair<std::string, std::string>> ParseScontrolLine(const std::string& line);
// `scontrol show node -o` output (its fields are an operator's: names,
// states, reasons).
std::vector<SlurmNodeView> ParseScontrolNodes(const std::string& text);
// `squeue --json` output: Slurm 22.05's form (job_state a string, priority a
// number) and 23.02's on (job_state a list of flags, priority an object with
// "number"). A job entry without an integer job_id is skipped; an error when
// the text is not JSON or has no "jobs" list, or Slurm reports errors.
core::Result<std::vector<SlurmJobView>> ParseSqueueJobs(const std::string& text);

}  // namespace topo::daemon
