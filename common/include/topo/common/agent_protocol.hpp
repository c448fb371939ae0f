#pragma once
// The topo-agent <-> topo-scheduler protocol (docs/agent-protocol.md), owned
// here and nowhere else: one typed struct per message in each direction, one
// strict reader and one writer for each, and the JSON schema the test
// clients use, all generated from the same field tables (agent_protocol.cpp,
// walked by the field-table engine of common/src/field_table.hpp).
//
//   Result<AgentMessage> m = ParseAgentMessage(text, &field);   // the daemon
//   std::string text = WriteSchedulerMessage(proto::Stop{17, "cancelled"});
//
// Every message is one JSON object with "type" first. The readers are strict:
// duplicate keys, unknown fields, missing fields, wrong types, numbers out of
// range, strings longer than their limit or with characters their kind does
// not allow, lists longer than their limit, and cross-field contradictions
// (a local rank twice in one start, a rank outside the world) are errors whose
// message starts with the field's path ("rank_exited.restart_count: ...") and
// whose `field` out-parameter names it alone, for the `error` reply.
// A message that reads back is safe to act on as far as types and ranges go;
// whether the sender may say it (node-scoped authority) is the daemon's
// check (scheduler/daemon/agents/agent_registry.cpp).
//
// Round trip: ParseX(WriteX(m)) == m for every m that ParseX accepts.
//
// Thread safety: pure functions.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "topo/core/job.hpp"
#include "topo/core/scheduler.hpp"
#include "topo/core/status.hpp"

namespace topo::proto {

// Bumped when a message changes incompatibly; `register` carries it and the
// daemon refuses another version with a message naming both. 4: the daemon
// requeues a run whose `start` no `started` acknowledges, and a `logs` reply
// carries its bytes as data_base64 (any byte survives), not data.
inline constexpr int kProtocolVersion = 4;

// Limits shared by both ends (and by the daemon's submission checks, so a job
// accepted by the API always fits in a `start`).
inline constexpr size_t kMaxMessageBytes = 4u << 20;  // either direction
inline constexpr int64_t kMaxJobId = int64_t{1} << 53;
inline constexpr int kMaxWorldSize = 1 << 20;
inline constexpr int kMaxRestartCount = 1000000;
inline constexpr int64_t kMaxStep = int64_t{1} << 53;
inline constexpr size_t kMaxNameBytes = 255;  // node names, addresses, models
inline constexpr size_t kMaxReasonBytes = 1024;
inline constexpr size_t kMaxUnixUserBytes = 32;  // useradd's limit
inline constexpr size_t kMaxPathBytes = 4095;
// Linux: one argument or environment string at most MAX_ARG_STRLEN
// (32 pages) including its NUL; argv and envp together at most ARG_MAX
// (a quarter of the stack limit, 2 MiB by default). The command and the
// job's environment stay well below the latter so the rank's own variables
// fit beside them.
inline constexpr size_t kMaxArgBytes = 131071;
inline constexpr size_t kMaxCommandBytes = 512u << 10;  // argv strings + NULs
inline constexpr size_t kMaxCommandArgs = 8192;
inline constexpr size_t kMaxEnvVars = 1024;
inline constexpr size_t kMaxEnvBytes = 256u << 10;  // "K=V" strings + NULs
inline constexpr int64_t kMaxLogChunkBytes = 128 << 10;
inline constexpr int kMinMasterPort = 1024;
inline constexpr int kMaxKeepJobs = 1 << 16;

enum class CheckpointTier : uint8_t { kLocal, kPersistent };
enum class DrainMode : uint8_t { kGraceful, kImmediate };

// ------------------------------------------------------------ agent -> scheduler

struct GpuInfo {
  int index = 0;
  std::string model;
  std::string uuid;
  int64_t memory_mb = 0;
  bool operator==(const GpuInfo&) const = default;
};
struct RunningRank {
  int64_t job = 0;
  int rank = 0;
  int64_t pid = 0;
  bool operator==(const RunningRank&) const = default;
};
// First message of every connection.
struct Register {
  static constexpr std::string_view kType = "register";
  std::string node;  // must equal the certificate's CN
  std::string addr;  // where this node's ranks listen (MASTER_ADDR)
  std::vector<GpuInfo> gpus;
  std::vector<RunningRank> ranks;  // what it still runs (after a reconnect)
  std::string agent;               // version text
  int protocol = kProtocolVersion;
  bool operator==(const Register&) const = default;
};
struct Heartbeat {
  static constexpr std::string_view kType = "heartbeat";
  int64_t seq = 0;
  bool operator==(const Heartbeat&) const = default;
};
struct GpuEventReport {
  static constexpr std::string_view kType = "gpu_event";
  int gpu = 0;
  core::GpuEventKind kind = core::GpuEventKind::kXid;
  int64_t code = 0;  // the XID number, or the ECC count
  bool operator==(const GpuEventReport&) const = default;
};
struct RankExited {
  static constexpr std::string_view kType = "rank_exited";
  int64_t job = 0;
  int rank = 0;
  int restart_count = 0;
  int exit_code = 0;  // 128 + signal when killed; -1 when unknown
  int signal = 0;
  bool status_known = true;  // false: an adopted rank, not the agent's child
  bool operator==(const RankExited&) const = default;
};
struct CheckpointReport {
  static constexpr std::string_view kType = "checkpoint";
  int64_t job = 0;
  int64_t step = 0;
  CheckpointTier tier = CheckpointTier::kPersistent;
  bool operator==(const CheckpointReport&) const = default;
};
struct Drained {
  static constexpr std::string_view kType = "drained";
  bool operator==(const Drained&) const = default;
};
// The agent is about to exit and leaves its ranks running for the next
// agent on the node to adopt (a restart, a package upgrade): sent last,
// before it closes the connection. The scheduler then waits up to its
// agent_restart_grace_ms for the node's next `register` before it calls
// the node down (the node is suspect meanwhile), instead of
// missed_heartbeats_down - 1 intervals. An older scheduler refuses it with
// an `error`, which changes nothing.
struct Leaving {
  static constexpr std::string_view kType = "leaving";
  bool operator==(const Leaving&) const = default;
};
// The answer to a LogsRequest: bytes [offset, next_offset) of a log of
// `size` bytes, or an error. Exactly one of the two forms. `data` is the
// bytes as the rank wrote them (NUL, escapes, invalid UTF-8), sent as
// "data_base64".
struct LogsReply {
  static constexpr std::string_view kType = "logs";
  int64_t req = 0;
  std::optional<std::string> error;
  std::optional<int64_t> offset;
  std::optional<int64_t> next_offset;
  std::optional<int64_t> size;
  std::optional<std::string> data;
  bool operator==(const LogsReply&) const = default;
};
// The agent could not start a `start`'s ranks. permanent: retrying elsewhere
// cannot help (the account is missing everywhere it is missing here, a root
// job is refused); otherwise the node could not (a port in use, a disk).
struct LaunchFailed {
  static constexpr std::string_view kType = "launch_failed";
  int64_t job = 0;
  int restart_count = 0;
  std::string reason;
  bool permanent = false;
  bool operator==(const LaunchFailed&) const = default;
};
// The ranks of a `start` are launched on this node (sent once per start,
// after the launch; a start that waits first, for ranks of the earlier run
// to exit or for a checkpoint copy, is acknowledged when it has launched).
// The scheduler requeues a run that some node of it does not acknowledge
// within its start_ack_timeout_s; one of an earlier run is ignored.
struct Started {
  static constexpr std::string_view kType = "started";
  int64_t job = 0;
  int restart_count = 0;
  bool operator==(const Started&) const = default;
};
// A `start` received here that waits before its ranks launch, for at most
// wait_ms more (a restart's checkpoint being copied onto this node can take
// far longer than the scheduler's start_ack_timeout_s): the scheduler waits
// that long, plus its timeout, for this node's `started`. Sent once per
// start that waits so; the agent fails the launch itself (`launch_failed`)
// when the wait runs out.
inline constexpr int64_t kMaxStartWaitMs = 7 * 24 * 3'600'000LL;  // a week
struct StartWaiting {
  static constexpr std::string_view kType = "start_waiting";
  int64_t job = 0;
  int restart_count = 0;
  int64_t wait_ms = 0;
  std::string reason;  // what it waits for, in words
  bool operator==(const StartWaiting&) const = default;
};
using AgentMessage = std::variant<Register, Heartbeat, GpuEventReport, RankExited, CheckpointReport,
                                  Drained, LogsReply, LaunchFailed, Leaving, Started, StartWaiting>;

// ------------------------------------------------------------ scheduler -> agent

struct Registered {
  static constexpr std::string_view kType = "registered";
  std::string node;
  int heartbeat_interval_ms = 1000;
  std::vector<int64_t> keep;  // jobs to keep; the agent stops the others
  // HA (docs/ha.md): the leadership term of the replica that answered; a
  // connection's commands are that term's. An agent that has seen a newer
  // term refuses an older one (a deposed leader). Absent: one scheduler.
  std::optional<int64_t> term;
  bool operator==(const Registered&) const = default;
};
struct StartRank {
  int rank = 0;        // RANK
  int local_rank = 0;  // LOCAL_RANK: index into this node's `gpus` of the job
  int gpu = 0;         // the node's GPU index
  bool operator==(const StartRank&) const = default;
};
struct Layout {
  int tp = 1, cp = 1, ep = 1, pp = 1, dp = 1;
  std::string order = "tp-cp-ep-dp-pp";
  bool operator==(const Layout&) const = default;
};
// Start (or restart, restart_count > 0) this node's ranks of a job. Carries
// everything the agent needs; nothing is derived on the node.
struct Start {
  static constexpr std::string_view kType = "start";
  int64_t job = 0;
  int restart_count = 0;
  int64_t checkpoint_step = -1;  // -1: from scratch
  int world_size = 1;
  std::string master_addr;
  int master_port = 0;
  int group_rank = 0;  // this node's index among the job's nodes
  int group_world_size = 1;
  std::vector<StartRank> ranks;  // in local-rank order 0..k-1
  Layout layout;
  std::vector<std::string> command;  // argv; empty: the agent's --job-command
  // One process per rank, or one per node (core::LaunchMode).
  core::LaunchMode launch = core::LaunchMode::kRank;
  std::string unix_user;  // the account the ranks run as
  // The job's own variables: names checked as the API checks them
  // (common::CheckJobEnv: no reserved name).
  std::map<std::string, std::string> env;
  std::string working_dir;  // empty: the account's home, else a job dir
  // Patterns (%j, %r, %%) of the files standard output and error go to,
  // opened as unix_user; empty: the agent's log (common::CheckOutputPattern).
  std::string output;
  std::string error;
  int64_t memory_mb = 0;  // the job's cgroup on this node; 0: no limit
  int cpu_millis = 0;     // likewise, CPU time (1000 = one CPU); 0: no limit
  // pids.max of the job's cgroup on this node (JobSpec::pids_max); absent:
  // the agent's --job-pids-max, which also caps it. Optional, so that a
  // start from an older scheduler still reads.
  std::optional<int> pids_max;
  // A task of a job array: the array's first job and the task's index
  // (TOPO_ARRAY_JOB_ID, TOPO_ARRAY_TASK_ID); absent for other jobs.
  std::optional<int64_t> array_job;
  std::optional<int64_t> array_task;
  bool operator==(const Start&) const = default;
};
struct Stop {
  static constexpr std::string_view kType = "stop";
  int64_t job = 0;
  std::string reason;
  bool operator==(const Stop&) const = default;
};
struct CheckpointRequest {
  static constexpr std::string_view kType = "checkpoint";
  int64_t job = 0;
  std::string reason;
  bool operator==(const CheckpointRequest&) const = default;
};
struct Drain {
  static constexpr std::string_view kType = "drain";
  DrainMode mode = DrainMode::kGraceful;
  std::string reason;
  bool operator==(const Drain&) const = default;
};
struct LogsRequest {
  static constexpr std::string_view kType = "logs";
  int64_t req = 0;
  int64_t job = 0;
  int rank = 0;
  int64_t offset = 0;  // negative: from the end
  int64_t max = kMaxLogChunkBytes;
  bool operator==(const LogsRequest&) const = default;
};
// The last message was refused (`refused`: its type, when it had one); the
// connection stays open unless it was the `register`.
struct Error {
  static constexpr std::string_view kType = "error";
  std::string message;
  std::string field;
  std::string refused;
  bool operator==(const Error&) const = default;
};
using SchedulerMessage =
    std::variant<Registered, Start, Stop, CheckpointRequest, Drain, LogsRequest, Error>;

// ------------------------------------------------------------ readers and writers

// Strict readers (see the top). field, when given, receives the path of the
// offending field ("" when the text is not a JSON object at all).
core::Result<AgentMessage> ParseAgentMessage(std::string_view text, std::string* field = nullptr);
core::Result<SchedulerMessage> ParseSchedulerMessage(std::string_view text,
                                                     std::string* field = nullptr);
// Compact JSON text, "type" first. Strings that are not UTF-8 (log data) are
// written with U+FFFD in place of bad bytes.
std::string WriteAgentMessage(const AgentMessage& message);
std::string WriteSchedulerMessage(const SchedulerMessage& message);

std::string_view TypeOf(const AgentMessage& message);
std::string_view TypeOf(const SchedulerMessage& message);

// JSON Schema (draft 2020-12) of both directions, generated from the same
// tables as the readers: {"$defs": {"agent_to_scheduler": {"oneOf": ...},
// "scheduler_to_agent": {...}}}. Byte limits appear as "maxLength" (an upper
// bound in characters too) plus "x-maxBytes". schema/agent-protocol.schema.json
// is this, checked by a test.
nlohmann::ordered_json ProtocolSchema();

// Layout <-> core::Parallelism (the rank order parsed and checked).
core::Result<core::Parallelism> ToParallelism(const Layout& layout);
Layout FromParallelism(const core::Parallelism& p);

// Valid account and environment names, shared with the API's checks.
bool ValidUnixUser(std::string_view name);
bool ValidEnvName(std::string_view name);

}  // namespace topo::proto
