// Unit tests of Slurm mode: scontrol parsing, the plugin's requests and the
// sync, on a real Service over a temp SQLite store (no Slurm needed; the
// real-Slurm tests are tests/slurm).

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "daemon/config.hpp"
#include "daemon/service.hpp"
#include "daemon/slurm/slurm_bridge.hpp"

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
  static SlurmSnapshot AllIdle() {
    SlurmSnapshot snap;
    for (const char* n : {"n1", "n2", "n3", "n4"}) snap.nodes.push_back({n, "IDLE", ""});
    return snap;
  }
};

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
  auto jobs = ParseScontrolJobs(
      "JobId=7 JobName=x Priority=0 JobState=PENDING NodeList= AdminComment=toposched:3 \n"
      "JobId=8 JobState=RUNNING Priority=100 NodeList=n[1-2] AdminComment=toposched:4 "
      "ranks=n2,n1 \nNo jobs in the system\n");
  REQUIRE(jobs.size() == 2);
  CHECK(jobs[0].priority == 0);
  CHECK(jobs[0].admin_comment == "toposched:3");
  CHECK(jobs[1].nodes == std::vector<std::string>{"n1", "n2"});
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
  CHECK(f.Ask(Submit(2, "", R"(,"req_nodes":"n1,n2")")).rfind("PASS", 0) == 0);
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
  snap.jobs.push_back({101, "RUNNING", 100, {"n1", "n2", "n3", "n4"}, "toposched:1"});
  snap.jobs.push_back({102, "PENDING", 0, {}, "toposched:2"});
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
  snap.jobs.push_back({103, "RUNNING", 100, {"n1", "n2", "n3"}, ""});
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
  snap.jobs.push_back({101, "RUNNING", 100, {"n1", "n2", "n3", "n4"}, "toposched:1"});
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
  snap.jobs[0] = {101, "PENDING", 0, {}, "toposched:1"};
  snap.nodes[3].state = "IDLE";
  actions = f.Sync(snap);
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].kind == SlurmAction::Kind::kRelease);
  CHECK(actions[0].nodes.size() == 4);
  CHECK(actions[0].reason.rfind("toposched:1 ranks=", 0) == 0);
  CHECK(actions[0].reason.find(" map=") != std::string::npos);
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
