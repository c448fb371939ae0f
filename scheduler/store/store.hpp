#pragma once
// The scheduler's durable state: one SQLite file (WAL mode,
// synchronous=FULL).
//
// Event sourcing. The `events` table is the source of truth: every event the
// daemon stepped through SchedulerCore, in order, with its time, its actor and
// the commands the core returned. SchedulerCore is deterministic, so
// Replay() feeding the log back through a fresh core rebuilds it exactly.
// The other tables (jobs, tenants, nodes, gpu_health) are materialized from
// the same entries in the same transaction, for queries; they never feed the
// core. Users, tokens and meta are plain tables outside the log.
//
// The daemon's loop, per group of requests:
//   commands = core.Step(event, now)          for each event, on the strand
//   store.Append(topology, entries)           one transaction, one fsync
//   then acknowledge the requests and send the commands.
//
// DURABILITY CONTRACT. An Append (or any other write) that returned Ok is on
// disk: it is committed to the write-ahead log and fsync'd (synchronous=FULL),
// so it survives a crash of the process or of the machine. A write that
// returned an error wrote nothing. Group commit: the caller batches many
// acknowledged writes into one Append so one fsync serves them all; it must
// not acknowledge anything in a batch before Append returns Ok.
//
// The one exception: a batch that committed but whose commit mark (below)
// could not be written after it; the error says so and LastSeq() includes
// the batch. The caller handles it as any failed Append.
//
// COMMIT MARK. SQLite cannot see a write-ahead log that ends early (a torn
// copy, a failing disk): it opens with the transactions before the cut and
// says nothing. So every Append, after its commit and before it returns Ok,
// writes the seq of its last event into PATH.mark beside the file and
// fdatasyncs it (commit_mark.hpp has the format and the ordering). Open
// refuses a store whose log ends before its mark, naming both seqs, unless
// OpenOptions::accept_data_loss; likewise a mark that is damaged, missing
// (for a store that had one) or another store's. Per file: an HA replica's
// store has its own mark, kept by the Appends that apply the replicated log.
//
// An Append that fails leaves the caller's SchedulerCore ahead of the log
// (Step already ran). The caller must not send that batch's commands or
// acknowledge its requests; it should stop and let the restart rebuild the
// core from the log (Replay), which only holds what was acknowledged.
//
// Migrations (schema/sql/NNNN_name.sql, embedded in the binary) are applied
// in order on Open, all in one transaction; the applied versions are recorded
// in `schema_version`. A file whose version is newer than this binary knows
// is refused, unchanged. docs/store.md has the schema.
//
// Thread safety: none. One owner (the daemon's strand) uses a Store; the
// file must not be opened by a second writer (the daemon locks its state
// directory). Readers such as the sqlite3 shell may look at it meanwhile.
// Errors are core::Status values whose messages name the file; no exception
// escapes.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/migrations.hpp"
#include "topo/core/scheduler.hpp"
#include "topo/core/status.hpp"
#include "topo/core/topology.hpp"

namespace topo::store {

using core::JobId;
using core::TimeMs;

// One step of the core: the event, when and by whom, and what it decided.
struct LogEntry {
  TimeMs time_ms = 0;  // the `now` given to Step
  std::string actor;   // "user:ada", "agent:n17", "scheduler" (timers), ...
  core::Event event;
  std::vector<core::Command> commands;  // what Step returned
};

struct StoredEvent {
  int64_t seq = 0;  // 1, 2, ... in log order
  LogEntry entry;
};

struct AppendResult {
  int64_t first_seq = 0;  // the batch's entry i has seq first_seq + i
  int64_t last_seq = 0;   // == LastSeq() after the call
};

struct ReplayReport {
  int64_t last_seq = 0;  // the last event replayed (0: empty log)
  int64_t events = 0;    // events stepped
  // Events whose replayed commands differ from the logged ones: the core's
  // decisions changed (a new binary, another config) since they were logged.
  // The rebuilt core follows the replayed decisions; the materialized tables
  // follow the logged ones.
  int64_t diverged = 0;
  int64_t first_diverged_seq = 0;  // 0 when none
};

// A row of the jobs table. Times and steps that do not apply are -1.
struct JobRow {
  JobId id = 0;
  std::string tenant;
  std::string user;
  core::JobState state = core::JobState::kQueued;
  std::string reason;     // as of the last state change
  std::string spec_json;  // job spec v1 (common/job_io.hpp)
  int priority = 0;
  TimeMs time_limit_ms = 0;
  TimeMs checkpoint_interval_ms = 0;
  TimeMs submit_ms = 0;
  TimeMs start_ms = -1;       // first start
  TimeMs last_start_ms = -1;  // latest start or restart
  TimeMs end_ms = -1;
  int restarts = 0;
  int64_t checkpoint_step = -1;
  TimeMs checkpoint_ms = -1;
  std::string ranks_json = "[]";   // [[node, gpu], ...] (common/event_json.hpp)
  std::string spares_json = "[]";  // [node, ...]
  int64_t submit_seq = 0;
  int64_t updated_seq = 0;
  // From job_runs (ListJobs, GetJob, ListHistory fill them):
  int runs = 0;              // runs so far (starts and restarts)
  int last_run_nodes = 0;    // distinct nodes of the newest run; 0 if none
  int64_t ended_gpu_ms = 0;  // GPU-ms of the runs that ended
  // What the job's request named (0008_job_node_sets.sql); "": none.
  std::string partition;
  std::string reservation;
};

// One run of a job: from a start or restart to the next restart, stop or
// state change that holds no GPUs (schema/sql/0004_job_runs.sql has the rule).
struct JobRunRow {
  JobId job = 0;
  int run = 0;  // 1, 2, ... in start order
  TimeMs start_ms = 0;
  TimeMs end_ms = -1;  // -1 while it runs
  int gpus = 0;
  int nodes = 0;                  // distinct nodes
  std::string ranks_json = "[]";  // [[node, gpu], ...] by rank
  std::string end_reason;         // "" while it runs
  std::optional<int> exit_code;   // the exit status that ended it, if one did
  int64_t gpu_ms = 0;             // (end - start) x gpus; 0 while it runs

  // GPU-ms up to now_ms for a run that has not ended.
  int64_t GpuMsAt(TimeMs now_ms) const {
    return end_ms >= 0 ? gpu_ms : std::max<int64_t>(0, now_ms - start_ms) * gpus;
  }
};

// Whose jobs a query may return: the store's form of the caller's scope
// (scheduler/daemon/access/scope.hpp makes it; the store applies it in SQL).
struct TenantScope {
  enum class Kind : uint8_t { kAll, kTenant, kSubtree };
  Kind kind = Kind::kAll;
  std::string tenant;  // kTenant: exactly it; kSubtree: it and "tenant/..."
};

// Jobs for `topo history`: those submitted before `until` that had not ended
// before `since` (they existed during [since, until)), by id ascending.
struct HistoryQuery {
  TenantScope scope;
  std::optional<std::string> tenant;  // exactly this tenant (within scope)
  std::optional<std::string> user;
  std::vector<core::JobState> states;  // empty: any
  std::optional<TimeMs> since;
  std::optional<TimeMs> until;
  JobId after_id = 0;  // paging: ids greater than this
  int limit = 100;
};

enum class UsageKey : uint8_t { kTenant, kUser };

// Usage per tenant or user over [since, until): GPU-ms of the runs clipped
// to the window (a run still going counts up to now_ms), jobs submitted,
// jobs that ended and how, first starts and their queue wait.
struct UsageQuery {
  TenantScope scope;
  UsageKey by = UsageKey::kTenant;
  TimeMs since = 0;
  TimeMs until = 0;
  TimeMs now_ms = 0;
  std::string after_key;  // paging: keys greater than this
  int limit = 100;
};

struct UsageRow {
  std::string key;  // the tenant or user
  int64_t gpu_ms = 0;
  int64_t submitted = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t cancelled = 0;
  int64_t started = 0;  // first starts in the window
  int64_t queue_wait_ms_total = 0;
  int64_t queue_wait_ms_max = 0;
};

struct JobQuery {
  std::optional<std::string> tenant;  // only this tenant's jobs
  bool include_terminal = true;
  JobId after_id = 0;  // paging: ids greater than this
  int limit = 1000;
};

struct NodeRow {
  std::string name;
  core::NodeState state = core::NodeState::kUp;
  std::string reason;
  TimeMs time_ms = 0;
};

struct GpuHealthRow {
  int64_t seq = 0;
  std::string node;
  int gpu = 0;
  core::GpuHealth health = core::GpuHealth::kHealthy;
  std::string reason;
  TimeMs time_ms = 0;
};

// A logged event as stored: the body is the JSON text
// {"event": ..., "commands": [...]} (common/event_json.hpp), unparsed.
struct RawEvent {
  int64_t seq = 0;
  TimeMs time_ms = 0;
  std::string actor;
  std::string kind;  // the event's "type"
  std::string body;
};

struct EventQuery {
  int64_t after_seq = 0;
  int64_t before_seq = 0;  // > 0: only events with a smaller seq
  int limit = 1000;
  std::optional<JobId> job;  // only events whose event or commands name this job
  // The newest `limit` events of the range, newest first (else the oldest,
  // oldest first).
  bool newest_first = false;
};

// A change outside the event log (users, tokens, topology imports).
struct AuditRow {
  int64_t seq = 0;
  TimeMs time_ms = 0;
  std::string actor;
  std::string action;  // "user.create", "token.revoke", "topology.import", ...
  std::string detail;  // JSON object text
};

enum class Role : uint8_t { kUser, kTenantAdmin, kClusterAdmin };
std::string_view RoleName(Role r);  // "user", "tenant-admin", "cluster-admin"
std::optional<Role> ParseRole(std::string_view name);

struct User {
  std::string name;
  std::string tenant;
  Role role = Role::kUser;
  TimeMs created_ms = 0;
  std::string unix_user;  // the account its jobs run as on the nodes
};

// The Unix accounts a cluster-admin granted a tenant (docs/api.md, "Unix
// accounts"): its tenant-admins map users of it (and of the tenants below
// it) only to an account of `accounts` or to a member of `unix_group`.
struct TenantAccounts {
  std::string tenant;
  std::vector<std::string> accounts;  // account names, each once
  std::string unix_group;             // a group name; "" for none
  bool empty() const { return accounts.empty() && unix_group.empty(); }
  bool operator==(const TenantAccounts&) const = default;
};

struct TokenInfo {
  std::string id;  // the first 12 hex digits of the token's SHA-256
  std::string user;
  TimeMs created_ms = 0;
  bool revoked = false;
};

struct IssuedToken {
  std::string token;  // "topo_" + 64 hex digits; shown once, never stored
  std::string id;
};

// A stored snapshot of the scheduling core (SchedulerCore::Snapshot).
struct SnapshotRow {
  int64_t seq = 0;        // the last event it covers: replay resumes at seq + 1
  TimeMs time_ms = 0;     // that event's time
  int format = 0;         // SchedulerCore::kSnapshotVersion of the writer
  TimeMs created_ms = 0;  // wall clock when written
  std::string state;      // the bytes SchedulerCore::Restore reads
};

// Snapshots the store keeps; compaction only deletes events older than the
// oldest of them, so a newest snapshot that fails to restore still leaves
// the previous one and every event after it.
inline constexpr int kKeptSnapshots = 2;

struct OpenOptions {
  // The migrations this binary knows; tests pass their own.
  std::span<const Migration> migrations = EmbeddedMigrations();
  int busy_timeout_ms = 5000;
  // A second connection for reads beside the writer (WAL lets readers run
  // while it writes): opens an existing store of a schema this binary knows
  // without creating, migrating or writing anything; every write fails.
  bool read_only = false;
  // The commit mark (above) is checked and kept: off only for a scratch
  // copy that no daemon runs on (topo-scheduler restore's check).
  bool commit_mark = true;
  // Open a store that is behind its commit mark (or whose mark is damaged,
  // missing or another store's) instead of refusing it: the mark is reset
  // to the store as it is, the loss is recorded in the audit log and
  // Store::accepted_loss() describes it. topo-scheduler --accept-data-loss.
  bool accept_data_loss = false;
};

// What Open accepted under OpenOptions::accept_data_loss.
struct DataLoss {
  int64_t store_seq = 0;  // where the log ends
  int64_t mark_seq = -1;  // what the mark said; -1: no usable mark
  std::string message;    // what was lost, and what the mark says now
};

class Store {
 public:
  // Opens or creates the store at path: WAL mode, synchronous=FULL, pending
  // migrations applied in one transaction, the commit mark checked (and
  // created for a new store, or one from before marks). Errors (file
  // unwritable, not a toposched store, schema newer than options.migrations
  // know, a failing migration, a store behind its commit mark) leave the
  // file as it was.
  static core::Result<Store> Open(const std::string& path, const OpenOptions& options = {});

  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  ~Store();

  // Logs the batch and materializes its effects, in ONE transaction (one
  // fsync). Each entry's time is raised to the previous entry's if it is
  // earlier (the core does the same with `now`), so the log's times never
  // decrease. Nothing is written, and an error names the entry, if an event
  // or command would not read back (a node id outside the topology, an
  // invalid job spec, a NaN share). An empty batch writes nothing.
  // REQUIRES: topology is the one the core was built over.
  //
  // before_commit, when given, is called once the batch is written inside
  // the open transaction, just before its commit: an error from it rolls
  // the transaction back and is returned, so nothing of the batch is
  // written. HA uses it to commit locally only after the replicated log
  // took the batch, while its append ran beside this one's writes. It is
  // not called when the batch fails earlier (encoding, a write).
  core::Result<AppendResult> Append(const core::Topology& topology, std::span<const LogEntry> batch,
                                    const std::function<core::Status()>& before_commit = {});

  // Calls fn for every logged event with seq >= from_seq, in order; stops at
  // the first error fn returns and returns it. Node names are resolved
  // against topology; an entry that does not parse is an error naming its
  // seq. REQUIRES: fn does not use this store.
  core::Status ReadEvents(int64_t from_seq, const core::Topology& topology,
                          const std::function<core::Status(const StoredEvent&)>& fn);

  // Feeds every logged event through core.Step at its logged time and
  // compares the commands with the logged ones (see ReplayReport). Returns
  // the last seq; the caller's next Append continues from there.
  // REQUIRES: core is fresh (no Step yet), built over the topology and with
  // the SchedulerConfig the log was written with (keep them in meta).
  // from_seq: the first event to replay (a topology import starts a new
  // epoch of the log; the daemon keeps its first seq in meta).
  core::Result<ReplayReport> Replay(core::SchedulerCore& core, int64_t from_seq = 1);

  // ---- snapshots and compaction (docs/store.md, Snapshots and compaction)
  // Stores `state`, the core's state after the newest logged event (seq
  // LastSeq()), in one durable transaction, and deletes all but the newest
  // kKeptSnapshots. A snapshot at LastSeq() that exists already is kept (Ok,
  // nothing written). Errors: an empty log or state.
  // REQUIRES: state is SchedulerCore::Snapshot() of the core that stepped
  // exactly the logged events (call it right after an Append).
  core::Status WriteSnapshot(int format, std::string_view state, TimeMs created_ms);
  // The snapshots with seq >= min_seq (the epoch's first event), newest
  // first, with their state.
  core::Result<std::vector<SnapshotRow>> Snapshots(int64_t min_seq = 1);
  // Replay() for a core restored from the snapshot at after_seq: steps the
  // events after it and compares their commands the same way.
  // REQUIRES: core holds the state as of event after_seq.
  core::Result<ReplayReport> ReplayAfter(core::SchedulerCore& core, int64_t after_seq);
  // The seq of the oldest logged event (0 for an empty log): above 1 once
  // compaction has deleted the oldest ones.
  core::Result<int64_t> FirstSeq();
  // One bounded step of compaction: deletes, in one transaction, at most
  // `limit` of the oldest events (and their job_events rows) that are both
  // older than the oldest kept snapshot (none while fewer than
  // kKeptSnapshots exist) and logged before before_ms. Returns how many it
  // deleted (0: nothing is due). Jobs, tenants, nodes and GPU health rows
  // stay: an old job is still listed and shown, with a shorter history.
  core::Result<int64_t> CompactEvents(TimeMs before_ms, int limit);

  // The seq of the newest event; 0 for an empty log (a read-only store
  // asks the file each time).
  int64_t LastSeq() const;
  // Set when Open accepted a loss (OpenOptions::accept_data_loss).
  const std::optional<DataLoss>& accepted_loss() const;
  // The time of the newest event; 0 for an empty log.
  TimeMs LastTime() const;
  int SchemaVersion() const;
  const std::string& path() const;

  // ---- materialized views
  core::Result<std::optional<JobRow>> GetJob(JobId id);
  // The jobs `user` submitted with this client_request_id (a job array's
  // tasks share one), by id; empty when none.
  core::Result<std::vector<JobId>> JobsByClientRequest(const std::string& user,
                                                       const std::string& client_request_id);
  core::Result<std::vector<JobRow>> ListJobs(const JobQuery& query);
  // The runs of each job, by job then run (jobs without runs have none).
  core::Result<std::vector<JobRunRow>> ListJobRuns(std::span<const JobId> jobs);
  // At most query.limit jobs (store_history.cpp).
  core::Result<std::vector<JobRow>> ListHistory(const HistoryQuery& query);
  // At most query.limit rows by key ascending, keys with nothing in the
  // window left out.
  core::Result<std::vector<UsageRow>> Usage(const UsageQuery& query);
  // The largest job id ever submitted, 0 if none: the daemon numbers new
  // jobs from here after a restart. It includes the jobs of an accepted loss
  // (the commit mark keeps their largest id), so their ids are not reused.
  core::Result<JobId> MaxJobId();
  core::Result<std::vector<core::TenantConfig>> ListTenants();
  core::Result<std::vector<NodeRow>> ListNodes();
  core::Result<std::vector<GpuHealthRow>> GpuHealthHistory(std::string_view node);
  // Logged events by seq (ascending, or descending when newest_first),
  // unparsed.
  core::Result<std::vector<RawEvent>> ListEvents(const EventQuery& query);

  // ---- users and tokens (each call its own durable transaction)
  // Errors: an empty name or tenant, a user that exists (Create) or does not
  // (Update, Delete). Deleting a user deletes their tokens.
  core::Status CreateUser(const User& user);
  core::Status UpdateUser(const User& user);
  core::Status DeleteUser(std::string_view name);
  core::Result<std::optional<User>> GetUser(std::string_view name);
  core::Result<std::vector<User>> ListUsers(std::optional<std::string_view> tenant = {});
  // The users whose jobs run as this Unix account, by name.
  core::Result<std::vector<User>> UsersOfUnixUser(std::string_view unix_user);

  // ---- the Unix accounts granted to tenants (each call its own durable
  // transaction). Set replaces the tenant's grant; an empty one removes it.
  // Get answers an empty grant for a tenant without one.
  core::Status SetTenantAccounts(const TenantAccounts& grant);
  core::Result<TenantAccounts> GetTenantAccounts(std::string_view tenant);
  core::Result<std::vector<TenantAccounts>> ListTenantAccounts();
  // A new random token for an existing user; only its hash is stored.
  core::Result<IssuedToken> CreateToken(std::string_view user, TimeMs now_ms);
  // The same for a token the caller made ("topo_" + 64 lowercase hex digits;
  // anything else is an error saying so): HA replicas given one admin token
  // file (docs/ha.md, Not in the log).
  core::Result<IssuedToken> CreateTokenFromText(std::string_view user, std::string_view token,
                                                TimeMs now_ms);
  // The token's user, or nullopt for an unknown or revoked token (an error
  // only when the store fails).
  core::Result<std::optional<User>> Authenticate(std::string_view token);
  // Revokes by id (at least 8 hex digits of it, unambiguous) or by the
  // token itself. Revoking a revoked token is Ok.
  core::Status RevokeToken(std::string_view id_or_token);
  core::Result<std::vector<TokenInfo>> ListTokens(std::optional<std::string_view> user = {});

  // ---- users, tokens and the tenants' granted accounts as one value: what
  // HA replicates (docs/ha.md, Users and tokens), in common/auth_json.hpp's
  // format; token hashes only.
  core::Result<std::string> ExportAuth();
  // Replaces every user, token and grant with the value's in one transaction,
  // after common::ParseAuthRows has checked all of it; its error, naming the
  // row and field, changes nothing.
  core::Status ImportAuth(std::string_view json);

  // ---- audit (each call its own durable transaction)
  core::Status AppendAudit(TimeMs time_ms, std::string_view actor, std::string_view action,
                           std::string_view detail_json);
  // Rows after after_seq by seq, ascending: the oldest `limit` of them, or
  // the newest `limit` when newest_last_n (still ascending).
  core::Result<std::vector<AuditRow>> ListAudit(int64_t after_seq, int limit,
                                                bool newest_last_n = false);

  // ---- meta
  core::Status SetMeta(std::string_view key, std::string_view value);
  // Several keys in one transaction: all are written or none.
  core::Status SetMetas(std::span<const std::pair<std::string, std::string>> values);
  core::Result<std::optional<std::string>> GetMeta(std::string_view key);

  class Impl;

 private:
  explicit Store(std::unique_ptr<Impl> impl);
  core::Result<IssuedToken> InsertToken(std::string_view user, std::string token, TimeMs now_ms);
  std::unique_ptr<Impl> impl_;
};

// The hex SHA-256 of text (OpenSSL EVP).
std::string Sha256Hex(std::string_view text);

}  // namespace topo::store
