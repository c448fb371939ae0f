// Unit tests of the daemon's pure parts: settings, names, request bodies,
// the certificate authority. The routes themselves are tested end to end
// against the real daemon (tests/daemon).

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "daemon/access/auth.hpp"
#include "daemon/api/route.hpp"
#include "daemon/config.hpp"
#include "daemon/log.hpp"
#include "daemon/pki/pki.hpp"

using namespace topo::daemon;

TEST_CASE("config: values, comments and defaults") {
  DaemonConfig c;
  const auto s = ApplyConfigText(
      "# comment\nlisten = 0.0.0.0:9443\nmax_connections = 12  # trailing\n"
      "stack = slurm-tree\nbackfill = no\nserver_names = a.example, 10.0.0.1\n\n",
      "x.conf", c);
  REQUIRE_MESSAGE(s.ok(), s.message());
  CHECK(c.listen_host == "0.0.0.0");
  CHECK(c.listen_port == 9443);
  CHECK(c.max_connections == 12);
  CHECK(c.stack == "slurm-tree");
  CHECK_FALSE(c.backfill);
  CHECK(c.server_names == std::vector<std::string>{"a.example", "10.0.0.1"});
  CHECK(c.max_body_bytes == 1 << 20);  // untouched default
  CHECK(c.max_unauthenticated_per_peer == 64);
  CHECK(c.max_connections_per_user == 64);
  CHECK(c.first_request_timeout_s == 10);
  CHECK(c.min_job_uid == 1000);
  REQUIRE(ApplyConfigText("max_unauthenticated_per_peer = 3\nfirst_request_timeout_s = 2\n"
                          "max_connections_per_user = 5\n",
                          "y.conf", c)
              .ok());
  CHECK(c.max_unauthenticated_per_peer == 3);
  CHECK(c.max_connections_per_user == 5);
  // The former name of the per-address cap is still read.
  REQUIRE(ApplyConfigText("max_connections_per_peer = 7\n", "z.conf", c).ok());
  CHECK(c.max_unauthenticated_per_peer == 7);
  CHECK(c.first_request_timeout_s == 2);
  auto sc = c.SchedulerConfig();
  REQUIRE(sc.ok());
  CHECK(sc.value().placer == "slurm-tree");
  CHECK_FALSE(sc.value().heartbeats_required);
  CHECK(sc.value().nodes_start_down);
}

TEST_CASE("config: a bad line names the file, the line and the fix, and changes nothing") {
  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"listen = 1.2.3.4\n", "x.conf:2: listen"},
      {"\n\nmax_connections = -3\n", "x.conf:4: max_connections"},
      {"max_connections = lots\n", "not a whole number"},
      {"colour = blue\n", "unknown key \"colour\""},
      {"stack = magic\n", "use one of"},
      {"backfill = maybe\n", "not true or false"},
      {"just words\n", "expected `key = value`"},
      {"listen = host:99999\n", "out of range"},
      {"min_job_uid = -1\n", "x.conf:2: min_job_uid: -1 is out of range; use 0..2147483647"},
      {"min_job_uid = 2147483648\n", "min_job_uid: 2147483648 is out of range"},
      {"max_connections_per_peer = 0\n",
       "x.conf:2: max_connections_per_peer: 0 is out of range; use 1..1000000"},
      {"max_unauthenticated_per_peer = 0\n",
       "x.conf:2: max_unauthenticated_per_peer: 0 is out of range; use 1..1000000"},
      {"max_connections_per_user = 0\n",
       "x.conf:2: max_connections_per_user: 0 is out of range; use 1..1000000"},
      {"max_connections_per_user = 1000001\n", "max_connections_per_user: 1000001 is out of range"},
      {"first_request_timeout_s = 0\n",
       "x.conf:2: first_request_timeout_s: 0 is out of range; use 1..3600"},
      {"first_request_timeout_s = 3601\n", "use 1..3600"},
      {"snapshot_every_events = -1\n", "snapshot_every_events: -1 is out of range"},
      {"snapshot_every_minutes = 10081\n", "use 0..10080"},
      {"event_retention_days = 36501\n", "event_retention_days: 36501 is out of range"},
      {"compaction_batch_events = 0\n",
       "compaction_batch_events: 0 is out of range; use 1..100000"},
      {"snapshot_every_events = lots\n", "snapshot_every_events"},
      {"agent_restart_grace_ms = -1\n",
       "agent_restart_grace_ms: -1 is out of range; use 0..3600000"},
      {"agent_restart_grace_ms = 3600001\n", "use 0..3600000"},
      {"start_ack_timeout_s = 9\n", "start_ack_timeout_s: 9 is out of range; use 10..86400"},
      {"start_ack_timeout_s = 86401\n", "use 10..86400"},
      {"start_ack_timeout_s = 10m\n", "start_ack_timeout_s"},
  };
  for (const Case& k : cases) {
    const std::string text = k.text;
    CAPTURE(text);
    DaemonConfig c;
    c.max_connections = 7;
    const auto s = ApplyConfigText(std::string("max_connections = 9\n") + k.text, "x.conf", c);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find(k.expect) != std::string::npos);
    CHECK(c.max_connections == 7);
  }
}

TEST_CASE("config: agent_restart_grace_ms defaults to 30 s, 0 turns the restart grace off") {
  DaemonConfig c;
  CHECK(c.agent_restart_grace_ms == 30000);
  REQUIRE(ApplyConfigText("agent_restart_grace_ms = 0\n", "x.conf", c).ok());
  CHECK(c.agent_restart_grace_ms == 0);
}

TEST_CASE("config: start_ack_timeout_s defaults to 600 s") {
  DaemonConfig c;
  CHECK(c.start_ack_timeout_s == 600);
  REQUIRE(ApplyConfigText("start_ack_timeout_s = 10\n", "x.conf", c).ok());
  CHECK(c.start_ack_timeout_s == 10);
}

TEST_CASE("config: snapshot and compaction settings, with their defaults") {
  DaemonConfig c;
  CHECK(c.snapshot_every_events == 10000);
  CHECK(c.snapshot_every_minutes == 10);
  CHECK(c.event_retention_days == 30);
  CHECK(c.compaction_batch_events == 1000);
  REQUIRE(ApplyConfigText("snapshot_every_events = 0\nsnapshot_every_minutes = 1\n"
                          "event_retention_days = 0\ncompaction_batch_events = 50\n",
                          "x.conf", c)
              .ok());
  CHECK(c.snapshot_every_events == 0);
  CHECK(c.snapshot_every_minutes == 1);
  CHECK(c.event_retention_days == 0);
  CHECK(c.compaction_batch_events == 50);
}

TEST_CASE("config: the stored policy round-trips and overrides the file") {
  DaemonConfig a;
  a.stack = "fifo-firstfit";
  a.preempt_grace_s = 5;
  a.preemption = false;
  DaemonConfig b;
  REQUIRE(ApplyPolicyJson(PolicyJson(a), b).ok());
  CHECK(b.stack == "fifo-firstfit");
  CHECK(b.preempt_grace_s == 5);
  CHECK_FALSE(b.preemption);
  CHECK_FALSE(ApplyPolicyJson("{\"stack\": \"nope\"}", b).ok());
  CHECK_FALSE(ApplyPolicyJson("[]", b).ok());
}

TEST_CASE("config: the failure policy's keys reach the core, and bad values name the key") {
  DaemonConfig c;
  auto defaults = c.SchedulerConfig();
  REQUIRE(defaults.ok());
  CHECK(defaults.value().max_app_failures == 10);
  CHECK(defaults.value().restart_backoff_initial == 10 * topo::core::kSecond);
  CHECK(defaults.value().restart_backoff_max == 600 * topo::core::kSecond);
  REQUIRE(ApplyConfigText("max_app_failures = 3\nrestart_backoff_initial_s = 0\n"
                          "restart_backoff_max_s = 60\n",
                          "x.conf", c)
              .ok());
  auto sc = c.SchedulerConfig();
  REQUIRE(sc.ok());
  CHECK(sc.value().max_app_failures == 3);
  CHECK(sc.value().restart_backoff_initial == 0);
  CHECK(sc.value().restart_backoff_max == 60 * topo::core::kSecond);
  CHECK(defaults.value().preempt_restart_cost == 600 * topo::core::kSecond);
  CHECK(defaults.value().preempt_protect_after == 3);
  CHECK(defaults.value().placement_wait == 1800 * topo::core::kSecond);
  CHECK(defaults.value().fairshare_max_wait == 0);
  CHECK(defaults.value().attribution_window == 5 * topo::core::kSecond);
  CHECK(defaults.value().backfill_depth == 500);
  REQUIRE(ApplyConfigText("preempt_restart_cost_s = 0\npreempt_protect_after = 7\n"
                          "fairshare_max_wait_s = 86400\nattribution_window_ms = 0\n"
                          "backfill_depth = 2000\n",
                          "x.conf", c)
              .ok());
  sc = c.SchedulerConfig();
  REQUIRE(sc.ok());
  CHECK(sc.value().preempt_restart_cost == 0);
  CHECK(sc.value().preempt_protect_after == 7);
  CHECK(sc.value().fairshare_max_wait == 86400 * topo::core::kSecond);
  CHECK(sc.value().attribution_window == 0);
  CHECK(sc.value().backfill_depth == 2000);

  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"max_app_failures = 0\n", "x.conf:1: max_app_failures: 0 is out of range; use 1..1000"},
      {"restart_backoff_initial_s = -1\n", "restart_backoff_initial_s: -1 is out of range"},
      {"restart_backoff_max_s = 0\n", "restart_backoff_max_s: 0 is out of range"},
      {"preempt_restart_cost_s = 90000\n", "preempt_restart_cost_s: 90000 is out of range"},
      {"preempt_protect_after = -1\n", "preempt_protect_after: -1 is out of range; use 0..1000"},
      {"preempt_protect_after = many\n", "preempt_protect_after"},
      {"placement_wait_s = 604801\n", "placement_wait_s: 604801 is out of range; use 0..604800"},
      {"fairshare_max_wait_s = 2592001\n",
       "fairshare_max_wait_s: 2592001 is out of range; use 0..2592000"},
      {"fairshare_max_wait_s = -1\n", "fairshare_max_wait_s: -1 is out of range"},
      {"fairshare_max_wait_s = 1d\n", "fairshare_max_wait_s"},
      {"attribution_window_ms = 600001\n",
       "attribution_window_ms: 600001 is out of range; use 0..600000"},
      {"attribution_window_ms = -1\n", "attribution_window_ms: -1 is out of range"},
      {"attribution_window_ms = 5s\n", "attribution_window_ms"},
      {"backfill_depth = 0\n", "backfill_depth: 0 is out of range; use 1..100000"},
      {"backfill_depth = 100001\n", "backfill_depth: 100001 is out of range"},
      {"backfill_depth = all\n", "backfill_depth"},
      {"restart_backoff_initial_s = 1200\n",
       "x.conf: restart_backoff_max_s (600) must be at least restart_backoff_initial_s (1200)"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.text);
    DaemonConfig d;
    const auto s = ApplyConfigText(k.text, "x.conf", d);
    REQUIRE_FALSE(s.ok());
    CAPTURE(s.message());
    CHECK(s.message().find(k.expect) != std::string::npos);
    CHECK(d.restart_backoff_initial_s == 10);  // nothing applied
  }
}

TEST_CASE("config: the failure policy is stored with the policy, old stores keep the defaults") {
  DaemonConfig a;
  a.max_app_failures = 4;
  a.restart_backoff_initial_s = 30;
  a.restart_backoff_max_s = 90;
  a.preempt_restart_cost_s = 0;
  a.preempt_protect_after = 1;
  a.fairshare_max_wait_s = 3600;
  a.attribution_window_ms = 2500;
  a.backfill_depth = 77;
  DaemonConfig b;
  REQUIRE(ApplyPolicyJson(PolicyJson(a), b).ok());
  CHECK(b.backfill_depth == 77);
  CHECK(b.fairshare_max_wait_s == 3600);
  CHECK(b.attribution_window_ms == 2500);
  CHECK(b.preempt_restart_cost_s == 0);
  CHECK(b.preempt_protect_after == 1);
  CHECK(b.max_app_failures == 4);
  CHECK(b.restart_backoff_initial_s == 30);
  CHECK(b.restart_backoff_max_s == 90);

  nlohmann::json old = nlohmann::json::parse(PolicyJson(DaemonConfig{}));
  for (const char* key : {"max_app_failures", "restart_backoff_initial_s", "restart_backoff_max_s"})
    old.erase(key);
  DaemonConfig c = a;  // the file's settings
  REQUIRE(ApplyPolicyJson(old.dump(), c).ok());
  // Absent: the built-in defaults, whatever the file says, so that every
  // start replays an old log alike.
  CHECK(c.max_app_failures == 10);
  CHECK(c.restart_backoff_initial_s == 10);
  CHECK(c.restart_backoff_max_s == 600);
  // Keys newer than the log replay as the core decided before them.
  nlohmann::json older = nlohmann::json::parse(PolicyJson(DaemonConfig{}));
  for (const char* key : {"preempt_restart_cost_s", "preempt_protect_after", "placement_wait_s",
                          "fairshare_max_wait_s", "attribution_window_ms", "backfill_depth"})
    older.erase(key);
  DaemonConfig d;
  REQUIRE(ApplyPolicyJson(older.dump(), d).ok());
  CHECK(d.preempt_restart_cost_s == 0);
  CHECK(d.preempt_protect_after == 0);
  CHECK(d.placement_wait_s == 0);
  CHECK(d.attribution_window_ms == 0);
  CHECK(d.backfill_depth == 64);  // the depth before it was a key
  CHECK(d.fairshare_max_wait_s == 0);

  nlohmann::json bad = nlohmann::json::parse(PolicyJson(a));
  bad["restart_backoff_max_s"] = 0;
  topo::core::Status s = ApplyPolicyJson(bad.dump(), c);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("restart_backoff_max_s is 0; use 1..604800") != std::string::npos);
  bad["restart_backoff_max_s"] = 5;
  s = ApplyPolicyJson(bad.dump(), c);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("must be at least restart_backoff_initial_s (30)") != std::string::npos);
  bad["max_app_failures"] = "ten";
  CHECK(ApplyPolicyJson(bad.dump(), c).message().find("max_app_failures") != std::string::npos);
}

TEST_CASE("rate limit: a request timed before the last one refills nothing, takes nothing more") {
  // Off-strand reads carry the time they started: a request can be a few
  // ms "older" than the bucket's last. That used to refill negatively: at a
  // high rate a few such requests emptied the bucket (bench_api at 128
  // connections got 429 far below its 100,000,000/s limit).
  char dir[] = "/tmp/topo-auth-test-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  {
    auto store = topo::store::Store::Open(std::string(dir) + "/state.db");
    REQUIRE_MESSAGE(store.ok(), store.message());
    REQUIRE(store.value().CreateUser({"ada", "default", topo::store::Role::kUser, 1, "ada"}).ok());
    const std::string token = store.value().CreateToken("ada", 1).value().token;
    Authenticator auth(1000);  // bursts of 2,000
    REQUIRE(auth.Authenticate("Bearer " + token, 10000, store.value()).ok());
    for (int i = 0; i < 1500; ++i) {
      auto who = auth.Authenticate("Bearer " + token, 9000, store.value());  // 1 s older
      REQUIRE_MESSAGE(who.ok(), i << ": " << who.message());
    }
    // The burst still holds: past it, the limit applies as before.
    int limited = 0;
    for (int i = 0; i < 600; ++i) {
      limited += !auth.Authenticate("Bearer " + token, 10000, store.value()).ok();
    }
    CHECK(limited > 0);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("names: tenants are paths of safe segments, users are plain") {
  for (const char* good : {"default", "org", "org/team", "a-b_c.d/e1", "0lab"}) {
    CAPTURE(good);
    CHECK(ValidTenantName(good));
  }
  for (const char* bad : {"", "/org", "org/", "org//x", "../etc", "Org", "a b", "org/.x",
                          "a/b/c/d/e/f/g/h/i", "x%2f"}) {
    CAPTURE(bad);
    CHECK_FALSE(ValidTenantName(bad));
  }
  CHECK(ValidUserName("ada"));
  CHECK(ValidUserName("ada@lab.example"));
  CHECK_FALSE(ValidUserName("@ada"));
  CHECK_FALSE(ValidUserName("Ada"));
  CHECK_FALSE(ValidUserName(std::string(65, 'a')));
}

TEST_CASE("bodies: objects only, depth-limited, typed fields") {
  using topo::core::ErrorCode;
  HttpRequest r;
  r.body = std::string(40, '[') + std::string(40, ']');
  CHECK(ParseBody(r, false).status().code() == ErrorCode::kInvalid);
  CHECK(StatusResponse(ParseBody(r, false).status()).status == 400);
  r.body = "[1]";
  CHECK(ParseBody(r, false).message().find("JSON object") != std::string::npos);
  r.body = "{\"a\": 1}";
  r.content_type = "text/plain";
  CHECK(StatusResponse(ParseBody(r, false).status()).status == 415);
  r.content_type = "application/json; charset=utf-8";
  topo::core::Result<Json> b = ParseBody(r, false);
  REQUIRE(b.ok());
  topo::core::Status unknown = UnknownField(b.value(), {"b"});
  CHECK(unknown.message().find("unknown field \"a\"") != std::string::npos);
  CHECK(unknown.field() == "a");
  CHECK(StatusResponse(unknown).body.find("\"field\":\"a\"") != std::string::npos);
  int64_t v = 0;
  CHECK(IntField(b.value(), "a", 0, 10, v).ok());
  CHECK(v == 1);
  CHECK(StatusResponse(IntField(b.value(), "a", 2, 10, v)).status == 400);
  r.body = "";
  CHECK(ParseBody(r, true).value().is_object());
}

TEST_CASE("answers: every error code has one HTTP status and one name") {
  using topo::core::ErrorCode;
  const std::pair<ErrorCode, int> kCodes[] = {{ErrorCode::kInvalid, 400},
                                              {ErrorCode::kInfeasible, 400},
                                              {ErrorCode::kUnauthenticated, 401},
                                              {ErrorCode::kForbidden, 403},
                                              {ErrorCode::kNotFound, 404},
                                              {ErrorCode::kMethodNotAllowed, 405},
                                              {ErrorCode::kConflict, 409},
                                              {ErrorCode::kTooLarge, 413},
                                              {ErrorCode::kUnsupportedMediaType, 415},
                                              {ErrorCode::kRateLimited, 429},
                                              {ErrorCode::kInternal, 500},
                                              {ErrorCode::kUnavailable, 503},
                                              {ErrorCode::kTimedOut, 504},
                                              {ErrorCode::kInsufficientStorage, 507}};
  std::set<std::string> names;
  for (const auto& [code, http] : kCodes) {
    HttpResponse r = StatusResponse(topo::core::Status::Error("why", code));
    CHECK(r.status == http);
    Json body = Json::parse(r.body);
    names.insert(body["error"]["code"].get<std::string>());
    CHECK(body["error"]["message"] == "why");
    CHECK_FALSE(body["error"].contains("field"));
  }
  CHECK(names.size() == std::size(kCodes));  // each code its own name
  CHECK(Json::parse(StatusResponse(Infeasible("never fits", "spec.gpus")).body)["error"] ==
        Json{{"code", "infeasible"}, {"message", "never fits"}, {"field", "spec.gpus"}});
  HttpResponse limited =
      StatusResponse(topo::core::Status::Error("slow down", ErrorCode::kRateLimited));
  CHECK(std::find(limited.headers.begin(), limited.headers.end(),
                  std::pair<std::string, std::string>{"Retry-After", "1"}) !=
        limited.headers.end());
}

TEST_CASE("pki: a CA, a server certificate and agent certificates, keys kept private") {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("topo-pki-" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  auto p = EnsurePki(dir, {"sched.example"});
  REQUIRE_MESSAGE(p.ok(), p.message());
  struct stat st {};
  REQUIRE(::stat(p.value().ca_key.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(::stat(p.value().server_key.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  std::ifstream ca_in(p.value().ca_cert);
  const std::string ca((std::istreambuf_iterator<char>(ca_in)), {});
  // A second start keeps the same CA, so clients keep trusting it.
  auto again = EnsurePki(dir, {});
  REQUIRE(again.ok());
  std::ifstream ca_again(again.value().ca_cert);
  CHECK(std::string((std::istreambuf_iterator<char>(ca_again)), {}) == ca);
  const auto issued =
      IssueCertificate(p.value(), "n17", {"n17"}, true, dir + "/n17.pem", dir + "/n17-key.pem");
  REQUIRE_MESSAGE(issued.ok(), issued.message());
  CHECK(std::filesystem::file_size(dir + "/n17.pem") > 100);
  // openssl verifies the chain when it is installed (it is, with libssl-dev's openssl).
  if (std::system("command -v openssl >/dev/null 2>&1") == 0) {
    CHECK(std::system(("openssl verify -CAfile " + p.value().ca_cert + " " + dir +
                       "/n17.pem >/dev/null 2>&1")
                          .c_str()) == 0);
    CHECK(std::system(("openssl verify -CAfile " + p.value().ca_cert + " " + p.value().server_cert +
                       " >/dev/null 2>&1")
                          .c_str()) == 0);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("log: every committed state change is one sentence with its fields") {
  topo::core::TopologyBuilder b("t", {"node", "leaf"}, 0);
  const int leaf = b.AddDomain("leaf0", 1, topo::core::TopologyBuilder::kTop);
  b.AddNode("n0", leaf, 8);
  b.AddNode("n1", leaf, 8);
  const topo::core::Topology topo = std::move(b).Build().value();
  topo::core::Launch launch;
  launch.restart_count = 2;
  launch.checkpoint_step = 400;
  launch.nodes = topo::core::GroupByNode({{0, 0}, {1, 0}});
  struct Case {
    topo::core::Command command;
    log::Level level;
    const char* text;
  };
  const Case cases[] = {
      {topo::core::RestartJob{7, {{0, 0}, {1, 0}}, {}, launch}, log::Level::kInfo,
       "job 7 restarted (run 2) from checkpoint step 400 on 2 nodes (n0, n1)"},
      {topo::core::NodeStateChanged{1, topo::core::NodeState::kDown, "agent silent for 3021 ms"},
       log::Level::kWarn, "node n1 down: agent silent for 3021 ms"},
      {topo::core::GpuHealthChanged{0, 3, topo::core::GpuHealth::kFailed, "XID 79"},
       log::Level::kWarn, "node n0 GPU 3 failed: XID 79"},
      {topo::core::JobStateChanged{7, topo::core::JobState::kFailed, "rank 3 exited with 127"},
       log::Level::kWarn, "job 7 failed: rank 3 exited with 127"},
      {topo::core::DrainNode{0, "bad cable"}, log::Level::kInfo, "node n0 drain: bad cable"},
  };
  for (const Case& c : cases) {
    const auto records = log::Describe(c.command, topo);
    REQUIRE(records.size() == 1);
    CHECK(records[0].level == c.level);
    CHECK(records[0].message == c.text);
    CHECK(records[0].fields.is_object());
  }
  CHECK_FALSE(log::Init("verbose", "text").ok());
  CHECK_FALSE(log::Init("info", "xml").ok());
  CHECK(log::Init("info", "text").ok());
}
