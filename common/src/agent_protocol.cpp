// The agent protocol's field tables (agent_protocol.hpp) and the one generic
// reader, writer and schema generator that walk them.
//
// Each message or nested object has a Table<T> listing its fields: the JSON
// name, the struct member, and the field's limit (Int range, Str bytes and
// character class, Enum, List of a limit, Obj for a nested table, Map of
// environment variables). An std::optional member is an optional field.
// Cross-field rules live in Check(T) beside the tables. Adding a field is one
// line in a table; the reader, the writer and the schema follow.

#include "topo/common/agent_protocol.hpp"

#include <algorithm>
#include <array>
#include <set>
#include <tuple>
#include <type_traits>

#include "json_util.hpp"
#include "topo/common/base64.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/job_process.hpp"
#include "topo/common/node_name.hpp"

namespace topo::proto {
namespace {

using core::Result;
using core::Status;
using Json = nlohmann::json;
using OJson = nlohmann::ordered_json;
using common::internal::Child;
using common::internal::Index;
using common::internal::Shown;
using common::internal::TypeName;

// ---------------------------------------------------------------- limits

struct Int {
  int64_t lo, hi;
};
struct Bool {};
// Character classes of strings.
enum class Chars : uint8_t {
  kText,      // anything but NUL (log data, command arguments, messages)
  kLine,      // no control characters (reasons, versions, models)
  kName,      // printable ASCII without spaces (addresses, uuids)
  kNodeName,  // ValidNodeName (node_name.hpp)
  kPath,      // empty, or an absolute path without NUL
  kUnixUser,  // ValidUnixUser
  kEnvName,   // ValidEnvName
};
struct Str {
  size_t max_bytes;
  Chars chars;
  bool allow_empty = true;
};
// Bytes (any: NUL, invalid UTF-8), carried as RFC 4648 base64 text;
// max_bytes bounds the bytes, not the text.
struct Base64 {
  size_t max_bytes;
};
template <class E>
struct Enum {};
struct Obj {};
template <class L>
struct List {
  size_t max_items;
  L element;
};
struct EnvMap {};

template <class S, class M, class L>
struct Field {
  std::string_view name;
  M S::*member;
  L limit;
};
template <class S, class M, class L>
constexpr Field<S, M, L> F(std::string_view name, M S::*member, L limit) {
  return {name, member, limit};
}

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

// ---------------------------------------------------------------- enums

template <class E>
struct EnumTable;
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
struct EnumTable<core::LaunchMode> {
  static constexpr std::array kValues = {core::LaunchMode::kRank, core::LaunchMode::kNode};
  static std::string_view Name(core::LaunchMode m) { return common::LaunchModeName(m); }
};
template <>
struct EnumTable<DrainMode> {
  static constexpr std::array kValues = {DrainMode::kGraceful, DrainMode::kImmediate};
  static std::string_view Name(DrainMode m) {
    return m == DrainMode::kGraceful ? "graceful" : "immediate";
  }
};

// ---------------------------------------------------------------- tables

constexpr Int kJob{1, kMaxJobId};
constexpr Int kRank{0, kMaxWorldSize - 1};
constexpr Int kGpu{0, core::kMaxGpusPerNode - 1};
constexpr Int kRestarts{0, kMaxRestartCount};
constexpr Int kReq{1, kMaxJobId};
constexpr Int kByteOffset{0, int64_t{1} << 50};
constexpr Str kNodeName{common::kMaxNodeNameBytes, Chars::kNodeName, false};
constexpr Str kReason{kMaxReasonBytes, Chars::kLine};

template <class T>
struct Table;

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
                      // Bad UTF-8 bytes come as U+FFFD (3 bytes each).
                      F("data_base64", &LogsReply::data, Base64{kMaxLogChunkBytes})};
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
        F("array_job", &Start::array_job, kJob),
        F("array_task", &Start::array_task, Int{0, 1000000})};
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

// ---------------------------------------------------------------- reading

struct Failure {
  std::string field;
  std::string message;
};

Status Fail(Failure& f, const std::string& path, const std::string& problem) {
  f.field = path;
  f.message = path + ": " + problem;
  return Status::Error(f.message);
}

bool CharsOk(std::string_view s, Chars chars) {
  switch (chars) {
    case Chars::kText:
      return s.find('\0') == std::string_view::npos;
    case Chars::kLine:
      return std::none_of(s.begin(), s.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u < 0x20 || u == 0x7f;
      });
    case Chars::kName:
      return std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f; });
    case Chars::kNodeName:
      return common::ValidNodeName(s);
    case Chars::kPath:
      return s.empty() || (s[0] == '/' && s.find('\0') == std::string_view::npos);
    case Chars::kUnixUser:
      return ValidUnixUser(s);
    case Chars::kEnvName:
      return ValidEnvName(s);
  }
  return false;
}

std::string_view CharsRule(Chars chars) {
  switch (chars) {
    case Chars::kText:
      return "must not contain NUL";
    case Chars::kLine:
      return "must not contain control characters";
    case Chars::kName:
      return "must be printable ASCII without spaces";
    case Chars::kNodeName:
      return "must be a node name (1-64 bytes of A-Z a-z 0-9 . _ -, starting with a letter or a "
             "digit)";
    case Chars::kPath:
      return "must be an absolute path";
    case Chars::kUnixUser:
      return "must be a Unix account name ([A-Za-z0-9._-], not starting with '-' or '.')";
    case Chars::kEnvName:
      return "must be a variable name ([A-Za-z_][A-Za-z0-9_]*)";
  }
  return "";
}

template <class M>
Status ReadValue(const Json& v, const std::string& path, Int limit, M& out, Failure& f) {
  const std::string want =
      "must be an integer " + std::to_string(limit.lo) + ".." + std::to_string(limit.hi);
  if (!v.is_number_integer()) return Fail(f, path, want + " (got " + Shown(v) + ")");
  int64_t i = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(limit.hi)) return Fail(f, path, want + " (got " + Shown(v) + ")");
    i = static_cast<int64_t>(u);
  } else {
    i = v.get<int64_t>();
  }
  if (i < limit.lo || i > limit.hi) return Fail(f, path, want + " (got " + Shown(v) + ")");
  out = static_cast<M>(i);
  return Status::Ok();
}

Status ReadValue(const Json& v, const std::string& path, Bool, bool& out, Failure& f) {
  if (!v.is_boolean()) {
    return Fail(f, path, "must be true or false (got " + std::string(TypeName(v)) + ")");
  }
  out = v.get<bool>();
  return Status::Ok();
}

Status ReadValue(const Json& v, const std::string& path, Str limit, std::string& out, Failure& f) {
  if (!v.is_string()) {
    return Fail(f, path, "must be a string (got " + std::string(TypeName(v)) + ")");
  }
  const auto& s = v.get_ref<const std::string&>();
  if (s.empty() && !limit.allow_empty) return Fail(f, path, "must not be empty");
  if (s.size() > limit.max_bytes) {
    return Fail(
        f, path,
        "is " + std::to_string(s.size()) + " bytes; at most " + std::to_string(limit.max_bytes));
  }
  if (!CharsOk(s, limit.chars)) return Fail(f, path, std::string(CharsRule(limit.chars)));
  out = s;
  return Status::Ok();
}

Status ReadValue(const Json& v, const std::string& path, Base64 limit, std::string& out,
                 Failure& f) {
  if (!v.is_string()) {
    return Fail(f, path, "must be a base64 string (got " + std::string(TypeName(v)) + ")");
  }
  const auto& text = v.get_ref<const std::string&>();
  if (text.size() > common::Base64Length(limit.max_bytes)) {
    return Fail(f, path,
                "is " + std::to_string(text.size()) + " bytes of base64; at most " +
                    std::to_string(common::Base64Length(limit.max_bytes)) + " (" +
                    std::to_string(limit.max_bytes) + " bytes)");
  }
  Result<std::string> bytes = common::Base64Decode(text);
  if (!bytes.ok()) return Fail(f, path, "must be base64 (RFC 4648): " + bytes.message());
  out = std::move(bytes).value();
  return Status::Ok();
}

template <class E>
Status ReadValue(const Json& v, const std::string& path, Enum<E>, E& out, Failure& f) {
  std::string names;
  for (E e : EnumTable<E>::kValues) {
    names += (names.empty() ? "" : ", ") + std::string(EnumTable<E>::Name(e));
    if (v.is_string() && v.get_ref<const std::string&>() == EnumTable<E>::Name(e)) {
      out = e;
      return Status::Ok();
    }
  }
  return Fail(f, path, "must be one of " + names + " (got " + Shown(v) + ")");
}

template <class T>
Status ReadObject(const Json& v, const std::string& path, T& out, Failure& f, bool typed);

template <class T>
Status ReadValue(const Json& v, const std::string& path, Obj, T& out, Failure& f) {
  return ReadObject(v, path, out, f, false);
}

template <class L, class T>
Status ReadValue(const Json& v, const std::string& path, List<L> limit, std::vector<T>& out,
                 Failure& f) {
  if (!v.is_array()) {
    return Fail(f, path, "must be an array (got " + std::string(TypeName(v)) + ")");
  }
  if (v.size() > limit.max_items) {
    return Fail(
        f, path,
        "has " + std::to_string(v.size()) + " items; at most " + std::to_string(limit.max_items));
  }
  out.clear();
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    T item{};
    if (Status st = ReadValue(v[i], Index(path, i), limit.element, item, f); !st.ok()) return st;
    out.push_back(std::move(item));
  }
  return Status::Ok();
}

Status ReadValue(const Json& v, const std::string& path, EnvMap,
                 std::map<std::string, std::string>& out, Failure& f) {
  if (!v.is_object()) {
    return Fail(f, path, "must be an object of strings (got " + std::string(TypeName(v)) + ")");
  }
  if (v.size() > kMaxEnvVars) {
    return Fail(
        f, path,
        "has " + std::to_string(v.size()) + " variables; at most " + std::to_string(kMaxEnvVars));
  }
  size_t total = 0;
  out.clear();
  for (const auto& [key, value] : v.items()) {
    const std::string where = Child(path, key.size() <= 64 ? key : key.substr(0, 64) + "...");
    if (!ValidEnvName(key)) return Fail(f, where, std::string(CharsRule(Chars::kEnvName)));
    std::string s;
    if (Status st = ReadValue(value, where, Str{kMaxArgBytes, Chars::kText}, s, f); !st.ok()) {
      return st;
    }
    total += key.size() + 1 + s.size() + 1;
    out.emplace(key, std::move(s));
  }
  if (total > kMaxEnvBytes) {
    return Fail(f, path,
                "is " + std::to_string(total) + " bytes as K=V strings; at most " +
                    std::to_string(kMaxEnvBytes));
  }
  return Status::Ok();
}

// Cross-field rules: overloads for the types that have some.
template <class T>
Status Check(const T&, const std::string&, Failure&) {
  return Status::Ok();
}

Status Check(const Register& m, const std::string& path, Failure& f) {
  std::set<int> seen;
  for (size_t i = 0; i < m.gpus.size(); ++i) {
    if (!seen.insert(m.gpus[i].index).second) {
      return Fail(f, Index(Child(path, "gpus"), i) + ".index",
                  "GPU " + std::to_string(m.gpus[i].index) + " is listed twice");
    }
  }
  return Status::Ok();
}

Status Check(const LogsReply& m, const std::string& path, Failure& f) {
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

Status Check(const Layout& m, const std::string& path, Failure& f) {
  Result<core::Parallelism> p = ToParallelism(m);
  if (!p.ok()) return Fail(f, path, p.message());
  return Status::Ok();
}

Status Check(const Start& m, const std::string& path, Failure& f) {
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
      return Fail(f, where + ".local_rank",
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

template <class S, class M, class L>
Status ReadField(const Json& object, const std::string& path, const Field<S, M, L>& field, S& out,
                 Failure& f) {
  auto it = object.find(std::string(field.name));
  M& member = out.*field.member;
  if constexpr (IsOptional<M>::value) {
    if (it == object.end()) {
      member.reset();
      return Status::Ok();
    }
    typename M::value_type value{};
    Status st = ReadValue(*it, Child(path, field.name), field.limit, value, f);
    if (st.ok()) member = std::move(value);
    return st;
  } else {
    if (it == object.end()) return Fail(f, Child(path, field.name), "missing");
    return ReadValue(*it, Child(path, field.name), field.limit, member, f);
  }
}

template <class T>
Status ReadObject(const Json& v, const std::string& path, T& out, Failure& f, bool typed) {
  if (!v.is_object()) {
    return Fail(f, path, "must be an object (got " + std::string(TypeName(v)) + ")");
  }
  constexpr auto fields = Table<T>::Fields();
  for (const auto& item : v.items()) {
    // A plain reference, not a structured binding: clang 14 cannot capture
    // those in the lambda below.
    const std::string& key = item.key();
    if (typed && key == "type") continue;
    bool known = false;
    std::string names;
    std::apply(
        [&](const auto&... fd) {
          ((known = known || fd.name == key,
            names += (names.empty() ? "" : ", ") + std::string(fd.name)),
           ...);
        },
        fields);
    if (!known) {
      return Fail(f, Child(path, key.size() <= 64 ? key : key.substr(0, 64) + "..."),
                  "unknown field" + (names.empty() ? std::string(" (this message has none)")
                                                   : "; allowed: " + names));
    }
  }
  Status status = Status::Ok();
  std::apply(
      [&](const auto&... fd) {
        ((status = status.ok() ? ReadField(v, path, fd, out, f) : status), ...);
      },
      fields);
  if (!status.ok()) return status;
  return Check(out, path, f);
}

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
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth) return fail("", "nested deeper than " + std::to_string(kMaxDepth));
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  Result<Json> parsed = common::internal::ParseStrictJson(text);
  if (!parsed.ok()) {
    std::string m = parsed.message();
    // "x.y: duplicate field \"k\"": name the field.
    const size_t dup = m.find(": duplicate field \"");
    if (dup != std::string::npos) {
      std::string path = m.substr(0, dup);
      const std::string key = m.substr(dup + 19, m.size() - dup - 20);
      if (path == "top level") path.clear();
      return fail(Child(path, key), "appears twice in one object");
    }
    return fail("", m);
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

// ---------------------------------------------------------------- writing

template <class M>
OJson WriteValue(Int, const M& v) {
  return static_cast<int64_t>(v);
}
inline OJson WriteValue(Bool, bool v) { return v; }
inline OJson WriteValue(Str, const std::string& v) { return v; }
inline OJson WriteValue(Base64, const std::string& v) { return common::Base64Encode(v); }
template <class E>
OJson WriteValue(Enum<E>, E v) {
  return std::string(EnumTable<E>::Name(v));
}
template <class T>
OJson WriteObject(const T& v);
template <class T>
OJson WriteValue(Obj, const T& v) {
  return WriteObject(v);
}
template <class L, class T>
OJson WriteValue(List<L> limit, const std::vector<T>& v) {
  OJson out = OJson::array();
  for (const T& item : v) out.push_back(WriteValue(limit.element, item));
  return out;
}
inline OJson WriteValue(EnvMap, const std::map<std::string, std::string>& v) {
  OJson out = OJson::object();
  for (const auto& [k, value] : v) out[k] = value;
  return out;
}

template <class T>
void WriteFields(const T& v, OJson& out) {
  std::apply(
      [&](const auto&... fd) {
        (
            [&] {
              const auto& member = v.*fd.member;
              if constexpr (IsOptional<std::decay_t<decltype(member)>>::value) {
                if (member) out[std::string(fd.name)] = WriteValue(fd.limit, *member);
              } else {
                out[std::string(fd.name)] = WriteValue(fd.limit, member);
              }
            }(),
            ...);
      },
      Table<T>::Fields());
}

template <class T>
OJson WriteObject(const T& v) {
  OJson out = OJson::object();
  WriteFields(v, out);
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

// ---------------------------------------------------------------- schema

OJson SchemaOf(Int limit) {
  return {{"type", "integer"}, {"minimum", limit.lo}, {"maximum", limit.hi}};
}
OJson SchemaOf(Bool) { return {{"type", "boolean"}}; }
OJson SchemaOf(Str limit) {
  OJson s = {{"type", "string"}, {"maxLength", limit.max_bytes}, {"x-maxBytes", limit.max_bytes}};
  if (!limit.allow_empty) s["minLength"] = 1;
  switch (limit.chars) {
    case Chars::kText:
      break;
    case Chars::kLine:
      s["pattern"] = "^[^\\u0000-\\u001f\\u007f]*$";
      break;
    case Chars::kName:
      s["pattern"] = "^[!-~]*$";
      break;
    case Chars::kNodeName:
      s["pattern"] = "^[A-Za-z0-9][A-Za-z0-9._-]*$";
      break;
    case Chars::kPath:
      s["pattern"] = "^(/.*)?$";
      break;
    case Chars::kUnixUser:
      s["pattern"] = "^[A-Za-z0-9_][A-Za-z0-9._-]*$";
      break;
    case Chars::kEnvName:
      s["pattern"] = "^[A-Za-z_][A-Za-z0-9_]*$";
      break;
  }
  return s;
}
OJson SchemaOf(Base64 limit) {
  const size_t text = common::Base64Length(limit.max_bytes);
  return {{"type", "string"},
          {"contentEncoding", "base64"},
          {"maxLength", text},
          {"x-maxBytes", text},
          {"pattern", "^[A-Za-z0-9+/]*={0,2}$"}};
}
template <class E>
OJson SchemaOf(Enum<E>) {
  OJson values = OJson::array();
  for (E e : EnumTable<E>::kValues) values.push_back(std::string(EnumTable<E>::Name(e)));
  return {{"type", "string"}, {"enum", values}};
}
template <class T, bool kTyped>
OJson ObjectSchema();
template <class T>
OJson SchemaFor(Obj) {
  return ObjectSchema<T, false>();
}
template <class T, class L>
OJson SchemaFor(L limit) {
  return SchemaOf(limit);
}
template <class T, class L>
OJson SchemaFor(List<L> limit) {
  return {{"type", "array"},
          {"maxItems", limit.max_items},
          {"items", SchemaFor<typename T::value_type>(limit.element)}};
}
template <class T>
OJson SchemaFor(EnvMap) {
  return {{"type", "object"},
          {"maxProperties", kMaxEnvVars},
          {"propertyNames", SchemaOf(Str{256, Chars::kEnvName, false})},
          {"additionalProperties", SchemaOf(Str{kMaxArgBytes, Chars::kText})},
          {"x-maxBytes", kMaxEnvBytes}};
}

template <class T, bool kTyped>
OJson ObjectSchema() {
  OJson properties = OJson::object();
  OJson required = OJson::array();
  if constexpr (kTyped) {
    properties["type"] = {{"const", std::string(T::kType)}};
    required.push_back("type");
  }
  std::apply(
      [&](const auto&... fd) {
        (
            [&] {
              using M = std::decay_t<decltype(std::declval<T>().*fd.member)>;
              if constexpr (IsOptional<M>::value) {
                properties[std::string(fd.name)] = SchemaFor<typename M::value_type>(fd.limit);
              } else {
                properties[std::string(fd.name)] = SchemaFor<M>(fd.limit);
                required.push_back(std::string(fd.name));
              }
            }(),
            ...);
      },
      Table<T>::Fields());
  return {{"type", "object"},
          {"properties", properties},
          {"required", required},
          {"additionalProperties", false}};
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
