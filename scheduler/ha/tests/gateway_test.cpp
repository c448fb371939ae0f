// The gateway's messages against hand-written JSON, including answers
// captured from etcd 3.4.23 (numbers as strings, zero fields left out).

#include "ha/gateway.hpp"

#include <doctest/doctest.h>

#include <string>

namespace topo::ha {
namespace {

using nlohmann::json;

TEST_CASE("base64 matches RFC 4648's test vectors both ways") {
  const std::pair<std::string, std::string> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    CHECK(Base64Encode(plain) == encoded);
    auto back = Base64Decode(encoded);
    REQUIRE(back.ok());
    CHECK(back.value() == plain);
  }
}

TEST_CASE("base64 round-trips every byte value") {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += 37) {
    auto back = Base64Decode(Base64Encode(all.substr(0, n)));
    REQUIRE(back.ok());
    CHECK(back.value() == all.substr(0, n));
  }
}

TEST_CASE("base64 refuses malformed text and says where") {
  CHECK(Base64Decode("Zm9").message().find("multiple of 4") != std::string::npos);
  CHECK(Base64Decode("Zm9v!A==").message().find("offset 4") != std::string::npos);
  CHECK_FALSE(Base64Decode("Z===").ok());      // padding too early
  CHECK_FALSE(Base64Decode("Zg==Zm9v").ok());  // padding before the end
  CHECK_FALSE(Base64Decode("Zm 9").ok());
  // Padding bits must be zero: "993=" and "990=" would both be the same two
  // bytes (the fuzzer's find; etcd writes the canonical form).
  CHECK(Base64Decode("990=").ok());
  CHECK(Base64Decode("993=").message().find("padding bits") != std::string::npos);
  CHECK(Base64Decode("Zh==").message().find("padding bits") != std::string::npos);
  CHECK(Base64Decode("Zg==").value() == "f");
}

TEST_CASE("PrefixRangeEnd covers exactly the keys under a prefix") {
  CHECK(PrefixRangeEnd("/toposched/a/log/") == "/toposched/a/log0");
  CHECK(PrefixRangeEnd(std::string("a\xff", 2)) == "b");
  CHECK(PrefixRangeEnd(std::string("\xff\xff", 2)) == std::string(1, '\0'));
}

TEST_CASE("a campaign txn is written as the gateway expects") {
  TxnRequest t;
  t.compare.push_back({"L", Compare::Target::kCreate, Compare::Op::kEqual, 0, ""});
  t.success.push_back(PutRequest{.key = "L", .value = "me", .lease = 6171798566322865158});
  t.failure.push_back(RangeRequest{"L", "", 0, 0, false});
  const json j = ToJson(t);
  CHECK(j["compare"][0] ==
        json{{"key", "TA=="}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}});
  // Lease ids exceed 2^53: they go out as strings, digit for digit.
  CHECK(j["success"][0]["request_put"] ==
        json{{"key", "TA=="}, {"value", "bWU="}, {"lease", "6171798566322865158"}});
  CHECK(j["failure"][0] == json{{"request_range", {{"key", "TA=="}}}});
  Compare v{
      .key = "h", .target = Compare::Target::kValue, .op = Compare::Op::kNotEqual, .value = "7"};
  TxnRequest t2;
  t2.compare.push_back(v);
  t2.success.push_back(DeleteRangeRequest{.key = "a", .range_end = "b"});
  const json j2 = ToJson(t2);
  CHECK(j2["compare"][0]["value"] == "Nw==");
  CHECK(j2["compare"][0]["result"] == "NOT_EQUAL");
  CHECK(j2["success"][0] ==
        json{{"request_delete_range", {{"key", "YQ=="}, {"range_end", "Yg=="}}}});
  CHECK(ToJson(RangeRequest{"k", "", 5, 9, false}) ==
        json{{"key", "aw=="}, {"limit", "5"}, {"revision", "9"}});
}

TEST_CASE("range answers from etcd 3.4 parse, zero fields left out included") {
  const json found = json::parse(R"({"header":{"cluster_id":"7892627959512127311",
      "member_id":"9050277098937338562","revision":"2","raft_term":"2"},
      "kvs":[{"key":"YQ==","create_revision":"2","mod_revision":"2","version":"1","value":"MQ=="}],
      "count":"1"})");
  auto r = ParseRangeResponse(found);
  REQUIRE(r.ok());
  CHECK(r.value().header.cluster_id == 7892627959512127311u);
  CHECK(r.value().header.revision == 2);
  CHECK(r.value().count == 1);
  REQUIRE(r.value().kvs.size() == 1);
  CHECK(r.value().kvs[0] == KeyValue{.key = "a",
                                     .value = "1",
                                     .create_revision = 2,
                                     .mod_revision = 2,
                                     .version = 1,
                                     .lease = 0});
  const json empty = json::parse(
      R"({"header":{"cluster_id":"1","member_id":"2","revision":"2","raft_term":"2"}})");
  auto e = ParseRangeResponse(empty);
  REQUIRE(e.ok());
  CHECK(e.value().kvs.empty());
  CHECK(e.value().count == 0);
}

TEST_CASE("a range answer of the wrong shape is refused, naming the field") {
  auto bad = [](const char* text) { return ParseRangeResponse(json::parse(text)).message(); };
  CHECK(bad(R"({"header":{},"kvs":[{"key":"YQ==","create_revision":true}]})") ==
        "range.kvs[0].create_revision: expected a decimal integer, got true");
  CHECK(bad(R"({"header":{},"kvs":[{"key":"Y"}]})").find("range.kvs[0].key: base64") == 0);
  CHECK(bad(R"({"header":{},"kvs":{}})") == "range.kvs: expected an array, got {}");
  CHECK(bad(R"({"header":{"revision":"12x"}})").find("range.header.revision") == 0);
  CHECK(bad(R"({"header":{"revision":"123456789012345678901"}})").find("range.header.revision") ==
        0);
  CHECK(bad(R"({"kvs":[]})").find("no header") != std::string::npos);
  CHECK(bad(R"([1])").find("expected a JSON object") != std::string::npos);
  CHECK(ParseRangeResponse(json::parse(R"({"header":{"revision":[]}})")).status().code() ==
        core::ErrorCode::kUnavailable);
}

TEST_CASE("txn answers: success, and the failure branch's range") {
  auto won = ParseTxnResponse(json::parse(R"({"header":{"revision":"3"},"succeeded":true,
      "responses":[{"response_put":{"header":{"revision":"3"}}}]})"));
  REQUIRE(won.ok());
  CHECK(won.value().succeeded);
  CHECK(won.value().header.revision == 3);
  REQUIRE(won.value().responses.size() == 1);
  CHECK(won.value().responses[0].kind == TxnOpResponse::Kind::kPut);

  // etcd leaves "succeeded" out when false.
  auto held = ParseTxnResponse(json::parse(R"({"header":{"revision":"3"},
      "responses":[{"response_range":{"header":{"revision":"3"},"kvs":[{"key":"TA==",
      "create_revision":"3","mod_revision":"3","version":"1","value":"bWU=",
      "lease":"6171798566322865158"}],"count":"1"}}]})"));
  REQUIRE(held.ok());
  CHECK_FALSE(held.value().succeeded);
  REQUIRE(held.value().responses[0].kind == TxnOpResponse::Kind::kRange);
  CHECK(held.value().responses[0].range.kvs[0].lease == 6171798566322865158);
  CHECK(held.value().responses[0].range.kvs[0].value == "me");

  auto del = ParseTxnResponse(
      json::parse(R"({"header":{},"responses":[{"response_delete_range":{"deleted":"4"}}]})"));
  REQUIRE(del.ok());
  CHECK(del.value().responses[0].deleted == 4);
  CHECK(ParseTxnResponse(json::parse(R"({"header":{},"responses":[{"response_what":{}}]})"))
            .message()
            .find("txn.responses[0]") == 0);
}

TEST_CASE("lease answers: grant, keepalive, and a lease that is gone") {
  auto g = ParseLeaseGrantResponse(
      json::parse(R"({"header":{"revision":"2"},"ID":"6171798566322865158","TTL":"5"})"));
  REQUIRE(g.ok());
  CHECK(g.value().id == 6171798566322865158);
  CHECK(g.value().ttl_s == 5);
  CHECK_FALSE(ParseLeaseGrantResponse(json::parse(R"({"header":{},"ID":"7"})")).ok());
  CHECK(ParseLeaseGrantResponse(json::parse(R"({"header":{},"ID":"7","TTL":"5","error":"no"})"))
            .message() == "lease_grant: no");

  auto k = ParseLeaseKeepAliveResponse(
      json::parse(R"({"result":{"header":{"revision":"2"},"ID":"61","TTL":"5"}})"));
  REQUIRE(k.ok());
  CHECK(k.value().ttl_s == 5);
  // After a revoke etcd answers without TTL: 0, the lease is gone.
  auto gone = ParseLeaseKeepAliveResponse(json::parse(R"({"result":{"header":{},"ID":"61"}})"));
  REQUIRE(gone.ok());
  CHECK(gone.value().ttl_s == 0);
  CHECK(ParseLeaseKeepAliveResponse(json::parse(R"({"header":{}})")).message().find("no result") !=
        std::string::npos);
}

TEST_CASE("gateway error bodies give etcd's message") {
  CHECK(
      GatewayErrorMessage(json::parse(
          R"({"error":"etcdserver: request timed out","message":"etcdserver: request timed out","code":14})")) ==
      "etcdserver: request timed out");
  CHECK(
      GatewayErrorMessage(json::parse(
          R"({"error":{"grpc_code":5,"http_code":404,"message":"requested lease not found"}})")) ==
      "requested lease not found");
  CHECK(GatewayErrorMessage(json::parse(R"({"header":{}})")).empty());
  CHECK(GatewayErrorMessage(json::parse("[]")).empty());
}

TEST_CASE("watch: the create request and the stream's messages") {
  const json create = WatchCreateJson("topo/c/log/", PrefixRangeEnd("topo/c/log/"), 42);
  CHECK(create.dump() ==
        R"({"create_request":{"key":"dG9wby9jL2xvZy8=","range_end":"dG9wby9jL2xvZzA=",)"
        R"("start_revision":"42"}})");
  // From now: no start_revision; one key: no range_end.
  CHECK(WatchCreateJson("k", "", 0).dump() == R"({"create_request":{"key":"aw=="}})");

  // As etcd 3.4's gateway streams them (tests/ha: a real member).
  auto created = ParseWatchMessage(json::parse(
      R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"5","raft_term":"2"},"created":true}})"));
  REQUIRE(created.ok());
  CHECK(created.value().created);
  CHECK(created.value().events == 0);
  CHECK(created.value().header.revision == 5);
  auto events = ParseWatchMessage(json::parse(
      R"({"result":{"header":{"revision":"6"},"events":[{"kv":{"key":"aw==","mod_revision":"6"}},{"type":"DELETE","kv":{"key":"aw=="}}]}})"));
  REQUIRE(events.ok());
  CHECK(events.value().events == 2);
  CHECK(!events.value().created);
  // A start below the compaction: canceled, with the compact revision (the
  // header has no revision then).
  auto compacted = ParseWatchMessage(json::parse(
      R"({"result":{"header":{"cluster_id":"1","raft_term":"2"},"canceled":true,"compact_revision":"4"}})"));
  REQUIRE(compacted.ok());
  CHECK(compacted.value().canceled);
  CHECK(compacted.value().compact_revision == 4);
  CHECK(compacted.value().header.revision == 0);

  // Hostile or broken messages are errors naming the field, never a crash.
  CHECK(ParseWatchMessage(json::parse("[]")).message().find("watch") != std::string::npos);
  CHECK(ParseWatchMessage(json::parse(R"({"header":{}})")).message().find("no result") !=
        std::string::npos);
  CHECK(ParseWatchMessage(json::parse(R"({"error":{"message":"etcdserver: no leader"}})"))
            .message() == "watch: etcdserver: no leader");
  CHECK(
      ParseWatchMessage(json::parse(R"({"result":{"created":"yes"}})")).message().find("created") !=
      std::string::npos);
  CHECK(ParseWatchMessage(json::parse(R"({"result":{"events":{}}})")).message().find("events") !=
        std::string::npos);
  CHECK(ParseWatchMessage(json::parse(R"({"result":{"compact_revision":"x"}})")).ok() == false);
  CHECK(ParseWatchMessage(json::parse(R"({"result":{"header":{"revision":-1}}})")).ok() == false);
}

}  // namespace
}  // namespace topo::ha
