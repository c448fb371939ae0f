#include "ha/records.hpp"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>

namespace topo::ha {

using core::Result;
using core::Status;
using nlohmann::json;

namespace {

std::string Padded(int64_t seq, int width) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%0*lld", width, static_cast<long long>(seq));
  return digits;
}

std::string Prefix(const std::string& cluster) { return "/toposched/" + cluster + "/"; }

Status Bad(std::string_view what, const std::string& why) {
  return Status::Error(std::string(what) + ": " + why + "; it is written only by topo-scheduler",
                       core::ErrorCode::kConflict);
}

// An integer field in [lo, hi]; the error names it.
Result<int64_t> Field(const json& j, const char* name, int64_t lo, int64_t hi,
                      std::string_view what) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_integer()) {
    return Bad(what, std::string(name) + " is missing or not an integer");
  }
  const int64_t v = it->get<int64_t>();
  if (it->is_number_unsigned() &&
      it->get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}) {
    return Bad(what, std::string(name) + " is out of range");
  }
  if (v < lo || v > hi) {
    return Bad(what, std::string(name) + " is " + std::to_string(v) + ", outside " +
                         std::to_string(lo) + ".." + std::to_string(hi));
  }
  return v;
}

constexpr int64_t kMaxSeq = std::numeric_limits<int64_t>::max() / 2;

}  // namespace

std::string SnapshotKey(const std::string& cluster, int64_t seq) {
  return Prefix(cluster) + "snapshot/" + Padded(seq, 20);
}

std::string SnapshotChunkKey(const std::string& cluster, int64_t seq, int64_t chunk) {
  return SnapshotKey(cluster, seq) + "/" + Padded(chunk, 6);
}

std::string AppliedKey(const std::string& cluster, const std::string& replica) {
  return Prefix(cluster) + "applied/" + replica;
}

std::string LogPartKey(const std::string& cluster, int64_t first_seq, int64_t part) {
  return Prefix(cluster) + "log/" + Padded(first_seq, 20) + "/" + Padded(part, 4);
}

std::string EpochPartKey(const std::string& cluster, int64_t from_seq, int64_t part) {
  return Prefix(cluster) + "topology/" + Padded(from_seq, 20) + "/" + Padded(part, 4);
}

std::optional<int64_t> SeqOfKey(std::string_view key, std::string_view prefix, std::string* rest) {
  if (key.size() < prefix.size() + 20 || key.substr(0, prefix.size()) != prefix) {
    return std::nullopt;
  }
  const std::string_view digits = key.substr(prefix.size(), 20);
  int64_t seq = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seq);
  if (ec != std::errc() || end != digits.data() + digits.size() || seq < 0) return std::nullopt;
  const std::string_view tail = key.substr(prefix.size() + 20);
  if (!tail.empty() && tail.front() != '/') return std::nullopt;
  if (rest != nullptr) *rest = tail.empty() ? std::string() : std::string(tail.substr(1));
  return seq;
}

std::string EncodeSnapshotManifest(const SnapshotManifest& m) {
  return json{{"term", m.term},        {"seq", m.seq},       {"chunks", m.chunks},
              {"bytes", m.bytes},      {"sha256", m.sha256}, {"schema_version", m.schema_version},
              {"format", "store-copy"}}
      .dump();
}

Result<SnapshotManifest> ParseSnapshotManifest(std::string_view text) {
  constexpr std::string_view what = "snapshot manifest";
  if (text.size() > 4096) return Bad(what, "longer than 4096 bytes");
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return Bad(what, "not a JSON object");
  auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != "store-copy") {
    return Bad(what, "format is not \"store-copy\"");
  }
  SnapshotManifest m;
  Result<int64_t> term = Field(j, "term", 1, kMaxSeq, what);
  if (!term.ok()) return term.status();
  Result<int64_t> seq = Field(j, "seq", 1, kMaxSeq, what);
  if (!seq.ok()) return seq.status();
  Result<int64_t> chunks = Field(j, "chunks", 1, 1000000, what);
  if (!chunks.ok()) return chunks.status();
  Result<int64_t> bytes =
      Field(j, "bytes", 1, chunks.value() * static_cast<int64_t>(kMaxPartBytes), what);
  if (!bytes.ok()) return bytes.status();
  if (bytes.value() <= (chunks.value() - 1) * static_cast<int64_t>(kMaxPartBytes)) {
    return Bad(what, "bytes " + std::to_string(bytes.value()) + " leaves a chunk empty");
  }
  Result<int64_t> version = Field(j, "schema_version", 1, 1000000, what);
  if (!version.ok()) return version.status();
  auto sha = j.find("sha256");
  if (sha == j.end() || !sha->is_string() || sha->get<std::string>().size() != 64 ||
      sha->get<std::string>().find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Bad(what, "sha256 is not 64 lowercase hex digits");
  }
  m.term = term.value();
  m.seq = seq.value();
  m.chunks = chunks.value();
  m.bytes = bytes.value();
  m.sha256 = sha->get<std::string>();
  m.schema_version = static_cast<int>(version.value());
  return m;
}

std::string EncodeBatchParts(const BatchParts& p) {
  return json{{"term", p.term},
              {"first_seq", p.first_seq},
              {"last_seq", p.last_seq},
              {"parts", p.parts},
              {"bytes", p.bytes}}
      .dump();
}

Result<std::optional<BatchParts>> ParseBatchParts(const json& j) {
  constexpr std::string_view what = "split batch header";
  if (!j.is_object() || !j.contains("parts")) return std::optional<BatchParts>();
  BatchParts p;
  Result<int64_t> term = Field(j, "term", 1, kMaxSeq, what);
  if (!term.ok()) return term.status();
  Result<int64_t> first = Field(j, "first_seq", 1, kMaxSeq, what);
  if (!first.ok()) return first.status();
  Result<int64_t> last = Field(j, "last_seq", first.value(), kMaxSeq, what);
  if (!last.ok()) return last.status();
  Result<int64_t> parts = Field(j, "parts", 2, kMaxBatchParts, what);
  if (!parts.ok()) return parts.status();
  Result<int64_t> bytes =
      Field(j, "bytes", 1, parts.value() * static_cast<int64_t>(kMaxPartBytes), what);
  if (!bytes.ok()) return bytes.status();
  p.term = term.value();
  p.first_seq = first.value();
  p.last_seq = last.value();
  p.parts = parts.value();
  p.bytes = bytes.value();
  return std::optional<BatchParts>(p);
}

Result<std::string> CompressJsonText(std::string_view text) {
  if (text.size() > kMaxJsonTextBytes) {
    return Status::Error("the JSON text is " + std::to_string(text.size()) + " bytes, above the " +
                         std::to_string(kMaxJsonTextBytes >> 20) +
                         " MiB one value may hold in etcd");
  }
  // Level 1: about as small as the default here, several times faster.
  uLongf size = compressBound(static_cast<uLong>(text.size()));
  std::string out(kCompressedMarker.size() + size, '\0');
  std::copy(kCompressedMarker.begin(), kCompressedMarker.end(), out.begin());
  const int rc = compress2(reinterpret_cast<Bytef*>(out.data() + kCompressedMarker.size()), &size,
                           reinterpret_cast<const Bytef*>(text.data()),
                           static_cast<uLong>(text.size()), Z_BEST_SPEED);
  if (rc != Z_OK)
    return Status::Error("zlib could not compress the value (" + std::to_string(rc) + ")");
  out.resize(kCompressedMarker.size() + size);
  return out;
}

Result<std::string> JsonText(std::string_view value) {
  if (!value.starts_with(kCompressedMarker)) return std::string(value);
  // Plain reasons: the caller names the key and who writes it.
  auto Bad = [](const std::string& why) {
    return Status::Error("compressed value: " + why, core::ErrorCode::kConflict);
  };
  value.remove_prefix(kCompressedMarker.size());
  z_stream z{};
  if (inflateInit(&z) != Z_OK) return Status::Error("zlib could not start inflating a value");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(value.data()));
  z.avail_in = static_cast<uInt>(value.size());
  if (z.avail_in != value.size()) {
    inflateEnd(&z);
    return Bad("larger than a value may be");
  }
  std::string text;
  char chunk[65536];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(chunk);
    z.avail_out = sizeof chunk;
    rc = inflate(&z, Z_NO_FLUSH);
    const size_t got = sizeof chunk - z.avail_out;
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&z);
      if (rc == Z_BUF_ERROR) return Bad("its zlib stream ends early");
      return Bad(std::string("not a zlib stream (") + (z.msg != nullptr ? z.msg : "error") + ")");
    }
    if (text.size() + got > kMaxJsonTextBytes) {
      inflateEnd(&z);
      return Bad("it inflates to more than the " + std::to_string(kMaxJsonTextBytes >> 20) +
                 " MiB a value may hold");
    }
    text.append(chunk, got);
  }
  const bool trailing = z.avail_in != 0;
  inflateEnd(&z);
  if (trailing) return Bad("bytes after its zlib stream's end");
  return text;
}

Result<int64_t> ParseAppliedSeq(std::string_view text) {
  int64_t seq = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seq);
  if (text.empty() || text.size() > 20 || ec != std::errc() || end != text.data() + text.size() ||
      seq < 0) {
    return Bad("applied seq", "'" + std::string(text.substr(0, 24)) + "' is not a decimal seq");
  }
  return seq;
}

}  // namespace topo::ha
