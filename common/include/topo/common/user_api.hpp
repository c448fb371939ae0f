#pragma once
// The user API's messages (docs/api.md), owned here and nowhere else, as
// agent_protocol.hpp owns the agent protocol: one typed struct per request
// and per view, each with one strict reader, one writer and its JSON
// Schema, all generated from the same field tables (user_api.cpp,
// user_api_views.cpp; the engine is common/src/field_table.hpp).
//
//   Result<SubmitRequest> r = ReadSubmitRequest(body, &field);  // the daemon
//   std::string body = WriteSubmitRequest(request);              // topo submit
//   Result<JobList> jobs = ParseJobList(answer, &field, Reading::kClient);
//
// The readers are strict: duplicate keys, unknown fields, missing fields,
// wrong types, numbers out of range, strings longer than their limit or with
// characters their kind does not allow, and cross-field contradictions are
// errors whose message starts with the field's path ("spec: ...",
// "env.RANK: ...") and whose `field` out-parameter names it alone. What they
// accept is safe to act on as far as the request goes; what needs the
// daemon's state (the tenant exists, the caller may use it, the job fits the
// cluster) is the daemon's check (scheduler/daemon/api/jobs_submit.cpp).
//
// A client reads answers with Reading::kClient: fields it does not know are
// ignored and absent ones keep their defaults, so that a newer daemon's
// additions and an older one's omissions still read.
//
// Round trip: ParseX(WriteX(x)) == x for every x that ParseX accepts.
// schema/api.schema.json is ApiSchema(), checked by a test.
//
// Thread safety: pure functions.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "topo/common/tenant_name.hpp"
#include "topo/core/cluster_state.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/job.hpp"
#include "topo/core/launch.hpp"
#include "topo/core/perf_model.hpp"
#include "topo/core/scheduler.hpp"
#include "topo/core/status.hpp"
#include "topo/core/topology.hpp"

namespace topo::api {

// ------------------------------------------------------------ limits

inline constexpr size_t kMaxRequestBytes = 4u << 20;        // a request text the readers take
inline constexpr size_t kMaxAnswerBytes = size_t{1} << 30;  // an answer a client reads
inline constexpr size_t kMaxTenantBytes = common::kMaxTenantBytes;
inline constexpr size_t kMaxUserNameBytes = 64;
inline constexpr int kMinPriority = -100;
inline constexpr int kMaxPriority = 100;
inline constexpr int64_t kMaxTimeLimitS = 30 * 86400;
inline constexpr int64_t kMaxIntervalS = 7 * 86400;  // checkpoints, placement waits
inline constexpr int64_t kMinCheckpointIntervalS = 60;
inline constexpr int64_t kMaxMemoryMbPerNode = int64_t{1} << 30;
inline constexpr double kMinCpusPerNode = 0.001;
inline constexpr double kMaxCpusPerNode = 100000;
inline constexpr size_t kMaxJobsPerPage = 10000;
// Unix milliseconds up to the end of year 9999.
inline constexpr int64_t kMaxTimeMs = core::kMaxTimeMs;

// Tenant names: segments of [a-z0-9][a-z0-9_.-]* joined by '/', at most 8
// deep and kMaxTenantBytes. User names: 1-64 of [a-z0-9_.-], '@' after the
// first, not starting with '.' or '-'.
using common::ValidTenantName;  // tenant_name.hpp
bool ValidUserName(std::string_view name);

enum class Reading { kStrict, kClient };

// ------------------------------------------------------------ POST /v1/jobs

// A submission. Absent optional fields take the defaults docs/api.md names
// (the caller's tenant, the scheduler's time limit, ...).
struct SubmitRequest {
  core::JobSpec spec;  // job spec v1 (schema/job.schema.json)
  std::optional<std::string> tenant;
  std::optional<int> priority;                   // kMinPriority..kMaxPriority
  std::optional<int64_t> time_limit_s;           // 1..kMaxTimeLimitS
  std::optional<int64_t> checkpoint_interval_s;  // -1 (never) or 60..kMaxIntervalS
  std::optional<int64_t> placement_wait_s;       // -1 never, 0 the default, up to kMaxIntervalS
  std::vector<std::string> command;              // argv, not empty
  std::optional<int64_t> memory_mb_per_node;     // 1..kMaxMemoryMbPerNode
  std::optional<double> cpus_per_node;           // kMinCpusPerNode..kMaxCpusPerNode
  std::optional<core::LaunchMode> launch;
  // The processes' own variables, working directory and output files, as
  // common/job_process.hpp checks them.
  std::optional<std::map<std::string, std::string>> env;
  std::optional<std::string> chdir;
  std::optional<std::string> output;
  std::optional<std::string> error;
  std::optional<std::string> dependency;  // "afterok:12:13" (common/job_chain.hpp)
  std::optional<std::string> array;       // "0-99%8"
  std::optional<std::string> client_request_id;
  // The partition it runs in (absent: the default one) and the reservation
  // it runs in (absent: none); core/node_sets.hpp.
  std::optional<std::string> partition;
  std::optional<std::string> reservation;
  bool operator==(const SubmitRequest&) const = default;
};

// ------------------------------------------------------------ job views

// A task's place in its array.
struct ArrayTask {
  int64_t job = 0;  // the array's first job
  int task = 0;
  int throttle = 0;  // 0: no bound
  bool operator==(const ArrayTask&) const = default;
};
struct RankView {
  int rank = 0;
  std::string node;
  int gpu = 0;
  bool operator==(const RankView&) const = default;
};
// GPUs of a job inside one domain of a tier.
struct DomainGpus {
  std::string name;
  int gpus = 0;
  bool operator==(const DomainGpus&) const = default;
};
struct PlacementView {
  int nodes = 0;
  std::vector<DomainGpus> hbds;
  std::vector<DomainGpus> leaves;
  std::vector<DomainGpus> pods;
  bool operator==(const PlacementView&) const = default;
};
// core::PlacementMetrics (docs/formats.md); ratios that do not apply are
// empty (null); tier_histogram: {kind: {tier name: groups}}, non-zero only.
struct MetricsView {
  std::optional<double> tp_in_hbd;
  std::optional<double> ep_in_hbd;
  std::optional<double> leaf_span_ratio;
  std::optional<double> pod_span_ratio;
  std::optional<double> comm_cost_ratio;
  int leaves_spanned = 0;
  int pods_spanned = 0;
  int min_leaves = 0;
  int min_pods = 0;
  double comm_cost = 0;
  double comm_cost_bound = 0;
  bool required_met = true;
  std::map<std::string, std::map<std::string, int>> tier_histogram;
  bool operator==(const MetricsView&) const = default;
};
// Seconds of one optimizer step, by part (docs/perf-model.md).
struct StepBreakdownView {
  double compute_s = 0, tp_s = 0, cp_s = 0, ep_s = 0, pp_s = 0, dp_s = 0, bubble_s = 0, total_s = 0,
         dp_raw_s = 0;
  bool operator==(const StepBreakdownView&) const = default;
};
struct PredictionView {
  double step_s = 0;
  double ideal_step_s = 0;
  double slowdown = 0;
  std::string model;  // the preset the prediction used, or "custom"
  StepBreakdownView breakdown;
  StepBreakdownView ideal_breakdown;
  bool operator==(const PredictionView&) const = default;
};
struct JobLimitsView {
  int64_t memory_mb_per_node = 0;  // 0: no limit
  double cpus_per_node = 0;        // 0: no limit
  bool operator==(const JobLimitsView&) const = default;
};
// How the job's processes start: what the core's record of it holds (a job
// only the store holds has none of it).
struct JobProcessView {
  std::vector<std::string> command;
  core::LaunchMode launch = core::LaunchMode::kRank;
  std::map<std::string, std::string> env;
  std::optional<std::string> chdir;   // empty (null): the account's home
  std::optional<std::string> output;  // empty (null): the agent's log
  std::optional<std::string> error;   // empty (null): with the output
  JobLimitsView limits;
  bool operator==(const JobProcessView&) const = default;
};
// One run of a job: from a start or restart to the next restart or end.
struct RunView {
  int run = 0;
  int64_t start_ms = 0;
  std::optional<int64_t> end_ms;  // empty while it runs
  int gpus = 0;
  int nodes = 0;                        // how many
  std::vector<std::string> node_names;  // which, in rank order
  std::optional<std::string> end_reason;
  std::optional<int> exit_code;  // the exit status that ended it, if one did
  double gpu_hours = 0;
  bool operator==(const RunView&) const = default;
};
// One event of the job's log, as the caller may see it.
struct JobEventView {
  int64_t seq = 0;
  int64_t time_ms = 0;
  std::string actor;
  std::string type;
  std::optional<core::JobState> state;  // the job's state change, if the event made one
  std::optional<std::string> reason;
  bool operator==(const JobEventView&) const = default;
};
// A restart or requeue of the job, from its log (docs/api.md).
struct IncidentView {
  int64_t time_ms = 0;
  std::string cause;  // the event type
  std::string actor;
  std::string reason;
  std::optional<int64_t> detection_ms;
  std::optional<int64_t> restart_ms;
  bool requeued = false;
  int64_t checkpoint_step = -1;
  std::optional<int> restart_count;
  double lost_work_s = 0;
  bool operator==(const IncidentView&) const = default;
};
// The job's runs (GET /v1/history's rows and the whole view).
struct JobAccounting {
  std::vector<std::string> node_names;  // the nodes `nodes` counts
  std::optional<double> queue_wait_s;   // first start - submission; empty: never started
  std::optional<int> exit_code;         // the exit status that ended the last run
  double gpu_hours = 0;
  std::vector<RunView> runs;
  bool operator==(const JobAccounting&) const = default;
};
// The rest of GET /v1/jobs/{id}.
struct JobDetail {
  std::optional<core::JobSpec> spec;      // empty: a stored spec that no longer reads
  std::optional<JobProcessView> process;  // while the core holds the job
  std::vector<RankView> ranks;
  std::vector<std::string> spares;
  std::optional<PlacementView> placement;  // empty: not placed
  std::optional<MetricsView> metrics;      // empty: not running
  std::optional<PredictionView> predicted;
  std::vector<JobEventView> history;
  std::vector<IncidentView> incidents;
  bool operator==(const JobDetail&) const = default;
};
// A job: its summary (every list of jobs), with the accounting part in the
// history and the whole view, and the detail part in the whole view. Each
// part's fields sit at the top level of the job's object.
struct JobView {
  int64_t id = 0;
  std::string name;
  std::string tenant;
  std::string user;
  core::JobState state = core::JobState::kQueued;
  std::string reason;
  int gpus = 0;
  // Nodes the job holds, or for a job that ended those of its last run; 0
  // when it holds none (waiting). The names: node_names (accounting).
  int nodes = 0;
  // The accelerator model of those nodes (the first one's); absent while it
  // holds none.
  std::optional<std::string> gpu_model;
  int priority = 0;
  int64_t submit_ms = 0;
  std::optional<int64_t> start_ms;  // its first start
  std::optional<int64_t> end_ms;
  int64_t time_limit_s = 0;
  int restarts = 0;
  int64_t checkpoint_step = -1;  // -1: none yet
  std::optional<int> queue_position;
  std::optional<int64_t> estimated_start_ms;
  std::optional<double> predicted_slowdown;
  std::optional<std::string> dependency;  // what it waits for
  std::optional<ArrayTask> array;
  // The partition it runs in (the one it named, or the default one it got;
  // a job the scheduler no longer holds shows the one it named) and the
  // reservation it named; empty (null): none.
  std::optional<std::string> partition;
  std::optional<std::string> reservation;
  std::optional<JobAccounting> accounting;
  std::optional<JobDetail> detail;
  bool operator==(const JobView&) const = default;
};
// GET /v1/jobs and GET /v1/history.
struct JobList {
  std::vector<JobView> jobs;
  std::optional<int64_t> next_after;  // the `after` of the next page; empty: the last page
  bool operator==(const JobList&) const = default;
};
// POST /v1/jobs's answer: the job's summary (an array's first task), and
// for an array the ids of every task and, where known, their task indexes
// (one per id).
struct SubmitAnswer {
  JobView job;
  std::optional<bool> duplicate;  // true: an earlier request with this client_request_id made it
  std::optional<std::vector<int64_t>> ids;
  std::optional<std::vector<int>> tasks;
  bool operator==(const SubmitAnswer&) const = default;
};

// ------------------------------------------------------------ node views

struct GpuHealthEventView {
  int64_t seq = 0;
  int gpu = 0;
  core::GpuHealth health = core::GpuHealth::kHealthy;
  std::string reason;
  int64_t time_ms = 0;
  bool operator==(const GpuHealthEventView&) const = default;
};
struct NodeView {
  std::string name;
  core::NodeState state = core::NodeState::kUp;
  std::string reason;
  int gpus = 0;
  int free = 0;                       // healthy GPUs without a job, when the node is up
  std::string gpu_model;              // the accelerator model; "" when the topology names none
  std::vector<std::string> features;  // the topology's node features
  std::string hbd;                    // the node's own HBD (per part of a mixed cluster)
  std::string leaf;
  std::string pod;
  std::vector<core::GpuHealth> gpu_health;
  std::vector<int64_t> gpu_jobs;        // the job on each GPU; 0 free, -1 another tenant's
  std::vector<std::string> partitions;  // the partitions holding it, by name
  // The reservation on it that is active now, else the next one to start;
  // empty (null): none.
  std::optional<std::string> reservation;
  std::optional<std::vector<GpuHealthEventView>> gpu_history;  // GET /v1/nodes/{name}
  bool operator==(const NodeView&) const = default;
};
struct NodeList {
  std::vector<NodeView> nodes;
  bool operator==(const NodeList&) const = default;
};

// ------------------------------------------------------------ partitions and reservations

// POST /v1/partitions (cluster-admin): adds a partition or replaces the one
// of that name (core::PartitionConfig; docs/api.md). `nodes` is a Slurm
// hostlist ("gpu[001-064]") or an array of node names; written back as a
// hostlist. Times are seconds (0: none); absent fields take the defaults
// core/node_sets.hpp names.
struct PartitionRequest {
  std::string name;
  std::vector<std::string> nodes;
  std::optional<int64_t> default_time_s;  // 0..kMaxTimeLimitS
  std::optional<int64_t> max_time_s;      // 0..kMaxTimeLimitS
  std::optional<int> max_gpus;            // per job; 0: no bound
  std::optional<std::vector<std::string>> tenants;
  std::optional<int> priority_tier;  // -1000..1000
  std::optional<bool> preemptible;
  std::optional<bool> is_default;  // "default"
  bool operator==(const PartitionRequest&) const = default;
};
// A partition as GET /v1/partitions shows it: its configuration, its size
// and what of it is up and free now.
struct PartitionView {
  std::string name;
  std::string nodes;  // a hostlist
  int node_count = 0;
  int gpus = 0;
  int up_nodes = 0;
  int free_gpus = 0;  // healthy GPUs without a job on its up nodes
  int64_t default_time_s = 0;
  int64_t max_time_s = 0;
  int max_gpus = 0;
  std::vector<std::string> tenants;  // empty: every tenant
  int priority_tier = 0;
  bool preemptible = false;
  bool is_default = false;  // "default"
  bool operator==(const PartitionView&) const = default;
};
struct PartitionList {
  std::vector<PartitionView> partitions;
  bool operator==(const PartitionList&) const = default;
};

// POST /v1/reservations (cluster-admin): nodes held for a window. Either
// `nodes` (a hostlist or an array, as for partitions) or `gpus` (the
// scheduler chooses whole nodes, of `partition` when given); the window
// from `start_ms` (absent: now) for `duration_s` or up to `end_ms`, one of
// the two.
struct ReservationRequest {
  std::string name;
  std::optional<std::vector<std::string>> nodes;
  std::optional<int> gpus;
  std::optional<int64_t> start_ms;
  std::optional<int64_t> duration_s;
  std::optional<int64_t> end_ms;
  std::optional<std::vector<std::string>> tenants;
  std::optional<bool> maintenance;
  std::optional<std::string> partition;  // only with gpus: where to choose them
  bool operator==(const ReservationRequest&) const = default;
};
enum class ReservationState : uint8_t { kPlanned, kActive };
struct ReservationView {
  std::string name;
  std::string nodes;  // a hostlist
  int node_count = 0;
  int gpus = 0;
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  std::vector<std::string> tenants;  // empty: any job that names it
  bool maintenance = false;
  ReservationState state = ReservationState::kPlanned;
  bool operator==(const ReservationView&) const = default;
};
struct ReservationList {
  std::vector<ReservationView> reservations;
  bool operator==(const ReservationList&) const = default;
};
// The most nodes one partition or reservation names (the API's and the
// log's readers refuse more), the most tenants it lists, the most GPUs a
// reservation asks for by count, and the longest window.
inline constexpr size_t kMaxNodeSetNodes = core::kMaxSelectionNames;
inline constexpr size_t kMaxNodeSetTenants = core::kMaxNodeSetTenants;
inline constexpr int kMaxReservationGpus = 10'000'000;
inline constexpr int64_t kMaxReservationS = int64_t{10} * 366 * 86400;

// ------------------------------------------------------------ the Slurm plugin's line

// One request line of plugins/slurm/job_submit_topo.c (docs/slurm.md).
// Every field but `op` may be absent or null: Slurm's unset. Numbers are
// Slurm's uint32 fields, -1 for NO_VAL and INFINITE.
enum class SlurmOp : uint8_t { kSubmit, kTest, kRefresh };
struct SlurmSubmitLine {
  std::optional<int> v;  // the line's version: 1
  SlurmOp op = SlurmOp::kSubmit;
  std::optional<int64_t> uid;
  std::optional<std::string> name;
  std::optional<std::string> account;
  std::optional<std::string> partition;
  std::optional<std::string> comment;
  std::optional<std::string> features;
  std::optional<std::string> req_nodes;
  std::optional<std::string> exc_nodes;
  std::optional<std::string> tres_per_job;
  std::optional<std::string> tres_per_node;
  std::optional<std::string> tres_per_socket;  // sent only when set
  std::optional<std::string> tres_per_task;    // sent only when set
  std::optional<int64_t> min_nodes;
  std::optional<int64_t> max_nodes;
  std::optional<int64_t> time_limit_min;
  std::optional<int64_t> req_switch;
  std::optional<int64_t> wait4switch;
  std::optional<int64_t> segment;
  std::optional<bool> exclusive_topo;
  std::optional<bool> batch;
  std::optional<bool> array;
  std::optional<std::map<std::string, std::string>> env;  // TOPO_* only
  bool operator==(const SlurmSubmitLine&) const = default;
};
inline constexpr size_t kMaxSlurmLineBytes = 1u << 20;
inline constexpr size_t kMaxSlurmStringBytes = 65536;
inline constexpr int64_t kSlurmNoValue = -1;
inline constexpr int64_t kMaxSlurmNumber = 4294967294;  // uint32 less NO_VAL

// ------------------------------------------------------------ readers and writers

// Strict readers (see the top); field, when given, receives the path of the
// offending field ("" when the text is not a JSON object at all).
core::Result<SubmitRequest> ParseSubmitRequest(std::string_view text, std::string* field = nullptr);
core::Result<SubmitRequest> ReadSubmitRequest(const nlohmann::json& body,
                                              std::string* field = nullptr);
core::Result<SubmitAnswer> ParseSubmitAnswer(std::string_view text, std::string* field = nullptr,
                                             Reading reading = Reading::kStrict);
core::Result<SubmitAnswer> ReadSubmitAnswer(const nlohmann::json& object,
                                            std::string* field = nullptr,
                                            Reading reading = Reading::kStrict);
core::Result<JobView> ParseJobView(std::string_view text, std::string* field = nullptr,
                                   Reading reading = Reading::kStrict);
core::Result<JobView> ReadJobView(const nlohmann::json& object, std::string* field = nullptr,
                                  Reading reading = Reading::kStrict);
core::Result<JobList> ParseJobList(std::string_view text, std::string* field = nullptr,
                                   Reading reading = Reading::kStrict);
core::Result<JobList> ReadJobList(const nlohmann::json& object, std::string* field = nullptr,
                                  Reading reading = Reading::kStrict);
core::Result<NodeView> ParseNodeView(std::string_view text, std::string* field = nullptr,
                                     Reading reading = Reading::kStrict);
core::Result<NodeView> ReadNodeView(const nlohmann::json& object, std::string* field = nullptr,
                                    Reading reading = Reading::kStrict);
core::Result<NodeList> ParseNodeList(std::string_view text, std::string* field = nullptr,
                                     Reading reading = Reading::kStrict);
core::Result<NodeList> ReadNodeList(const nlohmann::json& object, std::string* field = nullptr,
                                    Reading reading = Reading::kStrict);
core::Result<SlurmSubmitLine> ParseSlurmSubmitLine(std::string_view text,
                                                   std::string* field = nullptr);
core::Result<PartitionRequest> ReadPartitionRequest(const nlohmann::json& body,
                                                    std::string* field = nullptr);
core::Result<ReservationRequest> ReadReservationRequest(const nlohmann::json& body,
                                                        std::string* field = nullptr);
core::Result<PartitionView> ParsePartitionView(std::string_view text, std::string* field = nullptr,
                                               Reading reading = Reading::kStrict);
core::Result<PartitionList> ParsePartitionList(std::string_view text, std::string* field = nullptr,
                                               Reading reading = Reading::kStrict);
core::Result<ReservationView> ParseReservationView(std::string_view text,
                                                   std::string* field = nullptr,
                                                   Reading reading = Reading::kStrict);
core::Result<ReservationList> ParseReservationList(std::string_view text,
                                                   std::string* field = nullptr,
                                                   Reading reading = Reading::kStrict);

// Compact JSON text in the tables' field order; strings that are not UTF-8
// are written with U+FFFD in place of bad bytes. The *Json forms give the
// same as a JSON value.
std::string WriteSubmitRequest(const SubmitRequest& request);
std::string WriteSubmitAnswer(const SubmitAnswer& answer);
std::string WriteJobView(const JobView& job);
std::string WriteJobList(const JobList& list);
std::string WriteNodeView(const NodeView& node);
std::string WriteNodeList(const NodeList& list);
std::string WriteSlurmSubmitLine(const SlurmSubmitLine& line);
std::string WritePartitionRequest(const PartitionRequest& request);
std::string WriteReservationRequest(const ReservationRequest& request);
std::string WritePartitionView(const PartitionView& view);
std::string WritePartitionList(const PartitionList& list);
std::string WriteReservationView(const ReservationView& view);
std::string WriteReservationList(const ReservationList& list);
nlohmann::ordered_json PartitionViewJson(const PartitionView& view);
nlohmann::ordered_json ReservationViewJson(const ReservationView& view);
// "planned", "active".
std::string_view ReservationStateName(ReservationState state);
nlohmann::ordered_json SubmitRequestJson(const SubmitRequest& request);
nlohmann::ordered_json JobViewJson(const JobView& job);
nlohmann::ordered_json NodeViewJson(const NodeView& node);

// JSON Schema (draft 2020-12) of every struct above, generated from the
// same tables as the readers: {"$defs": {"submit_request": ..., "job_view":
// ..., ...}}; the job spec is a reference to schema/job.schema.json.
// schema/api.schema.json is this, checked by a test.
nlohmann::ordered_json ApiSchema();

// The views of the core's figures, and their JSON (as the job view and
// `topo place --json` show them; common::MetricsToJson and PredictionToJson
// are these).
MetricsView MetricsViewOf(const core::PlacementMetrics& metrics, const core::Topology& topology);
PredictionView PredictionViewOf(const core::StepPrediction& prediction, const std::string& model);
nlohmann::ordered_json MetricsViewJson(const MetricsView& metrics);
nlohmann::ordered_json PredictionViewJson(const PredictionView& prediction);

}  // namespace topo::api
