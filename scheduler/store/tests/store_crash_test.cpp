// Crash safety with real processes: store_crash_writer appends batches and
// prints the seqs of each acknowledged one; it is killed with SIGKILL at
// seeded random moments (while opening, replaying, writing, fsyncing), and
// after every kill the file must open cleanly, pass SQLite's integrity check,
// hold every acknowledged event exactly once, hold at most the one batch
// that was committed but not yet acknowledged beyond them, have a commit
// mark between the last acknowledged seq and the log's end, and replay
// without divergence.
//
// A SIGKILL tests atomicity and recovery of the WAL, not the fsync itself
// (the kernel keeps the dirty pages); power loss is covered by
// synchronous=FULL, as SQLite documents.

#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <sstream>

#include "store/commit_mark.hpp"
#include "store/store.hpp"
#include "store_test_util.hpp"

using namespace topo;
using namespace topo::store;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kMaxBatch = 8;  // store_crash_writer's largest batch

// SQLite's own check of what the crash left (a killed writer may also not
// have created the file yet).
std::string IntegrityCheck(const std::string& path) {
  if (!std::filesystem::exists(path)) return "ok";
  sqlite3* db = nullptr;
  std::string result = "cannot open";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      result = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return result;
}

// The newest seq SQLite itself finds in the file.
int64_t SqliteLastSeq(const std::string& path) {
  sqlite3* db = nullptr;
  int64_t seq = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT COALESCE(MAX(seq), 0) FROM events", -1, &st, nullptr) ==
            SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      seq = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return seq;
}

struct WriterRun {
  std::string output;  // what the writer printed before it died
  bool killed = false;
};

// Starts the writer, kills it when `kill_after` has passed since its spawn
// (or since it printed "open", when after_open), and returns its output.
WriterRun RunAndKill(const std::string& db, uint64_t seed, std::chrono::milliseconds kill_after,
                     bool after_open) {
  WriterRun run;
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const std::string seed_text = std::to_string(seed);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execl(STORE_CRASH_WRITER, "store_crash_writer", db.c_str(), seed_text.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(10);
  Clock::time_point deadline = after_open ? give_up : Clock::now() + kill_after;
  bool opened = false;
  char buf[4096];
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline || now >= give_up) break;
    pollfd p{fds[0], POLLIN, 0};
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    if (poll(&p, 1, static_cast<int>(wait.count()) + 1) <= 0) continue;
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;  // the writer exited by itself
    run.output.append(buf, static_cast<size_t>(n));
    if (after_open && !opened && run.output.find("open ") != std::string::npos) {
      opened = true;
      deadline = Clock::now() + kill_after;
    }
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  run.killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  // Lines written before the kill are still in the pipe.
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    run.output.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  return run;
}

}  // namespace

TEST_CASE("SIGKILL at random moments loses no acknowledged event and doubles none") {
  signal(SIGPIPE, SIG_IGN);
  testing::TempDir dir;
  const std::string path = dir.File("state.db");
  const core::Topology topo = testing::MakeTestTopology();
  core::Rng rng(20240611);
  int64_t max_acked = 0;
  int64_t previous_last_seq = 0;  // what the file held after the previous kill
  int rounds_with_acks = 0;
  const Clock::time_point start = Clock::now();
  constexpr int kKills = 24;
  for (int round = 0; round < kKills; ++round) {
    CAPTURE(round);
    // Every third round: anywhere from the spawn (opening, migrating,
    // replaying); the others: while it appends.
    const bool after_open = round % 3 != 0;
    const auto delay =
        std::chrono::milliseconds(after_open ? rng.Range(0, 100) : rng.Range(0, 150));
    WriterRun run = RunAndKill(path, rng.Next(), delay, after_open);
    CHECK(run.killed);

    // Acknowledged batches: contiguous, continuing the log.
    std::istringstream lines(run.output);
    std::string word;
    int64_t first = 0, last = 0;
    int64_t written_from = previous_last_seq;  // events of this round come after this
    int acks = 0;
    while (lines >> word) {
      if (word == "open") {
        int64_t from = 0;
        lines >> from;
        CHECK(from == previous_last_seq);  // it found exactly what the last check saw
      } else if (word == "ack") {
        lines >> first >> last;
        CHECK(first <= last);
        CHECK(first > max_acked);
        max_acked = last;
        written_from = last;
        ++acks;
      }
    }
    if (acks > 0) ++rounds_with_acks;

    REQUIRE(IntegrityCheck(path) == "ok");
    // The commit mark never runs ahead of the log and never lags what was
    // acknowledged (a kill between a commit and its mark leaves it behind
    // by that one unacknowledged batch).
    core::Result<std::optional<internal::ReadMark>> mark =
        internal::ReadCommitMark(internal::CommitMarkPath(path));
    REQUIRE_MESSAGE(mark.ok(), mark.message());
    if (mark.value()) {
      CHECK(mark.value()->mark.seq >= max_acked);
      CHECK(mark.value()->mark.seq <= SqliteLastSeq(path));
    } else {
      CHECK(max_acked == 0);  // killed before its first open created it
    }
    core::Result<Store> opened = Store::Open(path);
    REQUIRE_MESSAGE(opened.ok(), opened.message());
    Store store = std::move(opened).value();
    CHECK(store.LastSeq() >= max_acked);
    // Beyond this round's last acknowledgement: at most the one batch that
    // was committed but not yet acknowledged when the kill came.
    CHECK(store.LastSeq() - written_from <= kMaxBatch);
    previous_last_seq = store.LastSeq();

    int64_t expected_seq = 1;
    int64_t submitted = 0;
    std::set<JobId> job_ids;
    core::Status read = store.ReadEvents(1, topo, [&](const StoredEvent& e) {
      CHECK(e.seq == expected_seq);  // every seq once, none missing
      ++expected_seq;
      if (const auto* s = std::get_if<core::JobSubmitted>(&e.entry.event)) {
        ++submitted;
        CHECK(job_ids.insert(s->id).second);  // every submission exactly once
      }
      return core::Status::Ok();
    });
    REQUIRE_MESSAGE(read.ok(), read.message());
    CHECK(expected_seq - 1 == store.LastSeq());
    JobQuery all;
    all.limit = 1 << 30;
    CHECK(static_cast<int64_t>(store.ListJobs(all).value().size()) == submitted);

    core::SchedulerCore core(topo, testing::MakeTestConfig(false));
    core::Result<ReplayReport> replay = store.Replay(core);
    REQUIRE_MESSAGE(replay.ok(), replay.message());
    CHECK(replay.value().diverged == 0);
    CHECK(static_cast<int64_t>(core.jobs().size()) == submitted);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  MESSAGE(kKills << " kills, " << rounds_with_acks << " of them after acknowledged batches, "
                 << max_acked << " events acknowledged, " << seconds << " s");
  CHECK(rounds_with_acks >= kKills / 3);
  CHECK(max_acked > 0);
}
