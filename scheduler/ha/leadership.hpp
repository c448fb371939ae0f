#pragma once
// One topo-scheduler replica's part in HA (docs/ha.md): wait as a standby
// until elected, keep the lease alive, and append every group commit's batch
// to the replicated log in etcd, fenced on the leader key.
//
//   auto l = Leadership::Create(options);
//   l->WaitToLead(log, stop, follow);       // blocks: the standby phase
//   l->StartRenewing(on_lost);              // keepalives on a thread of its own
//   l->LoadSnapshotIfBehind(store, dir);    // a store behind the trimmed log
//   l->CatchUp(store);                      // the rest of the log
//   l->TakeOver(store.LastSeq());           // the replicated log must end where the store does
//   ... per group commit, before the local SQLite append:
//   l->Append(first_seq, batch, topology);  // Ok: the batch is in etcd under our term
//
// Keys under /toposched/<cluster>/: `leader` (the campaign key; the term is
// its create_revision), `head` (the last seq in the log, decimal) and
// `log/<first_seq, 20 digits>` (one batch). Append's txn compares
// create_revision(leader) == term and value(head) == first_seq - 1: a
// deposed leader's append fails (its lease expired, so the key was deleted,
// and a successor's key has a later create_revision), and so does an append
// that would leave a gap or follow another writer. A failed append wrote
// nothing, and its error names what happened ("the leader key is now held
// by 'b' (term 41)").
//
// Once lost (a failed append, or the renewing thread's verdict) every later
// Append fails at once without reaching etcd.
//
// Thread safety: WaitToLead, TakeOver and StartRenewing from one thread
// before the server runs; Append one call at a time, from the thread the
// strand's commit starts for it (AppendEpoch and PublishAuth from the strand
// while no Append runs); lost() and
// lost_reason() from any thread. The renewing thread owns the Election and
// its own EtcdClient; Append uses another.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ha/election.hpp"
#include "ha/etcd_client.hpp"
#include "ha/records.hpp"
#include "store/store.hpp"
#include "topo/core/status.hpp"
#include "topo/core/topology.hpp"

namespace topo::ha {

struct LeadershipOptions {
  EtcdClientOptions etcd;
  std::string cluster = "default";  // the key prefix's part
  std::string name;                 // this replica (the leader key's value)
  int ttl_s = 5;
  // etcd's --max-request-bytes (every member's): Append splits a batch whose
  // value would not fit one request, less kRequestMargin, into several appends.
  int64_t max_request_bytes = 1572864;
};

// What an append's txn carries besides the batch's value (keys, compares, head).
inline constexpr int64_t kRequestMargin = 64 << 10;

// The largest batch value written as one key (etcd refuses requests above
// its --max-request-bytes, 1.5 MiB by default). A larger batch is split into
// parts of at most kMaxPartBytes (records.hpp) written in the same txn.
inline constexpr size_t kMaxBatchBytes = 1u << 20;

// "/toposched/<cluster>/".
std::string KeyPrefix(const std::string& cluster);
// log/<seq> with the seq zero-padded to 20 digits, so keys sort in log order.
std::string LogKey(const std::string& cluster, int64_t first_seq);
// topology/<seq>, padded the same way: the topology epoch that starts at seq
// ({"term", "from_seq", "meta": {"topology", "topology_from_seq", "policy"}},
// the meta values a topology import sets).
std::string EpochKey(const std::string& cluster, int64_t from_seq);

// A batch as stored in etcd: {"term", "first_seq", "entries": [{"time_ms",
// "actor", "event", "commands"}]}, events and commands in the store's JSON
// (common/event_json.hpp). Errors: an entry that cannot be written as JSON.
core::Result<std::string> EncodeBatch(int64_t term, int64_t first_seq,
                                      std::span<const store::LogEntry> batch,
                                      const core::Topology& topology);

// The puts that store `value` at `key`: one put when it is at most
// kMaxBatchBytes, else a BatchParts header at `key` (first_seq..last_seq; an
// epoch gives from_seq twice) and the value's consecutive slices of at most
// kMaxPartBytes at part_key(0), part_key(1), ..., all for ONE txn. Errors:
// more than kMaxBatchParts parts.
core::Result<std::vector<PutRequest>> SplitPuts(
    const std::string& key, std::string value, int64_t term, int64_t first_seq, int64_t last_seq,
    const std::function<std::string(int64_t)>& part_key);
// " (etcd refuses ...: raise --max-request-bytes ...)" for etcd's "request is
// too large" error; empty for any other.
std::string TooLargeHint(const std::string& etcd_error);

class Leadership {
 public:
  // Validates the options (errors name the ha_* setting) and makes the two
  // etcd clients; reaches no member yet.
  static core::Result<std::unique_ptr<Leadership>> Create(LeadershipOptions options);
  ~Leadership();  // stops the renewing thread (does not resign)

  // The standby phase: campaigns every TTL/3, and at once (at most every
  // 100 ms) when a key of the cluster changes (an etcd watch: a new batch,
  // the leader key's end), until won or `stop` is set;
  // `say` gets one line per change ("standby: leader is 'a' (term 7)",
  // "etcd unreachable: ..."). Errors: stopped.
  // `between` runs after each campaign that lost (the standby follows the
  // log there, CatchUp).
  core::Status WaitToLead(const std::function<void(const std::string&)>& say,
                          const std::atomic<bool>& stop, const std::function<void()>& between = {});

  // A standby's (and a new leader's) catch-up: applies to `store` every
  // topology epoch and batch the replicated log holds after its LastSeq(),
  // in order: an epoch key at LastSeq()+1 sets the store's topology meta the
  // way an import does, and each batch is decoded with the store's event JSON
  // and written with Store::Append under the same seqs. Returns how many
  // entries it applied. Errors: etcd fails; a batch whose first_seq is not
  // LastSeq()+1 (the log lacks batches this store needs, or the store holds
  // ones the log does not); a key that does not decode (named). What was
  // applied before the error stays applied (each batch is one transaction).
  // REQUIRES: the thread that calls WaitToLead/TakeOver; no Append meanwhile.
  core::Result<int64_t> CatchUp(store::Store& store);

  // The leader's topology import, before the store's meta changes: puts the
  // epoch key at from_seq in a txn fenced like Append (leader term, head ==
  // from_seq - 1). Errors: lost leadership (final, like Append's), etcd
  // unreachable, or a value above kMaxBatchBytes.
  core::Status AppendEpoch(int64_t from_seq,
                           std::span<const std::pair<std::string, std::string>> meta);

  // After winning: the replicated log must end at local_last_seq (the local
  // store's LastSeq). A fresh cluster's log starts there: `head` is created.
  // Errors: the log is ahead of this replica (CatchUp first) or behind it (the
  // store holds batches the log does not), or etcd fails.
  core::Status TakeOver(int64_t local_last_seq);

  // Keeps the lease alive every TTL/3 on a thread; the first time the
  // leadership is lost, calls on_lost(reason) from that thread.
  void StartRenewing(std::function<void(const std::string&)> on_lost);

  // The fenced append of one group commit (see above). An empty batch is Ok.
  core::Status Append(int64_t first_seq, std::span<const store::LogEntry> batch,
                      const core::Topology& topology);

  // Revokes the lease (a clean stop: a standby takes over at once).
  core::Status Resign();

  // ---- snapshots in etcd and the bounded log (docs/ha.md, "Snapshots bound
  // the log in etcd").

  // The leader: starts the thread that publishes snapshots. After each
  // SnapshotWritten() it copies the store at db_path (VACUUM INTO on a
  // read-only connection: consistent as of one commit, into work_dir), writes
  // the copy to
  // snapshot/<seq> (its chunks first, each in a txn fenced on the leader key,
  // the manifest last, so a reader never sees half a snapshot), keeps the
  // newest kKeptEtcdSnapshots, and deletes the log/ and topology/ keys at or
  // below min(the newest snapshot's seq, every applied/<replica> seq) in one
  // fenced txn; between snapshots it trims every TTL as standbys advance.
  // `say` gets one line per snapshot and trim, or why one failed (the log
  // stays the truth: a failed publication is tried at the next snapshot).
  // REQUIRES: after TakeOver; called once.
  void StartPublishing(std::string db_path, std::string work_dir,
                       std::function<void(const std::string&)> say);
  // From the strand after the store wrote a snapshot: wakes the publisher
  // (never blocks; a publication in progress takes the newest state when it
  // starts its next round).
  void SnapshotWritten();
  // What StartPublishing's thread does once, on the calling thread. Returns
  // the published seq (0: etcd already holds a snapshot as new).
  core::Result<int64_t> PublishSnapshot(const std::string& db_path, const std::string& work_dir);
  // Deletes the log/ and topology/ keys at or below min(the newest snapshot
  // in etcd, every applied/<replica> seq but this replica's) in one txn
  // fenced on the leader key. Returns the new cut (0: nothing to trim).
  // REQUIRES: the publisher's thread (or, in tests, no publisher).
  core::Result<int64_t> TrimLog();

  // A standby, after each catch-up: puts applied/<name> = seq on a lease of
  // its own (TTL ha_lease_ttl_s, kept alive by each call), so the leader
  // never trims a batch this replica still needs, and forgets it once this
  // replica stops calling (dies, stops, is elected).
  core::Status ReportApplied(int64_t seq);
  // Elected: revokes that lease (the leader's own progress bounds nothing).
  void StopReporting();

  // A standby or a new leader whose store is behind the oldest batch left in
  // log/ (started empty, or down while the log was trimmed): loads the newest
  // snapshot in etcd in place of the store at state_dir/topo.db (checked
  // against its manifest's size and SHA-256, then restored as
  // `topo-scheduler restore --force` does) and reopens `store` on it, so the
  // ordinary start (a local snapshot plus the events after it) and CatchUp
  // go on from the snapshot's seq. Returns that seq, or 0 when the store is
  // not behind or no snapshot covers the gap (CatchUp then names the gap).
  // Errors: etcd fails, a chunk is missing or does not match the manifest,
  // the restore fails (the old store is reopened).
  // REQUIRES: store holds the store of state_dir; the CatchUp thread.
  core::Result<int64_t> LoadSnapshotIfBehind(std::optional<store::Store>& store,
                                             const std::string& state_dir);

  // ---- users and tokens (docs/ha.md, Users and tokens): the value at
  // auth (Store::ExportAuth's JSON).

  // The leader, after a change to its store's users or tokens: puts `value`
  // in a txn fenced on the leader key. Errors: lost leadership (final, like
  // Append's), etcd unreachable, or a value too large for one request.
  // REQUIRES: the strand (or the thread before the server runs).
  core::Status PublishAuth(const std::string& value);
  // A standby after each catch-up, and a new leader before it serves: when
  // etcd's value changed since this replica last took it, replaces the
  // store's users and tokens with it (Store::ImportAuth). Returns whether it
  // did. Errors: etcd fails; a value the store refuses (named; the store
  // keeps its own).
  // REQUIRES: the CatchUp thread.
  core::Result<bool> SyncAuth(store::Store& store);

  int64_t term() const { return term_; }
  bool lost() const { return lost_.load(); }
  std::string lost_reason() const;
  const LeadershipOptions& options() const { return options_; }

 private:
  Leadership(LeadershipOptions options, std::unique_ptr<EtcdClient> election_client,
             std::unique_ptr<EtcdClient> log_client, std::unique_ptr<EtcdClient> snapshot_client);
  core::Status MarkLost(const std::string& why);
  // The standby's wait between rounds: until `until`, or a change under the
  // cluster's keys (then at least kMinRound after `round_start`).
  void WaitForChange(std::chrono::steady_clock::time_point round_start,
                     std::chrono::steady_clock::time_point until, const std::atomic<bool>& stop);
  // A failed compare that shows this term's leader key and head at last_seq:
  // an earlier attempt of the same append applied (its answer was lost).
  bool AppliedBefore(const TxnResponse& t, int64_t last_seq) const;
  std::string DescribeFailedAppend(const TxnResponse& t, int64_t expected_head) const;
  // CatchUp's reader of a value that may be split over parts (records.hpp).
  core::Result<nlohmann::json> ReadSplit(const KeyValue& kv);

  LeadershipOptions options_;
  std::unique_ptr<EtcdClient> election_client_;  // the election's (renewing thread)
  std::unique_ptr<EtcdClient> log_client_;       // Append's (the strand)
  std::unique_ptr<Election> election_;
  int64_t term_ = 0;
  int64_t watch_from_ = 0;  // the standby's next watch starts at this revision (0: now)
  std::atomic<bool> lost_ = false;
  mutable std::mutex mu_;
  std::string lost_reason_;  // guarded by mu_
  std::atomic<bool> stop_renewing_ = false;
  std::thread renewer_;

  // Snapshot publishing (the publisher thread owns snapshot_client_).
  core::Status FencedTxn(EtcdClient& client, TxnRequest t, const std::string& what);
  void StopPublishing();
  std::unique_ptr<EtcdClient> snapshot_client_;
  std::mutex publish_mu_;
  std::condition_variable publish_cv_;
  bool publish_due_ = false;      // guarded by publish_mu_
  bool stop_publishing_ = false;  // guarded by publish_mu_
  std::thread publisher_;
  int64_t newest_snapshot_seq_ = 0;  // the publisher's: the newest in etcd (0: not read yet)
  int64_t trimmed_to_ = 0;           // the publisher's: log/ holds nothing at or below it
  int64_t auth_revision_ = 0;        // the mod_revision of the auth value this store took
  // ReportApplied's lease (the standby's thread).
  int64_t applied_lease_ = 0;
  int64_t applied_reported_ = -1;
};

}  // namespace topo::ha
