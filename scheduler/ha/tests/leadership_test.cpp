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
