#pragma once
// The commit mark: a small file beside the store (PATH.mark, e.g.
// STATE_DIR/topo.db.mark) holding the seq of the newest committed event.
// SQLite cannot tell a write-ahead log that ends early (a torn copy, a
// failing disk) from one that ends where it should: it replays the frames
// up to the first bad one and opens. A store whose log ends before its mark
// has lost acknowledged events, and Store::Open refuses it
// (docs/store.md, The commit mark).
//
// Ordering. Append commits (SQLite fsyncs the WAL), then writes the mark and
// fdatasyncs it, then returns Ok, so the mark never runs ahead of the log:
//   crash before the commit       store == mark (the batch was not acked)
//   crash between commit and mark store > mark: not a loss; Open raises it
//   crash during the mark's write the other slot still holds the previous
//                                 mark, which is <= the store
// and whatever was acknowledged is <= the mark on disk.
//
// Format: 8192 bytes, two 4096-byte slots. Each slot is one text line,
//   toposched-commit-mark 1 store=<id> seq=<n> job=<n> sum=<16 hex>\n
// padded with '\n'; sum is the first 16 hex digits of the SHA-256 of the
// line before " sum=". A write goes to the slot that does not hold the
// newest record, in place (no new blocks: it works on a full disk), so a
// torn write leaves the other slot whole; a file with no valid slot is
// damaged and reported as such. `store` pairs the mark with its store (meta
// "store_id"); `job` is the largest job id ever committed, so the ids of
// lost jobs are not handed out again after an accepted loss.
//
// Thread safety: none; the store's owner writes it.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "topo/core/status.hpp"

namespace topo::store::internal {

struct CommitMark {
  std::string store_id;    // meta "store_id" of the store it belongs to
  int64_t seq = 0;         // the newest committed event
  int64_t max_job_id = 0;  // the largest job id ever committed
  bool operator==(const CommitMark&) const = default;
};

struct ReadMark {
  CommitMark mark;      // the newest valid record
  int newest_slot = 0;  // the slot holding it (0 or 1)
  bool both_valid = false;
};

inline constexpr int kMarkSlotBytes = 4096;

// PATH.mark for the store at db_path.
std::string CommitMarkPath(const std::string& db_path);

// A new random store id (32 hex digits).
std::string NewStoreId();

// The mark at path: nullopt when the file does not exist; an error naming
// the file and what is wrong when it exists but holds no valid record (or
// two valid records of different stores).
core::Result<std::optional<ReadMark>> ReadCommitMark(const std::string& path);

// Replaces the file at path with a new mark whose two slots both hold
// `mark`: written to PATH.tmp (mode 0600), fsync'd, renamed over path, and
// the directory fsync'd, so a crash leaves the old file or the new one.
core::Status ResetCommitMark(const std::string& path, const CommitMark& mark);

// The mark the store keeps open and writes after every commit.
class CommitMarkWriter {
 public:
  // Opens the existing mark file at path for writing in place; the first
  // Write goes to the slot after newest_slot.
  static core::Result<CommitMarkWriter> Open(const std::string& path, int newest_slot);
  CommitMarkWriter(CommitMarkWriter&& other) noexcept;
  CommitMarkWriter& operator=(CommitMarkWriter&& other) noexcept;
  CommitMarkWriter(const CommitMarkWriter&) = delete;
  CommitMarkWriter& operator=(const CommitMarkWriter&) = delete;
  ~CommitMarkWriter();

  // Writes `mark` into the older slot and fdatasyncs the file. An error
  // (naming the file) leaves the other slot's record in place.
  core::Status Write(const CommitMark& mark);
  const std::string& path() const { return path_; }

 private:
  CommitMarkWriter(std::string path, int fd, int next_slot)
      : path_(std::move(path)), fd_(fd), next_slot_(next_slot) {}
  std::string path_;
  int fd_ = -1;
  int next_slot_ = 0;
};

}  // namespace topo::store::internal
