// Leadership's pure parts: the key layout and the batch encoding (the
// elections and fenced appends run against real etcd in tests/ha).

#include "ha/leadership.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "topo/common/event_json.hpp"
#include "topo/core/generators.hpp"

namespace topo::ha {
namespace {

TEST_CASE("log keys sort in seq order and sit under the cluster's prefix") {
  CHECK(KeyPrefix("prod") == "/toposched/prod/");
  CHECK(LogKey("prod", 42) == "/toposched/prod/log/00000000000000000042");
  CHECK(LogKey("prod", 9) < LogKey("prod", 10));
  CHECK(LogKey("prod", 999999) < LogKey("prod", 1000000));
  CHECK(LogKey("prod", 1).size() == LogKey("prod", 9223372036854775807).size());
}

TEST_CASE("topology epoch keys sort in seq order apart from the log's") {
  CHECK(EpochKey("prod", 42) == "/toposched/prod/topology/00000000000000000042");
  CHECK(EpochKey("prod", 9) < EpochKey("prod", 10));
  // A range over log/ never returns an epoch key, and the other way round.
  CHECK(EpochKey("prod", 1).rfind(KeyPrefix("prod") + "log/", 0) == std::string::npos);
}

TEST_CASE("a batch is encoded with its term, first seq and the store's event JSON") {
  auto topo = core::GenerateTopology("tiny");
  REQUIRE(topo.ok());
  store::LogEntry cancel;
  cancel.time_ms = 1234;
  cancel.actor = "user:ada";
  cancel.event = core::JobCancelled{7, "no longer needed"};
  store::LogEntry tick;
  tick.time_ms = 1300;
  tick.actor = "scheduler";
  tick.event = core::Tick{};
  const store::LogEntry batch[] = {cancel, tick};
  auto text = EncodeBatch(3, 41, batch, topo.value());
  REQUIRE(text.ok());
  const nlohmann::json j = nlohmann::json::parse(text.value());
  CHECK(j["term"] == 3);
  CHECK(j["first_seq"] == 41);
  REQUIRE(j["entries"].size() == 2);
  CHECK(j["entries"][0]["time_ms"] == 1234);
  CHECK(j["entries"][0]["actor"] == "user:ada");
  CHECK(j["entries"][0]["event"] == common::EventToJson(cancel.event, topo.value()));
  CHECK(j["entries"][0]["commands"] == nlohmann::json::array());
  // Each event reads back as it was (a standby will apply these).
  auto back = common::EventFromJson(j["entries"][1]["event"], topo.value());
  REQUIRE(back.ok());
  CHECK(std::holds_alternative<core::Tick>(back.value()));
}

TEST_CASE("a batch whose text is not UTF-8 is refused, not thrown") {
  auto topo = core::GenerateTopology("tiny");
  REQUIRE(topo.ok());
  store::LogEntry bad;
  bad.actor = std::string("user:\xff\xfe", 7);
  bad.event = core::Tick{};
  const store::LogEntry batch[] = {bad};
  auto text = EncodeBatch(1, 1, batch, topo.value());
  CHECK_FALSE(text.ok());
  CHECK(text.message().find("cannot be written as JSON") != std::string::npos);
}

}  // namespace
}  // namespace topo::ha

namespace topo::ha {
namespace {

TEST_CASE("a value up to 1 MiB is one put, a larger one a header and parts that rebuild it") {
  auto part_key = [](int64_t i) { return LogPartKey("p", 41, i); };
  auto small = SplitPuts(LogKey("p", 41), std::string(kMaxBatchBytes, 'a'), 3, 41, 45, part_key);
  REQUIRE(small.ok());
  REQUIRE(small.value().size() == 1);
  CHECK(small.value()[0].key == LogKey("p", 41));
  CHECK(small.value()[0].value.size() == kMaxBatchBytes);

  std::string big;
  for (size_t i = 0; i < 2 * kMaxPartBytes + 10; ++i)
    big.push_back(static_cast<char>('a' + i % 26));
  auto split = SplitPuts(LogKey("p", 41), big, 3, 41, 45, part_key);
  REQUIRE(split.ok());
  REQUIRE(split.value().size() == 4);  // the header and three parts
  auto header = ParseBatchParts(nlohmann::json::parse(split.value()[0].value));
  REQUIRE(header.ok());
  REQUIRE(header.value().has_value());
  CHECK(*header.value() == BatchParts{3, 41, 45, 3, static_cast<int64_t>(big.size())});
  std::string joined;
  for (size_t i = 1; i < split.value().size(); ++i) {
    CHECK(split.value()[i].key == LogPartKey("p", 41, static_cast<int64_t>(i - 1)));
    CHECK(split.value()[i].value.size() <= kMaxPartBytes);
    joined += split.value()[i].value;
  }
  CHECK(joined == big);
}

TEST_CASE("a value that needs more parts than one txn may write is refused, saying so") {
  auto r = SplitPuts(LogKey("p", 1), std::string(kMaxBatchParts * kMaxPartBytes + 1, 'x'), 3, 1, 1,
                     [](int64_t i) { return LogPartKey("p", 1, i); });
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("above the 100 one etcd txn may write") != std::string::npos);
}

TEST_CASE("etcd's request-too-large error gets the setting to raise, others nothing") {
  CHECK(TooLargeHint("etcd https://x: etcdserver: request is too large")
            .find("--max-request-bytes") != std::string::npos);
  CHECK(TooLargeHint("HTTP 429: grpc: received message larger than max (3279705 vs. 2097152)")
            .find("--max-request-bytes") != std::string::npos);
  CHECK(TooLargeHint("etcdserver: request timed out").empty());
}

}  // namespace
}  // namespace topo::ha
