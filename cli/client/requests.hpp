#pragma once
// Request bodies and targets of the admin verbs, built and checked before
// anything is sent (docs/api.md). Pure functions.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "topo/common/user_api.hpp"
#include "topo/core/status.hpp"

namespace topo::cli {

// POST /v1/nodes/drain and /resume: {"nodes": EXPR, "reason": R}. The
// hostlist goes to the daemon as written (it expands it itself); here it is
// only checked, so a typo fails before the request. An empty reason is left
// out.
core::Result<nlohmann::json> NodeActionBody(const std::string& hostlist, const std::string& reason);

// The flags of `topo quota set`, as given ("" when not given).
struct QuotaFlags {
  std::string guaranteed;        // N
  std::string borrow_limit;      // N | none (-> -1)
  std::string max_job_gpus;      // N | none (-> 0)
  std::string max_running_jobs;  // N | none (-> 0)
  std::string max_queued_jobs;   // N | none (-> 0)
  std::string shares;            // X > 0
  std::string placement_wait;    // DURATION | never (-> -1) | default (-> 0)
  // The Unix accounts its tenant-admins may map users to (docs/api.md,
  // "Unix accounts").
  std::string unix_accounts;  // A,B,... | none (-> [])
  std::string unix_group;     // GROUP | none (-> "")
  // --partition-limit, repeatable: PART:max_gpus=N[,max_job_gpus=N]
  // [,max_running_jobs=N] (each N or none -> 0), or PART:none (-> null:
  // no limits there). Only the partitions and fields given change.
  std::vector<std::string> partition_limits;
};
// PUT /v1/tenants/{name}: only the fields given.
core::Result<nlohmann::json> QuotaSetBody(const QuotaFlags& flags);

// The flags of `topo partition create`, as given ("" when not given).
struct PartitionFlags {
  std::string name;
  std::string nodes;          // HOSTLIST
  std::string default_time;   // DURATION (submit.hpp's forms)
  std::string max_time;       // DURATION
  std::string max_gpus;       // N
  std::string tenants;        // T,T,...
  std::string priority_tier;  // -1000..1000
  bool preemptible = false;
  bool is_default = false;
};
// POST /v1/partitions, checked by the API's own reader; errors name the
// flag ("--max-time 40x: ...").
core::Result<api::PartitionRequest> PartitionCreateRequest(const PartitionFlags& flags);

// The flags of `topo reservation create`.
struct ReservationFlags {
  std::string name;
  std::string nodes;      // HOSTLIST, or
  std::string gpus;       // N: the scheduler chooses whole nodes
  std::string start;      // a time point (input.hpp ParseTimePoint); "": now
  std::string duration;   // DURATION, or
  std::string end;        // a time point
  std::string tenants;    // T,T,...
  std::string partition;  // with --gpus: where to choose
  bool maintenance = false;
};
core::Result<api::ReservationRequest> ReservationCreateRequest(const ReservationFlags& flags,
                                                               int64_t now_ms);
// The flag that sets a field of those requests ("max_time_s" -> "--max-time"),
// for the daemon's errors; "" for none.
std::string NodeSetFieldFlag(std::string_view field);

// /v1/partitions/NAME and /v1/reservations/NAME.
std::string PartitionTarget(const std::string& name);
std::string ReservationTarget(const std::string& name);

// /v1/tenants/org/team (each segment percent-encoded, slashes kept).
std::string TenantTarget(const std::string& tenant);

// `topo gpu clear NODE:GPU`: the node's name and the GPU's index (0..63),
// split at the last ':'; the error names the argument and the form.
struct NodeGpu {
  std::string node;
  int gpu = 0;
};
core::Result<NodeGpu> ParseNodeGpu(const std::string& text);
// POST /v1/nodes/{node}/gpus/{gpu}/clear.
std::string GpuClearTarget(const NodeGpu& target);

// The filters of GET /v1/jobs (`topo queue`, `topo cancel --me ...`); an
// empty string is a filter not given.
struct JobFilter {
  bool all = false;    // terminal jobs too
  std::string tenant;  // tenant=
  std::string user;    // user=
  std::string states;  // state=, comma-separated
};
// GET /v1/jobs?... for one page of the list.
std::string JobsTarget(const JobFilter& filter, const std::string& after, int limit);
// "user ada, state queued": the filters given, for messages ("" for none).
std::string DescribeJobFilter(const JobFilter& filter);

}  // namespace topo::cli
