// Unit tests of Slurm mode: scontrol parsing, the plugin's requests and the
// sync, on a real Service over a temp SQLite store (no Slurm needed; the
// real-Slurm tests are tests/slurm).

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/config.hpp"
#include "daemon/service.hpp"
#include "daemon/slurm/slurm_bridge.hpp"
#include "daemon/slurm/slurm_selection.hpp"

using namespace topo::daemon;

namespace {

// Two leaves of two nodes under one spine, 8 GPUs each.
constexpr const char* kTopology =
    "SwitchName=l1 Nodes=n[1-2]\nSwitchName=l2 Nodes=n[3-4]\nSwitchName=s Switches=l[1-2]\n";

struct Fixture {
  std::filesystem::path dir;
  std::unique_ptr<Service> service;
  topo::core::TimeMs now = 1'000'000;

  explicit Fixture(const std::string& extra = "") {
    char tmpl[] = "/tmp/topo-slurm-unit-XXXXXX";
    dir = mkdtemp(tmpl);
    DaemonConfig config;
    config.state_dir = dir.string();
    REQUIRE(ApplyConfigText("slurm_job_grace_s = 30\n" + extra, "t.conf", config).ok());
    auto opened = Service::Open(config, nullptr, now);
    REQUIRE_MESSAGE(opened.ok(), opened.message());
    service = std::move(opened).value();
    REQUIRE(service->SlurmImportTopology(kTopology, 8, now).ok());
  }
  ~Fixture() {
    service.reset();
    std::filesystem::remove_all(dir);
  }
  std::string Ask(const std::string& json) {
    std::string a = service->SlurmRequest(json, "alice", now);
    REQUIRE(service->Commit().ok());
    return a;
  }
  std::vector<SlurmAction> Sync(const SlurmSnapshot& snap) {
    auto actions = service->SlurmSync(snap, now);
    REQUIRE(service->Commit().ok());
    return actions;
  }
  // POST /v1/nodes/drain as the first admin; the HTTP status.
  int Drain(const std::string& node, const std::string& mode) {
    HttpRequest r;
    r.method = "POST";
    r.target = "/v1/nodes/drain";
    r.authorization = "Bearer " + *service->first_admin_token();
    r.content_type = "application/json";
    r.body = R"({"nodes":")" + node + R"(","mode":")" + mode + R"("})";
    const int status = service->Handle(r, now).status;
    REQUIRE(service->Commit().ok());
    return status;
  }
  // A request as the first admin: the HTTP status.
  int Call(const std::string& method, const std::string& target, const std::string& body = "") {
    HttpRequest r;
    r.method = method;
    r.target = target;
    r.authorization = "Bearer " + *service->first_admin_token();
    r.content_type = "application/json";
    r.body = body;
    const int status = service->Handle(r, now).status;
    REQUIRE(service->Commit().ok());
    return status;
  }
  // GET as the first admin: the body's JSON.
  nlohmann::json Get(const std::string& target) {
    HttpRequest r;
    r.method = "GET";
    r.target = target;
    r.authorization = "Bearer " + *service->first_admin_token();
    HttpResponse answer = service->Handle(r, now);
    REQUIRE(service->Commit().ok());
    return nlohmann::json::parse(answer.body, nullptr, false);
  }
  // GET one thing as the first admin: its "state".
  std::string State(const std::string& target) {
    HttpRequest r;
    r.method = "GET";
    r.target = target;
    r.authorization = "Bearer " + *service->first_admin_token();
    HttpResponse answer = service->Handle(r, now);
    REQUIRE(service->Commit().ok());
    auto j = nlohmann::json::parse(answer.body, nullptr, false);
    return j.is_object() && j.contains("state") ? j["state"].get<std::string>() : answer.body;
  }
  static SlurmSnapshot AllIdle() {
    SlurmSnapshot snap;
    for (const char* n : {"n1", "n2", "n3", "n4"}) snap.nodes.push_back({n, "IDLE", ""});
    return snap;
  }
};

// A job as `squeue --json` shows it; its signal= token read as the bridge does.
SlurmJobView Job(int64_t id, const std::string& state, int64_t priority,
                 std::vector<std::string> nodes, const std::string& comment,
                 const std::string& reason = "") {
  SlurmJobView v;
  v.id = id;
  v.state = state;
  v.priority = priority;
  v.nodes = std::move(nodes);
  v.admin_comment = comment;
  v.state_reason = reason;
  v.checkpoint_signal = topo::common::ParseSlurmCheckpointSignal(comment);
  return v;
}

// "PLACE <id> <a,b,...> ..." -> its nodes, sorted as Slurm lists them.
std::vector<std::string> PlacedNodes(const std::string& answer) {
  std::istringstream in(answer);
  std::string word, id, list;
  in >> word >> id >> list;
  std::vector<std::string> out;
  std::stringstream items(list);
  for (std::string n; std::getline(items, n, ',');) out.push_back(n);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<SlurmAction> OfKind(const std::vector<SlurmAction>& all, SlurmAction::Kind kind) {
  std::vector<SlurmAction> out;
  for (const SlurmAction& a : all) {
    if (a.kind == kind) out.push_back(a);
  }
  return out;
}

std::string Submit(int nodes, const std::string& comment = "", const std::string& extra = "") {
  return R"({"v":1,"op":"submit","uid":1000,"name":"j","min_nodes":)" + std::to_string(nodes) +
         R"(,"max_nodes":)" + std::to_string(nodes) + R"(,"comment":")" + comment +
         R"(","env":{})" + extra + "}";
}

}  // namespace

TEST_CASE("slurm: scontrol one-liners") {
  auto kv = ParseScontrolLine("NodeName=n1 State=IDLE+DRAIN Reason=bad cable [root@2026] Arch=x");
  REQUIRE(kv.size() == 4);
  CHECK(kv[2].second == "bad cable [root@2026]");
  auto nodes = ParseScontrolNodes(
      "NodeName=n1 State=IDLE+DRAIN Reason=toposched: GPU 3 failed [root@2026-11-22T11:52:04]\n"
      "NodeName=n2 State=DOWN* Reason=Not responding\n");
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0].state == "IDLE+DRAIN");
  CHECK(nodes[0].reason == "toposched: GPU 3 failed");
  CHECK(nodes[1].reason == "Not responding");
}

TEST_CASE("slurm: squeue --json, 22.05's form and 23.02's") {
  // 22.05: job_state a string, priority a number; a job's user controls its
  // name, comment and paths, which the one-line form could not tell from
  // fields (a comment " AdminComment=toposched:9" claimed toposched job 9).
  auto jobs = ParseSqueueJobs(R"({"meta":{"plugin":{"type":"openapi/v0.0.38"}},"errors":[],
    "jobs":[
      {"job_id":7,"name":"x JobState=COMPLETED","job_state":"PENDING","priority":0,"nodes":"",
       "admin_comment":"toposched:3 signal=B:10","state_reason":"JobHeldUser",
       "comment":"a AdminComment=toposched:9 ranks=n9","job_resources":{"nodes":"n9"}},
      {"job_id":8,"job_state":"RUNNING","priority":100,"nodes":"n[1-2]",
       "admin_comment":"toposched:4 ranks=n2,n1 map=0-1:0-7 layout=tp:8,cp:1,ep:1,pp:1,dp:2,order:tp-cp-ep-dp-pp",
       "state_reason":"None"},
      {"job_id":9,"job_state":"RUNNING","priority":1,"nodes":"n3","admin_comment":"",
       "comment":"x AdminComment=toposched:4","name":"y AdminComment=toposched:4"},
      {"name":"no id"}, 17]})");
  REQUIRE_MESSAGE(jobs.ok(), jobs.message());
  REQUIRE(jobs.value().size() == 3);
  const SlurmJobView& held = jobs.value()[0];
  CHECK(held.id == 7);
  CHECK(held.state == "PENDING");
  CHECK(held.priority == 0);
  CHECK(held.nodes.empty());
  CHECK(held.admin_comment == "toposched:3 signal=B:10");
  CHECK(held.state_reason == "JobHeldUser");
  REQUIRE(held.checkpoint_signal.has_value());
  CHECK(held.checkpoint_signal->number == 10);
  CHECK(held.checkpoint_signal->batch_only);
  CHECK(jobs.value()[1].nodes == std::vector<std::string>{"n1", "n2"});
  CHECK(!jobs.value()[1].checkpoint_signal.has_value());
  CHECK(jobs.value()[2].admin_comment.empty());

  // 23.02 on: job_state a list of flags, priority {"set","infinite","number"}.
  auto later = ParseSqueueJobs(R"({"jobs":[{"job_id":12,"job_state":["PENDING","REQUEUED"],
    "priority":{"set":true,"infinite":false,"number":0},"nodes":"","admin_comment":"toposched:5",
    "state_reason":"JobHeldAdmin"}],"errors":[]})");
  REQUIRE_MESSAGE(later.ok(), later.message());
  REQUIRE(later.value().size() == 1);
  CHECK(later.value()[0].state == "PENDING");
  CHECK(later.value()[0].priority == 0);
  CHECK(later.value()[0].state_reason == "JobHeldAdmin");

  // What is not a job list is an error, never an empty cluster.
  CHECK(!ParseSqueueJobs("").ok());
  CHECK(!ParseSqueueJobs("JobId=7 JobState=RUNNING").ok());
  CHECK(!ParseSqueueJobs(R"({"errors":[]})").ok());
  CHECK(ParseSqueueJobs(R"({"jobs":[],"errors":[{"error":"Unable to contact slurm controller"}]})")
            .message()
            .find("Unable to contact") != std::string::npos);
}

TEST_CASE("slurm: place, hold, reject, pass") {
  Fixture f;
  f.Sync(Fixture::AllIdle());
  std::string a = f.Ask(Submit(2, "topo: tp=8"));
  CHECK(a.rfind("PLACE 1 ", 0) == 0);
  std::string b = f.Ask(Submit(3));
  CHECK(b.rfind("HOLD 2 ", 0) == 0);
  CHECK(f.Ask(Submit(2, "topo: tp=16")).find("REJECT") == 0);
  CHECK(f.Ask(Submit(2, "topo: tpp=8")).find("unknown layout key \"tpp\"") != std::string::npos);
  CHECK(f.Ask(Submit(9)).find("more than the cluster has") != std::string::npos);
  CHECK(f.Ask(R"({"op":"submit","min_nodes":2,"env":{"TOPO_LAYOUT":"tp=3"}})").find("REJECT") == 0);
  CHECK(f.Ask("not json").rfind("PASS", 0) == 0);
  // test op: what would be placed, without submitting (2 nodes are free).
  CHECK(f.Ask(R"({"op":"test","min_nodes":3})").rfind("BUSY", 0) == 0);
  CHECK(f.Ask(R"({"op":"test","min_nodes":2})").rfind("PLACE 0 ", 0) == 0);
}

// The plugin's line is read by one strict reader (common/user_api.hpp): a
// field of the wrong type was read as absent, so a job asking for two
// nodes as "2" was placed on one.
TEST_CASE("slurm: a request line that does not read passes, naming the field") {
  Fixture f;
  f.Sync(Fixture::AllIdle());
  const std::string two_as_text =
      f.Ask(R"({"op":"submit","uid":1000,"min_nodes":"2","comment":"topo: tp=8","env":{}})");
  CHECK(two_as_text.rfind("PASS the request line does not read: min_nodes: must be an integer",
                          0) == 0);
  CHECK(f.Ask(Submit(2, "topo: tp=8", R"(,"colour":"red")"))
            .rfind("PASS the request line does not read: colour: unknown field", 0) == 0);
  CHECK(f.Ask(R"({"op":"submit","min_nodes":2,"env":{"HOME":"/root"}})")
            .rfind("PASS the request line does not read: env.HOME: not a TOPO_* variable", 0) == 0);
  CHECK(f.Ask(R"({"op":"submit","op":"test","min_nodes":2})").find("op: appears twice") !=
        std::string::npos);
  CHECK(f.Ask(R"({"op":"place","min_nodes":2})").find("op: must be one of submit, test, refresh") !=
        std::string::npos);
  // Nothing was submitted: the next job is the first.
  CHECK(f.Ask(Submit(2, "topo: tp=8")).rfind("PLACE 1 ", 0) == 0);
}

TEST_CASE("slurm: small jobs without a layout pass below slurm_min_nodes") {
  Fixture f("slurm_min_nodes = 2\n");
  f.Sync(Fixture::AllIdle());
  CHECK(f.Ask(Submit(1)).rfind("PASS", 0) == 0);
  CHECK(f.Ask(Submit(1, "topo: tp=8")).rfind("PLACE", 0) == 0);
}

TEST_CASE("slurm: sync frees capacity, releases held jobs, follows and drives node state") {
  Fixture f;
  f.Sync(Fixture::AllIdle());
  std::string a = f.Ask(Submit(4));
  REQUIRE(a.rfind("PLACE 1 ", 0) == 0);
  REQUIRE(f.Ask(Submit(2)).rfind("HOLD 2 ", 0) == 0);

  // Slurm runs job 1 (toposched 1), holds job 2 (toposched 2).
  SlurmSnapshot snap = Fixture::AllIdle();
  snap.jobs.push_back(Job(101, "RUNNING", 100, {"n1", "n2", "n3", "n4"}, "toposched:1"));
  snap.jobs.push_back(Job(102, "PENDING", 0, {}, "toposched:2"));
  CHECK(f.Sync(snap).empty());
  // Job 1 ends in Slurm: the held job starts in the core, and Slurm is told.
  snap.jobs[0].state = "COMPLETED";
  auto actions = f.Sync(snap);
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].kind == SlurmAction::Kind::kRelease);
  CHECK(actions[0].slurm_job == 102);
  CHECK(actions[0].nodes.size() == 2);

  // A node busy with a job toposched did not place is kept out of placements.
  snap.jobs[1].state = "COMPLETED";
  snap.jobs.push_back(Job(103, "RUNNING", 100, {"n1", "n2", "n3"}, ""));
  f.Sync(snap);
  CHECK(f.Ask(R"({"op":"test","min_nodes":2})").rfind("BUSY", 0) == 0);
  std::string one = f.Ask(Submit(1));
  // "PLACE <id> <nodes> ranks=... map=... layout=..."
  CHECK(one.rfind("PLACE 3 n4 ranks=n4 map=0:0-7 layout=", 0) == 0);

  // The foreign job ends; n2 goes down in Slurm: n1 and n3 are free, n2 is not.
  snap.jobs.pop_back();
  snap.nodes[1].state = "DOWN*";
  CHECK(f.Sync(snap).empty());
  CHECK(f.Ask(R"({"op":"test","min_nodes":2})").rfind("PLACE 0 ", 0) == 0);
  CHECK(f.Ask(R"({"op":"test","min_nodes":3})").rfind("BUSY", 0) == 0);
}

TEST_CASE("slurm: a placed job no Slurm job carries is cancelled after the grace") {
  Fixture f;
  f.Sync(Fixture::AllIdle());
  REQUIRE(f.Ask(Submit(4)).rfind("PLACE 1 ", 0) == 0);
  f.now += 10'000;
  f.Sync(Fixture::AllIdle());
  CHECK(f.Ask(R"({"op":"test","min_nodes":1})").rfind("BUSY", 0) == 0);
  f.now += 30'000;
  f.Sync(Fixture::AllIdle());
  CHECK(f.Ask(R"({"op":"test","min_nodes":4})").rfind("PLACE 0 ", 0) == 0);
}

TEST_CASE("slurm: a job Slurm runs where the core no longer does is requeued, then released") {
  Fixture f;
  f.Sync(Fixture::AllIdle());
  REQUIRE(f.Ask(Submit(4, "topo: tp=8")).rfind("PLACE 1 ", 0) == 0);
  SlurmSnapshot snap = Fixture::AllIdle();
  snap.jobs.push_back(Job(101, "RUNNING", 100, {"n1", "n2", "n3", "n4"}, "toposched:1"));
  CHECK(f.Sync(snap).empty());
  // n4 is lost: no replacement, so the core queues the job again; Slurm
  // still runs it and is told to requeue it held.
  snap.nodes[3].state = "DOWN*";
  auto actions = f.Sync(snap);
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].kind == SlurmAction::Kind::kRequeue);
  CHECK(actions[0].slurm_job == 101);
  // Slurm holds it; n4 comes back: the core starts it, Slurm releases it
  // with its rank map in the AdminComment.
  snap.jobs[0] = Job(101, "PENDING", 0, {}, "toposched:1");
  snap.nodes[3].state = "IDLE";
  actions = f.Sync(snap);
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].kind == SlurmAction::Kind::kRelease);
  CHECK(actions[0].nodes.size() == 4);
  CHECK(actions[0].admin_comment.rfind("toposched:1 ranks=", 0) == 0);
  CHECK(actions[0].admin_comment.find(" map=") != std::string::npos);
}

TEST_CASE("slurm: --switches, --segment and --exclusive=topo") {
  Fixture f;
  f.Sync(Fixture::AllIdle());
  const std::string two = R"({"op":"test","min_nodes":2,"comment":"topo: tp=8,pp=2")";
  std::string a = f.Ask(two + R"(,"req_switch":1,"wait4switch":60})");
  CHECK((a == "PLACE 0 n1,n2" || a == "PLACE 0 n3,n4"));
  std::string b = f.Ask(R"({"op":"test","min_nodes":3,"req_switch":1})");
  CHECK(b.rfind("REJECT", 0) == 0);
  CHECK(b.find("--switches=1") != std::string::npos);
  CHECK(f.Ask(R"({"op":"test","min_nodes":3,"req_switch":2})").rfind("PLACE 0 ", 0) == 0);
  std::string c = f.Ask(two + R"(,"segment":2})");
  CHECK(c.find("--segment needs blocks") != std::string::npos);
  CHECK(f.Ask(two + R"(,"segment":3})").find("does not divide") != std::string::npos);
  // With blocks of two nodes, each pipeline (tp=8,pp=2: its two nodes) goes in one.
  auto imported = f.service->SlurmImportTopology(
      std::string(kTopology) + "BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[3-4]\n", 8, f.now);
  REQUIRE_MESSAGE(imported.ok(), imported.message());
  f.Sync(Fixture::AllIdle());
  REQUIRE(f.service->Commit().ok());
  std::string e = f.Ask(two + R"(,"segment":2})");
  CHECK_MESSAGE((e == "PLACE 0 n1,n2" || e == "PLACE 0 n3,n4"), e);
  std::string g = f.Ask(R"({"op":"test","min_nodes":4,"comment":"topo: tp=8,pp=4","segment":2})");
  CHECK_MESSAGE(g.rfind("REJECT --segment=2: no parallel group", 0) == 0, g);
  CHECK(g.find("tp 1, cp 1, ep 1, pp 4, dp 1") != std::string::npos);
  std::string d = f.Ask(two + R"(,"exclusive_topo":true})");
  CHECK(d.rfind("REJECT --exclusive=topo", 0) == 0);
}

TEST_CASE("slurm: a graceful drain signals only jobs that declared a checkpoint signal") {
  Fixture f("slurm_socket = /nonexistent/topo.sock\npreempt_grace_s = 5\n");
  f.Sync(Fixture::AllIdle());
  const std::string a = f.Ask(Submit(2, "topo: tp=8"));
  const std::string b = f.Ask(Submit(2, "topo: tp=8"));
  REQUIRE(a.rfind("PLACE 1 ", 0) == 0);
  REQUIRE(b.rfind("PLACE 2 ", 0) == 0);
  const std::vector<std::string> a_nodes = PlacedNodes(a), b_nodes = PlacedNodes(b);
  SlurmSnapshot snap = Fixture::AllIdle();
  // Job 1 declared nothing (a plain batch script); job 2 --signal=B:12@60.
  snap.jobs.push_back(Job(101, "RUNNING", 100, a_nodes, "toposched:1"));
  snap.jobs.push_back(Job(102, "RUNNING", 100, b_nodes, "toposched:2 signal=B:12"));
  CHECK(f.Sync(snap).empty());

  // Draining job 1's node: no signal, and past the grace it still runs there.
  REQUIRE(f.Drain(a_nodes[0], "graceful") == 200);
  auto actions = f.Sync(snap);
  CHECK(OfKind(actions, SlurmAction::Kind::kSignal).empty());
  CHECK(OfKind(actions, SlurmAction::Kind::kRequeue).empty());
  f.now += 60'000;
  actions = f.Sync(snap);
  CHECK(OfKind(actions, SlurmAction::Kind::kSignal).empty());
  CHECK(OfKind(actions, SlurmAction::Kind::kRequeue).empty());
  CHECK(f.State("/v1/jobs/1") == "running");
  CHECK(f.State("/v1/nodes/" + a_nodes[0]) == "draining");
  // It ends on its own: the node is drained.
  snap.jobs[0].state = "COMPLETED";
  f.Sync(snap);
  CHECK(f.State("/v1/jobs/1") == "completed");
  CHECK(f.State("/v1/nodes/" + a_nodes[0]) == "drained");

  // Draining job 2's node: its own signal, to its batch shell; after the
  // grace it moves (requeued onto its new nodes).
  REQUIRE(f.Drain(b_nodes[0], "graceful") == 200);
  actions = OfKind(f.Sync(snap), SlurmAction::Kind::kSignal);
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].slurm_job == 102);
  CHECK(actions[0].signal == topo::common::SlurmCheckpointSignal{12, true});
  f.now += 6'000;
  actions = OfKind(f.Sync(snap), SlurmAction::Kind::kRequeue);
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].slurm_job == 102);
  CHECK(std::find(actions[0].nodes.begin(), actions[0].nodes.end(), b_nodes[0]) ==
        actions[0].nodes.end());
}

TEST_CASE("slurm: a job held for capacity stays held when its user releases it") {
  Fixture f;
  f.Sync(Fixture::AllIdle());
  REQUIRE(f.Ask(Submit(4)).rfind("PLACE 1 ", 0) == 0);
  REQUIRE(f.Ask(Submit(2, "topo: tp=8")).rfind("HOLD 2 ", 0) == 0);
  SlurmSnapshot snap = Fixture::AllIdle();
  snap.jobs.push_back(Job(101, "RUNNING", 100, {"n1", "n2", "n3", "n4"}, "toposched:1"));
  // job_submit's priority 0 is a user's hold: it becomes an operator's.
  snap.jobs.push_back(Job(102, "PENDING", 0, {}, "toposched:2 signal=10", "JobHeldUser"));
  auto actions = f.Sync(snap);
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].kind == SlurmAction::Kind::kHold);
  CHECK(actions[0].slurm_job == 102);
  CHECK(actions[0].admin_comment.empty());
  snap.jobs[1].state_reason = "JobHeldAdmin";
  CHECK(f.Sync(snap).empty());

  // Released anyway (by an operator, or by its user before the hold was
  // an operator's): held again, and its AdminComment says why.
  snap.jobs[1] = Job(102, "PENDING", 4294901757, {}, "toposched:2 signal=10", "Resources");
  actions = f.Sync(snap);
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].kind == SlurmAction::Kind::kHold);
  CHECK(actions[0].admin_comment.rfind("toposched:2 signal=10 waits for capacity: released by hand",
                                       0) == 0);
  CHECK(actions[0].admin_comment.find('=', 22) == std::string::npos);
  // Slurm started it on nodes of its own choosing: requeued held, and the
  // core still has it waiting.
  snap.jobs[1] = Job(102, "RUNNING", 4294901757, {"n1", "n2"}, "toposched:2 signal=10");
  actions = f.Sync(snap);
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].kind == SlurmAction::Kind::kRequeue);
  CHECK(actions[0].nodes.empty());
  CHECK(actions[0].admin_comment.rfind("toposched:2 signal=10 waits for capacity: requeued", 0) ==
        0);
  CHECK(f.State("/v1/jobs/2") == "queued");

  // Capacity frees: the release onto the core's nodes keeps the signal token
  // and writes the rank map once.
  snap.jobs[0].state = "COMPLETED";
  snap.jobs[1] = Job(102, "PENDING", 0, {}, actions[0].admin_comment, "JobHeldAdmin");
  actions = f.Sync(snap);
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].kind == SlurmAction::Kind::kRelease);
  CHECK(actions[0].admin_comment.rfind("toposched:2 signal=10 ranks=", 0) == 0);
  CHECK(actions[0].admin_comment.find("ranks=") == actions[0].admin_comment.rfind("ranks="));
  CHECK(actions[0].admin_comment.find("waits") == std::string::npos);
}

// ------------------------------------------------------------ node selection

namespace {

// n1, n2: H100 x8 with ib; n3, n4: A100 x4 with ib and nvme; two leaves.
constexpr const char* kMixedTopology = R"({"version": 1, "name": "mixed",
  "tiers": ["node", "leaf", "spine"], "hbd": "node", "gpus_per_node": 8, "gpu_model": "H100",
  "domains": [{"name": "s", "children": [
    {"name": "l1", "nodes": [{"name": "n1", "features": ["ib"]},
                             {"name": "n2", "features": ["ib"]}]},
    {"name": "l2", "nodes": [{"name": "n3", "gpus": 4, "gpu_model": "A100",
                              "features": ["ib", "nvme"]},
                             {"name": "n4", "gpus": 4, "gpu_model": "A100",
                              "features": ["ib", "nvme"]}]}]}]})";

void UseMixedTopology(Fixture& f) {
  const nlohmann::json body = {{"format", "json"}, {"content", kMixedTopology}};
  REQUIRE(f.Call("PUT", "/v1/topology", body.dump()) == 200);
  f.Sync(Fixture::AllIdle());
}

// An op:test line with these fields.
std::string Test(const nlohmann::json& fields) {
  nlohmann::json line = {{"v", 1}, {"op", "test"}, {"uid", 1000}, {"name", "sel"}, {"env", {}}};
  line.update(fields);
  return line.dump();
}

bool Printable(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

}  // namespace

TEST_CASE("slurm: the GPUs of a TRES string, in every form Slurm writes") {
  struct Row {
    const char* tres;
    int64_t count;
    std::vector<std::string> types;
  };
  const std::vector<Row> rows = {
      {"gres:gpu:h100:8", 8, {"h100"}},  // 22.05: --gres=gpu:h100:8, --gpus-per-node=h100:8
      {"gres/gpu:h100:8", 8, {"h100"}},  // 23.02 on
      {"gres/gpu:h100=8", 8, {"h100"}},  // the TRES form
      {"gres/gpu=8", 8, {}},
      {"gres:gpu:8", 8, {}},           // untyped: no type
      {"gres:gpu:h100", 1, {"h100"}},  // a type without a count: one
      {"gres:gpu", 1, {}},
      {"gpu:4", 4, {}},
      {"gres:gpu:a100_80gb:4", 4, {"a100_80gb"}},
      {"gres:nvme:1,gres:gpu:h100-sxm:2", 2, {"h100-sxm"}},  // other GRES are skipped
      {"gres:gpu:h100:8,gres:gpu:H200:8", 8, {"h100", "H200"}},
      {"gres:gpu:h100:8;gres:gpu:H100:8", 8, {"h100"}},  // one type, any spelling
      {"gres:gpu:0", -1, {}},
      {"cpu=4", -1, {}},
      {"", -1, {}},
      {"gres:gpus:8", -1, {}},  // not "gpu"
  };
  for (const Row& r : rows) {
    CAPTURE(r.tres);
    auto g = ParseSlurmTresGpus(r.tres, "tres_per_node");
    REQUIRE_MESSAGE(g.ok(), g.message());
    CHECK(g.value().count == r.count);
    CHECK(g.value().types == r.types);
  }

  struct Hostile {
    std::string tres;
    const char* message;
  };
  const std::vector<Hostile> hostile = {
      {"gres:gpu:h100:8,gres:gpu:a100:4", "give every type the same count"},
      {"gres:gpu:" + std::string(65, 'h') + ":8", "is 65 bytes; at most 64"},
      {"gres:gpu:h1\x01"
       "00:8",
       "is not a type name"},
      {"gres:gpu:h100:x", "is not a whole number"},
      {"gres:gpu:h100:99999999999999999999", "is not a whole number"},
      {"gres:gpu:h100:-1", "is not a whole number"},
      {"gres:gpu::8", "empty GPU type"},
      {"gres:gpu:h100?:8", "is not a type name"},  // the plugin's '?' for a byte above 0x7e
  };
  for (const Hostile& h : hostile) {
    CAPTURE(h.tres);
    auto g = ParseSlurmTresGpus(h.tres, "tres_per_node");
    REQUIRE_FALSE(g.ok());
    CHECK_MESSAGE(g.message().rfind("tres_per_node (--gres, --gpus-per-node): ", 0) == 0,
                  g.message());
    CHECK_MESSAGE(g.message().find(h.message) != std::string::npos, g.message());
    CHECK(Printable(g.message()));
    CHECK(g.message().size() < 600);
  }
  CHECK(ParseSlurmTresGpus("gres:gpu:x y:1", "tres_per_task")
            .message()
            .rfind("tres_per_task (--gpus-per-task): ", 0) == 0);
}

TEST_CASE("slurm: -C is an AND of features, anything richer is refused by name") {
  CHECK(ParseSlurmFeatures("ib").value() == std::vector<std::string>{"ib"});
  CHECK(ParseSlurmFeatures("ib&nvme").value() == std::vector<std::string>{"ib", "nvme"});
  // 22.05 reads a comma as AND too (sbatch --test-only -C a,b: only nodes with both).
  CHECK(ParseSlurmFeatures("ib,nvme").value() == std::vector<std::string>{"ib", "nvme"});
  CHECK(ParseSlurmFeatures("ib&ib").value() == std::vector<std::string>{"ib"});
  CHECK(ParseSlurmFeatures("gpu80g&cpu.v4-x").ok());

  std::string many;
  for (int i = 0; many.size() < 10000; ++i) many += (i ? "&f" : "f") + std::to_string(i);
  struct Hostile {
    std::string features;
    const char* message;
  };
  const std::vector<Hostile> hostile = {
      {"a|b", "is more than an AND of features"},
      {"[rack1|rack2]", "brackets"},
      {"[rack1*2&rack2*4]", "counts (*N, :N)"},
      {"ib:2", "is more than an AND"},
      {"(a&b)|c", "parentheses"},
      {"!a", "NOT (!)"},
      {std::string(10000, 'a'), "is 10000 bytes; at most 64"},
      {std::string(10000, '|'), "is more than an AND"},
      {many, "more than 64 features"},
      {"a&&b", "an empty feature"},
      {"ib&", "an empty feature"},
      {"ib nvme", "is not a feature name"},
      {"ib\x1b", "is not a feature name"},
      {"ib\n", "is not a feature name"},
      {"caf\xc3\xa9", "is not a feature name"},
  };
  for (const Hostile& h : hostile) {
    CAPTURE(h.features.substr(0, 40));
    auto r = ParseSlurmFeatures(h.features);
    REQUIRE_FALSE(r.ok());
    CHECK_MESSAGE(r.message().rfind("features (-C/--constraint): ", 0) == 0, r.message());
    CHECK_MESSAGE(r.message().find(h.message) != std::string::npos, r.message());
    CHECK(Printable(r.message()));
    CHECK(r.message().size() < 1000);  // the plugin shows up to 2 KiB
  }
  CHECK(ParseSlurmFeatures("a|b").message().find("-C ib&nvme") != std::string::npos);
}

TEST_CASE("slurm: -w and -x are hostlists of node names, errors name the field") {
  CHECK(ParseSlurmNodeList("n[1-2],x", "req_nodes").value() ==
        std::vector<std::string>{"n1", "n2", "x"});
  struct Hostile {
    std::string list;
    const char* field;
    const char* message;
  };
  const std::vector<Hostile> hostile = {
      {"n1\x07", "req_nodes (-w/--nodelist): ", "is not a node name"},
      {"n[1-", "req_nodes (-w/--nodelist): ", "is not a hostlist"},
      {"n[2-1]", "exc_nodes (-x/--exclude): ", "is not a hostlist"},
      {"-n1", "exc_nodes (-x/--exclude): ", "is not a node name"},
      {std::string(65, 'n'), "req_nodes (-w/--nodelist): ", "1-64 bytes"},
      {"n[1-200000]", "req_nodes (-w/--nodelist): ", "is not a hostlist"},
  };
  for (const Hostile& h : hostile) {
    CAPTURE(h.list.substr(0, 40));
    const std::string field(h.field, std::string_view(h.field).find(' '));
    auto r = ParseSlurmNodeList(h.list, field);
    REQUIRE_FALSE(r.ok());
    CHECK_MESSAGE(r.message().rfind(h.field, 0) == 0, r.message());
    CHECK_MESSAGE(r.message().find(h.message) != std::string::npos, r.message());
    CHECK(Printable(r.message()));
  }

  // One line: duplicates go, and a node both listed and excluded is refused.
  topo::api::SlurmSubmitLine line;
  line.req_nodes = "n[1-2],n1";
  line.exc_nodes = "n3";
  line.tres_per_node = "gres:gpu:h100:8";
  line.tres_per_task = "gres:gpu:H100:1";
  line.tres_per_socket = "gres:gpu:h200:1";
  auto sel = ReadSlurmSelection(line);
  REQUIRE_MESSAGE(sel.ok(), sel.message());
  CHECK(sel.value().selection.nodelist == std::vector<std::string>{"n1", "n2"});
  CHECK(sel.value().selection.exclude == std::vector<std::string>{"n3"});
  CHECK(sel.value().selection.gpu_types == std::vector<std::string>{"h100", "h200"});
  CHECK(sel.value().gpus_per_node == 8);
  CHECK(sel.value().gpus_per_job == -1);
  line.exc_nodes = "n2";
  CHECK(ReadSlurmSelection(line).message() ==
        "req_nodes (-w) and exc_nodes (-x) both name node \"n2\"; leave it out of one of them");
}

TEST_CASE("slurm: GPU type, features, -w and -x reach the job spec and its placement") {
  Fixture f;
  UseMixedTopology(f);
  auto placed = [](const std::string& a) {
    return a.rfind("PLACE 0 ", 0) == 0 ? a.substr(8) : "(" + a + ")";
  };
  // GPU types pick the part; whole nodes of that type.
  CHECK(placed(f.Ask(Test({{"min_nodes", 2}, {"tres_per_node", "gres:gpu:h100:8"}}))) == "n1,n2");
  CHECK(placed(f.Ask(Test({{"min_nodes", 2}, {"tres_per_node", "gres:gpu:a100:4"}}))) == "n3,n4");
  // --gpus=a100:8 and no -N: two of the A100 nodes' 4 GPUs.
  CHECK(placed(f.Ask(Test({{"tres_per_job", "gres:gpu:a100:8"}}))) == "n3,n4");
  CHECK(placed(f.Ask(Test({{"tres_per_job", "gres/gpu:H100=16"}}))) == "n1,n2");
  const std::string task =
      placed(f.Ask(Test({{"min_nodes", 1}, {"tres_per_task", "gres:gpu:a100:1"}})));
  CHECK((task == "n3" || task == "n4"));
  // A type the cluster lacks: refused with the cluster's types.
  const std::string b200 = f.Ask(Test({{"min_nodes", 1}, {"tres_per_node", "gres:gpu:b200:8"}}));
  CHECK_MESSAGE(b200.rfind("REJECT the job can never be placed on this cluster with GPU type b200 "
                           "(--gres/--gpus): ",
                           0) == 0,
                b200);
  CHECK_MESSAGE(b200.find("this cluster has no 'b200' GPUs; its GPU types are H100, A100") !=
                    std::string::npos,
                b200);

  // Features: all of them; nodes of 4 GPUs for nvme.
  CHECK(placed(f.Ask(Test({{"min_nodes", 2}, {"features", "nvme"}}))) == "n3,n4");
  CHECK(placed(f.Ask(Test({{"min_nodes", 2}, {"features", "ib&nvme"}}))) == "n3,n4");
  CHECK(placed(f.Ask(Test({{"min_nodes", 2}, {"features", "ib,nvme"}}))) == "n3,n4");
  const std::string unknown = f.Ask(Test({{"min_nodes", 1}, {"features", "gpu80g"}}));
  CHECK_MESSAGE(unknown.find("no node has feature 'gpu80g'; the features here are ib, nvme") !=
                    std::string::npos,
                unknown);
  const std::string either = f.Ask(Test({{"min_nodes", 1}, {"features", "ib|nvme"}}));
  CHECK_MESSAGE(either.rfind("REJECT features (-C/--constraint): \"ib|nvme\" is more than", 0) == 0,
                either);
  const std::string huge = f.Ask(Test({{"min_nodes", 1}, {"features", std::string(10000, 'f')}}));
  CHECK(huge.rfind("REJECT features (-C/--constraint): ", 0) == 0);
  CHECK(huge.size() < 1000);

  // -w: exactly those nodes (their GPUs, whole); -x: never those.
  CHECK(placed(f.Ask(Test({{"req_nodes", "n[3-4]"}, {"min_nodes", 2}}))) == "n3,n4");
  CHECK(placed(f.Ask(Test({{"req_nodes", "n2"}}))) == "n2");
  const std::string more = f.Ask(Test({{"req_nodes", "n1"}, {"min_nodes", 2}}));
  CHECK_MESSAGE(
      more.rfind("REJECT req_nodes (-w) names 1 node(s) and the job asks for 2 (-N)", 0) == 0,
      more);
  const std::string mixed = f.Ask(Test({{"req_nodes", "n[2-3]"}}));
  CHECK_MESSAGE(mixed.rfind("REJECT the job can never be placed", 0) == 0, mixed);
  CHECK(placed(f.Ask(
            Test({{"min_nodes", 1}, {"exc_nodes", "n3"}, {"tres_per_node", "gres:gpu:a100:4"}}))) ==
        "n4");
  // Excluding a node toposched does not know changes nothing.
  CHECK(placed(f.Ask(Test(
            {{"min_nodes", 2}, {"exc_nodes", "n99"}, {"tres_per_node", "gres:gpu:a100:4"}}))) ==
        "n3,n4");
  CHECK(f.Ask(Test({{"req_nodes", "n9"}})).rfind("PASS the job names node n9 (-w)", 0) == 0);
  const std::string bell = f.Ask(Test({{"req_nodes", "n1\x07"}}));
  CHECK_MESSAGE(
      bell.rfind("REJECT req_nodes (-w/--nodelist): node \"n1\\x07\" is not a node name", 0) == 0,
      bell);
  CHECK(Printable(bell));
  CHECK(f.Ask(Test({{"exc_nodes", "n[1-"}, {"min_nodes", 1}}))
            .rfind("REJECT exc_nodes (-x/--exclude): \"n[1-\" is not a hostlist", 0) == 0);
  CHECK(f.Ask(Test({{"req_nodes", "n1"}, {"exc_nodes", "n1"}}))
            .rfind("REJECT req_nodes (-w) and exc_nodes (-x) both name node", 0) == 0);
  const std::string long_type =
      f.Ask(Test({{"min_nodes", 1}, {"tres_per_node", "gres:gpu:" + std::string(65, 'h') + ":8"}}));
  CHECK_MESSAGE(
      long_type.rfind("REJECT tres_per_node (--gres, --gpus-per-node): the GPU type ", 0) == 0,
      long_type);

  // Submitted: the toposched job's spec carries the selection.
  const std::string a = f.Ask(R"({"v":1,"op":"submit","uid":1000,"name":"typed","min_nodes":2,)"
                              R"("tres_per_node":"gres:gpu:h100:8","features":"ib",)"
                              R"("exc_nodes":"n3","env":{}})");
  REQUIRE_MESSAGE(a.rfind("PLACE 1 ", 0) == 0, a);
  const nlohmann::json job = f.Get("/v1/jobs/1");
  REQUIRE_MESSAGE(job.contains("spec"), job.dump());
  CHECK(job["spec"]["gpu_types"] == nlohmann::json::array({"h100"}));
  CHECK(job["spec"]["features"] == nlohmann::json::array({"ib"}));
  CHECK(job["spec"]["exclude"] == "n3");
  CHECK(job["spec"]["gpus_per_node"] == 8);
}

TEST_CASE("slurm: what toposched's topology cannot tell, Slurm places") {
  Fixture f;  // topology.conf: no GPU models, no features
  f.Sync(Fixture::AllIdle());
  CHECK(f.Ask(Test({{"min_nodes", 2}, {"tres_per_node", "gres:gpu:h100:8"}}))
            .rfind("PASS the job asks for GPU type h100 and toposched's topology names no GPU "
                   "models",
                   0) == 0);
  CHECK(f.Ask(Test({{"min_nodes", 2}, {"features", "ib"}}))
            .rfind("PASS the job asks for features (-C ib)", 0) == 0);
  // Untyped GPUs and plain jobs are toposched's as before.
  CHECK(f.Ask(Test({{"min_nodes", 2}, {"tres_per_node", "gres:gpu:8"}})).rfind("PLACE 0 ", 0) == 0);
  // #toposched: model=H100 in the topology.conf: types are read.
  REQUIRE(
      f.service->SlurmImportTopology(std::string("#toposched: model=H100\n") + kTopology, 8, f.now)
          .ok());
  f.Sync(Fixture::AllIdle());
  CHECK(
      f.Ask(Test({{"min_nodes", 2}, {"tres_per_node", "gres:gpu:h100:8"}})).rfind("PLACE 0 ", 0) ==
      0);
  CHECK(f.Ask(Test({{"min_nodes", 2}, {"tres_per_node", "gres:gpu:a100:8"}}))
            .find("its GPU types are H100") != std::string::npos);
}

TEST_CASE("slurm: a job that is not toposched's passes before its selection is read") {
  Fixture f("slurm_min_nodes = 2\n");
  UseMixedTopology(f);
  CHECK(f.Ask(Test({{"min_nodes", 1}, {"features", "a|b"}})).rfind("PASS", 0) == 0);
  CHECK(f.Ask(Test({{"min_nodes", 1}, {"array", true}, {"req_nodes", "n["}})).rfind("PASS", 0) ==
        0);
  CHECK(f.Ask(Test({{"min_nodes", 2}, {"features", "a|b"}})).rfind("REJECT features", 0) == 0);
  // -w of two nodes is two nodes, whatever -N said (sbatch sets it from -w).
  CHECK(f.Ask(Test({{"req_nodes", "n[1-2]"}})).rfind("PLACE 0 n1,n2", 0) == 0);
}

TEST_CASE("slurm: -p places the job in toposched's partition of that name, others are ignored") {
  Fixture f;
  f.Sync(Fixture::AllIdle());
  REQUIRE(f.Call("POST", "/v1/partitions",
                 R"({"name":"gpu","nodes":"n[3-4]","max_time_s":3600,"tenants":["default"]})") ==
          201);
  // The partition of that name: its nodes.
  const std::string a = f.Ask(Submit(2, "", R"(,"partition":"gpu","time_limit_min":30)"));
  REQUIRE_MESSAGE(a.rfind("PLACE 1 ", 0) == 0, a);
  CHECK(PlacedNodes(a) == std::vector<std::string>{"n3", "n4"});
  CHECK(f.Get("/v1/jobs/1")["partition"] == "gpu");
  // Slurm's list: the first partition toposched has. Its nodes are taken,
  // so the job waits for them rather than run on n1, n2.
  const std::string b = f.Ask(Submit(2, "", R"(,"partition":"debug,gpu","time_limit_min":30)"));
  CHECK_MESSAGE(b.rfind("HOLD 2 ", 0) == 0, b);
  // A Slurm partition toposched has none of, and no default partition:
  // Slurm's own partitions place it.
  const std::string pass = f.Ask(Submit(2, "", R"(,"partition":"normal","time_limit_min":10)"));
  CHECK_MESSAGE(pass.rfind("PASS the job's partition (normal) is none of toposched's", 0) == 0,
                pass);
  // With a default partition it runs there instead, the Slurm one ignored.
  REQUIRE(f.Call("POST", "/v1/partitions", R"({"name":"rest","nodes":"n[1-2]","default":true})") ==
          201);
  const std::string c = f.Ask(Submit(2, "", R"(,"partition":"normal","time_limit_min":10)"));
  CHECK_MESSAGE(c.rfind("PLACE 3 ", 0) == 0, c);
  CHECK(PlacedNodes(c) == std::vector<std::string>{"n1", "n2"});
  CHECK(f.Get("/v1/jobs/3")["partition"] == "rest");
  // The partition's bounds hold for Slurm jobs too: refused naming it.
  const std::string d = f.Ask(Submit(1, "", R"(,"partition":"gpu","time_limit_min":120)"));
  CHECK_MESSAGE(d.rfind("REJECT ", 0) == 0, d);
  CHECK_MESSAGE(d.find("gpu") != std::string::npos, d);
  CHECK(d.find('\n') == std::string::npos);
}

TEST_CASE("slurm: SlurmPartition reads Slurm's -p list against toposched's partitions") {
  topo::core::TopologyBuilder b("t", {"node", "leaf"}, 0);
  const int leaf = b.AddDomain("l0", 1, topo::core::TopologyBuilder::kTop);
  for (const char* n : {"n1", "n2"}) b.AddNode(n, leaf, 8);
  const topo::core::Topology topo = std::move(b).Build().value();
  topo::core::NodeSets sets(topo);
  topo::core::PartitionConfig gpu;
  gpu.name = "gpu";
  gpu.nodes = {"n1"};
  REQUIRE(sets.ConfigurePartition(gpu).ok());
  topo::core::PartitionConfig big = gpu;
  big.name = "big";
  big.nodes = {"n1", "n2"};
  REQUIRE(sets.ConfigurePartition(big).ok());
  CHECK(SlurmPartition(std::nullopt, sets).empty());
  CHECK(SlurmPartition(std::string(), sets).empty());
  CHECK(SlurmPartition(std::string("gpu"), sets) == "gpu");
  CHECK(SlurmPartition(std::string("normal"), sets).empty());
  CHECK(SlurmPartition(std::string("normal,big,gpu"), sets) == "big");
  CHECK(SlurmPartition(std::string(",,gpu,"), sets) == "gpu");
  CHECK(SlurmPartition(std::string("GPU"), sets).empty());  // names are exact, as Slurm's
}
