// The Service in process (Service::Handle, no network): the one scoping rule
// over every read route with three roles and two tenants, and the limits on
// input, queues and storage. A real SQLite store in a temp directory; the
// network side is tested against the real daemon in tests/daemon.

#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/api/route.hpp"
#include "daemon/service.hpp"

using namespace topo::daemon;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/topo-service-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

json TinyTopology() {
  json domains = json::array();
  for (int s = 0; s < 2; ++s) {
    json children = json::array();
    for (int l = 0; l < 2; ++l) {
      const int leaf = 2 * s + l;
      children.push_back(
          {{"name", "leaf" + std::to_string(leaf)},
           {"nodes", {"n" + std::to_string(2 * leaf), "n" + std::to_string(2 * leaf + 1)}}});
    }
    domains.push_back({{"name", "spine" + std::to_string(s)}, {"children", children}});
  }
  return {{"version", 1},      {"name", "tiny"},     {"tiers", {"node", "leaf", "spine"}},
          {"hbd", "node"},     {"gpus_per_node", 8}, {"gpu_model", "H100"},
          {"domains", domains}};
}

class Fixture {
 public:
  explicit Fixture(std::function<void(DaemonConfig&)> tweak = {}) {
    DaemonConfig config;
    config.state_dir = dir.path;
    config.min_free_disk_mb = 0;
    if (tweak) tweak(config);
    auto opened = Service::Open(config, &metrics, now);
    REQUIRE_MESSAGE(opened.ok(), opened.message());
    service = std::move(opened).value();
    admin = *service->first_admin_token();
  }

  // One request; commits like the server's group commit.
  std::pair<int, std::string> Call(const std::string& method, const std::string& target,
                                   const std::string& token, const std::string& body = "") {
    HttpRequest r;
    r.method = method;
    r.target = target;
    r.authorization = token.empty() ? "" : "Bearer " + token;
    r.content_type = body.empty() ? "" : "application/json";
    r.body = body;
    now += 10;
    HttpResponse answer = service->Handle(r, now);
    const topo::core::Status committed = service->Commit();
    REQUIRE_MESSAGE(committed.ok(), committed.message());
    return {answer.status, answer.body};
  }
  json Ok(const std::string& method, const std::string& target, const std::string& token,
          const json& body = nullptr, int want = 200) {
    // No structured binding: INFO is a lambda, and clang 14 cannot capture one.
    const auto answer = Call(method, target, token, body.is_null() ? "" : body.dump());
    const int status = answer.first;
    const std::string& text = answer.second;
    INFO(method << " " << target << " -> " << status << " " << text);
    REQUIRE(status == want);
    return json::parse(text, nullptr, false);
  }
  std::string TokenFor(const std::string& user) {
    return Ok("POST", "/v1/tokens", admin, {{"user", user}}, 201)["token"];
  }

  TempDir dir;
  Metrics metrics;
  topo::core::TimeMs now = 1'700'000'000'000;
  std::unique_ptr<Service> service;
  std::string admin;
};

void SetUpTwoTenants(Fixture& f) {
  f.Ok("PUT", "/v1/topology", f.admin, {{"format", "json"}, {"content", TinyTopology().dump()}});
  f.Ok("POST", "/v1/nodes/resume", f.admin, {{"nodes", "n[0-7]"}});
  // org/a borrows everything; org/b is guaranteed the whole cluster, so its
  // job preempts org/a's: one event names both tenants' jobs.
  f.Ok("PUT", "/v1/tenants/org/a", f.admin, {{"guaranteed_gpus", 0}}, 201);
  f.Ok("PUT", "/v1/tenants/org/b", f.admin, {{"guaranteed_gpus", 64}}, 201);
  f.Ok("POST", "/v1/users", f.admin, {{"name", "alice"}, {"tenant", "org/a"}, {"role", "user"}},
       201);
  f.Ok("POST", "/v1/users", f.admin,
       {{"name", "carol"}, {"tenant", "org/a"}, {"role", "tenant-admin"}}, 201);
  f.Ok("POST", "/v1/users", f.admin, {{"name", "bob"}, {"tenant", "org/b"}, {"role", "user"}}, 201);
}

}  // namespace

TEST_CASE("scoping: no byte of another tenant's job names, commands or users in any read") {
  Fixture f;
  SetUpTwoTenants(f);
  const std::string alice = f.TokenFor("alice");
  const std::string carol = f.TokenFor("carol");
  const std::string bob = f.TokenFor("bob");
  auto submit = [&](const std::string& token, const std::string& name, const std::string& secret) {
    return f
        .Ok("POST", "/v1/jobs", token,
            {{"spec", {{"gpus", 64}, {"name", name}}},
             {"command", {"/usr/bin/train", "--hf-token", secret}}},
            201)["id"]
        .get<int64_t>();
  };
  const int64_t a_job = submit(alice, "alpha-run-ZQX", "hf_aaaSECRETaaa");
  const int64_t b_job = submit(bob, "bravo-run-KWV", "hf_bbbSECRETbbb");
  // bob's job preempted alice's: the event of bob's submission names both.
  const json a_view = f.Ok("GET", "/v1/jobs/" + std::to_string(a_job), alice);
  CHECK(a_view["state"] == "preempting");

  const std::vector<std::string> a_secrets = {"alpha-run-ZQX", "hf_aaaSECRETaaa", "alice", "carol"};
  const std::vector<std::string> b_secrets = {"bravo-run-KWV", "hf_bbbSECRETbbb", "bob"};
  const std::vector<std::string> routes = {
      "/v1/jobs",
      "/v1/jobs?all=1",
      "/v1/jobs?user=bob",
      "/v1/jobs?all=1&user=alice",
      "/v1/jobs/" + std::to_string(a_job),
      "/v1/jobs/" + std::to_string(b_job),
      "/v1/events",
      "/v1/events?job=" + std::to_string(a_job),
      "/v1/events?job=" + std::to_string(b_job),
      "/v1/events?node=n0",
      "/v1/events?type=job_submitted,job_cancelled",
      "/v1/events?last=5",
      "/v1/events?last=3&node=n1&type=job_submitted",
      "/v1/events?job=" + std::to_string(a_job) + "&last=2&node=n0",
      "/v1/audit?last=2",
      "/v1/nodes",
      "/v1/nodes/n0",
      "/v1/tenants",
      "/v1/users",
      "/v1/tokens",
      "/v1/cluster",
      "/v1/utilization",
      "/v1/whoami",
      "/v1/audit",
      "/v1/topology",
      "/metrics",
  };
  struct Role {
    const char* name;
    std::string token;
    const std::vector<std::string>* others;  // must never appear
    const char* other_tenant;
  };
  const Role roles[] = {{"alice (user, org/a)", alice, &b_secrets, "org/b"},
                        {"carol (tenant-admin, org/a)", carol, &b_secrets, "org/b"},
                        {"bob (user, org/b)", bob, &a_secrets, "org/a"}};
  int bodies = 0;
  for (const Role& role : roles) {
    for (const std::string& route : routes) {
      const auto answer = f.Call("GET", route, role.token);
      const int status = answer.first;
      const std::string& body = answer.second;  // CAPTURE cannot take a binding (clang 14)
      CAPTURE(role.name);
      CAPTURE(route);
      CAPTURE(body);
      CHECK((status == 200 || status == 403 || status == 404));
      for (const std::string& secret : *role.others) {
        // Names and commands: not one byte (the user name "bob" may be a
        // substring of nothing else here; the names are chosen to be unique).
        CHECK(body.find(secret) == std::string::npos);
      }
      if (route == "/metrics") {
        CHECK(body.find(std::string("tenant=\"") + role.other_tenant) == std::string::npos);
      }
      ++bodies;
    }
  }
  CHECK(bodies == 3 * static_cast<int>(routes.size()));

  // The preemption event is shown to both, each with the other's job reduced.
  auto events = [&](const std::string& token) {
    return f.Ok("GET", "/v1/events?limit=1000", token)["events"];
  };
  bool alice_saw_bob = false;
  for (const json& e : events(alice)) {
    if (e["event"].value("id", int64_t{0}) == b_job) {
      alice_saw_bob = true;
      CHECK_FALSE(e["event"].contains("request"));
      CHECK(e["event"]["tenant"] == "org/b");
    }
  }
  CHECK(alice_saw_bob);
  // Events that name no job (nodes resumed) are for admins only.
  for (const json& e : events(alice)) CHECK(e["event"].contains("id"));
  bool admin_sees_nodes = false;
  for (const json& e : events(f.admin)) {
    admin_sees_nodes = admin_sees_nodes || e["event"].value("type", "") == "node_state_requested";
  }
  CHECK(admin_sees_nodes);
  // The check can fail: a cluster-admin sees every secret.
  std::string all;
  for (const std::string& route : routes) all += f.Call("GET", route, f.admin).second;
  for (const char* secret : {"hf_aaaSECRETaaa", "hf_bbbSECRETbbb", "bravo-run-KWV"}) {
    CHECK(all.find(secret) != std::string::npos);
  }
}

TEST_CASE("job list: user= narrows the scope, the blocked head's estimated start") {
  Fixture f;
  SetUpTwoTenants(f);
  const std::string alice = f.TokenFor("alice");
  const std::string bob = f.TokenFor("bob");
  auto submit = [&](const std::string& token, int gpus) {
    return f
        .Ok("POST", "/v1/jobs", token,
            {{"spec", {{"gpus", gpus}}}, {"time_limit_s", 3600}, {"command", {"/bin/true"}}}, 201)
        .at("id")
        .get<int64_t>();
  };
  const int64_t running = submit(alice, 48);
  const int64_t head = submit(alice, 64);
  const int64_t behind = submit(alice, 64);
  auto ids = [&](const std::string& target, const std::string& token) {
    std::set<int64_t> out;
    const json list = f.Ok("GET", target, token);
    for (const json& j : list["jobs"]) out.insert(j["id"].get<int64_t>());
    return out;
  };
  CHECK(ids("/v1/jobs?user=alice", f.admin) == std::set<int64_t>{running, head, behind});
  CHECK(ids("/v1/jobs?user=alice", alice) == std::set<int64_t>{running, head, behind});
  CHECK(ids("/v1/jobs?all=1&user=admin", f.admin).empty());
  // A filter never widens the scope: bob asking for alice's jobs sees none.
  CHECK(ids("/v1/jobs?user=alice", bob).empty());
  CHECK(ids("/v1/jobs?all=1&user=alice", bob).empty());
  auto [status, body] = f.Call("GET", "/v1/jobs?user=Alice%20B", f.admin);
  CHECK(status == 400);
  CHECK(body.find("user: not a user name") != std::string::npos);

  std::map<int64_t, json> jobs;
  const json list = f.Ok("GET", "/v1/jobs", alice);
  for (const json& j : list["jobs"]) jobs[j["id"].get<int64_t>()] = j;
  REQUIRE(jobs[running]["state"] == "running");
  REQUIRE(jobs[head]["state"] == "queued");
  // The head starts when the running job reaches its time limit.
  const int64_t limit_reached = jobs[running]["start_ms"].get<int64_t>() + 3600 * 1000;
  CHECK(jobs[head]["estimated_start_ms"] == limit_reached);
  CHECK(jobs[running]["estimated_start_ms"].is_null());
  CHECK(jobs[behind]["estimated_start_ms"].is_null());
  CHECK(f.Ok("GET", "/v1/jobs/" + std::to_string(head), alice)["estimated_start_ms"] ==
        jobs[head]["estimated_start_ms"]);
}

TEST_CASE("events: last=, node= and type= filter within the caller's scope") {
  Fixture f;
  SetUpTwoTenants(f);
  const std::string alice = f.TokenFor("alice");
  const std::string bob = f.TokenFor("bob");
  // alice's job runs on every node; bob's (org/b, guaranteed all) preempts it.
  f.Ok("POST", "/v1/jobs", alice, {{"spec", {{"gpus", 64}}}, {"command", {"/bin/true"}}}, 201);
  f.Ok("POST", "/v1/jobs", bob, {{"spec", {{"gpus", 64}}}, {"command", {"/bin/true"}}}, 201);
  auto events = [&](const std::string& query, const std::string& token) {
    const json body = f.Ok("GET", "/v1/events" + query, token);
    return body["events"];
  };
  auto types = [](const json& list) {
    std::vector<std::string> out;
    for (const json& e : list) out.push_back(e["event"]["type"]);
    return out;
  };
  const json all = events("?limit=10000", f.admin);
  REQUIRE(all.size() >= 10);
  // The newest N, oldest first; the rest of the range is still there with limit.
  const json last = events("?last=2", f.admin);
  REQUIRE(last.size() == 2);
  CHECK(last[0]["seq"] == all[all.size() - 2]["seq"]);
  CHECK(last[1]["seq"] == all[all.size() - 1]["seq"]);
  CHECK(events("?last=1000", f.admin) == all);
  // type=: exactly those events.
  const json resumes = events("?type=node_state_requested", f.admin);
  CHECK(resumes.size() == 8);
  for (const std::string& t : types(resumes)) CHECK(t == "node_state_requested");
  CHECK(events("?type=node_state_requested,job_submitted", f.admin).size() == 10);
  // node=: the resume of n3 and alice's start, which put ranks on it.
  const json on_n3 = events("?node=n3", f.admin);
  CHECK(types(on_n3) == std::vector<std::string>{"node_state_requested", "job_submitted"});
  CHECK(events("?node=n3&last=1", f.admin) == json::array({on_n3[1]}));
  CHECK(events("?node=nowhere", f.admin).empty());
  // The preemption's grace ends: one event stops alice's job and starts
  // bob's on every node.
  f.now += 3 * 60 * 1000;
  f.service->Tick(f.now);
  REQUIRE(f.service->Commit().ok());
  const json tick = events("?last=1", f.admin);
  REQUIRE(tick.size() == 1);
  CHECK(events("?node=n3&last=1", f.admin) == tick);
  // Scope first: node events are the admins'. alice sees the tick (it stops
  // her job), but with bob's start reduced it names no node: node=n3 shows
  // her start alone. bob sees his start there.
  CHECK(events("?type=node_state_requested", alice).empty());
  const json alice_tick = events("?last=1", alice);
  REQUIRE(alice_tick.size() == 1);
  CHECK(alice_tick[0]["seq"] == tick[0]["seq"]);
  const json alice_n3 = events("?node=n3", alice);
  REQUIRE(alice_n3.size() == 1);
  CHECK(alice_n3[0]["seq"] == on_n3[1]["seq"]);
  const json bob_n3 = events("?node=n3", bob);
  REQUIRE(bob_n3.size() == 1);
  CHECK(bob_n3[0]["seq"] == tick[0]["seq"]);
  // Each filter is checked: named field, 400.
  for (const char* bad : {"?type=bogus", "?type=job_submitted,", "?node=a%20b", "?node=", "?last=0",
                          "?last=10001", "?last=x", "?last=5&limit=5"}) {
    const auto answer = f.Call("GET", std::string("/v1/events") + bad, f.admin);
    const std::string& body = answer.second;  // CAPTURE cannot take a binding (clang 14)
    CAPTURE(bad);
    CAPTURE(body);
    CHECK(answer.first == 400);
  }
  auto [status, body] = f.Call("GET", "/v1/events?type=bogus", f.admin);
  CHECK(body.find("unknown event type") != std::string::npos);
  CHECK(body.find("gpu_event") != std::string::npos);
}

TEST_CASE("limits: names, duplicate keys, host lists, queues and the storage floor") {
  Fixture f([](DaemonConfig& c) { c.max_queued_jobs_per_user = 3; });
  SetUpTwoTenants(f);
  const std::string alice = f.TokenFor("alice");
  struct Case {
    const char* what;
    std::string method, target, body;
    int status;
    const char* field;
  };
  const std::string long_name(257, 'n');
  const Case cases[] = {
      {"a 257-byte job name", "POST", "/v1/jobs",
       json{{"spec", {{"gpus", 8}, {"name", long_name}}}}.dump(), 400, "spec"},
      {"a duplicate key", "POST", "/v1/jobs", R"({"spec": {"gpus": 8}, "spec": {"gpus": 16}})", 400,
       "spec"},
      {"a nested duplicate key", "POST", "/v1/jobs", R"({"spec": {"gpus": 8, "gpus": 16}})", 400,
       "spec.gpus"},
      {"an argument longer than exec takes", "POST", "/v1/jobs",
       json{{"spec", {{"gpus", 8}}}, {"command", {"/bin/sh", std::string(131072, 'x')}}}.dump(),
       400, "command[1]"},
      {"no command", "POST", "/v1/jobs", json{{"spec", {{"gpus", 8}}}}.dump(), 400, "command"},
      {"a reserved variable", "POST", "/v1/jobs",
       json{{"spec", {{"gpus", 8}}}, {"command", {"true"}}, {"env", {{"RANK", "0"}}}}.dump(), 400,
       "env.RANK"},
      {"an unknown launch mode", "POST", "/v1/jobs",
       json{{"spec", {{"gpus", 8}}}, {"command", {"true"}}, {"launch", "gpu"}}.dump(), 400,
       "launch"},
      {"a relative chdir", "POST", "/v1/jobs",
       json{{"spec", {{"gpus", 8}}}, {"command", {"true"}}, {"chdir", "run"}}.dump(), 400, "chdir"},
      {"an unknown output pattern", "POST", "/v1/jobs",
       json{{"spec", {{"gpus", 8}}}, {"command", {"true"}}, {"error", "e-%N"}}.dump(), 400,
       "error"},
      {"a reason over 1000 bytes", "POST", "/v1/jobs/1/cancel",
       json{{"reason", std::string(1001, 'r')}}.dump(), 400, "reason"},
      {"an unknown method on a route", "PATCH", "/v1/jobs", "{}", 405, ""},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const auto answer = f.Call(c.method, c.target, alice, c.body);
    const int status = answer.first;
    const std::string& body = answer.second;  // CAPTURE cannot take a binding (clang 14)
    CAPTURE(body);
    CHECK(status == c.status);
    if (*c.field) CHECK(json::parse(body)["error"]["field"] == c.field);
  }

  // A host list naming one node many times drains it once: one event.
  const int64_t before = f.Ok("GET", "/v1/cluster", f.admin)["last_seq"];
  std::string many = "n0";
  for (int i = 0; i < 500; ++i) many += ",n0";
  f.Ok("POST", "/v1/nodes/drain", f.admin, {{"nodes", many}, {"mode", "wait"}});
  CHECK(f.Ok("GET", "/v1/cluster", f.admin)["last_seq"].get<int64_t>() == before + 1);
  f.Ok("POST", "/v1/nodes/resume", f.admin, {{"nodes", "n0"}});

  // Caps on waiting jobs: the tenant's quota, then each user's.
  f.Ok("PUT", "/v1/tenants/org/a", f.admin, {{"max_queued_jobs", 2}});
  const json big = {{"spec", {{"gpus", 64}}}, {"command", {"/bin/true"}}};
  f.Ok("POST", "/v1/jobs", alice, big, 201);  // runs
  f.Ok("POST", "/v1/jobs", alice, big, 201);  // waits (1)
  f.Ok("POST", "/v1/jobs", alice, big, 201);  // waits (2)
  auto [status, body] = f.Call("POST", "/v1/jobs", alice, big.dump());
  CHECK(status == 409);
  CHECK(body.find("max_queued_jobs") != std::string::npos);
  CHECK(f.Ok("GET", "/v1/tenants/org/a", f.admin)["queued_jobs"] == 2);
  f.Ok("PUT", "/v1/tenants/org/a", f.admin, {{"max_queued_jobs", 0}});
  f.Ok("POST", "/v1/jobs", alice, big, 201);  // waits (3)
  auto [status2, body2] = f.Call("POST", "/v1/jobs", alice, big.dump());
  CHECK(status2 == 409);
  CHECK(body2.find("max_queued_jobs_per_user") != std::string::npos);
}

TEST_CASE("storage floor: below it writes get 507 with the reason, reads go on") {
  // A floor no filesystem here reaches: every write is below it.
  Fixture f([](DaemonConfig& c) { c.min_free_disk_mb = int64_t{1} << 40; });
  auto [status, body] = f.Call("PUT", "/v1/topology", f.admin,
                               json{{"format", "json"}, {"content", TinyTopology().dump()}}.dump());
  CHECK(status == 507);
  CHECK(json::parse(body)["error"]["code"] == "insufficient_storage");
  CHECK(body.find("min_free_disk_mb") != std::string::npos);
  CHECK(f.Call("GET", "/v1/whoami", f.admin).first == 200);
  CHECK(f.Call("GET", "/v1/users", f.admin).first == 200);
  CHECK(f.Call("GET", "/v1/events", f.admin).first == 200);
}

TEST_CASE("routes: one handler per route, named segments, a query key once") {
  Fixture f;
  f.Ok("PUT", "/v1/topology", f.admin, {{"format", "json"}, {"content", TinyTopology().dump()}});
  // A repeated key is refused naming it, on the strand's routes and on the
  // ones served off it, whichever value each would have taken.
  for (const std::string target : {"/v1/jobs?limit=1&limit=2", "/v1/events?last=1&last=2",
                                   "/v1/nodes?domain=leaf0&domain=leaf1"}) {
    const auto answer = f.Call("GET", target, f.admin);
    INFO(target << " -> " << answer.second);
    CHECK(answer.first == 400);
    const json error = json::parse(answer.second)["error"];
    CHECK(error["message"].get<std::string>().find("given twice") != std::string::npos);
    CHECK(error.contains("field"));
  }
  // {name*} takes the rest of the path: a tenant below another.
  f.Ok("PUT", "/v1/tenants/org/a/team", f.admin, {{"guaranteed_gpus", 0}}, 201);
  CHECK(f.Ok("GET", "/v1/tenants/org/a/team", f.admin)["name"] == "org/a/team");
  // {name} and {gpu}: one segment each.
  CHECK(f.Ok("GET", "/v1/nodes/n3", f.admin)["name"] == "n3");
  const auto [clear_status, clear_body] = f.Call("POST", "/v1/nodes/n3/gpus/9/clear", f.admin);
  CHECK(clear_status == 404);
  CHECK(clear_body.find("has GPUs 0..7") != std::string::npos);
  // The wrong method on a known route: 405 with the methods it takes.
  const auto [put_status, put_body] = f.Call("PUT", "/v1/jobs", f.admin, "{}");
  CHECK(put_status == 405);
  CHECK(json::parse(put_body)["error"]["code"] == "method_not_allowed");
  CHECK(json::parse(put_body)["error"]["message"].get<std::string>().find("GET, POST") !=
        std::string::npos);
  // An infeasible job is refused with its own code before it is logged, by
  // the core's check.
  const int64_t seq = f.Ok("GET", "/v1/cluster", f.admin)["last_seq"];
  const auto [big_status, big_body] = f.Call(
      "POST", "/v1/jobs", f.admin, json{{"spec", {{"gpus", 128}}}, {"command", {"true"}}}.dump());
  CHECK(big_status == 400);
  CHECK(json::parse(big_body)["error"]["code"] == "infeasible");
  CHECK(json::parse(big_body)["error"]["field"] == "spec.gpus");
  CHECK(f.Ok("GET", "/v1/cluster", f.admin)["last_seq"] == seq);
}
