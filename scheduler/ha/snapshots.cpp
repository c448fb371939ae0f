// Leadership's snapshots in etcd and the bounded log (docs/ha.md, "Snapshots
// bound the log in etcd"): the leader publishes copies of its store and trims
// the log below what every live standby has applied; a replica that fell
// behind the trimmed log loads the newest copy.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>

#include <sqlite3.h>

#include "ha/leadership.hpp"
#include "store/backup.hpp"
#include "store/sqlite_db.hpp"

namespace topo::ha {

using core::Result;
using core::Status;

namespace {

Status Unavailable(std::string m) {
  return Status::Error(std::move(m), core::ErrorCode::kUnavailable);
}

RangeRequest Prefixed(const std::string& prefix, bool keys_only) {
  RangeRequest r;
  r.key = prefix;
  r.range_end = PrefixRangeEnd(prefix);
  r.keys_only = keys_only;
  return r;
}

// The seqs of the snapshot manifests in etcd (snapshot/<seq>, not its
// chunks), ascending.
Result<std::vector<int64_t>> ManifestSeqs(EtcdClient& client, const std::string& prefix) {
  Result<RangeResponse> r = client.Range(Prefixed(prefix + "snapshot/", /*keys_only=*/true));
  if (!r.ok()) return r.status();
  std::vector<int64_t> seqs;
  for (const KeyValue& kv : r.value().kvs) {
    std::string rest;
    std::optional<int64_t> seq = SeqOfKey(kv.key, prefix + "snapshot/", &rest);
    if (seq && rest.empty()) seqs.push_back(*seq);
  }
  std::sort(seqs.begin(), seqs.end());
  return seqs;
}

Result<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot read " + path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::Error("cannot read " + path);
  return bytes;
}

struct StoreCopy {
  int64_t seq = 0;  // its newest event
  int schema_version = 0;
};

// Copies the store with VACUUM INTO on a read-only connection: one statement
// in one read transaction, so the copy is consistent as of one commit, and
// the leader's commits meanwhile neither wait for it nor restart it (WAL), as
// they would restart the page-by-page backup API on a busy store. The copy
// carries no free pages and is left in rollback-journal mode, a plain file.
Result<StoreCopy> CopyStore(const std::string& db_path, const std::string& copy) {
  std::error_code ec;
  std::filesystem::remove(copy, ec);
  {
    Result<store::internal::Database> src = store::internal::Database::Open(db_path, true);
    if (!src.ok()) return Status::Error("cannot open " + db_path + ": " + src.message());
    sqlite3_busy_timeout(src.value().get(), 5000);
    std::string quoted;
    for (char c : copy) quoted += c == '\'' ? std::string("''") : std::string(1, c);
    if (Status s = src.value().Exec("VACUUM INTO '" + quoted + "'"); !s.ok()) {
      return Status::Error("VACUUM INTO " + copy + ": " + s.message());
    }
  }
  Result<store::internal::Database> db = store::internal::Database::Open(copy);
  if (!db.ok()) return Status::Error("cannot open " + copy + ": " + db.message());
  if (Status s = db.value().Exec("PRAGMA journal_mode = DELETE"); !s.ok()) {
    return Status::Error(copy + ": " + s.message());
  }
  Result<int64_t> seq = db.value().QueryInt("SELECT COALESCE(MAX(seq), 0) FROM events");
  if (!seq.ok()) return Status::Error(copy + ": " + seq.message());
  Result<int64_t> version =
      db.value().QueryInt("SELECT COALESCE(MAX(version), 0) FROM schema_version");
  if (!version.ok()) return Status::Error(copy + ": " + version.message());
  return StoreCopy{seq.value(), static_cast<int>(version.value())};
}

}  // namespace

Status Leadership::FencedTxn(EtcdClient& client, TxnRequest t, const std::string& what) {
  const std::string leader = KeyPrefix(options_.cluster) + "leader";
  t.compare.insert(t.compare.begin(), CreateRevisionIs(leader, term_));
  t.failure.clear();
  RangeRequest who;
  who.key = leader;
  t.failure.push_back(who);
  Result<TxnResponse> r = client.Txn(t);
  if (!r.ok()) return Unavailable(what + ": " + r.message());
  if (r.value().succeeded) return Status::Ok();
  return Unavailable(what + ": this replica no longer holds the leader key (term " +
                     std::to_string(term_) + ")");
}

Result<int64_t> Leadership::PublishSnapshot(const std::string& db_path,
                                            const std::string& work_dir) {
  const std::string prefix = KeyPrefix(options_.cluster);
  EtcdClient& etcd = *snapshot_client_;
  // A consistent copy as of one commit: every commit is in etcd's log
  // before the store's, so the copy's newest seq is in the replicated log.
  const std::string copy = work_dir + "/ha-snapshot.db";
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      std::error_code e;
      std::filesystem::remove(path, e);
      std::filesystem::remove(path + "-journal", e);
    }
  } cleanup{copy};
  Result<StoreCopy> info = CopyStore(db_path, copy);
  if (!info.ok()) return Status::Error("copying the store: " + info.message());
  const int64_t seq = info.value().seq;
  if (seq <= 0) return int64_t{0};
  Result<std::vector<int64_t>> have = ManifestSeqs(etcd, prefix);
  if (!have.ok()) return have.status();
  if (!have.value().empty() && have.value().back() >= seq) return int64_t{0};
  Result<std::string> bytes = ReadFileBytes(copy);
  if (!bytes.ok()) return bytes.status();
  SnapshotManifest m;
  m.term = term_;
  m.seq = seq;
  m.bytes = static_cast<int64_t>(bytes.value().size());
  m.chunks =
      (m.bytes + static_cast<int64_t>(kMaxPartBytes) - 1) / static_cast<int64_t>(kMaxPartBytes);
  m.sha256 = store::Sha256Hex(bytes.value());
  m.schema_version = info.value().schema_version;
  // One chunk per txn keeps each request inside etcd's default limit; the
  // manifest, written last, is what makes the snapshot visible.
  for (int64_t i = 0; i < m.chunks; ++i) {
    {
      std::lock_guard<std::mutex> lock(publish_mu_);
      if (stop_publishing_) return Unavailable("stopped while publishing a snapshot");
    }
    const size_t at = static_cast<size_t>(i) * kMaxPartBytes;
    TxnRequest t;
    t.success.push_back(PutRequest{SnapshotChunkKey(options_.cluster, seq, i),
                                   bytes.value().substr(at, kMaxPartBytes), 0});
    if (Status s = FencedTxn(etcd, std::move(t),
                             "writing chunk " + std::to_string(i) + " of the snapshot at seq " +
                                 std::to_string(seq));
        !s.ok()) {
      return s;
    }
  }
  {
    TxnRequest t;
    t.success.push_back(
        PutRequest{SnapshotKey(options_.cluster, seq), EncodeSnapshotManifest(m), 0});
    if (Status s = FencedTxn(etcd, std::move(t),
                             "writing the manifest of the snapshot at seq " + std::to_string(seq));
        !s.ok()) {
      return s;
    }
  }
  // Keep the newest kKeptEtcdSnapshots: everything under snapshot/ below the
  // oldest kept one goes (older manifests, their chunks, and the chunks of a
  // publication that never wrote its manifest).
  std::vector<int64_t> kept = have.value();
  kept.push_back(seq);
  if (static_cast<int>(kept.size()) > kKeptEtcdSnapshots) {
    const int64_t oldest_kept = kept[kept.size() - kKeptEtcdSnapshots];
    TxnRequest t;
    t.success.push_back(
        DeleteRangeRequest{prefix + "snapshot/", SnapshotKey(options_.cluster, oldest_kept)});
    if (Status s = FencedTxn(etcd, std::move(t), "deleting older snapshots"); !s.ok()) return s;
  }
  newest_snapshot_seq_ = seq;
  return seq;
}

Result<int64_t> Leadership::TrimLog() {
  const std::string prefix = KeyPrefix(options_.cluster);
  EtcdClient& etcd = *snapshot_client_;
  if (newest_snapshot_seq_ == 0) {  // a new leader: its predecessor's snapshots count
    Result<std::vector<int64_t>> have = ManifestSeqs(etcd, prefix);
    if (!have.ok()) return have.status();
    if (have.value().empty()) return int64_t{0};
    newest_snapshot_seq_ = have.value().back();
  }
  // Below the newest snapshot and every live standby's applied seq.
  Result<RangeResponse> applied = etcd.Range(Prefixed(prefix + "applied/", false));
  if (!applied.ok()) return applied.status();
  int64_t cut = newest_snapshot_seq_;
  for (const KeyValue& kv : applied.value().kvs) {
    if (kv.key == AppliedKey(options_.cluster, options_.name)) continue;  // this leader's old one
    Result<int64_t> a = ParseAppliedSeq(kv.value);
    if (!a.ok()) return Status::Error("etcd key " + kv.key + ": " + a.message());
    cut = std::min(cut, a.value());
  }
  if (cut <= trimmed_to_) return int64_t{0};
  TxnRequest t;
  t.success.push_back(DeleteRangeRequest{prefix + "log/", LogKey(options_.cluster, cut + 1)});
  t.success.push_back(
      DeleteRangeRequest{prefix + "topology/", EpochKey(options_.cluster, cut + 1)});
  if (Status s = FencedTxn(etcd, std::move(t), "trimming the log"); !s.ok()) return s;
  trimmed_to_ = cut;
  return cut;
}

void Leadership::StartPublishing(std::string db_path, std::string work_dir,
                                 std::function<void(const std::string&)> say) {
  publisher_ = std::thread(
      [this, db_path = std::move(db_path), work_dir = std::move(work_dir), say = std::move(say)] {
        // Woken by each local snapshot; between them every TTL, so the log is
        // trimmed as soon as the standbys' applied seqs allow it.
        // A failure that repeats every TTL (etcd unreachable) is said once.
        std::string last_failure;
        std::string failure_before;
        auto failed = [&](const std::string& why) {
          if (why != failure_before) say(why);
          last_failure = why;
        };
        while (true) {
          bool due = false;
          {
            std::unique_lock<std::mutex> lock(publish_mu_);
            publish_cv_.wait_for(lock, std::chrono::seconds(options_.ttl_s),
                                 [this] { return publish_due_ || stop_publishing_; });
            if (stop_publishing_) return;
            due = std::exchange(publish_due_, false);
          }
          if (lost_.load()) return;
          // A round without a failure forgets the last one.
          failure_before = std::exchange(last_failure, std::string());
          std::string line;
          if (due) {
            Result<int64_t> r = PublishSnapshot(db_path, work_dir);
            if (!r.ok()) {
              failed("snapshot not written to etcd: " + r.message() +
                     "; the replicated log keeps every batch until the next one");
            } else if (r.value() > 0) {
              line = "snapshot at seq " + std::to_string(r.value()) + " written to etcd";
            }
          }
          // Between snapshots a trim is not worth a line of its own.
          Result<int64_t> cut = TrimLog();
          if (!cut.ok()) {
            failed("the replicated log was not trimmed: " + cut.message());
          } else if (!line.empty() && cut.value() > 0) {
            line += "; log/ trimmed up to seq " + std::to_string(cut.value());
          }
          if (!line.empty()) say(line);
        }
      });
}

void Leadership::SnapshotWritten() {
  {
    std::lock_guard<std::mutex> lock(publish_mu_);
    publish_due_ = true;
  }
  publish_cv_.notify_one();
}

void Leadership::StopPublishing() {
  {
    std::lock_guard<std::mutex> lock(publish_mu_);
    stop_publishing_ = true;
  }
  publish_cv_.notify_one();
  if (publisher_.joinable()) publisher_.join();
}

Status Leadership::ReportApplied(int64_t seq) {
  const std::string key = AppliedKey(options_.cluster, options_.name);
  if (applied_lease_ != 0) {
    Result<LeaseKeepAliveResponse> k = log_client_->LeaseKeepAlive(applied_lease_);
    if (!k.ok()) return k.status();
    if (k.value().ttl_s <= 0) {  // expired: the key went with it
      applied_lease_ = 0;
      applied_reported_ = -1;
    }
  }
  if (applied_lease_ == 0) {
    Result<LeaseGrantResponse> g = log_client_->LeaseGrant(options_.ttl_s);
    if (!g.ok()) return g.status();
    applied_lease_ = g.value().id;
  }
  if (seq == applied_reported_) return Status::Ok();
  Result<ResponseHeader> p = log_client_->Put(PutRequest{key, std::to_string(seq), applied_lease_});
  if (!p.ok()) return p.status();
  applied_reported_ = seq;
  return Status::Ok();
}

void Leadership::StopReporting() {
  if (applied_lease_ != 0) (void)log_client_->LeaseRevoke(applied_lease_);
  applied_lease_ = 0;
  applied_reported_ = -1;
}

Result<int64_t> Leadership::LoadSnapshotIfBehind(std::optional<store::Store>& store,
                                                 const std::string& state_dir) {
  const std::string prefix = KeyPrefix(options_.cluster);
  const int64_t local = store->LastSeq();
  RangeRequest oldest = Prefixed(prefix + "log/", /*keys_only=*/true);
  oldest.limit = 1;
  Result<RangeResponse> log = log_client_->Range(oldest);
  if (!log.ok()) return log.status();
  int64_t oldest_seq = 0;  // 0: no batch left in log/
  if (!log.value().kvs.empty()) {
    std::optional<int64_t> s = SeqOfKey(log.value().kvs.front().key, prefix + "log/");
    if (!s) return int64_t{0};  // CatchUp names the key it cannot read
    oldest_seq = *s;
    if (oldest_seq <= local + 1) return int64_t{0};  // not behind: follow the log
  } else {
    Result<RangeResponse> head = log_client_->Range(KeyAlone(prefix + "head"));
    if (!head.ok()) return head.status();
    if (head.value().kvs.empty()) return int64_t{0};  // a fresh cluster
    Result<int64_t> h = ParseAppliedSeq(head.value().kvs.front().value);
    if (!h.ok() || h.value() <= local) return int64_t{0};  // TakeOver judges the head
  }
  Result<std::vector<int64_t>> seqs = ManifestSeqs(*log_client_, prefix);
  if (!seqs.ok()) return seqs.status();
  // The newest snapshot must reach the oldest batch left (the trimming never
  // deletes above it) and be ahead of this store.
  if (seqs.value().empty()) return int64_t{0};
  const int64_t seq = seqs.value().back();
  if (seq <= local || (oldest_seq > 0 && seq + 1 < oldest_seq)) return int64_t{0};
  Result<RangeResponse> mr = log_client_->Range(KeyAlone(SnapshotKey(options_.cluster, seq)));
  if (!mr.ok()) return mr.status();
  if (mr.value().kvs.empty())
    return Unavailable("the snapshot at seq " + std::to_string(seq) +
                       " was deleted while loading it; trying again");
  Result<SnapshotManifest> m = ParseSnapshotManifest(mr.value().kvs.front().value);
  if (!m.ok())
    return Status::Error("etcd key " + SnapshotKey(options_.cluster, seq) + ": " + m.message());
  if (m.value().seq != seq) {
    return Status::Error("etcd key " + SnapshotKey(options_.cluster, seq) + ": its seq is " +
                         std::to_string(m.value().seq) + "; it is written only by topo-scheduler");
  }
  std::string bytes;
  // The manifest's size is checked, not trusted, before it is known right.
  bytes.reserve(static_cast<size_t>(std::min<int64_t>(m.value().bytes, int64_t{256} << 20)));
  for (int64_t i = 0; i < m.value().chunks; ++i) {
    const std::string key = SnapshotChunkKey(options_.cluster, seq, i);
    Result<RangeResponse> c = log_client_->Range(KeyAlone(key));
    if (!c.ok()) return c.status();
    if (c.value().kvs.empty()) {
      return Unavailable("etcd key " + key +
                         " is missing (the snapshot was deleted while "
                         "loading it?); trying again");
    }
    const std::string& chunk = c.value().kvs.front().value;
    if (chunk.size() > kMaxPartBytes ||
        (i + 1 < m.value().chunks && chunk.size() != kMaxPartBytes)) {
      return Status::Error("etcd key " + key + " holds " + std::to_string(chunk.size()) +
                               " bytes, not a chunk of the snapshot its manifest describes; it is "
                               "written only by topo-scheduler",
                           core::ErrorCode::kConflict);
    }
    bytes += chunk;
  }
  if (static_cast<int64_t>(bytes.size()) != m.value().bytes ||
      store::Sha256Hex(bytes) != m.value().sha256) {
    return Status::Error("the snapshot at seq " + std::to_string(seq) +
                             " in etcd does not match its manifest (size or SHA-256); it is "
                             "written only by topo-scheduler",
                         core::ErrorCode::kConflict);
  }
  const std::string download = state_dir + "/topo.db.from-etcd";
  {
    std::error_code ec;
    std::filesystem::remove(download, ec);
    std::FILE* f = std::fopen(download.c_str(), "wbx");
    if (f == nullptr) return Status::Error("cannot create " + download);
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    if (std::fclose(f) != 0 || !ok) {
      std::filesystem::remove(download, ec);
      return Status::Error("cannot write " + download);
    }
  }
  const std::string db_path = state_dir + "/topo.db";
  store.reset();  // the restore replaces the file under it
  Result<store::BackupInfo> restored = store::RestoreStore(download, state_dir, /*force=*/true);
  std::error_code ec;
  std::filesystem::remove(download, ec);
  Result<store::Store> reopened = store::Store::Open(db_path);
  if (!reopened.ok()) return reopened.status();
  store.emplace(std::move(reopened).value());
  if (!restored.ok())
    return Status::Error("loading the snapshot at seq " + std::to_string(seq) + ": " +
                         restored.message());
  if (store->LastSeq() != seq) {
    return Status::Error("the snapshot at seq " + std::to_string(seq) + " loaded a store at seq " +
                             std::to_string(store->LastSeq()),
                         core::ErrorCode::kConflict);
  }
  return seq;
}

}  // namespace topo::ha
