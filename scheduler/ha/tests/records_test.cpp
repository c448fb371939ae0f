// The records kept in etcd beside the log (records.hpp): key layout, and
// each reader against what its writer makes and against what it must refuse.

#include "ha/records.hpp"

#include <doctest/doctest.h>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include "ha/leadership.hpp"

namespace topo::ha {
namespace {

using nlohmann::json;

SnapshotManifest AManifest() {
  SnapshotManifest m;
  m.term = 7;
  m.seq = 1200;
  m.chunks = 3;
  m.bytes = 2 * static_cast<int64_t>(kMaxPartBytes) + 5;
  m.sha256 = std::string(64, 'a');
  m.schema_version = 9;
  return m;
}

TEST_CASE("snapshot keys: the manifest, then its chunks, all before the next seq's") {
  CHECK(SnapshotKey("p", 42) == "/toposched/p/snapshot/00000000000000000042");
  CHECK(SnapshotChunkKey("p", 42, 3) == "/toposched/p/snapshot/00000000000000000042/000003");
  CHECK(SnapshotKey("p", 42) < SnapshotChunkKey("p", 42, 0));
  CHECK(SnapshotChunkKey("p", 42, 999999) < SnapshotKey("p", 43));
  CHECK(SnapshotChunkKey("p", 49, 0) < SnapshotKey("p", 50));
  CHECK(AppliedKey("p", "b") == "/toposched/p/applied/b");
  // A split batch's parts sort after its header and before the next batch.
  CHECK(LogPartKey("p", 19, 0) == LogKey("p", 19) + "/0000");
  CHECK(LogKey("p", 19) < LogPartKey("p", 19, 0));
  CHECK(LogPartKey("p", 19, 99) < LogKey("p", 20));
}

TEST_CASE("SeqOfKey reads a padded seq and what follows its slash, nothing else") {
  const std::string prefix = "/toposched/p/log/";
  std::string rest = "x";
  CHECK(SeqOfKey(LogKey("p", 42), prefix, &rest) == 42);
  CHECK(rest.empty());
  CHECK(SeqOfKey(LogPartKey("p", 42, 7), prefix, &rest) == 42);
  CHECK(rest == "0007");
  CHECK_FALSE(SeqOfKey("/toposched/p/log/42", prefix));
  CHECK_FALSE(SeqOfKey(LogKey("p", 42) + "x", prefix));
  CHECK_FALSE(SeqOfKey(EpochKey("p", 42), prefix));
  CHECK_FALSE(SeqOfKey("/toposched/p/log/-0000000000000000042", prefix));
  CHECK_FALSE(SeqOfKey("/toposched/p/log/0000000000000000004a", prefix));
}

TEST_CASE("a snapshot manifest reads back as written") {
  const SnapshotManifest m = AManifest();
  auto back = ParseSnapshotManifest(EncodeSnapshotManifest(m));
  REQUIRE(back.ok());
  CHECK(back.value() == m);
}

TEST_CASE("a snapshot manifest that topo-scheduler would not write is refused by field") {
  const json good = json::parse(EncodeSnapshotManifest(AManifest()));
  auto refused = [&](const std::string& field, const json& value, const std::string& want) {
    json j = good;
    if (value.is_null()) {
      j.erase(field);
    } else {
      j[field] = value;
    }
    auto r = ParseSnapshotManifest(j.dump());
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().find(want) != std::string::npos);
  };
  refused("format", "sqlite", "format is not \"store-copy\"");
  refused("seq", nullptr, "seq is missing or not an integer");
  refused("seq", 0, "seq is 0, outside 1..");
  refused("seq", "12", "seq is missing or not an integer");
  refused("chunks", 0, "chunks is 0");
  refused("chunks", 2000000, "chunks is 2000000");
  refused("bytes", 3 * static_cast<int64_t>(kMaxPartBytes) + 1, "bytes is");
  refused("bytes", 100, "leaves a chunk empty");
  refused("sha256", "ABC", "sha256 is not 64 lowercase hex digits");
  refused("sha256", std::string(64, 'G'), "sha256 is not 64 lowercase hex digits");
  refused("term", -1, "term is -1");
  refused("term", json(18446744073709551615ull), "term is out of range");
  CHECK_FALSE(ParseSnapshotManifest("[1]").ok());
  CHECK_FALSE(ParseSnapshotManifest("not json").ok());
  CHECK_FALSE(ParseSnapshotManifest(std::string(5000, ' ')).ok());
}

TEST_CASE("a split batch header reads back, an ordinary batch is not one") {
  BatchParts p{3, 41, 1040, 4, 3 * static_cast<int64_t>(kMaxPartBytes) + 1};
  auto back = ParseBatchParts(json::parse(EncodeBatchParts(p)));
  REQUIRE(back.ok());
  REQUIRE(back.value().has_value());
  CHECK(*back.value() == p);
  auto plain = ParseBatchParts(json{{"term", 3}, {"first_seq", 41}, {"entries", json::array()}});
  REQUIRE(plain.ok());
  CHECK_FALSE(plain.value().has_value());
  json bad = json::parse(EncodeBatchParts(p));
  bad["parts"] = 1;  // one part is an ordinary batch
  CHECK(ParseBatchParts(bad).message().find("parts is 1") != std::string::npos);
  bad["parts"] = kMaxBatchParts + 1;
  CHECK_FALSE(ParseBatchParts(bad).ok());
  bad = json::parse(EncodeBatchParts(p));
  bad["last_seq"] = 40;  // ends before it starts
  CHECK(ParseBatchParts(bad).message().find("last_seq is 40") != std::string::npos);
  bad = json::parse(EncodeBatchParts(p));
  bad["bytes"] = 4 * static_cast<int64_t>(kMaxPartBytes) + 1;
  CHECK_FALSE(ParseBatchParts(bad).ok());
}

// A zlib stream of `text`, the marker before it, as a writer could make one.
std::string Deflated(const std::string& text) {
  uLongf size = compressBound(static_cast<uLong>(text.size()));
  std::string out(size, '\0');
  REQUIRE(compress2(reinterpret_cast<Bytef*>(out.data()), &size,
                    reinterpret_cast<const Bytef*>(text.data()), static_cast<uLong>(text.size()),
                    Z_BEST_SPEED) == Z_OK);
  out.resize(size);
  return std::string(kCompressedMarker) + out;
}

TEST_CASE("a batch's text reads back from its compressed value, and a plain value is the text") {
  std::string text = "{\"term\":3,\"first_seq\":41,\"entries\":[";
  for (int i = 0; i < 200; ++i) {
    text += std::string(i > 0 ? "," : "") +
            "{\"actor\":\"user:ada\",\"event\":{\"id\":" + std::to_string(i) +
            ",\"type\":\"job_submitted\"},\"commands\":[]}";
  }
  text += "]}";
  auto value = CompressJsonText(text);
  REQUIRE(value.ok());
  CHECK(value.value().starts_with(kCompressedMarker));
  CHECK(value.value().size() * 5 < text.size());  // repeated keys compress
  auto back = JsonText(value.value());
  REQUIRE(back.ok());
  CHECK(back.value() == text);
  // What earlier releases wrote, and the topology epochs: the text itself.
  CHECK(JsonText(text).value() == text);
  CHECK(JsonText("not json").value() == "not json");
  // A JSON text never begins with the marker's NUL.
  CHECK_FALSE(json::parse(std::string(kCompressedMarker), nullptr, false).is_object());
  // Empty, and at the bound exactly, compress; one byte more does not.
  CHECK(JsonText(CompressJsonText("").value()).value().empty());
  CHECK(CompressJsonText(std::string(kMaxJsonTextBytes, ' ')).ok());
  auto over = CompressJsonText(std::string(kMaxJsonTextBytes + 1, ' '));
  REQUIRE_FALSE(over.ok());
  CHECK(over.message().find("above the 100 MiB one value may hold") != std::string::npos);
}

TEST_CASE("a compressed value that topo-scheduler would not write is refused, saying why") {
  const std::string good = Deflated("{\"term\":1}");
  std::string bomb_text(kMaxJsonTextBytes + 1, '{');
  const std::string bomb = Deflated(bomb_text);
  bomb_text = std::string();
  struct Row {
    const char* name;
    std::string value;
    const char* why;
  };
  const Row rows[] = {
      {"the marker alone", std::string(kCompressedMarker), "ends early"},
      {"not zlib after the marker", std::string(kCompressedMarker) + "{\"term\":1}",
       "not a zlib stream"},
      {"a stream cut short", good.substr(0, good.size() - 3), "ends early"},
      {"bytes after the stream", good + "x", "bytes after its zlib stream's end"},
      {"a stream that inflates past the bound", bomb, "inflates to more than the 100 MiB"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    auto r = JsonText(row.value);
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().find(row.why) != std::string::npos);
    CHECK(r.message().starts_with("compressed value: "));
  }
  CHECK(JsonText(good).value() == "{\"term\":1}");
}

TEST_CASE("an applied seq is a plain decimal") {
  CHECK(ParseAppliedSeq("0").value() == 0);
  CHECK(ParseAppliedSeq("1234").value() == 1234);
  for (const char* bad : {"", "-1", "12a", " 12", "1e3", "99999999999999999999999"}) {
    CHECK_FALSE(ParseAppliedSeq(bad).ok());
  }
}

}  // namespace
}  // namespace topo::ha
