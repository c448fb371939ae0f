#pragma once
// The values topo-scheduler keeps in etcd beside the log's batches (docs/ha.md,
// Keys in etcd), as typed records with one writer and one validating reader
// each, and the key layout they live under. No I/O.
//
//   snapshot/<seq>            SnapshotManifest (written last, after its chunks)
//   snapshot/<seq>/<i>        chunk i of the store copy (6 digits, 0-based)
//   applied/<replica>         a standby's applied seq, decimal, on its own lease
//   log/<first_seq>           a batch, or a BatchParts header of a split batch
//   log/<first_seq>/<i>       part i of a split batch's JSON text (4 digits)
//   topology/<seq>/<i>        part i of a split topology epoch, the same way
//
// Seqs are 20 digits, zero-padded, so a range read returns keys in seq order
// and a key's chunks or parts sort after it and before the next seq's key.
//
// Readers refuse, with a message naming the field, anything a topo-scheduler
// would not have written: they read what another process put in etcd.
//
// Thread safety: pure functions.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "topo/core/status.hpp"

namespace topo::ha {

// The largest part of a split batch and the largest snapshot chunk: each
// sits in one etcd value, well inside etcd's default 1.5 MiB request.
inline constexpr size_t kMaxPartBytes = 1u << 20;
// The most parts one split batch may have: they go in ONE txn, and etcd
// refuses a txn of more than --max-txn-ops (128) operations.
inline constexpr int64_t kMaxBatchParts = 100;
// The snapshots kept in etcd (the newest two, like the store's).
inline constexpr int kKeptEtcdSnapshots = 2;

std::string SnapshotKey(const std::string& cluster, int64_t seq);
std::string SnapshotChunkKey(const std::string& cluster, int64_t seq, int64_t chunk);
std::string AppliedKey(const std::string& cluster, const std::string& replica);
std::string LogPartKey(const std::string& cluster, int64_t first_seq, int64_t part);
// topology/<from_seq>/<i>: part i of a split topology epoch (4 digits).
std::string EpochPartKey(const std::string& cluster, int64_t from_seq, int64_t part);

// The seq of a key `<prefix><20 digits>` (exactly: `rest` is empty) or
// `<prefix><20 digits>/<anything>` (`rest` gets what follows the slash);
// nullopt for any other key.
std::optional<int64_t> SeqOfKey(std::string_view key, std::string_view prefix,
                                std::string* rest = nullptr);

// A snapshot in etcd: a consistent copy of the leader's store (its SQLite
// file, like one `topo-scheduler backup` writes) whose newest event is `seq`,
// in `chunks` values of at most kMaxPartBytes.
struct SnapshotManifest {
  int64_t term = 0;        // the leader term that wrote it
  int64_t seq = 0;         // the copy's newest event: follow the log from seq + 1
  int64_t chunks = 0;      // 1..1,000,000
  int64_t bytes = 0;       // the file's size: 1..chunks x kMaxPartBytes
  std::string sha256;      // of the whole file, 64 lowercase hex digits
  int schema_version = 0;  // the store's schema version
  bool operator==(const SnapshotManifest&) const = default;
};
std::string EncodeSnapshotManifest(const SnapshotManifest& m);
core::Result<SnapshotManifest> ParseSnapshotManifest(std::string_view text);

// The header a split batch leaves at log/<first_seq>: the batch's JSON text
// (EncodeBatch's) is the concatenation of `parts` values at
// log/<first_seq>/<i>, `bytes` long in all, written in the same txn. A split
// topology epoch leaves the same header at topology/<from_seq>, with
// first_seq = last_seq = from_seq.
struct BatchParts {
  int64_t term = 0;
  int64_t first_seq = 0;
  int64_t last_seq = 0;
  int64_t parts = 0;  // 2..kMaxBatchParts
  int64_t bytes = 0;  // 1..parts x kMaxPartBytes
  bool operator==(const BatchParts&) const = default;
};
std::string EncodeBatchParts(const BatchParts& p);
// nullopt when `j` is an ordinary batch (an object without "parts") rather
// than a header; an error when it has "parts" but is not a valid header.
core::Result<std::optional<BatchParts>> ParseBatchParts(const nlohmann::json& j);

// A log batch's value (or a split batch's joined parts) and the auth value
// are their JSON text compressed with zlib, after kCompressedMarker, which
// no JSON text begins with: their JSON repeats its keys and compresses
// several times over, and
// etcd's time per append grows with the bytes it replicates and fsyncs on
// every member. A value without the marker is the JSON text itself (what
// earlier releases wrote, and the topology epochs).
inline constexpr std::string_view kCompressedMarker{"\0zlib", 5};
// The largest JSON text one value may have, compressed or not (what a split
// batch of kMaxBatchParts parts could hold before values were compressed):
// a reader inflates no more than this.
inline constexpr size_t kMaxJsonTextBytes = static_cast<size_t>(kMaxBatchParts) * kMaxPartBytes;
// The marker and the zlib stream of `text`; an error when text is longer
// than kMaxJsonTextBytes.
core::Result<std::string> CompressJsonText(std::string_view text);
// The JSON text a value holds: the value itself without the marker, else
// the stream after it, inflated. Errors: a stream zlib refuses, one that
// ends early or has bytes after its end, or more than kMaxJsonTextBytes
// once inflated (the reader stops there).
core::Result<std::string> JsonText(std::string_view value);

// applied/<replica>'s value: a seq, decimal, >= 0.
core::Result<int64_t> ParseAppliedSeq(std::string_view text);

}  // namespace topo::ha
