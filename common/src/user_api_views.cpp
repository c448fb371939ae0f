// The user API's views (user_api.hpp): a job (summary, accounting and
// detail parts), lists of jobs, the submission's answer, a node and the node
// list, as field tables for the engine (field_table.hpp); and the views of
// the core's placement metrics and step-time prediction.

#include <algorithm>
#include <array>
#include <tuple>

#include "field_schema.hpp"
#include "field_table.hpp"
#include "json_util.hpp"
#include "topo/common/job_chain.hpp"
#include "topo/common/user_api.hpp"
#include "topo/core/evaluator.hpp"
#include "topo/core/perf_model.hpp"
#include "topo/core/topology.hpp"
#include "user_api_internal.hpp"

namespace topo::common::fields {

using namespace topo::api;

template <>
struct EnumTable<core::JobState> {
  static constexpr std::array kValues = {core::JobState::kQueued,    core::JobState::kHeld,
                                         core::JobState::kRunning,   core::JobState::kPreempting,
                                         core::JobState::kCompleted, core::JobState::kFailed,
                                         core::JobState::kCancelled, core::JobState::kRejected};
  static std::string_view Name(core::JobState s) { return core::JobStateName(s); }
};
template <>
struct EnumTable<core::NodeState> {
  static constexpr std::array kValues = {core::NodeState::kUp, core::NodeState::kDraining,
                                         core::NodeState::kDrained, core::NodeState::kDown,
                                         core::NodeState::kSuspect};
  static std::string_view Name(core::NodeState s) { return core::NodeStateName(s); }
};
template <>
struct EnumTable<core::GpuHealth> {
  static constexpr std::array kValues = {core::GpuHealth::kHealthy, core::GpuHealth::kDegraded,
                                         core::GpuHealth::kFailed};
  static std::string_view Name(core::GpuHealth h) { return core::GpuHealthName(h); }
};

template <>
struct EnumTable<ReservationState> {
  static constexpr std::array kValues = {ReservationState::kPlanned, ReservationState::kActive};
  static std::string_view Name(ReservationState s) { return ReservationStateName(s); }
};

namespace {

// Views are the daemon's words: bounds that document them, loose where the
// daemon passes on what others wrote (a topology's names, a reason).
constexpr int64_t kMaxCount = 10'000'000;  // GPUs, ranks, nodes of a job
constexpr Int kJobId{1, proto::kMaxJobId};
constexpr Int kCount{0, kMaxCount};
constexpr Int kTime{0, kMaxTimeMs};
constexpr Int kSeq{0, int64_t{1} << 62};
constexpr Int kDuration{0, int64_t{1} << 62};
constexpr Int kExitCode{-1, 255 + 128};
constexpr Num kFigure{0, 1e300};
constexpr Num kSigned{-1e300, 1e300};
constexpr Str kName{1024, Chars::kText};  // domain and tier names of the topology
constexpr Str kNode{common::kMaxNodeNameBytes, Chars::kNodeName, false};     // node_name.hpp
constexpr Str kText{65536, Chars::kText};                                    // reasons, actors
constexpr Str kWord{64, Chars::kName};                                       // event types, causes
constexpr Str kSetName{core::kMaxNodeSetNameBytes, Chars::kSetName, false};  // node_sets.hpp
// A hostlist of a node set's nodes (at most kMaxNodeSetNodes names).
constexpr Str kHostlist{size_t{8} << 20, Chars::kName, false};
constexpr List<Str> kTenants{kMaxNodeSetTenants, {kMaxTenantBytes, Chars::kTenant, false}};

}  // namespace

template <>
struct Table<ArrayTask> {
  static constexpr auto Fields() {
    return std::tuple{F("job", &ArrayTask::job, kJobId),
                      F("task", &ArrayTask::task, Int{0, kMaxArrayIndex}),
                      F("throttle", &ArrayTask::throttle, Int{0, kMaxArrayTasks})};
  }
};
template <>
struct Table<RankView> {
  static constexpr auto Fields() {
    return std::tuple{F("rank", &RankView::rank, Int{0, kMaxCount - 1}),
                      F("node", &RankView::node, kNode),
                      F("gpu", &RankView::gpu, Int{0, core::kMaxGpusPerNode - 1})};
  }
};
template <>
struct Table<DomainGpus> {
  static constexpr auto Fields() {
    return std::tuple{F("name", &DomainGpus::name, kName), F("gpus", &DomainGpus::gpus, kCount)};
  }
};
template <>
struct Table<PlacementView> {
  static constexpr auto Fields() {
    using P = PlacementView;
    return std::tuple{F("nodes", &P::nodes, kCount), F("hbds", &P::hbds, List<Obj>{kMaxCount, {}}),
                      F("leaves", &P::leaves, List<Obj>{kMaxCount, {}}),
                      F("pods", &P::pods, List<Obj>{kMaxCount, {}})};
  }
};
template <>
struct Table<MetricsView> {
  static constexpr auto Fields() {
    using M = MetricsView;
    constexpr Nullable<Num> kRatio{kFigure};
    return std::tuple{
        F("tp_in_hbd", &M::tp_in_hbd, kRatio),
        F("ep_in_hbd", &M::ep_in_hbd, kRatio),
        F("leaf_span_ratio", &M::leaf_span_ratio, kRatio),
        F("pod_span_ratio", &M::pod_span_ratio, kRatio),
        F("comm_cost_ratio", &M::comm_cost_ratio, kRatio),
        F("leaves_spanned", &M::leaves_spanned, kCount),
        F("pods_spanned", &M::pods_spanned, kCount),
        F("min_leaves", &M::min_leaves, kCount),
        F("min_pods", &M::min_pods, kCount),
        F("comm_cost", &M::comm_cost, kFigure),
        F("comm_cost_bound", &M::comm_cost_bound, kFigure),
        F("required_met", &M::required_met, Bool{}),
        F("tier_histogram", &M::tier_histogram,
          Map<Map<Int>>{
              core::kGroupKindCount, {8, Chars::kName, false}, Map<Int>{64, kName, kCount}})};
  }
};
template <>
struct Table<StepBreakdownView> {
  static constexpr auto Fields() {
    using B = StepBreakdownView;
    return std::tuple{F("compute_s", &B::compute_s, kFigure), F("tp_s", &B::tp_s, kFigure),
                      F("cp_s", &B::cp_s, kFigure),           F("ep_s", &B::ep_s, kFigure),
                      F("pp_s", &B::pp_s, kFigure),           F("dp_s", &B::dp_s, kFigure),
                      F("bubble_s", &B::bubble_s, kFigure),   F("total_s", &B::total_s, kFigure),
                      F("dp_raw_s", &B::dp_raw_s, kFigure)};
  }
};
template <>
struct Table<PredictionView> {
  static constexpr auto Fields() {
    using P = PredictionView;
    return std::tuple{
        F("step_s", &P::step_s, kFigure),     F("ideal_step_s", &P::ideal_step_s, kFigure),
        F("slowdown", &P::slowdown, kFigure), F("model", &P::model, Str{256, Chars::kLine}),
        F("breakdown", &P::breakdown, Obj{}), F("ideal_breakdown", &P::ideal_breakdown, Obj{})};
  }
};
template <>
struct Table<JobLimitsView> {
  static constexpr auto Fields() {
    return std::tuple{
        F("memory_mb_per_node", &JobLimitsView::memory_mb_per_node, Int{0, kMaxMemoryMbPerNode}),
        F("cpus_per_node", &JobLimitsView::cpus_per_node, Num{0, kMaxCpusPerNode})};
  }
};
template <>
struct Table<JobProcessView> {
  static constexpr auto Fields() {
    using P = JobProcessView;
    constexpr Nullable<Str> kPath{{proto::kMaxPathBytes, Chars::kText}};
    return std::tuple{F("command", &P::command,
                        List<Str>{proto::kMaxCommandArgs, {proto::kMaxArgBytes, Chars::kText}}),
                      F("launch", &P::launch, Enum<core::LaunchMode>{}),
                      F("env", &P::env, EnvMap{}),
                      F("chdir", &P::chdir, kPath),
                      F("output", &P::output, kPath),
                      F("error", &P::error, kPath),
                      F("limits", &P::limits, Obj{})};
  }
};
template <>
struct Table<RunView> {
  static constexpr auto Fields() {
    using R = RunView;
    return std::tuple{F("run", &R::run, Int{1, kMaxCount}),
                      F("start_ms", &R::start_ms, kTime),
                      F("end_ms", &R::end_ms, Nullable<Int>{kTime}),
                      F("gpus", &R::gpus, kCount),
                      F("nodes", &R::nodes, kCount),
                      F("node_names", &R::node_names, List<Str>{kMaxCount, kNode}),
                      F("end_reason", &R::end_reason, Nullable<Str>{kText}),
                      F("exit_code", &R::exit_code, Nullable<Int>{kExitCode}),
                      F("gpu_hours", &R::gpu_hours, kFigure)};
  }
};
template <>
struct Table<JobEventView> {
  static constexpr auto Fields() {
    using E = JobEventView;
    return std::tuple{F("seq", &E::seq, kSeq),
                      F("time_ms", &E::time_ms, kTime),
                      F("actor", &E::actor, kText),
                      F("type", &E::type, kWord),
                      F("state", &E::state, Nullable<Enum<core::JobState>>{}),
                      F("reason", &E::reason, Nullable<Str>{kText})};
  }
};
template <>
struct Table<IncidentView> {
  static constexpr auto Fields() {
    using I = IncidentView;
    return std::tuple{
        F("time_ms", &I::time_ms, kTime),
        F("cause", &I::cause, kWord),
        F("actor", &I::actor, kText),
        F("reason", &I::reason, kText),
        F("detection_ms", &I::detection_ms, Nullable<Int>{kDuration}),
        F("restart_ms", &I::restart_ms, Nullable<Int>{kDuration}),
        F("requeued", &I::requeued, Bool{}),
        F("checkpoint_step", &I::checkpoint_step, Int{-1, proto::kMaxStep}),
        F("restart_count", &I::restart_count, Nullable<Int>{{0, proto::kMaxRestartCount}}),
        F("lost_work_s", &I::lost_work_s, kFigure)};
  }
};
template <>
struct Table<JobAccounting> {
  static constexpr auto Fields() {
    using A = JobAccounting;
    return std::tuple{F("node_names", &A::node_names, List<Str>{kMaxCount, kNode}),
                      F("queue_wait_s", &A::queue_wait_s, Nullable<Num>{kSigned}),
                      F("exit_code", &A::exit_code, Nullable<Int>{kExitCode}),
                      F("gpu_hours", &A::gpu_hours, kFigure),
                      F("runs", &A::runs, List<Obj>{kMaxCount, {}})};
  }
};
template <>
struct Table<JobDetail> {
  static constexpr auto Fields() {
    using D = JobDetail;
    return std::tuple{F("spec", &D::spec, Nullable<Custom<JobSpecCodec>>{}),
                      F("process", &D::process, Flat{}),
                      F("ranks", &D::ranks, List<Obj>{kMaxCount, {}}),
                      F("spares", &D::spares, List<Str>{100000, kNode}),
                      F("placement", &D::placement, Nullable<Obj>{}),
                      F("metrics", &D::metrics, Nullable<Obj>{}),
                      F("predicted", &D::predicted, Nullable<Obj>{}),
                      F("history", &D::history, List<Obj>{100000, {}}),
                      F("incidents", &D::incidents, List<Obj>{100000, {}})};
  }
};
template <>
struct Table<JobView> {
  static constexpr auto Fields() {
    using J = JobView;
    return std::tuple{F("id", &J::id, kJobId),
                      F("name", &J::name, Str{core::kMaxJobNameBytes, Chars::kText}),
                      F("tenant", &J::tenant, Str{kMaxTenantBytes, Chars::kTenant, false}),
                      F("user", &J::user, Str{kMaxUserNameBytes, Chars::kLine}),
                      F("state", &J::state, Enum<core::JobState>{}),
                      F("reason", &J::reason, kText),
                      F("gpus", &J::gpus, kCount),
                      F("nodes", &J::nodes, kCount),
                      F("gpu_model", &J::gpu_model, Nullable<Str>{kName}),
                      F("priority", &J::priority, Int{kMinPriority, kMaxPriority}),
                      F("submit_ms", &J::submit_ms, kTime),
                      F("start_ms", &J::start_ms, Nullable<Int>{kTime}),
                      F("end_ms", &J::end_ms, Nullable<Int>{kTime}),
                      F("time_limit_s", &J::time_limit_s, Int{0, int64_t{1} << 40}),
                      F("restarts", &J::restarts, Int{0, proto::kMaxRestartCount}),
                      F("checkpoint_step", &J::checkpoint_step, Int{-1, proto::kMaxStep}),
                      F("queue_position", &J::queue_position, Nullable<Int>{{1, kMaxCount}}),
                      F("estimated_start_ms", &J::estimated_start_ms, Nullable<Int>{kTime}),
                      F("predicted_slowdown", &J::predicted_slowdown, Nullable<Num>{kFigure}),
                      F("dependency", &J::dependency, Nullable<Str>{{kMaxChainText, Chars::kLine}}),
                      F("array", &J::array, Nullable<Obj>{}),
                      F("partition", &J::partition, Nullable<Str>{kSetName}),
                      F("reservation", &J::reservation, Nullable<Str>{kSetName}),
                      F("accounting", &J::accounting, Flat{}),
                      F("detail", &J::detail, Flat{})};
  }
};
template <>
struct Table<JobList> {
  static constexpr auto Fields() {
    return std::tuple{F("jobs", &JobList::jobs, List<Obj>{kMaxJobsPerPage, {}}),
                      F("next_after", &JobList::next_after, Nullable<Int>{kJobId})};
  }
};
template <>
struct Table<SubmitAnswer> {
  static constexpr auto Fields() {
    using A = SubmitAnswer;
    return std::tuple{F("job", &A::job, Flat{}), F("duplicate", &A::duplicate, Bool{}),
                      F("ids", &A::ids, List<Int>{kMaxArrayTasks, kJobId}),
                      F("tasks", &A::tasks, List<Int>{kMaxArrayTasks, {0, kMaxArrayIndex}})};
  }
  static Status Check(const SubmitAnswer& a, const std::string& path, Failure& f) {
    if (a.tasks && (!a.ids || a.ids->size() != a.tasks->size())) {
      return Fail(f, Child(path, "tasks"), "must list one task index per id of \"ids\"");
    }
    return Status::Ok();
  }
};
template <>
struct Table<GpuHealthEventView> {
  static constexpr auto Fields() {
    using G = GpuHealthEventView;
    return std::tuple{F("seq", &G::seq, kSeq), F("gpu", &G::gpu, Int{0, core::kMaxGpusPerNode - 1}),
                      F("health", &G::health, Enum<core::GpuHealth>{}),
                      F("reason", &G::reason, kText), F("time_ms", &G::time_ms, kTime)};
  }
};
template <>
struct Table<NodeView> {
  static constexpr auto Fields() {
    using N = NodeView;
    constexpr size_t kGpus = core::kMaxGpusPerNode;
    return std::tuple{
        F("name", &N::name, kNode),
        F("state", &N::state, Enum<core::NodeState>{}),
        F("reason", &N::reason, kText),
        F("gpus", &N::gpus, Int{0, core::kMaxGpusPerNode}),
        F("free", &N::free, Int{0, core::kMaxGpusPerNode}),
        F("gpu_model", &N::gpu_model, kName),
        F("features", &N::features, List<Str>{size_t{core::kMaxTopologyFeatures}, kName}),
        F("hbd", &N::hbd, kName),
        F("leaf", &N::leaf, kName),
        F("pod", &N::pod, kName),
        F("gpu_health", &N::gpu_health, List<Enum<core::GpuHealth>>{kGpus, {}}),
        F("gpu_jobs", &N::gpu_jobs, List<Int>{kGpus, {-1, proto::kMaxJobId}}),
        F("partitions", &N::partitions, List<Str>{core::kMaxNodeSets, kSetName}),
        F("reservation", &N::reservation, Nullable<Str>{kSetName}),
        F("gpu_history", &N::gpu_history, List<Obj>{1000000, {}})};
  }
  static Status Check(const NodeView& n, const std::string& path, Failure& f) {
    if (n.gpu_health.size() != static_cast<size_t>(n.gpus) && !f.lenient) {
      return Fail(f, Child(path, "gpu_health"),
                  "lists " + std::to_string(n.gpu_health.size()) + " GPUs; the node has " +
                      std::to_string(n.gpus));
    }
    if (n.gpu_jobs.size() != static_cast<size_t>(n.gpus) && !f.lenient) {
      return Fail(f, Child(path, "gpu_jobs"),
                  "lists " + std::to_string(n.gpu_jobs.size()) + " GPUs; the node has " +
                      std::to_string(n.gpus));
    }
    if (n.free > n.gpus) return Fail(f, Child(path, "free"), "is more than the node's GPUs");
    return Status::Ok();
  }
};
template <>
struct Table<NodeList> {
  static constexpr auto Fields() {
    return std::tuple{F("nodes", &NodeList::nodes, List<Obj>{size_t{kMaxCount}, {}})};
  }
};

template <>
struct Table<PartitionView> {
  static constexpr auto Fields() {
    using P = PartitionView;
    constexpr Int kSeconds{0, kMaxTimeLimitS};
    return std::tuple{F("name", &P::name, kSetName),
                      F("nodes", &P::nodes, kHostlist),
                      F("node_count", &P::node_count, Int{1, int64_t{kMaxNodeSetNodes}}),
                      F("gpus", &P::gpus, kCount),
                      F("up_nodes", &P::up_nodes, Int{0, int64_t{kMaxNodeSetNodes}}),
                      F("free_gpus", &P::free_gpus, kCount),
                      F("default_time_s", &P::default_time_s, kSeconds),
                      F("max_time_s", &P::max_time_s, kSeconds),
                      F("max_gpus", &P::max_gpus, kCount),
                      F("tenants", &P::tenants, kTenants),
                      F("priority_tier", &P::priority_tier, Int{-1000, 1000}),
                      F("preemptible", &P::preemptible, Bool{}),
                      F("default", &P::is_default, Bool{})};
  }
};
template <>
struct Table<PartitionList> {
  static constexpr auto Fields() {
    return std::tuple{
        F("partitions", &PartitionList::partitions, List<Obj>{size_t{core::kMaxNodeSets}, {}})};
  }
};
template <>
struct Table<ReservationView> {
  static constexpr auto Fields() {
    using R = ReservationView;
    return std::tuple{F("name", &R::name, kSetName),
                      F("nodes", &R::nodes, kHostlist),
                      F("node_count", &R::node_count, Int{1, int64_t{kMaxNodeSetNodes}}),
                      F("gpus", &R::gpus, kCount),
                      F("start_ms", &R::start_ms, kTime),
                      F("end_ms", &R::end_ms, kTime),
                      F("tenants", &R::tenants, kTenants),
                      F("maintenance", &R::maintenance, Bool{}),
                      F("state", &R::state, Enum<ReservationState>{})};
  }
};
template <>
struct Table<ReservationList> {
  static constexpr auto Fields() {
    return std::tuple{F("reservations", &ReservationList::reservations,
                        List<Obj>{size_t{core::kMaxNodeSets}, {}})};
  }
};

void AddViewSchemas(OJson& defs) {
  defs["submit_answer"] = ObjectSchema<SubmitAnswer, false>();
  defs["job_view"] = ObjectSchema<JobView, false>();
  defs["job_list"] = ObjectSchema<JobList, false>();
  defs["node_view"] = ObjectSchema<NodeView, false>();
  defs["node_list"] = ObjectSchema<NodeList, false>();
  defs["partition_view"] = ObjectSchema<PartitionView, false>();
  defs["partition_list"] = ObjectSchema<PartitionList, false>();
  defs["reservation_view"] = ObjectSchema<ReservationView, false>();
  defs["reservation_list"] = ObjectSchema<ReservationList, false>();
}

}  // namespace topo::common::fields

namespace topo::api {

namespace fields = common::fields;
using core::Result;

namespace {

// A list of jobs nests: jobs[].spec.constraints.tp{}, jobs[].metrics.tier_histogram.tp{}.
constexpr int kMaxViewDepth = 10;

template <class T>
Result<T> ParseView(std::string_view text, std::string* field, Reading reading) {
  return fields::ParseObjectText<T>(text, kMaxAnswerBytes, kMaxViewDepth,
                                    reading == Reading::kClient, field);
}
template <class T>
Result<T> ReadView(const nlohmann::json& object, std::string* field, Reading reading) {
  return fields::ReadObjectJson<T>(object, reading == Reading::kClient, field);
}

}  // namespace

Result<SubmitAnswer> ParseSubmitAnswer(std::string_view text, std::string* field, Reading reading) {
  return ParseView<SubmitAnswer>(text, field, reading);
}
Result<SubmitAnswer> ReadSubmitAnswer(const nlohmann::json& object, std::string* field,
                                      Reading reading) {
  return ReadView<SubmitAnswer>(object, field, reading);
}
Result<JobView> ParseJobView(std::string_view text, std::string* field, Reading reading) {
  return ParseView<JobView>(text, field, reading);
}
Result<JobView> ReadJobView(const nlohmann::json& object, std::string* field, Reading reading) {
  return ReadView<JobView>(object, field, reading);
}
Result<JobList> ParseJobList(std::string_view text, std::string* field, Reading reading) {
  return ParseView<JobList>(text, field, reading);
}
Result<JobList> ReadJobList(const nlohmann::json& object, std::string* field, Reading reading) {
  return ReadView<JobList>(object, field, reading);
}
Result<NodeView> ParseNodeView(std::string_view text, std::string* field, Reading reading) {
  return ParseView<NodeView>(text, field, reading);
}
Result<NodeView> ReadNodeView(const nlohmann::json& object, std::string* field, Reading reading) {
  return ReadView<NodeView>(object, field, reading);
}
Result<NodeList> ParseNodeList(std::string_view text, std::string* field, Reading reading) {
  return ParseView<NodeList>(text, field, reading);
}
Result<NodeList> ReadNodeList(const nlohmann::json& object, std::string* field, Reading reading) {
  return ReadView<NodeList>(object, field, reading);
}

Result<PartitionView> ParsePartitionView(std::string_view text, std::string* field,
                                         Reading reading) {
  return ParseView<PartitionView>(text, field, reading);
}
Result<PartitionList> ParsePartitionList(std::string_view text, std::string* field,
                                         Reading reading) {
  return ParseView<PartitionList>(text, field, reading);
}
Result<ReservationView> ParseReservationView(std::string_view text, std::string* field,
                                             Reading reading) {
  return ParseView<ReservationView>(text, field, reading);
}
Result<ReservationList> ParseReservationList(std::string_view text, std::string* field,
                                             Reading reading) {
  return ParseView<ReservationList>(text, field, reading);
}
std::string WritePartitionView(const PartitionView& view) { return fields::WriteText(view); }
std::string WritePartitionList(const PartitionList& list) { return fields::WriteText(list); }
std::string WriteReservationView(const ReservationView& view) { return fields::WriteText(view); }
std::string WriteReservationList(const ReservationList& list) { return fields::WriteText(list); }
nlohmann::ordered_json PartitionViewJson(const PartitionView& view) {
  return fields::WriteObject(view);
}
nlohmann::ordered_json ReservationViewJson(const ReservationView& view) {
  return fields::WriteObject(view);
}
std::string_view ReservationStateName(ReservationState state) {
  return state == ReservationState::kActive ? "active" : "planned";
}

std::string WriteSubmitAnswer(const SubmitAnswer& answer) { return fields::WriteText(answer); }
std::string WriteJobView(const JobView& job) { return fields::WriteText(job); }
std::string WriteJobList(const JobList& list) { return fields::WriteText(list); }
std::string WriteNodeView(const NodeView& node) { return fields::WriteText(node); }
std::string WriteNodeList(const NodeList& list) { return fields::WriteText(list); }
nlohmann::ordered_json JobViewJson(const JobView& job) { return fields::WriteObject(job); }
nlohmann::ordered_json NodeViewJson(const NodeView& node) { return fields::WriteObject(node); }
nlohmann::ordered_json MetricsViewJson(const MetricsView& metrics) {
  return fields::WriteObject(metrics);
}
nlohmann::ordered_json PredictionViewJson(const PredictionView& prediction) {
  return fields::WriteObject(prediction);
}

MetricsView MetricsViewOf(const core::PlacementMetrics& m, const core::Topology& topology) {
  MetricsView v;
  v.tp_in_hbd = m.tp_in_hbd;
  v.ep_in_hbd = m.ep_in_hbd;
  v.leaf_span_ratio = m.leaf_span_ratio;
  v.pod_span_ratio = m.pod_span_ratio;
  v.comm_cost_ratio = m.comm_cost_ratio;
  v.leaves_spanned = m.leaves_spanned;
  v.pods_spanned = m.pods_spanned;
  v.min_leaves = m.min_leaves;
  v.min_pods = m.min_pods;
  v.comm_cost = m.comm_cost;
  v.comm_cost_bound = m.comm_cost_bound;
  v.required_met = m.required_met;
  for (core::GroupKind kind : core::kAllGroupKinds) {
    const std::vector<int>& counts = m.tier_histogram[static_cast<int>(kind)];
    std::map<std::string, int>& by_tier = v.tier_histogram[std::string(core::GroupKindName(kind))];
    for (int t = 0; t < static_cast<int>(counts.size()) && t <= topology.root_tier(); ++t) {
      if (counts[t] != 0) by_tier[topology.tier(t).name] = counts[t];
    }
  }
  return v;
}

namespace {
StepBreakdownView BreakdownView(const core::StepBreakdown& b) {
  return {b.compute_s, b.tp_s, b.cp_s, b.ep_s, b.pp_s, b.dp_s, b.bubble_s, b.total_s, b.dp_raw_s};
}
}  // namespace

PredictionView PredictionViewOf(const core::StepPrediction& p, const std::string& model) {
  return {p.step.total_s, p.ideal.total_s,       p.slowdown,
          model,          BreakdownView(p.step), BreakdownView(p.ideal)};
}

}  // namespace topo::api
