// The agent protocol's field tables (agent_protocol.hpp), read, written and
// turned into a JSON Schema by the field-table engine (field_table.hpp).
//
// Each message or nested object has a Table<T> listing its fields: the JSON
// name, the struct member, and the field's limit (Int range, Str bytes and
// character class, Enum, List of a limit, Obj for a nested table, EnvMap of
// environment variables). An std::optional member is an optional field.
// Cross-field rules are the tables' Check. Adding a field is one line in a
// table; the reader, the writer and the schema follow.

#include "topo/common/agent_protocol.hpp"

#include <algorithm>
#include <array>
#include <set>
#include <tuple>
#include <type_traits>

#include "field_schema.hpp"
#include "field_table.hpp"
#include "json_util.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_process.hpp"

namespace topo::common::fields {

using namespace topo::proto;

// ---------------------------------------------------------------- enums

template <>
struct EnumTable<core::GpuEventKind> {
  static constexpr std::array kValues = {
      core::GpuEventKind::kXid,          core::GpuEventKind::kEccSingleBit,
      core::GpuEventKind::kEccDoubleBit, core::GpuEventKind::kThermal,
      core::GpuEventKind::kOffBus,       core::GpuEventKind::kCleared};
  static std::string_view Name(core::GpuEventKind k) { return common::GpuEventKindName(k); }
};
template <>
struct EnumTable<CheckpointTier> {
  static constexpr std::array kValues = {CheckpointTier::kLocal, CheckpointTier::kPersistent};
  static std::string_view Name(CheckpointTier t) {
    return t == CheckpointTier::kLocal ? "local" : "persistent";
  }
};
template <>
struct EnumTable<DrainMode> {
  static constexpr std::array kValues = {DrainMode::kGraceful, DrainMode::kImmediate};
  static std::string_view Name(DrainMode m) {
    return m == DrainMode::kGraceful ? "graceful" : "immediate";
  }
};

// ---------------------------------------------------------------- tables

namespace {

constexpr Int kJob{1, kMaxJobId};
constexpr Int kRank{0, kMaxWorldSize - 1};
constexpr Int kGpu{0, core::kMaxGpusPerNode - 1};
constexpr Int kRestarts{0, kMaxRestartCount};
constexpr Int kReq{1, kMaxJobId};
constexpr Int kByteOffset{0, int64_t{1} << 50};
constexpr Str kNodeName{common::kMaxNodeNameBytes, Chars::kNodeName, false};
constexpr Str kReason{kMaxReasonBytes, Chars::kLine};

}  // namespace

template <>
struct Table<GpuInfo> {
  static constexpr auto Fields() {
    return std::tuple{F("index", &GpuInfo::index, kGpu),
                      F("model", &GpuInfo::model, Str{kMaxNameBytes, Chars::kLine}),
                      F("uuid", &GpuInfo::uuid, Str{kMaxNameBytes, Chars::kName}),
                      F("memory_mb", &GpuInfo::memory_mb, Int{0, int64_t{1} << 40})};
  }
};
template <>
struct Table<RunningRank> {
  static constexpr auto Fields() {
    return std::tuple{F("job", &RunningRank::job, kJob), F("rank", &RunningRank::rank, kRank),
                      F("pid", &RunningRank::pid, Int{1, 1 << 30})};
  }
};
template <>
struct Table<Register> {
  static constexpr auto Fields() {
    return std::tuple{F("node", &Register::node, kNodeName),
                      F("addr", &Register::addr, Str{kMaxNameBytes, Chars::kName, false}),
                      F("gpus", &Register::gpus, List<Obj>{core::kMaxGpusPerNode, {}}),
                      F("ranks", &Register::ranks, List<Obj>{4096, {}}),
                      F("agent", &Register::agent, Str{kMaxNameBytes, Chars::kLine}),
                      F("protocol", &Register::protocol, Int{1, 1000})};
  }
  static Status Check(const Register& m, const std::string& path, Failure& f) {
    std::set<int> seen;
    for (size_t i = 0; i < m.gpus.size(); ++i) {
      if (!seen.insert(m.gpus[i].index).second) {
        return Fail(f, Index(Child(path, "gpus"), i) + ".index",
                    "GPU " + std::to_string(m.gpus[i].index) + " is listed twice");
      }
    }
    return Status::Ok();
  }
};
template <>
struct Table<Heartbeat> {
  static constexpr auto Fields() { return std::tuple{F("seq", &Heartbeat::seq, Int{0, kMaxStep})}; }
};
template <>
struct Table<GpuEventReport> {
  static constexpr auto Fields() {
    return std::tuple{F("gpu", &GpuEventReport::gpu, kGpu),
                      F("kind", &GpuEventReport::kind, Enum<core::GpuEventKind>{}),
                      F("code", &GpuEventReport::code, Int{0, (int64_t{1} << 31) - 1})};
  }
};
template <>
struct Table<RankExited> {
  static constexpr auto Fields() {
    return std::tuple{F("job", &RankExited::job, kJob),
                      F("rank", &RankExited::rank, kRank),
                      F("restart_count", &RankExited::restart_count, kRestarts),
                      F("exit_code", &RankExited::exit_code, Int{-1, 255 + 128}),
                      F("signal", &RankExited::signal, Int{0, 127}),
                      F("status_known", &RankExited::status_known, Bool{})};
  }
};
template <>
struct Table<CheckpointReport> {
  static constexpr auto Fields() {
    return std::tuple{F("job", &CheckpointReport::job, kJob),
                      F("step", &CheckpointReport::step, Int{0, kMaxStep}),
                      F("tier", &CheckpointReport::tier, Enum<CheckpointTier>{})};
  }
};
template <>
struct Table<Drained> {
  static constexpr auto Fields() { return std::tuple{}; }
};
template <>
struct Table<Leaving> {
  static constexpr auto Fields() { return std::tuple{}; }
};
template <>
struct Table<LogsReply> {
  static constexpr auto Fields() {
    return std::tuple{F("req", &LogsReply::req, kReq),
                      F("error", &LogsReply::error, Str{kMaxReasonBytes, Chars::kText, false}),
                      F("offset", &LogsReply::offset, kByteOffset),
                      F("next_offset", &LogsReply::next_offset, kByteOffset),
                      F("size", &LogsReply::size, kByteOffset),
                      F("data_base64", &LogsReply::data, Base64{kMaxLogChunkBytes})};
  }
  static Status Check(const LogsReply& m, const std::string& path, Failure& f) {
    const bool data = m.offset || m.next_offset || m.size || m.data;
    if (m.error && data) return Fail(f, path, "has both error and data: send one of the two");
    if (!m.error) {
      for (const char* key : {"offset", "next_offset", "size", "data_base64"}) {
        const bool present = std::string_view(key) == "offset"        ? m.offset.has_value()
                             : std::string_view(key) == "next_offset" ? m.next_offset.has_value()
                             : std::string_view(key) == "size"        ? m.size.has_value()
                                                                      : m.data.has_value();
        if (!present) return Fail(f, Child(path, key), "missing (a reply without error has data)");
      }
      if (*m.offset > *m.next_offset || *m.next_offset > *m.size) {
        return Fail(f, Child(path, "next_offset"), "must satisfy offset <= next_offset <= size");
      }
      if (*m.next_offset - *m.offset > kMaxLogChunkBytes) {
        return Fail(f, Child(path, "next_offset"),
                    "more than " + std::to_string(kMaxLogChunkBytes) + " bytes in one reply");
      }
    }
    return Status::Ok();
  }
};
template <>
struct Table<LaunchFailed> {
  static constexpr auto Fields() {
    return std::tuple{F("job", &LaunchFailed::job, kJob),
                      F("restart_count", &LaunchFailed::restart_count, kRestarts),
                      F("reason", &LaunchFailed::reason, Str{kMaxReasonBytes, Chars::kLine, false}),
                      F("permanent", &LaunchFailed::permanent, Bool{})};
  }
};
template <>
struct Table<Started> {
  static constexpr auto Fields() {
    return std::tuple{F("job", &Started::job, kJob),
                      F("restart_count", &Started::restart_count, kRestarts)};
  }
};
template <>
struct Table<StartWaiting> {
  static constexpr auto Fields() {
    return std::tuple{F("job", &StartWaiting::job, kJob),
                      F("restart_count", &StartWaiting::restart_count, kRestarts),
                      F("wait_ms", &StartWaiting::wait_ms, Int{1, kMaxStartWaitMs}),
                      F("reason", &StartWaiting::reason, kReason)};
  }
};
template <>
struct Table<Registered> {
  static constexpr auto Fields() {
    return std::tuple{
        F("node", &Registered::node, kNodeName),
        F("heartbeat_interval_ms", &Registered::heartbeat_interval_ms, Int{10, 600000}),
        F("keep", &Registered::keep, List<Int>{kMaxKeepJobs, kJob}),
        F("term", &Registered::term, Int{1, int64_t{1} << 62})};
  }
};
template <>
struct Table<StartRank> {
  static constexpr auto Fields() {
    return std::tuple{F("rank", &StartRank::rank, kRank),
                      F("local_rank", &StartRank::local_rank, kGpu),
                      F("gpu", &StartRank::gpu, kGpu)};
  }
};
template <>
struct Table<Layout> {
  static constexpr Int kDegree{1, kMaxWorldSize};
  static constexpr auto Fields() {
    return std::tuple{
        F("tp", &Layout::tp, kDegree), F("cp", &Layout::cp, kDegree),
        F("ep", &Layout::ep, kDegree), F("pp", &Layout::pp, kDegree),
        F("dp", &Layout::dp, kDegree), F("order", &Layout::order, Str{64, Chars::kName, false})};
  }
  static Status Check(const Layout& m, const std::string& path, Failure& f) {
    Result<core::Parallelism> p = ToParallelism(m);
    if (!p.ok()) return Fail(f, path, p.message());
    return Status::Ok();
  }
};
template <>
struct Table<Start> {
  static constexpr auto Fields() {
    return std::tuple{
        F("job", &Start::job, kJob),
        F("restart_count", &Start::restart_count, kRestarts),
        F("checkpoint_step", &Start::checkpoint_step, Int{-1, kMaxStep}),
        F("world_size", &Start::world_size, Int{1, kMaxWorldSize}),
        F("master_addr", &Start::master_addr, Str{kMaxNameBytes, Chars::kName, false}),
        F("master_port", &Start::master_port, Int{kMinMasterPort, 65535}),
        F("group_rank", &Start::group_rank, Int{0, kMaxWorldSize - 1}),
        F("group_world_size", &Start::group_world_size, Int{1, kMaxWorldSize}),
        F("ranks", &Start::ranks, List<Obj>{core::kMaxGpusPerNode, {}}),
        F("layout", &Start::layout, Obj{}),
        F("command", &Start::command, List<Str>{kMaxCommandArgs, {kMaxArgBytes, Chars::kText}}),
        F("launch", &Start::launch, Enum<core::LaunchMode>{}),
        F("unix_user", &Start::unix_user, Str{kMaxUnixUserBytes, Chars::kUnixUser, false}),
        F("env", &Start::env, EnvMap{}),
        F("working_dir", &Start::working_dir, Str{kMaxPathBytes, Chars::kPath}),
        F("output", &Start::output, Str{kMaxPathBytes, Chars::kLine}),
        F("error", &Start::error, Str{kMaxPathBytes, Chars::kLine}),
        F("memory_mb", &Start::memory_mb, Int{0, int64_t{1} << 30}),
        F("cpu_millis", &Start::cpu_millis, Int{0, 100000000}),
        F("pids_max", &Start::pids_max, Int{1, core::kMaxJobPids}),
        F("array_job", &Start::array_job, kJob),
        F("array_task", &Start::array_task, Int{0, 1000000})};
  }
  static Status Check(const Start& m, const std::string& path, Failure& f) {
    const int64_t world = int64_t{m.layout.tp} * m.layout.cp * m.layout.pp * m.layout.dp;
    if (world != m.world_size) {
      return Fail(f, Child(path, "world_size"),
                  "is " + std::to_string(m.world_size) + " but the layout has " +
                      std::to_string(world) + " ranks (tp * cp * pp * dp)");
    }
    if (m.group_rank >= m.group_world_size) {
      return Fail(f, Child(path, "group_rank"), "must be below group_world_size");
    }
    if (m.group_world_size > m.world_size) {
      return Fail(f, Child(path, "group_world_size"), "must not exceed world_size");
    }
    if (m.ranks.empty()) return Fail(f, Child(path, "ranks"), "must not be empty");
    std::set<int> ranks, gpus;
    for (size_t i = 0; i < m.ranks.size(); ++i) {
      const StartRank& r = m.ranks[i];
      const std::string where = Index(Child(path, "ranks"), i);
      if (r.local_rank != static_cast<int>(i)) {
        return Fail(
            f, where + ".local_rank",
            "must be " + std::to_string(i) + ": ranks are listed in local-rank order 0..k-1");
      }
      if (r.rank >= m.world_size) {
        return Fail(f, where + ".rank", "must be below world_size " + std::to_string(m.world_size));
      }
      if (!ranks.insert(r.rank).second) return Fail(f, where + ".rank", "is listed twice");
      if (!gpus.insert(r.gpu).second) return Fail(f, where + ".gpu", "is given to two ranks");
    }
    size_t bytes = 0;
    for (const std::string& a : m.command) bytes += a.size() + 1;
    if (bytes > kMaxCommandBytes) {
      return Fail(
          f, Child(path, "command"),
          "is " + std::to_string(bytes) + " bytes; at most " + std::to_string(kMaxCommandBytes));
    }
    if (!m.command.empty() && m.command[0].empty()) {
      return Fail(f, Child(path, "command") + "[0]", "must not be empty");
    }
    // The same checks as the API's (job_process.hpp).
    if (Status s = common::CheckJobEnv(m.env); !s.ok()) {
      return Fail(f, Child(path, "env"), s.message());
    }
    if (!m.working_dir.empty()) {
      if (Status s = common::CheckWorkingDir(m.working_dir); !s.ok()) {
        return Fail(f, Child(path, "working_dir"), s.message());
      }
    }
    for (const auto& [name, pattern] :
         {std::pair<const char*, const std::string*>{"output", &m.output}, {"error", &m.error}}) {
      if (pattern->empty()) continue;
      if (Status s = common::CheckOutputPattern(*pattern); !s.ok()) {
        return Fail(f, Child(path, name), s.message());
      }
    }
    return Status::Ok();
  }
};
template <>
struct Table<Stop> {
  static constexpr auto Fields() {
    return std::tuple{F("job", &Stop::job, kJob), F("reason", &Stop::reason, kReason)};
  }
};
template <>
struct Table<CheckpointRequest> {
  static constexpr auto Fields() {
    return std::tuple{F("job", &CheckpointRequest::job, kJob),
                      F("reason", &CheckpointRequest::reason, kReason)};
  }
};
template <>
struct Table<Drain> {
  static constexpr auto Fields() {
    return std::tuple{F("mode", &Drain::mode, Enum<DrainMode>{}),
                      F("reason", &Drain::reason, kReason)};
  }
};
template <>
struct Table<LogsRequest> {
  static constexpr auto Fields() {
    return std::tuple{F("req", &LogsRequest::req, kReq), F("job", &LogsRequest::job, kJob),
                      F("rank", &LogsRequest::rank, kRank),
                      F("offset", &LogsRequest::offset, Int{-(int64_t{1} << 50), int64_t{1} << 50}),
                      F("max", &LogsRequest::max, Int{1, kMaxLogChunkBytes})};
  }
};
template <>
struct Table<Error> {
  static constexpr auto Fields() {
    return std::tuple{F("message", &Error::message, Str{kMaxReasonBytes, Chars::kText}),
                      F("field", &Error::field, Str{kMaxNameBytes, Chars::kLine}),
                      F("refused", &Error::refused, Str{64, Chars::kLine})};
  }
};

}  // namespace topo::common::fields

namespace topo::proto {
namespace {

using namespace topo::common::fields;

// ---------------------------------------------------------------- messages

template <class Variant, size_t I = 0>
Status ReadAlternative(const Json& v, std::string_view type, Variant& out, Failure& f,
                       std::string& known) {
  if constexpr (I < std::variant_size_v<Variant>) {
    using T = std::variant_alternative_t<I, Variant>;
    known += (known.empty() ? "" : ", ") + std::string(T::kType);
    if (type == T::kType) {
      T message{};
      Status st = ReadObject(v, std::string(T::kType), message, f, true);
      if (st.ok()) out = std::move(message);
      return st;
    }
    return ReadAlternative<Variant, I + 1>(v, type, out, f, known);
  } else {
    return Fail(
        f, "type",
        "unknown message type \"" + std::string(type.substr(0, 40)) + "\"; known: " + known);
  }
}

constexpr int kMaxDepth = 8;

template <class Variant>
Result<Variant> ParseMessage(std::string_view text, std::string* field) {
  Failure f;
  auto fail = [&](const std::string& path, const std::string& problem) {
    Status st = Fail(f, path, problem);
    if (field) *field = f.field;
    return st;
  };
  if (text.size() > kMaxMessageBytes) {
    return fail("", "message of " + std::to_string(text.size()) + " bytes; at most " +
                        std::to_string(kMaxMessageBytes));
  }
  // No message nests deeper than 4; a deeper text is refused before the
  // parser builds it.
  if (!WithinDepth(text, kMaxDepth)) {
    return fail("", "nested deeper than " + std::to_string(kMaxDepth));
  }
  Result<Json> parsed = common::internal::ParseStrictJson(text);
  if (!parsed.ok()) {
    Status st = FailParse(f, parsed.message());
    if (field) *field = f.field;
    return st;
  }
  const Json& j = parsed.value();
  if (!j.is_object()) return fail("", "a message is one JSON object");
  auto type = j.find("type");
  if (type == j.end() || !type->is_string()) {
    return fail("type", "every message needs a string \"type\"");
  }
  Variant out;
  std::string known;
  Status st = ReadAlternative(j, type->get_ref<const std::string&>(), out, f, known);
  if (!st.ok()) {
    if (field) *field = f.field;
    return st;
  }
  if (field) field->clear();
  return out;
}

template <class Variant>
std::string WriteMessage(const Variant& message) {
  return std::visit(
      [](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        OJson out = OJson::object();
        out["type"] = std::string(T::kType);
        WriteFields(m, out);
        return out.dump(-1, ' ', false, OJson::error_handler_t::replace);
      },
      message);
}

template <class Variant>
OJson VariantSchema() {
  OJson one_of = OJson::array();
  [&]<size_t... I>(std::index_sequence<I...>) {
    (one_of.push_back(ObjectSchema<std::variant_alternative_t<I, Variant>, true>()), ...);
  }
  (std::make_index_sequence<std::variant_size_v<Variant>>{});
  return {{"oneOf", one_of}};
}

}  // namespace

bool ValidUnixUser(std::string_view name) {
  if (name.empty() || name.size() > kMaxUnixUserBytes || name[0] == '-' || name[0] == '.') {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

bool ValidEnvName(std::string_view name) {
  if (name.empty() || name.size() > 256 || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

core::Result<core::Parallelism> ToParallelism(const Layout& layout) {
  core::Parallelism p;
  p.tp = layout.tp;
  p.cp = layout.cp;
  p.ep = layout.ep;
  p.pp = layout.pp;
  p.dp = layout.dp;
  Result<std::vector<core::Dim>> order = core::ParseRankOrder(layout.order);
  if (!order.ok()) return Status::Error("order: " + order.message());
  p.order = std::move(order).value();
  core::JobSpec spec;
  spec.gpus = p.tp * p.cp * p.pp * p.dp;
  spec.parallelism = p;
  if (Status st = core::ValidateJobSpec(spec); !st.ok()) return st;
  return p;
}

Layout FromParallelism(const core::Parallelism& p) {
  return Layout{p.tp, p.cp, p.ep, p.pp, p.dp, core::FormatRankOrder(p.order)};
}

core::Result<AgentMessage> ParseAgentMessage(std::string_view text, std::string* field) {
  return ParseMessage<AgentMessage>(text, field);
}
core::Result<SchedulerMessage> ParseSchedulerMessage(std::string_view text, std::string* field) {
  return ParseMessage<SchedulerMessage>(text, field);
}
std::string WriteAgentMessage(const AgentMessage& message) { return WriteMessage(message); }
std::string WriteSchedulerMessage(const SchedulerMessage& message) { return WriteMessage(message); }

std::string_view TypeOf(const AgentMessage& message) {
  return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::kType; }, message);
}
std::string_view TypeOf(const SchedulerMessage& message) {
  return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::kType; }, message);
}

nlohmann::ordered_json ProtocolSchema() {
  OJson defs = OJson::object();
  defs["agent_to_scheduler"] = VariantSchema<AgentMessage>();
  defs["scheduler_to_agent"] = VariantSchema<SchedulerMessage>();
  return {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
          {"title", "toposched agent protocol"},
          {"x-protocolVersion", kProtocolVersion},
          {"x-maxMessageBytes", kMaxMessageBytes},
          {"$defs", defs}};
}

}  // namespace topo::proto
