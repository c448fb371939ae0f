// SchedulerCore events and commands as JSON (event_json.hpp).

#include "topo/common/event_json.hpp"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "json_util.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/job_process.hpp"
#include "topo/common/node_name.hpp"
#include "topo/common/tenant_name.hpp"

namespace topo::common {

namespace {
constexpr std::array<std::pair<core::GpuEventKind, std::string_view>, 6> kGpuEventKinds = {{
    {core::GpuEventKind::kXid, "xid"},
    {core::GpuEventKind::kEccSingleBit, "ecc_single_bit"},
    {core::GpuEventKind::kEccDoubleBit, "ecc_double_bit"},
    {core::GpuEventKind::kThermal, "thermal"},
    {core::GpuEventKind::kOffBus, "off_bus"},
    {core::GpuEventKind::kCleared, "cleared"},
}};
}  // namespace

std::string_view GpuEventKindName(core::GpuEventKind k) {
  for (const auto& [kind, name] : kGpuEventKinds) {
    if (kind == k) return name;
  }
  return "unknown";
}

std::optional<core::GpuEventKind> ParseGpuEventKind(std::string_view name) {
  for (const auto& [kind, n] : kGpuEventKinds) {
    if (n == name) return kind;
  }
  return std::nullopt;
}

namespace {

using core::NodeId;
using core::Result;
using core::Status;
using internal::Child;
using internal::Index;
using internal::Json;
using internal::PathError;

constexpr int64_t kIntMin = std::numeric_limits<int>::min();
constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

// The core's name functions say "unknown" past the last value, so a value
// added to the core parses without a change here.
template <typename Enum, typename NameFn>
std::optional<Enum> ParseEnum(std::string_view name, NameFn name_of) {
  for (int i = 0; i < 256; ++i) {
    const std::string_view n = name_of(static_cast<Enum>(i));
    if (n == "unknown") break;
    if (n == name) return static_cast<Enum>(i);
  }
  return std::nullopt;
}

// Puts an error of a nested reader under its field: "request" + "spec.gpus:
// ..." gives "request.spec.gpus: ...".
Status Nest(std::string_view prefix, const Status& inner) {
  const std::string& m = inner.message();
  constexpr std::string_view kTop = "top level: ";
  if (m.compare(0, kTop.size(), kTop) == 0) {
    return Status::Error(std::string(prefix) + ": " + m.substr(kTop.size()));
  }
  if (!m.empty() && m[0] == '[') return Status::Error(std::string(prefix) + m);
  return Status::Error(std::string(prefix) + "." + m);
}

Json NodeName(NodeId n, const core::Topology& topo) {
  if (n < 0 || n >= topo.node_count()) return nullptr;
  return topo.node(n).name;
}

// Reads the fields of one JSON object; the first problem is kept and later
// reads return defaults, so a parser reads every field and checks once.
class Reader {
 public:
  Reader(const Json& j, std::string path, std::initializer_list<std::string_view> allowed)
      : j_(j), path_(std::move(path)) {
    if (!j_.is_object()) {
      Fail(PathError(path_,
                     "must be a JSON object (got " + std::string(internal::TypeName(j_)) + ")"));
      return;
    }
    Keep(internal::CheckFields(j_, path_, allowed));
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const std::string& path() const { return path_; }
  void Keep(Status s) {
    if (status_.ok() && !s.ok()) status_ = std::move(s);
  }
  void Fail(Status s) { Keep(std::move(s)); }

  bool Has(std::string_view key) const { return ok() && j_.contains(std::string(key)); }
  const Json* Field(std::string_view key) {
    if (!ok()) return nullptr;
    auto it = j_.find(std::string(key));
    if (it == j_.end()) {
      Fail(PathError(path_, "\"" + std::string(key) + "\" is required"));
      return nullptr;
    }
    return &*it;
  }
  int64_t Int64(std::string_view key, int64_t lo = kI64Min, int64_t hi = kI64Max) {
    if (Field(key) == nullptr) return 0;
    Result<int64_t> v = internal::GetInt(j_, path_, key, lo, hi);
    Keep(v.status());
    return v.ok() ? v.value() : 0;
  }
  int Int(std::string_view key, int64_t lo = kIntMin, int64_t hi = kIntMax) {
    return static_cast<int>(Int64(key, lo, hi));
  }
  std::string String(std::string_view key, bool allow_empty = true) {
    if (Field(key) == nullptr) return {};
    Result<std::string> v = internal::GetString(j_, path_, key, allow_empty);
    Keep(v.status());
    return v.ok() ? v.value() : std::string();
  }
  bool Bool(std::string_view key) {
    const Json* v = Field(key);
    if (v == nullptr) return false;
    if (!v->is_boolean()) {
      Fail(PathError(path_, "\"" + std::string(key) + "\" must be true or false (got " +
                                internal::Shown(*v) + ")"));
      return false;
    }
    return v->get<bool>();
  }
  double Number(std::string_view key) {
    const Json* v = Field(key);
    if (v == nullptr) return 0;
    if (!v->is_number()) {
      Fail(PathError(path_, "\"" + std::string(key) + "\" must be a number (got " +
                                internal::Shown(*v) + ")"));
      return 0;
    }
    return v->get<double>();
  }
  NodeId Node(std::string_view key, const core::Topology& topo) {
    const Json* v = Field(key);
    if (v == nullptr) return 0;
    Result<NodeId> n = ReadNode(*v, Child(path_, key), topo);
    Keep(n.status());
    return n.ok() ? n.value() : 0;
  }
  // A name from a fixed set, turned into its enum by parse.
  template <typename Enum, typename Parse>
  Enum Named(std::string_view key, std::string_view what, Parse parse) {
    std::string name = String(key, /*allow_empty=*/false);
    if (!ok()) return Enum{};
    std::optional<Enum> e = parse(name);
    if (!e) {
      Fail(PathError(path_, "\"" + std::string(key) + "\": unknown " + std::string(what) + " \"" +
                                name + "\""));
      return Enum{};
    }
    return *e;
  }

  static Result<NodeId> ReadNode(const Json& v, const std::string& path,
                                 const core::Topology& topo) {
    if (!v.is_string()) {
      return PathError(path, "a node is written by its name (got " + internal::Shown(v) + ")");
    }
    const std::string name = v.get<std::string>();
    const NodeId n = topo.FindNode(name);
    if (n < 0) {
      return PathError(path, "unknown node \"" + name + "\": not in topology \"" + topo.name() +
                                 "\" (was the topology replaced by one without it?)");
    }
    return n;
  }

 private:
  const Json& j_;
  std::string path_;
  Status status_;
};

// ---------------------------------------------------------------- events

// node_state_requested's body, and each item of node_states_requested.
Json NodeRequestBody(const core::NodeStateRequested& e, const core::Topology& topo) {
  return {{"node", NodeName(e.node, topo)},
          {"state", core::NodeStateName(e.state)},
          {"reason", e.reason}};
}

// Reads the node, state and reason of r's object.
core::NodeStateRequested ReadNodeRequest(Reader& r, const core::Topology& topo) {
  return core::NodeStateRequested{r.Node("node", topo),
                                  r.Named<core::NodeState>("state", "node state", ParseNodeState),
                                  r.String("reason")};
}

// A policy's times in milliseconds; a checkpoint interval of never is -1.
Json PolicyBody(const core::SchedulingPolicy& p) {
  return {
      {"backfill", p.backfill},
      {"preemption", p.preemption},
      {"preempt_grace_ms", p.preempt_grace},
      {"preempt_restart_cost_ms", p.preempt_restart_cost},
      {"preempt_protect_after", p.preempt_protect_after},
      {"placement_wait_ms", p.placement_wait},
      {"fairshare_max_wait_ms", p.fairshare_max_wait},
      {"default_time_limit_ms", p.default_time_limit},
      {"default_checkpoint_interval_ms",
       p.default_checkpoint_interval == core::kNever ? int64_t{-1} : p.default_checkpoint_interval},
      {"max_app_failures", p.max_app_failures},
      {"restart_backoff_initial_ms", p.restart_backoff_initial},
      {"restart_backoff_max_ms", p.restart_backoff_max},
      {"attribution_window_ms", p.attribution_window},
      {"backfill_depth", p.backfill_depth}};
}

template <typename T>
Json EventBody(const T& e, const core::Topology& topo) {
  if constexpr (std::is_same_v<T, core::JobSubmitted>) {
    return {{"id", e.id}, {"request", JobRequestToJson(e.request)}};
  } else if constexpr (std::is_same_v<T, core::JobCancelled>) {
    return {{"id", e.id}, {"reason", e.reason}};
  } else if constexpr (std::is_same_v<T, core::JobHoldChanged>) {
    return {{"id", e.id}, {"hold", e.hold}};
  } else if constexpr (std::is_same_v<T, core::JobFinished>) {
    return {{"id", e.id}, {"exit_code", e.exit_code}};
  } else if constexpr (std::is_same_v<T, core::RankExited>) {
    return {{"id", e.id}, {"rank", e.rank}, {"exit_code", e.exit_code}};
  } else if constexpr (std::is_same_v<T, core::CheckpointCompleted>) {
    return {{"id", e.id}, {"step", e.step}};
  } else if constexpr (std::is_same_v<T, core::NodeStateRequested>) {
    return NodeRequestBody(e, topo);
  } else if constexpr (std::is_same_v<T, core::NodeStatesRequested>) {
    Json requests = Json::array();
    for (const core::NodeStateRequested& r : e.requests) {
      requests.push_back(NodeRequestBody(r, topo));
    }
    return {{"requests", std::move(requests)}};
  } else if constexpr (std::is_same_v<T, core::Heartbeat>) {
    return {{"node", NodeName(e.node, topo)}};
  } else if constexpr (std::is_same_v<T, core::GpuEvent>) {
    return {{"node", NodeName(e.node, topo)},
            {"gpu", e.gpu},
            {"kind", GpuEventKindName(e.kind)},
            {"code", e.code}};
  } else if constexpr (std::is_same_v<T, core::TenantConfigured>) {
    return {{"tenant", TenantConfigToJson(e.tenant)}};
  } else if constexpr (std::is_same_v<T, core::NodeEvacuated>) {
    return {{"node", NodeName(e.node, topo)}, {"reason", e.reason}};
  } else if constexpr (std::is_same_v<T, core::JobLaunchFailed>) {
    return {{"id", e.id},
            {"node", NodeName(e.node, topo)},
            {"reason", e.reason},
            {"permanent", e.permanent}};
  } else if constexpr (std::is_same_v<T, core::StartUnacknowledged>) {
    return {{"id", e.id}, {"nodes", NodeListToJson(e.nodes, topo)}, {"waited_ms", e.waited}};
  } else if constexpr (std::is_same_v<T, core::PolicyChanged>) {
    return {{"policy", PolicyBody(e.policy)},
            {"key", e.key},
            {"old", e.old_value},
            {"new", e.new_value}};
  } else if constexpr (std::is_same_v<T, core::PartitionConfigured>) {
    return {{"partition", PartitionConfigToJson(e.partition)}};
  } else if constexpr (std::is_same_v<T, core::ReservationConfigured>) {
    return {{"reservation", ReservationConfigToJson(e.reservation)}};
  } else if constexpr (std::is_same_v<T, core::PartitionDeleted> ||
                       std::is_same_v<T, core::ReservationDeleted>) {
    return {{"name", e.name}};
  } else {
    static_assert(std::is_same_v<T, core::Tick>);
    return Json::object();
  }
}

Result<core::Event> ReadEvent(std::string_view type, const Json& j, const core::Topology& topo) {
  auto fields = [&](std::initializer_list<std::string_view> allowed) {
    return Reader(j, "", allowed);
  };
  auto done = [](Reader& r, core::Event e) -> Result<core::Event> {
    if (!r.ok()) return r.status();
    return e;
  };
  if (type == "job_submitted") {
    Reader r = fields({"type", "id", "request"});
    core::JobSubmitted e{r.Int64("id"), {}};
    if (const Json* req = r.Field("request")) {
      Result<core::JobRequest> request = JobRequestFromJson(*req);
      if (!request.ok()) return Nest("request", request.status());
      e.request = std::move(request).value();
    }
    return done(r, std::move(e));
  }
  if (type == "job_cancelled") {
    Reader r = fields({"type", "id", "reason"});
    core::JobCancelled e{r.Int64("id"), r.String("reason")};
    return done(r, std::move(e));
  }
  if (type == "job_hold_changed") {
    Reader r = fields({"type", "id", "hold"});
    core::JobHoldChanged e{r.Int64("id"), r.Bool("hold")};
    return done(r, e);
  }
  if (type == "job_finished") {
    Reader r = fields({"type", "id", "exit_code"});
    core::JobFinished e{r.Int64("id"), r.Int("exit_code")};
    return done(r, e);
  }
  if (type == "rank_exited") {
    Reader r = fields({"type", "id", "rank", "exit_code"});
    core::RankExited e{r.Int64("id"), r.Int("rank"), r.Int("exit_code")};
    return done(r, e);
  }
  if (type == "checkpoint_completed") {
    Reader r = fields({"type", "id", "step"});
    core::CheckpointCompleted e{r.Int64("id"), r.Int64("step")};
    return done(r, e);
  }
  if (type == "node_state_requested") {
    Reader r = fields({"type", "node", "state", "reason"});
    core::NodeStateRequested e = ReadNodeRequest(r, topo);
    return done(r, std::move(e));
  }
  if (type == "node_states_requested") {
    Reader r = fields({"type", "requests"});
    core::NodeStatesRequested e;
    if (const Json* list = r.Field("requests")) {
      if (!list->is_array() || list->empty()) {
        return PathError("requests", "must be a non-empty array of {node, state, reason} (got " +
                                         internal::Shown(*list) + ")");
      }
      e.requests.reserve(list->size());
      for (size_t i = 0; i < list->size(); ++i) {
        Reader item((*list)[i], Index("requests", i), {"node", "state", "reason"});
        core::NodeStateRequested request = ReadNodeRequest(item, topo);
        if (!item.ok()) return item.status();
        e.requests.push_back(std::move(request));
      }
    }
    return done(r, std::move(e));
  }
  if (type == "heartbeat") {
    Reader r = fields({"type", "node"});
    core::Heartbeat e{r.Node("node", topo)};
    return done(r, e);
  }
  if (type == "gpu_event") {
    Reader r = fields({"type", "node", "gpu", "kind", "code"});
    core::GpuEvent e{r.Node("node", topo), r.Int("gpu"),
                     r.Named<core::GpuEventKind>("kind", "GPU event kind", ParseGpuEventKind),
                     r.Int("code")};
    return done(r, e);
  }
  if (type == "tenant_configured") {
    Reader r = fields({"type", "tenant"});
    core::TenantConfigured e{};
    if (const Json* t = r.Field("tenant")) {
      Result<core::TenantConfig> tenant = TenantConfigFromJson(*t);
      if (!tenant.ok()) return Nest("tenant", tenant.status());
      e.tenant = std::move(tenant).value();
    }
    return done(r, std::move(e));
  }
  if (type == "partition_configured" || type == "reservation_configured") {
    const bool partition = type == "partition_configured";
    const char* key = partition ? "partition" : "reservation";
    Reader r = fields({"type", key});
    const Json* body = r.Field(key);
    if (!r.ok()) return r.status();
    if (partition) {
      Result<core::PartitionConfig> p = PartitionConfigFromJson(*body);
      if (!p.ok()) return Nest(key, p.status());
      return core::Event{core::PartitionConfigured{std::move(p).value()}};
    }
    Result<core::ReservationConfig> v = ReservationConfigFromJson(*body);
    if (!v.ok()) return Nest(key, v.status());
    return core::Event{core::ReservationConfigured{std::move(v).value()}};
  }
  if (type == "partition_deleted" || type == "reservation_deleted") {
    Reader r = fields({"type", "name"});
    std::string name = r.String("name", /*allow_empty=*/false);
    if (!r.ok()) return r.status();
    if (Status v = core::ValidateNodeSetName(name, "name"); !v.ok()) return v;
    if (type == "partition_deleted") return core::Event{core::PartitionDeleted{std::move(name)}};
    return core::Event{core::ReservationDeleted{std::move(name)}};
  }
  if (type == "node_evacuated") {
    Reader r = fields({"type", "node", "reason"});
    core::NodeEvacuated e{r.Node("node", topo), r.String("reason")};
    return done(r, std::move(e));
  }
  if (type == "tick") {
    Reader r = fields({"type"});
    return done(r, core::Tick{});
  }
  if (type == "policy_changed") {
    Reader r = fields({"type", "policy", "key", "old", "new"});
    core::PolicyChanged e{{}, r.String("key"), r.String("old"), r.String("new")};
    if (const Json* p = r.Field("policy")) {
      constexpr int64_t kWeekMs = 7ll * 86400 * 1000, kMonthMs = 30ll * 86400 * 1000;
      Reader q(*p, "policy",
               {"backfill", "preemption", "preempt_grace_ms", "preempt_restart_cost_ms",
                "preempt_protect_after", "placement_wait_ms", "fairshare_max_wait_ms",
                "default_time_limit_ms", "default_checkpoint_interval_ms", "max_app_failures",
                "restart_backoff_initial_ms", "restart_backoff_max_ms", "attribution_window_ms",
                "backfill_depth"});
      core::SchedulingPolicy& pol = e.policy;
      pol.backfill = q.Bool("backfill");
      pol.preemption = q.Bool("preemption");
      pol.preempt_grace = q.Int64("preempt_grace_ms", 0, kMonthMs);
      pol.preempt_restart_cost = q.Int64("preempt_restart_cost_ms", 0, kMonthMs);
      pol.preempt_protect_after = q.Int("preempt_protect_after", 0, 1000);
      pol.placement_wait = q.Int64("placement_wait_ms", 0, kWeekMs);
      // Optional: logs written before the bound existed have none (0, what
      // their core did).
      if (q.Has("fairshare_max_wait_ms")) {
        pol.fairshare_max_wait = q.Int64("fairshare_max_wait_ms", 0, kMonthMs);
      }
      pol.default_time_limit = q.Int64("default_time_limit_ms", 1, 365 * 86400000ll);
      const int64_t interval = q.Int64("default_checkpoint_interval_ms", -1, kMonthMs);
      pol.default_checkpoint_interval = interval < 0 ? core::kNever : interval;
      pol.max_app_failures = q.Int("max_app_failures", 1, 1000);
      pol.restart_backoff_initial = q.Int64("restart_backoff_initial_ms", 0, kWeekMs);
      pol.restart_backoff_max = q.Int64("restart_backoff_max_ms", 0, kWeekMs);
      // Optional: logs written before the window existed have none (0, what
      // their core did).
      if (q.Has("attribution_window_ms")) {
        pol.attribution_window = q.Int64("attribution_window_ms", 0, 600000);
      }
      // Optional: before it was a policy key the depth was 64.
      pol.backfill_depth = q.Has("backfill_depth") ? q.Int("backfill_depth", 1, 100000) : 64;
      if (!q.ok()) return q.status();
    }
    return done(r, std::move(e));
  }
  if (type == "job_launch_failed") {
    Reader r = fields({"type", "id", "node", "reason", "permanent"});
    core::JobLaunchFailed e{r.Int64("id"), r.Node("node", topo), r.String("reason"),
                            r.Bool("permanent")};
    return done(r, std::move(e));
  }
  if (type == "start_unacknowledged") {
    Reader r = fields({"type", "id", "nodes", "waited_ms"});
    core::StartUnacknowledged e{r.Int64("id"), {}, r.Int64("waited_ms", 0, kI64Max)};
    if (const Json* v = r.Field("nodes")) {
      Result<std::vector<NodeId>> nodes = NodeListFromJson(*v, topo);
      if (!nodes.ok()) return Nest("nodes", nodes.status());
      e.nodes = std::move(nodes).value();
    }
    return done(r, std::move(e));
  }
  return PathError("", "\"type\": unknown event type \"" + std::string(type) +
                           "\"; known: job_submitted, job_cancelled, job_hold_changed, "
                           "job_finished, rank_exited, checkpoint_completed, "
                           "node_state_requested, heartbeat, gpu_event, tenant_configured, tick, "
                           "node_evacuated, job_launch_failed, node_states_requested, "
                           "policy_changed, start_unacknowledged");
}

// ---------------------------------------------------------------- commands

template <typename T>
Json CommandBody(const T& c, const core::Topology& topo) {
  if constexpr (std::is_same_v<T, core::StartJob> || std::is_same_v<T, core::RestartJob>) {
    // The launch's request-carried fields are the job's request, logged at
    // submission; the per-node grouping follows from the ranks.
    return {{"id", c.id},
            {"ranks", GpuSlotsToJson(c.ranks, topo)},
            {"spares", NodeListToJson(c.spares, topo)},
            {"checkpoint_step", c.launch.checkpoint_step},
            {"restart_count", c.launch.restart_count},
            {"master_port", c.launch.master_port}};
  } else if constexpr (std::is_same_v<T, core::StopJob> ||
                       std::is_same_v<T, core::RequestCheckpoint>) {
    return {{"id", c.id}, {"reason", c.reason}};
  } else if constexpr (std::is_same_v<T, core::DrainNode>) {
    return {{"node", NodeName(c.node, topo)}, {"reason", c.reason}};
  } else if constexpr (std::is_same_v<T, core::NodeStateChanged>) {
    return {{"node", NodeName(c.node, topo)},
            {"state", core::NodeStateName(c.state)},
            {"reason", c.reason}};
  } else if constexpr (std::is_same_v<T, core::GpuHealthChanged>) {
    return {{"node", NodeName(c.node, topo)},
            {"gpu", c.gpu},
            {"health", core::GpuHealthName(c.health)},
            {"reason", c.reason}};
  } else {
    static_assert(std::is_same_v<T, core::JobStateChanged>);
    return {{"id", c.id}, {"state", core::JobStateName(c.state)}, {"reason", c.reason}};
  }
}

Result<core::Command> ReadCommand(std::string_view type, const Json& j,
                                  const core::Topology& topo) {
  auto fields = [&](std::initializer_list<std::string_view> allowed) {
    return Reader(j, "", allowed);
  };
  auto done = [](Reader& r, core::Command c) -> Result<core::Command> {
    if (!r.ok()) return r.status();
    return c;
  };
  auto placement = [&](Reader& r, std::vector<core::GpuSlot>& ranks, std::vector<NodeId>& spares) {
    if (const Json* v = r.Field("ranks")) {
      Result<std::vector<core::GpuSlot>> slots = GpuSlotsFromJson(*v, topo);
      if (!slots.ok()) r.Fail(Nest("ranks", slots.status()));
      if (slots.ok()) ranks = std::move(slots).value();
    }
    if (const Json* v = r.Field("spares")) {
      Result<std::vector<NodeId>> nodes = NodeListFromJson(*v, topo);
      if (!nodes.ok()) r.Fail(Nest("spares", nodes.status()));
      if (nodes.ok()) spares = std::move(nodes).value();
    }
  };
  // A start's launch from its logged fields. checkpoint_step,
  // restart_count and master_port are optional for start_job (logs written
  // before they were logged).
  auto launch = [&](Reader& r, const std::vector<core::GpuSlot>& ranks, bool optional) {
    core::Launch l;
    auto read = [&](std::string_view key, int64_t lo, int64_t hi, int64_t fallback) -> int64_t {
      if (optional && r.ok() && !j.contains(std::string(key))) return fallback;
      return r.Int64(key, lo, hi);
    };
    l.checkpoint_step = read("checkpoint_step", -1, kI64Max, -1);
    l.restart_count = static_cast<int>(read("restart_count", 0, kIntMax, 0));
    l.master_port = static_cast<int>(read("master_port", 0, 65535, 0));
    l.world_size = static_cast<int>(ranks.size());
    l.nodes = core::GroupByNode(ranks);
    l.master_node = ranks.empty() ? -1 : ranks[0].node;
    return l;
  };
  if (type == "start_job" || type == "restart_job") {
    Reader r = fields(
        {"type", "id", "ranks", "spares", "checkpoint_step", "restart_count", "master_port"});
    const core::JobId id = r.Int64("id");
    std::vector<core::GpuSlot> ranks;
    std::vector<NodeId> spares;
    placement(r, ranks, spares);
    core::Launch l = launch(r, ranks, type == "start_job");
    if (type == "start_job") {
      return done(r, core::StartJob{id, std::move(ranks), std::move(spares), std::move(l)});
    }
    return done(r, core::RestartJob{id, std::move(ranks), std::move(spares), std::move(l)});
  }
  if (type == "stop_job") {
    Reader r = fields({"type", "id", "reason"});
    core::StopJob c{r.Int64("id"), r.String("reason")};
    return done(r, std::move(c));
  }
  if (type == "request_checkpoint") {
    Reader r = fields({"type", "id", "reason"});
    core::RequestCheckpoint c{r.Int64("id"), r.String("reason")};
    return done(r, std::move(c));
  }
  if (type == "drain_node") {
    Reader r = fields({"type", "node", "reason"});
    core::DrainNode c{r.Node("node", topo), r.String("reason")};
    return done(r, std::move(c));
  }
  if (type == "node_state_changed") {
    Reader r = fields({"type", "node", "state", "reason"});
    core::NodeStateChanged c{r.Node("node", topo),
                             r.Named<core::NodeState>("state", "node state", ParseNodeState),
                             r.String("reason")};
    return done(r, std::move(c));
  }
  if (type == "gpu_health_changed") {
    Reader r = fields({"type", "node", "gpu", "health", "reason"});
    core::GpuHealthChanged c{r.Node("node", topo), r.Int("gpu"),
                             r.Named<core::GpuHealth>("health", "GPU health", ParseGpuHealth),
                             r.String("reason")};
    return done(r, std::move(c));
  }
  if (type == "job_state_changed") {
    Reader r = fields({"type", "id", "state", "reason"});
    core::JobStateChanged c{r.Int64("id"),
                            r.Named<core::JobState>("state", "job state", ParseJobState),
                            r.String("reason")};
    return done(r, std::move(c));
  }
  return PathError("", "\"type\": unknown command type \"" + std::string(type) +
                           "\"; known: start_job, restart_job, stop_job, request_checkpoint, "
                           "drain_node, node_state_changed, gpu_health_changed, "
                           "job_state_changed");
}

// The "type" of a tagged object, or why there is none.
Result<std::string> TypeOf(const Json& j, std::string_view what) {
  if (!j.is_object()) {
    return PathError("", "an " + std::string(what) + " is a JSON object with a \"type\" (got " +
                             internal::Shown(j) + ")");
  }
  auto it = j.find("type");
  if (it == j.end()) return PathError("", "\"type\" is required");
  if (!it->is_string()) {
    return PathError("", "\"type\" must be a string (got " + internal::Shown(*it) + ")");
  }
  return it->get<std::string>();
}

}  // namespace

// ---------------------------------------------------------------- public

std::optional<core::JobState> ParseJobState(std::string_view name) {
  return ParseEnum<core::JobState>(name, core::JobStateName);
}
std::optional<core::NodeState> ParseNodeState(std::string_view name) {
  return ParseEnum<core::NodeState>(name, core::NodeStateName);
}
std::optional<core::GpuHealth> ParseGpuHealth(std::string_view name) {
  return ParseEnum<core::GpuHealth>(name, core::GpuHealthName);
}

namespace {

// By the index of each alternative of core::Event.
constexpr std::string_view kEventTypeNames[] = {"job_submitted",
                                                "job_cancelled",
                                                "job_hold_changed",
                                                "job_finished",
                                                "rank_exited",
                                                "checkpoint_completed",
                                                "node_state_requested",
                                                "heartbeat",
                                                "gpu_event",
                                                "tenant_configured",
                                                "tick",
                                                "node_evacuated",
                                                "job_launch_failed",
                                                "node_states_requested",
                                                "policy_changed",
                                                "start_unacknowledged",
                                                "partition_configured",
                                                "partition_deleted",
                                                "reservation_configured",
                                                "reservation_deleted"};
static_assert(std::size(kEventTypeNames) == std::variant_size_v<core::Event>, "name every event");

}  // namespace

std::string_view EventTypeName(const core::Event& event) { return kEventTypeNames[event.index()]; }

std::span<const std::string_view> EventTypeNames() { return kEventTypeNames; }

std::string_view CommandTypeName(const core::Command& command) {
  static constexpr std::string_view kNames[] = {
      "start_job",  "restart_job",        "stop_job",           "request_checkpoint",
      "drain_node", "node_state_changed", "gpu_health_changed", "job_state_changed"};
  static_assert(std::size(kNames) == std::variant_size_v<core::Command>, "name every command");
  return kNames[command.index()];
}

Json EventToJson(const core::Event& event, const core::Topology& topology) {
  Json j = std::visit([&](const auto& e) { return EventBody(e, topology); }, event);
  j["type"] = EventTypeName(event);
  return j;
}

Result<core::Event> EventFromJson(const Json& j, const core::Topology& topology) {
  try {
    Result<std::string> type = TypeOf(j, "event");
    if (!type.ok()) return type.status();
    return ReadEvent(type.value(), j, topology);
  } catch (const std::exception& e) {  // a reader bug must not cross the module boundary
    return Status::Error(std::string("event: ") + e.what());
  }
}

Json CommandToJson(const core::Command& command, const core::Topology& topology) {
  Json j = std::visit([&](const auto& c) { return CommandBody(c, topology); }, command);
  j["type"] = CommandTypeName(command);
  return j;
}

Result<core::Command> CommandFromJson(const Json& j, const core::Topology& topology) {
  try {
    Result<std::string> type = TypeOf(j, "command");
    if (!type.ok()) return type.status();
    return ReadCommand(type.value(), j, topology);
  } catch (const std::exception& e) {
    return Status::Error(std::string("command: ") + e.what());
  }
}

Json PartitionLimitsToJson(const std::map<std::string, core::PartitionLimits>& partitions) {
  Json out = Json::object();
  for (const auto& [name, l] : partitions) {
    out[name] = {{"max_gpus", l.max_gpus},
                 {"max_job_gpus", l.max_job_gpus},
                 {"max_running_jobs", l.max_running_jobs}};
  }
  return out;
}

Json TenantConfigToJson(const core::TenantConfig& t) {
  return {{"name", t.name},
          {"guaranteed_gpus", t.guaranteed_gpus},
          {"borrow_limit_gpus", t.borrow_limit_gpus},
          {"max_job_gpus", t.max_job_gpus},
          {"max_running_jobs", t.max_running_jobs},
          {"max_queued_jobs", t.max_queued_jobs},
          {"shares", t.shares},
          {"placement_wait_ms", t.placement_wait},
          {"partitions", PartitionLimitsToJson(t.partitions)}};
}

namespace {

// An optional wait bound in milliseconds: < 0 never, 0 inherit, at most a
// week. Absent (logs from before the bound existed): 0.
Status ReadPlacementWait(const Json& j, core::TimeMs& out) {
  auto it = j.find("placement_wait_ms");
  if (it == j.end()) return Status::Ok();
  constexpr int64_t kWeekMs = 7ll * 86400 * 1000;
  if (!it->is_number_integer() || it->get<int64_t>() < -1 || it->get<int64_t>() > kWeekMs) {
    return PathError("placement_wait_ms",
                     "must be an integer -1..604800000 (-1 never, 0 inherit) milliseconds");
  }
  out = it->get<int64_t>();
  return Status::Ok();
}

// A tenant's per-partition limits: an object of at most
// core::kMaxTenantPartitions partition names, each {max_gpus, max_job_gpus,
// max_running_jobs}, all three required. Absent (logs from before the
// limits existed): none.
Status ReadPartitionLimits(const Json& j, std::map<std::string, core::PartitionLimits>& out) {
  auto it = j.find("partitions");
  if (it == j.end()) return Status::Ok();
  if (!it->is_object()) {
    return PathError("partitions",
                     "must be an object of partition name -> {max_gpus, "
                     "max_job_gpus, max_running_jobs} (got " +
                         std::string(internal::TypeName(*it)) + ")");
  }
  if (it->size() > core::kMaxTenantPartitions) {
    return PathError("partitions", "at most " + std::to_string(core::kMaxTenantPartitions) +
                                       " partitions (got " + std::to_string(it->size()) + ")");
  }
  for (const auto& [name, limits] : it->items()) {
    if (Status s = core::ValidateNodeSetName(name, "partitions"); !s.ok()) return s;
    Reader r(limits, Child("partitions", name), {"max_gpus", "max_job_gpus", "max_running_jobs"});
    core::PartitionLimits l;
    l.max_gpus = r.Int("max_gpus", 0, core::kMaxPartitionLimit);
    l.max_job_gpus = r.Int("max_job_gpus", 0, core::kMaxPartitionLimit);
    l.max_running_jobs = r.Int("max_running_jobs", 0, core::kMaxPartitionLimit);
    if (!r.ok()) return r.status();
    out.emplace(name, l);
  }
  return core::ValidatePartitionLimits(out);
}

}  // namespace

Result<core::TenantConfig> TenantConfigFromJson(const Json& j) {
  Reader r(j, "",
           {"name", "guaranteed_gpus", "borrow_limit_gpus", "max_job_gpus", "max_running_jobs",
            "max_queued_jobs", "shares", "placement_wait_ms", "partitions"});
  core::TenantConfig t;
  t.name = r.String("name");
  t.guaranteed_gpus = r.Int("guaranteed_gpus");
  t.borrow_limit_gpus = r.Int("borrow_limit_gpus");
  t.max_job_gpus = r.Int("max_job_gpus");
  t.max_running_jobs = r.Int("max_running_jobs");
  t.shares = r.Number("shares");
  if (!r.ok()) return r.status();
  // Optional: logs written before the field existed have none.
  if (auto it = j.find("max_queued_jobs"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kIntMax) {
      return PathError("", "\"max_queued_jobs\" must be an integer 0.." + std::to_string(kIntMax));
    }
    t.max_queued_jobs = it->get<int>();
  }
  if (Status s = ReadPlacementWait(j, t.placement_wait); !s.ok()) return s;
  if (Status s = ReadPartitionLimits(j, t.partitions); !s.ok()) return s;
  return t;
}

namespace {

// A list of names: an array of at most `most` strings of 1..bytes bytes.
Status ReadNames(const Json& j, const std::string& key, size_t most, size_t bytes,
                 std::vector<std::string>& out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  if (!it->is_array() || it->size() > most) {
    return PathError(key, "must be an array of at most " + std::to_string(most) + " names");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& v = (*it)[i];
    if (!v.is_string() || v.get_ref<const std::string&>().empty() ||
        v.get_ref<const std::string&>().size() > bytes) {
      return PathError(Index(key, i), "must be a name of 1 to " + std::to_string(bytes) + " bytes");
    }
    out.push_back(v.get<std::string>());
  }
  return Status::Ok();
}

constexpr size_t kMaxSetTenants = core::kMaxNodeSetTenants;
constexpr size_t kMaxSetTenantBytes = kMaxTenantBytes;
// A node set's times: milliseconds up to the end of the year 9999, so no sum
// of them overflows.
constexpr int64_t kMaxSetTimeMs = core::kMaxTimeMs;

// The rest of a node set's fields by their rules: its name
// (core::ValidateNodeSetName), its nodes' names (node_name.hpp) and its
// tenants' (tenant_name.hpp). What the topology decides (the nodes
// exist) is core::ValidatePartition's.
Status CheckSet(const std::string& name, const std::vector<std::string>& nodes,
                const std::vector<std::string>& tenants) {
  if (Status s = core::ValidateNodeSetName(name, "name"); !s.ok()) return s;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!ValidNodeName(nodes[i])) {
      return PathError(Index("nodes", i), "\"" + ShownName(nodes[i]) + "\" is not a node name: " +
                                              std::string(NodeNameRule()));
    }
  }
  for (size_t i = 0; i < tenants.size(); ++i) {
    if (!ValidTenantName(tenants[i])) {
      return PathError(Index("tenants", i),
                       "\"" + ShownName(tenants[i]) +
                           "\" is not a tenant name: segments of a-z 0-9 _ . - joined by /");
    }
  }
  return Status::Ok();
}

}  // namespace

Json PartitionConfigToJson(const core::PartitionConfig& p) {
  return {{"name", p.name},
          {"nodes", p.nodes},
          {"default_time_ms", p.default_time},
          {"max_time_ms", p.max_time},
          {"max_gpus", p.max_gpus},
          {"tenants", p.tenants},
          {"priority_tier", p.priority_tier},
          {"preemptible", p.preemptible},
          {"default", p.is_default}};
}

Result<core::PartitionConfig> PartitionConfigFromJson(const Json& j) {
  Reader r(j, "",
           {"name", "nodes", "default_time_ms", "max_time_ms", "max_gpus", "tenants",
            "priority_tier", "preemptible", "default"});
  core::PartitionConfig p;
  p.name = r.String("name", /*allow_empty=*/false);
  r.Field("nodes");
  p.default_time = r.Int64("default_time_ms", 0, kMaxSetTimeMs);
  p.max_time = r.Int64("max_time_ms", 0, kMaxSetTimeMs);
  p.max_gpus = r.Int("max_gpus", 0);
  p.priority_tier = r.Int("priority_tier", -1000, 1000);
  p.preemptible = r.Bool("preemptible");
  p.is_default = r.Bool("default");
  if (!r.ok()) return r.status();
  if (Status s =
          ReadNames(j, "nodes", core::kMaxSelectionNames, core::kMaxSelectionNameBytes, p.nodes);
      !s.ok())
    return s;
  if (Status s = ReadNames(j, "tenants", kMaxSetTenants, kMaxSetTenantBytes, p.tenants); !s.ok())
    return s;
  if (Status s = CheckSet(p.name, p.nodes, p.tenants); !s.ok()) return s;
  return p;
}

Json ReservationConfigToJson(const core::ReservationConfig& v) {
  return {{"name", v.name},  {"nodes", v.nodes},     {"start_ms", v.start},
          {"end_ms", v.end}, {"tenants", v.tenants}, {"maintenance", v.maintenance}};
}

Result<core::ReservationConfig> ReservationConfigFromJson(const Json& j) {
  Reader r(j, "", {"name", "nodes", "start_ms", "end_ms", "tenants", "maintenance"});
  core::ReservationConfig v;
  v.name = r.String("name", /*allow_empty=*/false);
  r.Field("nodes");
  v.start = r.Int64("start_ms", 0, kMaxSetTimeMs);
  v.end = r.Int64("end_ms", 0, kMaxSetTimeMs);
  v.maintenance = r.Bool("maintenance");
  if (!r.ok()) return r.status();
  if (Status s =
          ReadNames(j, "nodes", core::kMaxSelectionNames, core::kMaxSelectionNameBytes, v.nodes);
      !s.ok())
    return s;
  if (Status s = ReadNames(j, "tenants", kMaxSetTenants, kMaxSetTenantBytes, v.tenants); !s.ok())
    return s;
  if (Status s = CheckSet(v.name, v.nodes, v.tenants); !s.ok()) return s;
  return v;
}

core::Status CheckClientRequestId(std::string_view id) {
  if (id.empty() || id.size() > kMaxClientRequestId) {
    return core::Status::Error("must be 1 to " + std::to_string(kMaxClientRequestId) +
                               " characters long");
  }
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) {
      return core::Status::Error(
          "may hold only letters, digits and . _ : - (a random hex string from `topo submit`, or "
          "a name of your own such as nightly-2026-11-26)");
    }
  }
  return core::Status::Ok();
}

Json JobRequestToJson(const core::JobRequest& request) {
  Json out = {{"spec", JobSpecToJson(request.spec)},
              {"tenant", request.tenant},
              {"user", request.user},
              {"priority", request.priority},
              {"time_limit_ms", request.time_limit},
              {"checkpoint_interval_ms", request.checkpoint_interval},
              {"command", request.command},
              {"unix_user", request.unix_user},
              {"memory_mb_per_node", request.memory_mb_per_node},
              {"cpu_millis_per_node", request.cpu_millis_per_node},
              {"placement_wait_ms", request.placement_wait}};
  ProcessSpecToJson(request.process, &out);
  // Written only when set, so the requests of other jobs read as before.
  if (!request.dependencies.empty()) {
    Json deps = Json::array();
    for (const core::Dependency& d : request.dependencies) {
      deps.push_back({{"kind", core::DependencyKindName(d.kind)}, {"job", d.job}});
    }
    out["dependencies"] = std::move(deps);
  }
  if (request.array_job != 0) {
    out["array"] = {{"job", request.array_job},
                    {"task", request.array_task},
                    {"throttle", request.array_throttle}};
  }
  if (!request.client_request_id.empty()) out["client_request_id"] = request.client_request_id;
  if (!request.partition.empty()) out["partition"] = request.partition;
  if (!request.reservation.empty()) out["reservation"] = request.reservation;
  return out;
}

Result<core::JobRequest> JobRequestFromJson(const Json& j) {
  Reader r(j, "",
           {"spec",
            "tenant",
            "user",
            "priority",
            "time_limit_ms",
            "checkpoint_interval_ms",
            "command",
            "unix_user",
            "memory_mb_per_node",
            "cpu_millis_per_node",
            "placement_wait_ms",
            "launch",
            "env",
            "chdir",
            "output",
            "error",
            "dependencies",
            "array",
            "client_request_id",
            "partition",
            "reservation"});
  core::JobRequest request;
  if (const Json* spec = r.Field("spec")) {
    Result<core::JobSpec> s = JobSpecFromJson(*spec);
    if (!s.ok()) return Nest("spec", s.status());
    request.spec = std::move(s).value();
  }
  request.tenant = r.String("tenant");
  request.user = r.String("user");
  request.priority = r.Int("priority");
  request.time_limit = r.Int64("time_limit_ms");
  request.checkpoint_interval = r.Int64("checkpoint_interval_ms");
  if (!r.ok()) return r.status();
  // Optional, each of them: absent is the default. Checked when submitted:
  // here only their types, so a later release's stricter rules still replay
  // the log.
  Result<core::ProcessSpec> process = ProcessSpecFromJson(j, nullptr, ProcessSpecChecks::kTypes);
  if (!process.ok()) return process.status();
  request.process = std::move(process).value();
  // Optional: logs written before commands existed have none.
  if (auto it = j.find("command"); it != j.end()) {
    if (!it->is_array()) return PathError("command", "must be an array of strings");
    for (size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string()) {
        return PathError("command[" + std::to_string(i) + "]", "must be a string");
      }
      request.command.push_back((*it)[i].get<std::string>());
    }
  }
  // Optional: logs written before jobs ran as their submitter have none.
  if (auto it = j.find("unix_user"); it != j.end()) {
    if (!it->is_string()) return PathError("unix_user", "must be a string");
    request.unix_user = it->get<std::string>();
  }
  // Optional likewise: the limits came later.
  if (auto it = j.find("memory_mb_per_node"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kI64Max / 2) {
      return PathError("memory_mb_per_node", "must be an integer >= 0");
    }
    request.memory_mb_per_node = it->get<int64_t>();
  }
  if (auto it = j.find("cpu_millis_per_node"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kIntMax) {
      return PathError("cpu_millis_per_node", "must be an integer 0.." + std::to_string(kIntMax));
    }
    request.cpu_millis_per_node = it->get<int>();
  }
  if (Status s = ReadPlacementWait(j, request.placement_wait); !s.ok()) return s;
  if (auto it = j.find("dependencies"); it != j.end()) {
    if (!it->is_array() || it->size() > kMaxJobDependencies) {
      return PathError("dependencies", "must be an array of at most " +
                                           std::to_string(kMaxJobDependencies) + " {kind, job}");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& d = (*it)[i];
      const std::string path = Index("dependencies", i);
      Reader dr(d, path, {"kind", "job"});
      const std::string kind = dr.String("kind");
      const int64_t job = dr.Int64("job", 1);
      if (!dr.ok()) return dr.status();
      core::Dependency dep;
      if (!core::ParseDependencyKind(kind, dep.kind)) {
        return PathError(path + ".kind", "must be afterok, afterany or afternotok, not \"" +
                                             kind.substr(0, 40) + "\"");
      }
      dep.job = job;
      request.dependencies.push_back(dep);
    }
  }
  if (auto it = j.find("array"); it != j.end()) {
    Reader ar(*it, "array", {"job", "task", "throttle"});
    request.array_job = ar.Int64("job", 1);
    request.array_task = ar.Int("task", 0);
    request.array_throttle = ar.Int("throttle", 0);
    if (!ar.ok()) return ar.status();
  }
  if (auto it = j.find("client_request_id"); it != j.end()) {
    if (!it->is_string() || it->get_ref<const std::string&>().size() > kMaxClientRequestId) {
      return PathError("client_request_id", "must be a string of at most " +
                                                std::to_string(kMaxClientRequestId) + " bytes");
    }
    request.client_request_id = it->get<std::string>();
  }
  // Optional: a partition and a reservation by name (whether they exist is
  // checked when submitted; the name rule never changes, so it holds here).
  for (auto [key, out] : {std::pair<const char*, std::string*>{"partition", &request.partition},
                          {"reservation", &request.reservation}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_string() || it->get_ref<const std::string&>().size() > core::kMaxNodeSetNameBytes) {
      return PathError(key, "must be a name of at most " +
                                std::to_string(core::kMaxNodeSetNameBytes) + " bytes");
    }
    *out = it->get<std::string>();
    if (Status v = core::ValidateNodeSetName(*out, key); !v.ok()) return v;
  }
  return request;
}

Json GpuSlotsToJson(const std::vector<core::GpuSlot>& slots, const core::Topology& topology) {
  Json out = Json::array();
  for (const core::GpuSlot& s : slots)
    out.push_back(Json::array({NodeName(s.node, topology), s.gpu}));
  return out;
}

Result<std::vector<core::GpuSlot>> GpuSlotsFromJson(const Json& j, const core::Topology& topology) {
  if (!j.is_array()) {
    return PathError("", "must be an array of [node, gpu] pairs (got " + internal::Shown(j) + ")");
  }
  std::vector<core::GpuSlot> slots;
  slots.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& pair = j[i];
    const std::string path = Index("", i);
    if (!pair.is_array() || pair.size() != 2) {
      return PathError(path, "must be a [node, gpu] pair (got " + internal::Shown(pair) + ")");
    }
    Result<NodeId> node = Reader::ReadNode(pair[0], Index(path, 0), topology);
    if (!node.ok()) return node.status();
    const int gpus = topology.node(node.value()).gpus;
    if (!pair[1].is_number_integer() || pair[1].get<int64_t>() < 0 ||
        pair[1].get<int64_t>() >= gpus) {
      return PathError(Index(path, 1), "GPU must be an integer 0.." + std::to_string(gpus - 1) +
                                           " (got " + internal::Shown(pair[1]) + ")");
    }
    slots.push_back({node.value(), static_cast<int>(pair[1].get<int64_t>())});
  }
  return slots;
}

Json NodeListToJson(const std::vector<NodeId>& nodes, const core::Topology& topology) {
  Json out = Json::array();
  for (NodeId n : nodes) out.push_back(NodeName(n, topology));
  return out;
}

Result<std::vector<NodeId>> NodeListFromJson(const Json& j, const core::Topology& topology) {
  if (!j.is_array()) {
    return PathError("", "must be an array of node names (got " + internal::Shown(j) + ")");
  }
  std::vector<NodeId> nodes;
  nodes.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    Result<NodeId> n = Reader::ReadNode(j[i], Index("", i), topology);
    if (!n.ok()) return n.status();
    nodes.push_back(n.value());
  }
  return nodes;
}

}  // namespace topo::common
