// What a store can lose without SQLite noticing, on real files: a
// write-ahead log cut short (a torn copy, a failing disk) is caught by the
// commit mark (commit_mark.hpp); a torn, missing or foreign mark is
// reported as such; a log with a gap, or a snapshot past its end, is refused
// by the replay, naming the seq.
//
// The WAL is the real one that store_crash_writer leaves when it stops
// without closing (as a crash does); each cut is applied to a copy of the
// state and judged against what SQLite itself recovers from the same bytes.

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "store/commit_mark.hpp"
#include "store/store.hpp"
#include "store_test_util.hpp"

using namespace topo;
using namespace topo::store;
using store::testing::MakeTestConfig;
using store::testing::MakeTestTopology;
using store::testing::TempDir;

namespace {

namespace fs = std::filesystem;

constexpr int64_t kWalHeader = 32;
constexpr int64_t kFrame = 24 + 4096;  // frame header + one page (SQLite's default size)

struct WriterOutput {
  int64_t opened_at = 0;  // "open SEQ"
  int64_t last_acked = 0;
  int acks = 0;
};

// Runs store_crash_writer until it has `batches` acknowledged batches; it
// then exits without closing the store, leaving its WAL as a crash would.
WriterOutput RunWriter(const std::string& db, int seed, int batches) {
  const std::string cmd = std::string(STORE_CRASH_WRITER) + " " + db + " " + std::to_string(seed) +
                          " " + std::to_string(batches);
  std::FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  REQUIRE(::pclose(p) == 0);
  WriterOutput w;
  std::istringstream lines(out);
  std::string word;
  while (lines >> word) {
    if (word == "open") lines >> w.opened_at;
    if (word == "ack") {
      int64_t first = 0;
      lines >> first >> w.last_acked;
      ++w.acks;
    }
  }
  REQUIRE(w.acks == batches);
  return w;
}

// What SQLite alone recovers from a store's files: its newest seq.
int64_t SqliteSeq(const std::string& db) {
  sqlite3* h = nullptr;
  int64_t seq = -1;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(h, "SELECT COALESCE(MAX(seq), 0) FROM events", -1, &st, nullptr) ==
            SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      seq = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(h);
  return seq;
}

void Exec(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err);
  const std::string message = err != nullptr ? err : "";
  sqlite3_free(err);
  sqlite3_close(h);
  REQUIRE_MESSAGE(rc == SQLITE_OK, message);
}

// The state files of `from` (DIR/state.db and what lies beside it) copied
// into `to`, the WAL cut to wal_bytes.
void CopyState(const std::string& from, const std::string& to, int64_t wal_bytes) {
  fs::create_directories(to);
  for (const char* tail : {"", ".mark", "-wal"}) {
    fs::copy_file(from + "/state.db" + tail, to + "/state.db" + tail,
                  fs::copy_options::overwrite_existing);
  }
  fs::resize_file(to + "/state.db-wal", static_cast<uintmax_t>(wal_bytes));
}

uint32_t BigEndian32(const std::string& b, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(b[at])) << 24 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 1])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 2])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 3]));
}

// The leading frames of a WAL that carry its header's salts (SQLite's
// format): a checkpoint that restarts the log writes new salts from the top.
int64_t WalFramesOfOneGeneration(const std::string& wal) {
  std::ifstream f(wal, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() < kWalHeader) return 0;
  int64_t n = 0;
  for (size_t at = kWalHeader; at + kFrame <= bytes.size(); at += kFrame, ++n) {
    if (BigEndian32(bytes, at + 8) != BigEndian32(bytes, 16) ||
        BigEndian32(bytes, at + 12) != BigEndian32(bytes, 20)) {
      break;
    }
  }
  return n;
}

internal::CommitMark ReadMark(const std::string& db) {
  core::Result<std::optional<internal::ReadMark>> r =
      internal::ReadCommitMark(internal::CommitMarkPath(db));
  REQUIRE_MESSAGE(r.ok(), r.message());
  REQUIRE(r.value().has_value());
  return r.value()->mark;
}

// A store with a few appended events, closed.
std::string SmallStore(const TempDir& dir, const std::string& name) {
  const core::Topology topo = MakeTestTopology();
  const std::string path = dir.File(name);
  Store store = Store::Open(path).value();
  core::SchedulerCore core(topo, MakeTestConfig(false));
  std::vector<LogEntry> batch;
  for (const core::TenantConfig& t : testing::TestTenants()) {
    core::Event e = core::TenantConfigured{t};
    batch.push_back({0, "admin", e, core.Step(e, 0)});
  }
  REQUIRE(store.Append(topo, batch).ok());
  REQUIRE(store.LastSeq() == 3);
  return path;
}

void Garble(const std::string& path, int64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(at);
  f.write("XXXX", 4);
}

}  // namespace

TEST_CASE("a WAL cut short is refused at every cut that lost acknowledged events") {
  TempDir dir;
  const std::string live = dir.path() + "/live";
  fs::create_directories(live);
  const std::string db = live + "/state.db";
  // The first run's events go into the database file when a store closes
  // (a checkpoint); the second run's stay in the WAL only.
  const WriterOutput first = RunWriter(db, 11, 15);
  { Store closed = Store::Open(db).value(); }
  // Closed cleanly, so all of it is in the database file; the next run
  // starts a new WAL (small enough that no checkpoint resets it meanwhile).
  fs::remove(db + "-wal");
  fs::remove(db + "-shm");
  const WriterOutput second = RunWriter(db, 12, 16);
  REQUIRE(second.opened_at == first.last_acked);
  const int64_t acked = second.last_acked;
  CHECK(ReadMark(db).seq == acked);  // the mark follows every acknowledgement

  // The untouched copy, for the job ids that were handed out.
  const std::string whole = dir.path() + "/whole";
  const int64_t wal = static_cast<int64_t>(fs::file_size(db + "-wal"));
  CopyState(live, whole, wal);
  JobId max_job = 0;
  {
    Store s = Store::Open(whole + "/state.db").value();
    CHECK(!s.accepted_loss());
    CHECK(s.LastSeq() == acked);
    max_job = s.MaxJobId().value();
  }
  REQUIRE(max_job > 0);

  const int64_t frames = (wal - kWalHeader) / kFrame;
  REQUIRE(frames >= 8);
  REQUIRE(wal == kWalHeader + frames * kFrame);
  CHECK(WalFramesOfOneGeneration(db + "-wal") == frames);  // no checkpoint restarted it
  const std::vector<int64_t> cuts = {0,
                                     kWalHeader,
                                     kWalHeader + kFrame * (frames / 2),         // frame boundary
                                     kWalHeader + kFrame * (frames / 2) + 1000,  // mid-frame
                                     wal / 2,
                                     wal - kFrame + 100,  // inside the last frame
                                     wal};
  const core::Topology topo = MakeTestTopology();
  int refused = 0;
  for (size_t i = 0; i < cuts.size(); ++i) {
    const int64_t cut = cuts[i];
    CAPTURE(cut);
    const std::string scratch = dir.path() + "/scratch" + std::to_string(i);
    const std::string copy = dir.path() + "/cut" + std::to_string(i);
    CopyState(live, scratch, cut);
    CopyState(live, copy, cut);
    const int64_t left = SqliteSeq(scratch + "/state.db");
    REQUIRE(left >= first.last_acked);
    REQUIRE(left <= acked);
    const std::string path = copy + "/state.db";
    core::Result<Store> opened = Store::Open(path);
    if (left == acked) {
      // Nothing acknowledged is missing: an ordinary start.
      REQUIRE_MESSAGE(opened.ok(), opened.message());
      CHECK(!opened.value().accepted_loss());
      continue;
    }
    ++refused;
    REQUIRE(!opened.ok());
    const std::string& m = opened.message();
    CHECK_MESSAGE(m.find("its log ends at seq " + std::to_string(left) + ",") != std::string::npos,
                  m);
    CHECK_MESSAGE(
        m.find("says seq " + std::to_string(acked) + " was committed") != std::string::npos, m);
    CHECK_MESSAGE(m.find("--accept-data-loss") != std::string::npos, m);
    // Refused before the migrations and the mark: both as they were.
    CHECK(ReadMark(path).seq == acked);

    OpenOptions accept;
    accept.accept_data_loss = true;
    {
      core::Result<Store> taken = Store::Open(path, accept);
      REQUIRE_MESSAGE(taken.ok(), taken.message());
      Store& s = taken.value();
      REQUIRE(s.accepted_loss().has_value());
      CHECK(s.accepted_loss()->store_seq == left);
      CHECK(s.accepted_loss()->mark_seq == acked);
      const std::string lost =
          (left + 1 == acked ? "event " : "events " + std::to_string(left + 1) + "..") +
          std::to_string(acked);
      CHECK_MESSAGE(s.accepted_loss()->message.find(lost) != std::string::npos,
                    s.accepted_loss()->message);
      CHECK(s.LastSeq() == left);
      // The lost jobs' ids are not handed out again.
      CHECK(s.MaxJobId().value() == max_job);
      core::SchedulerCore core(topo, MakeTestConfig(false));
      core::Result<ReplayReport> r = s.Replay(core);
      REQUIRE_MESSAGE(r.ok(), r.message());
      CHECK(r.value().diverged == 0);
      std::vector<AuditRow> audit = s.ListAudit(0, 100).value();
      REQUIRE(!audit.empty());
      CHECK(audit.back().action == "store.data_loss_accepted");
      CHECK(audit.back().detail.find("\"mark_seq\":" + std::to_string(acked)) != std::string::npos);
    }
    // The mark now fits the store: the next start is ordinary, and ids
    // still continue after the lost ones.
    CHECK(ReadMark(path).seq == left);
    core::Result<Store> again = Store::Open(path);
    REQUIRE_MESSAGE(again.ok(), again.message());
    CHECK(!again.value().accepted_loss());
    CHECK(again.value().MaxJobId().value() == max_job);
  }
  // Cut at 0, at the header, at a frame boundary, mid-frame and in the last
  // frame: each lost at least the last batch.
  MESSAGE(refused << " of " << cuts.size() << " cuts of a " << frames << "-frame WAL lost events "
                  << "up to seq " << acked << " and were refused");
  CHECK(refused >= 5);
}

TEST_CASE("a mark behind its store is a crash between commit and mark, not a loss") {
  TempDir dir;
  const std::string path = SmallStore(dir, "s.db");
  const internal::CommitMark mark = ReadMark(path);
  CHECK(mark.seq == 3);
  internal::CommitMark older = mark;
  older.seq = 1;
  REQUIRE(internal::ResetCommitMark(internal::CommitMarkPath(path), older).ok());
  core::Result<Store> opened = Store::Open(path);
  REQUIRE_MESSAGE(opened.ok(), opened.message());
  CHECK(!opened.value().accepted_loss());
  CHECK(ReadMark(path).seq == 3);  // raised to the store
}

TEST_CASE("a torn mark: one bad slot is repaired, two are refused as damaged") {
  TempDir dir;
  const std::string path = SmallStore(dir, "s.db");
  const std::string mark_path = internal::CommitMarkPath(path);
  // After creation (both slots) and one Append (one slot), slot 0 and 1 hold
  // seq 0 and 3 in some order; tear the newest.
  core::Result<std::optional<internal::ReadMark>> before = internal::ReadCommitMark(mark_path);
  REQUIRE(before.ok());
  REQUIRE(before.value()->both_valid);
  Garble(mark_path, before.value()->newest_slot * internal::kMarkSlotBytes + 30);
  core::Result<std::optional<internal::ReadMark>> torn = internal::ReadCommitMark(mark_path);
  REQUIRE(torn.ok());
  CHECK(!torn.value()->both_valid);
  CHECK(torn.value()->mark.seq == 0);  // the older record, behind the store: fine
  {
    core::Result<Store> opened = Store::Open(path);
    REQUIRE_MESSAGE(opened.ok(), opened.message());
    CHECK(!opened.value().accepted_loss());
  }
  core::Result<std::optional<internal::ReadMark>> repaired = internal::ReadCommitMark(mark_path);
  REQUIRE(repaired.ok());
  CHECK(repaired.value()->both_valid);
  CHECK(repaired.value()->mark.seq == 3);

  // Both slots torn, or the file cut short: nothing says what was committed.
  for (int way = 0; way < 2; ++way) {
    CAPTURE(way);
    if (way == 0) {
      Garble(mark_path, 30);
      Garble(mark_path, internal::kMarkSlotBytes + 30);
    } else {
      fs::resize_file(mark_path, 40);
    }
    core::Result<Store> refused = Store::Open(path);
    REQUIRE(!refused.ok());
    CHECK_MESSAGE(refused.message().find("commit mark is damaged") != std::string::npos,
                  refused.message());
    CHECK(refused.message().find("holds no valid record") != std::string::npos);
    CHECK(refused.message().find("--accept-data-loss") != std::string::npos);
    OpenOptions accept;
    accept.accept_data_loss = true;
    {
      core::Result<Store> taken = Store::Open(path, accept);
      REQUIRE_MESSAGE(taken.ok(), taken.message());
      REQUIRE(taken.value().accepted_loss());
      CHECK(taken.value().accepted_loss()->mark_seq == -1);
    }
    CHECK(ReadMark(path).seq == 3);
    CHECK(Store::Open(path).ok());
  }
}

TEST_CASE(
    "a missing mark is refused for a store that had one, and made for one from before marks") {
  TempDir dir;
  const std::string path = SmallStore(dir, "s.db");
  fs::remove(internal::CommitMarkPath(path));
  core::Result<Store> refused = Store::Open(path);
  REQUIRE(!refused.ok());
  CHECK_MESSAGE(refused.message().find("is missing, but this store") != std::string::npos,
                refused.message());
  CHECK(refused.message().find("--accept-data-loss") != std::string::npos);
  CHECK(!fs::exists(internal::CommitMarkPath(path)));  // refused: nothing written

  // A store written before commit marks existed: no id, no mark.
  Exec(path, "DELETE FROM meta WHERE key = 'store_id'");
  {
    core::Result<Store> opened = Store::Open(path);
    REQUIRE_MESSAGE(opened.ok(), opened.message());
    CHECK(!opened.value().accepted_loss());
    CHECK(opened.value().GetMeta("store_id").value().has_value());
  }
  CHECK(ReadMark(path).seq == 3);
}

TEST_CASE("hostile mark files: every slot that is not exactly a record is no record") {
  TempDir dir;
  const std::string path = dir.File("m.mark");
  // A line with a correct checksum, so only the reader's own checks stand.
  auto slot = [](const std::string& body) {
    std::string line = body + " sum=" + Sha256Hex(body).substr(0, 16) + "\n";
    line.resize(internal::kMarkSlotBytes, '\n');
    return line;
  };
  auto write = [&](const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << bytes;
  };
  const std::string ok = "toposched-commit-mark 1 store=ab seq=5 job=2";
  write(slot(ok) + slot(ok));
  core::Result<std::optional<internal::ReadMark>> good = internal::ReadCommitMark(path);
  REQUIRE_MESSAGE(good.ok(), good.message());
  CHECK(good.value()->mark == internal::CommitMark{"ab", 5, 2});
  const std::vector<std::string> hostile = {
      "toposched-commit-mark 1 store=ab seq=-5 job=2",
      "toposched-commit-mark 1 store=ab seq=5x job=2",
      "toposched-commit-mark 1 store=ab seq=99999999999999999999 job=2",
      "toposched-commit-mark 1 store=ab seq= job=2",
      "toposched-commit-mark 1 store=ab seq=5",
      "toposched-commit-mark 1 store=ab seq=5 job=2 more=1",
      "toposched-commit-mark 1 seq=5 store=ab job=2",
      "toposched-commit-mark 2 store=ab seq=5 job=2",
      "toposched-commit-mark 1 store=" + std::string(65, 'a') + " seq=5 job=2",
      ok + std::string(1, '\0'),
      std::string(200, '\0'),
      "",
  };
  for (const std::string& body : hostile) {
    CAPTURE(body);
    write(slot(body) + slot(body));
    core::Result<std::optional<internal::ReadMark>> r = internal::ReadCommitMark(path);
    CHECK(!r.ok());
  }
  // Two valid records of different stores; a slot without its newline; a
  // file that is a directory or a link.
  write(slot(ok) + slot("toposched-commit-mark 1 store=cd seq=6 job=2"));
  CHECK(internal::ReadCommitMark(path).message().find("two different stores") != std::string::npos);
  write(std::string(2 * internal::kMarkSlotBytes, 'x'));
  CHECK(!internal::ReadCommitMark(path).ok());
  fs::remove(path);
  fs::create_directory(path);
  CHECK(!internal::ReadCommitMark(path).ok());
  fs::remove(path);
  write(slot(ok) + slot(ok));
  fs::create_symlink(path, path + ".link");
  CHECK(!internal::ReadCommitMark(path + ".link").ok());
  // One hostile slot beside a good one: the good one is read.
  write(slot(ok) + std::string(internal::kMarkSlotBytes, '\0'));
  REQUIRE(internal::ReadCommitMark(path).ok());
  CHECK(!internal::ReadCommitMark(path).value()->both_valid);
}

TEST_CASE("another store's mark is refused, naming both ids") {
  TempDir dir;
  const std::string a = SmallStore(dir, "a.db");
  const std::string b = SmallStore(dir, "b.db");
  fs::copy_file(internal::CommitMarkPath(b), internal::CommitMarkPath(a),
                fs::copy_options::overwrite_existing);
  core::Result<Store> refused = Store::Open(a);
  REQUIRE(!refused.ok());
  CHECK_MESSAGE(refused.message().find("belongs to another store (id " + ReadMark(b).store_id) !=
                    std::string::npos,
                refused.message());
  OpenOptions accept;
  accept.accept_data_loss = true;
  REQUIRE(Store::Open(a, accept).ok());
  CHECK(ReadMark(a).store_id != ReadMark(b).store_id);
  CHECK(Store::Open(a).ok());
}

TEST_CASE("replay refuses a log with a gap, or a snapshot past the log's end, naming the seq") {
  TempDir dir;
  const core::Topology topo = MakeTestTopology();
  const std::string path = dir.File("s.db");
  {
    Store store = Store::Open(path).value();
    core::SchedulerCore core(topo, MakeTestConfig(false));
    testing::Workload workload(topo, 5, 1, false);
    core::TimeMs now = 0;
    for (int i = 0; i < 12; ++i) {
      core::Event e = workload.Next(core, now);
      std::vector<LogEntry> batch = {{now, "test", e, core.Step(e, now)}};
      REQUIRE(store.Append(topo, batch).ok());
      if (i == 5) {
        core.TakeFinishedJobs();
        REQUIRE(store
                    .WriteSnapshot(static_cast<int>(core::SchedulerCore::kSnapshotVersion),
                                   core.Snapshot(), 1)
                    .ok());
      }
    }
  }
  Exec(path, "DELETE FROM events WHERE seq IN (9, 10)");
  Store store = Store::Open(path).value();
  core::SchedulerCore full(topo, MakeTestConfig(false));
  core::Result<ReplayReport> r = store.Replay(full);
  REQUIRE(!r.ok());
  CHECK_MESSAGE(r.message().find("seq 8 is followed by seq 11, so events 9..10 are missing") !=
                    std::string::npos,
                r.message());
  const SnapshotRow snap = store.Snapshots().value().front();
  REQUIRE(snap.seq == 6);
  core::SchedulerCore restored(topo, MakeTestConfig(false));
  REQUIRE(restored.Restore(snap.state).ok());
  r = store.ReplayAfter(restored, snap.seq);
  REQUIRE(!r.ok());
  CHECK(r.message().find("events 9..10 are missing") != std::string::npos);

  // The first event after the snapshot gone.
  Exec(path, "DELETE FROM events WHERE seq = 7");
  core::SchedulerCore again(topo, MakeTestConfig(false));
  REQUIRE(again.Restore(snap.state).ok());
  r = store.ReplayAfter(again, snap.seq);
  REQUIRE(!r.ok());
  CHECK_MESSAGE(r.message().find("the snapshot at seq 6 is followed by seq 8, so event 7 is "
                                 "missing") != std::string::npos,
                r.message());

  // Every event after the snapshot gone: the snapshot is past the log.
  Exec(path, "DELETE FROM events WHERE seq > 5");
  core::SchedulerCore past(topo, MakeTestConfig(false));
  REQUIRE(past.Restore(snap.state).ok());
  r = store.ReplayAfter(past, snap.seq);
  REQUIRE(!r.ok());
  CHECK_MESSAGE(
      r.message().find("the log ends at seq 5, before the snapshot's seq 6") != std::string::npos,
      r.message());
}
