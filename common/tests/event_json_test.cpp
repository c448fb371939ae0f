// Events and commands as JSON: every alternative round-trips, through text
// too; a log written under one node numbering reads back under another; the
// readers reject what they should and say where.

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "topo/common/event_json.hpp"
#include "topo/common/job_io.hpp"

using namespace topo;
using core::Command;
using core::Event;
using nlohmann::json;

namespace {

// 2 leaves x 2 nodes x 4 GPUs; `reversed` adds the nodes in the opposite
// order, so every node name has another id.
core::Topology MakeTopology(bool reversed = false) {
  core::TopologyBuilder b("ej", {"node", "leaf"}, 0);
  int l0 = b.AddDomain("leaf0", 1, core::TopologyBuilder::kTop);
  int l1 = b.AddDomain("leaf1", 1, core::TopologyBuilder::kTop);
  std::vector<std::pair<std::string, int>> nodes = {{"a0", l0}, {"a1", l0}, {"b0", l1}, {"b1", l1}};
  if (reversed) std::reverse(nodes.begin(), nodes.end());
  for (const auto& [name, leaf] : nodes) b.AddNode(name, leaf, 4);
  return std::move(b).Build().value();
}

core::JobRequest MakeRequest() {
  core::JobRequest r;
  r.spec.name = "moe";
  r.spec.gpus = 8;
  r.spec.parallelism.tp = 2;
  r.spec.parallelism.ep = 2;
  r.spec.parallelism.pp = 2;
  r.spec.parallelism.dp = 2;
  r.spec.spares = 1;
  r.tenant = "org/team";
  r.user = "ada";
  r.priority = -3;
  r.time_limit = 2 * core::kHour;
  r.checkpoint_interval = -1;
  r.command = {"/usr/bin/python3", "train.py", "--steps", "10"};
  r.process.launch = core::LaunchMode::kNode;
  r.process.env = {{"NCCL_DEBUG", "INFO"}};
  r.process.working_dir = "/srv/run";
  r.process.output = "out-%j-%r.log";
  return r;
}

core::PartitionConfig PartitionOf() {
  return {
      "gpu", {"a0", "a1", "b0"}, 4 * core::kHour, 48 * core::kHour, 16, {"org", "lab/x"}, -10, true,
      true};
}

core::ReservationConfig ReservationOf() {
  return {"maint-1", {"b1", "a0"}, 1795000000000, 1795003600000, {"org/team"}, true};
}

// A request naming a partition and a reservation.
core::JobRequest InSets() {
  core::JobRequest r = MakeRequest();
  r.partition = "gpu";
  r.reservation = "maint-1";
  return r;
}

std::vector<Event> SampleEvents(const core::Topology& t) {
  const core::NodeId b1 = t.FindNode("b1");
  return {
      core::JobSubmitted{7, MakeRequest()},
      core::JobCancelled{7, "user asked"},
      core::JobHoldChanged{7, true},
      core::JobFinished{7, -9},
      core::RankExited{7, 3, 137},
      core::CheckpointCompleted{7, 1234567890123},
      core::NodeStateRequested{b1, core::NodeState::kDraining, "maintenance"},
      core::Heartbeat{t.FindNode("a0")},
      core::GpuEvent{b1, 3, core::GpuEventKind::kXid, 79},
      core::GpuEvent{b1, 0, core::GpuEventKind::kEccSingleBit, 120},
      core::TenantConfigured{
          core::TenantConfig{"org/team", 16, -1, 64, 3, 0.1, 0, 0, {{"gb200", {64, 0, 2}}}}},
      core::Tick{},
      core::NodeEvacuated{b1, "agent stopped its ranks"},
      core::JobLaunchFailed{7, b1, "no Unix account 'ada' on b1", true},
      core::NodeStatesRequested{{{b1, core::NodeState::kDown, "agent silent for 3000 ms"},
                                 {t.FindNode("a1"), core::NodeState::kSuspect, ""}}},
      core::PolicyChanged{core::SchedulingPolicy::Of(*core::SchedulerConfig::ForStack("toposched")),
                          "preempt_grace_s", "120", "5"},
      core::StartUnacknowledged{7, {b1, t.FindNode("a1")}, 600000},
      core::PartitionConfigured{core::PartitionConfig{
          "gpu", {"a0", "b1"}, 3600000, 172800000, 64, {"org/team"}, 5, true, true}},
      core::PartitionDeleted{"gpu"},
      core::ReservationConfigured{
          core::ReservationConfig{"maint", {"b1"}, 1795000000000, 1795003600000, {}, true}},
      core::ReservationDeleted{"maint"},
      core::JobSubmitted{8, InSets()},
  };
}

core::Launch LaunchOf(const std::vector<core::GpuSlot>& ranks, int64_t step, int restarts,
                      int port) {
  core::Launch l;
  l.checkpoint_step = step;
  l.restart_count = restarts;
  l.master_port = port;
  l.world_size = static_cast<int>(ranks.size());
  l.nodes = core::GroupByNode(ranks);
  l.master_node = ranks.empty() ? -1 : ranks[0].node;
  return l;
}

std::vector<Command> SampleCommands(const core::Topology& t) {
  const core::NodeId a0 = t.FindNode("a0"), a1 = t.FindNode("a1"), b0 = t.FindNode("b0");
  std::vector<core::GpuSlot> ranks = {{a0, 0}, {a0, 1}, {a1, 3}, {b0, 2}};
  return {
      core::StartJob{7, ranks, {b0}, LaunchOf(ranks, -1, 0, 20000)},
      core::RestartJob{7, ranks, {}, LaunchOf(ranks, 42, 2, 20001)},
      core::StopJob{7, "time limit reached"},
      core::RequestCheckpoint{7, "periodic"},
      core::DrainNode{a1, "a1 GPU 0 failed (XID 79)"},
      core::NodeStateChanged{a1, core::NodeState::kSuspect, "no heartbeat for 3 s"},
      core::GpuHealthChanged{a1, 0, core::GpuHealth::kFailed, "XID 79"},
      core::JobStateChanged{7, core::JobState::kRejected, "tp must divide gpus"},
  };
}

template <typename Variant>
void CheckEveryAlternative(const std::vector<Variant>& samples) {
  std::set<size_t> seen;
  for (const Variant& v : samples) seen.insert(v.index());
  CHECK(seen.size() == std::variant_size_v<Variant>);
}

}  // namespace

TEST_CASE("every event round-trips, as JSON and as text") {
  const core::Topology t = MakeTopology();
  std::vector<Event> events = SampleEvents(t);
  CheckEveryAlternative(events);
  for (const Event& e : events) {
    json j = common::EventToJson(e, t);
    CAPTURE(j.dump());
    CHECK(j.at("type") == common::EventTypeName(e));
    // EventTypeNames lists the same names, by the alternative's index.
    REQUIRE(e.index() < common::EventTypeNames().size());
    CHECK(common::EventTypeNames()[e.index()] == common::EventTypeName(e));
    core::Result<Event> back = common::EventFromJson(json::parse(j.dump()), t);
    REQUIRE(back.ok());
    CHECK(back.value().index() == e.index());
    CHECK(common::EventToJson(back.value(), t) == j);
  }
}

TEST_CASE("partitions, reservations and a request's partition keep every field") {
  const core::Topology t = MakeTopology();
  core::Result<Event> p = common::EventFromJson(
      json::parse(common::EventToJson(core::PartitionConfigured{PartitionOf()}, t).dump()), t);
  REQUIRE_MESSAGE(p.ok(), p.message());
  CHECK(std::get<core::PartitionConfigured>(p.value()).partition == PartitionOf());
  core::Result<Event> r = common::EventFromJson(
      json::parse(common::EventToJson(core::ReservationConfigured{ReservationOf()}, t).dump()), t);
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(std::get<core::ReservationConfigured>(r.value()).reservation == ReservationOf());
  const json named = common::JobRequestToJson(InSets());
  CHECK(named.at("partition") == "gpu");
  CHECK(named.at("reservation") == "maint-1");
  core::Result<core::JobRequest> back = common::JobRequestFromJson(named);
  REQUIRE_MESSAGE(back.ok(), back.message());
  CHECK(back.value().partition == "gpu");
  CHECK(back.value().reservation == "maint-1");
  // A request naming neither writes neither, so logs written before read
  // as they did.
  const json plain = common::JobRequestToJson(MakeRequest());
  CHECK_FALSE(plain.contains("partition"));
  CHECK_FALSE(plain.contains("reservation"));
  CHECK(common::JobRequestFromJson(plain).value().partition.empty());
}

TEST_CASE("the node-set readers hold names, nodes, tenants and times to their rules") {
  const core::Topology t = MakeTopology();
  const json partition = common::EventToJson(core::PartitionConfigured{PartitionOf()}, t);
  const json reservation = common::EventToJson(core::ReservationConfigured{ReservationOf()}, t);
  struct Case {
    const char* what;
    json event;
    std::string message;
  };
  auto with = [](json j, const char* part, const char* key, json value) {
    j[part][key] = std::move(value);
    return j;
  };
  const Case cases[] = {
      {"a node name with an ESC",
       with(partition, "partition", "nodes", json::array({"a0", "a\x1b[2J"})),
       "partition.nodes[1]: \"a\\x1b[2J\" is not a node name"},
      {"a node name starting with -", with(partition, "partition", "nodes", json::array({"-a0"})),
       "partition.nodes[0]: \"-a0\" is not a node name"},
      {"100001 nodes",
       with(partition, "partition", "nodes", json(std::vector<std::string>(100001, "a0"))),
       "partition.nodes: must be an array of at most 100000 names"},
      {"a tenant not a tenant name", with(partition, "partition", "tenants", json::array({"Org"})),
       "partition.tenants[0]: \"Org\" is not a tenant name"},
      {"a tenant path escaping", with(partition, "partition", "tenants", json::array({"../etc"})),
       "is not a tenant name"},
      {"a tenant of 129 bytes",
       with(partition, "partition", "tenants", json::array({std::string(129, 't')})),
       "partition.tenants[0]: must be a name of 1 to 128 bytes"},
      {"1001 tenants",
       with(partition, "partition", "tenants", json(std::vector<std::string>(1001, "org"))),
       "partition.tenants: must be an array of at most 1000 names"},
      {"a time past the year 9999", with(partition, "partition", "max_time_ms", 253402300800000),
       "\"max_time_ms\" must be an integer 0..253402300799999"},
      {"a negative end", with(reservation, "reservation", "end_ms", -5), "\"end_ms\""},
      {"a start past the year 9999", with(reservation, "reservation", "start_ms", int64_t{1} << 62),
       "\"start_ms\""},
      {"a name starting with -", with(partition, "partition", "name", "-gpu"),
       "partition.name: '-gpu' may not start with '-' or '.'"},
      {"a name with a slash", with(reservation, "reservation", "name", "a/b"),
       "reservation.name: 'a/b' has a character outside"},
      {"a name of 65 bytes", with(partition, "partition", "name", std::string(65, 'p')),
       "partition.name: a name is 1 to 64"},
      {"a deleted name with a blank", json{{"type", "partition_deleted"}, {"name", "a b"}},
       "name: 'a b' has a character outside"},
      {"a deleted name starting with .", json{{"type", "reservation_deleted"}, {"name", ".r"}},
       "name: '.r' may not start"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    core::Result<Event> e = common::EventFromJson(c.event, t);
    REQUIRE_FALSE(e.ok());
    CHECK_MESSAGE(e.message().find(c.message) != std::string::npos, e.message());
  }
  // A request's partition and reservation: names by the same rule.
  const json request = common::JobRequestToJson(InSets());
  for (const auto& [key, value] :
       {std::pair<const char*, json>{"partition", 5},
        std::pair<const char*, json>{"partition", "-x"},
        std::pair<const char*, json>{"reservation", json::array()},
        std::pair<const char*, json>{"reservation", "a b"},
        std::pair<const char*, json>{"reservation", std::string(65, 'r')}}) {
    json bad = request;
    bad[key] = value;
    CAPTURE(bad.dump());
    core::Result<core::JobRequest> got = common::JobRequestFromJson(bad);
    REQUIRE_FALSE(got.ok());
    CHECK(got.message().rfind(std::string(key) + ": ", 0) == 0);
  }
}

TEST_CASE("a tenant's per-partition limits round-trip, and their reader holds every rule") {
  core::TenantConfig a{"org/a", 8, -1, 0, 0, 1.0};
  a.partitions["gb200"] = {.max_gpus = 64, .max_job_gpus = 32, .max_running_jobs = 4};
  a.partitions["debug"] = {.max_running_jobs = 1};
  const json j = common::TenantConfigToJson(a);
  CHECK(j.at("partitions") ==
        json::parse(R"({"debug": {"max_gpus": 0, "max_job_gpus": 0, "max_running_jobs": 1},
                        "gb200": {"max_gpus": 64, "max_job_gpus": 32, "max_running_jobs": 4}})"));
  core::Result<core::TenantConfig> back = common::TenantConfigFromJson(json::parse(j.dump()));
  REQUIRE_MESSAGE(back.ok(), back.message());
  CHECK(back.value().partitions == a.partitions);
  CHECK(common::TenantConfigToJson(back.value()) == j);
  // None is written as {}; a log from before the limits has no key: none.
  CHECK(common::TenantConfigToJson(core::TenantConfig{"b"}).at("partitions") == json::object());
  json older = j;
  older.erase("partitions");
  REQUIRE(common::TenantConfigFromJson(older).ok());
  CHECK(common::TenantConfigFromJson(older).value().partitions.empty());

  // Hostile values, each alone.
  auto with = [&](json partitions) {
    json bad = j;
    bad["partitions"] = std::move(partitions);
    return bad;
  };
  const json ok_limits = {{"max_gpus", 1}, {"max_job_gpus", 0}, {"max_running_jobs", 0}};
  auto limits = [&](const char* key, json value) {
    json l = ok_limits;
    l[key] = std::move(value);
    return json{{"gb", l}};
  };
  json many = json::object();
  for (int i = 0; i <= 1000; ++i) many["p" + std::to_string(i)] = ok_limits;
  json unknown_key = ok_limits;
  unknown_key["max_nodes"] = 1;
  json missing = ok_limits;
  missing.erase("max_job_gpus");
  struct Case {
    const char* what;
    json tenant;
    std::string message;
  };
  const Case cases[] = {
      {"an array", with(json::array({ok_limits})), "partitions: must be an object"},
      {"a string", with("gb:64"), "partitions: must be an object"},
      {"limits a number", with({{"gb", 64}}), "partitions.gb: must be a JSON object"},
      {"a name starting with -", with({{"-gb", ok_limits}}), "partitions: '-gb' may not start"},
      {"a name with a slash", with({{"a/b", ok_limits}}), "partitions: 'a/b' has a character"},
      {"a name with an ESC", with({{"g\x1b[2J", ok_limits}}), "has a character outside"},
      {"an empty name", with({{"", ok_limits}}), "partitions: a name is 1 to 64"},
      {"a name of 65 bytes", with({{std::string(65, 'p'), ok_limits}}), "a name is 1 to 64"},
      {"1001 partitions", with(many), "partitions: at most 1000 partitions"},
      {"an unknown key", with({{"gb", unknown_key}}), "partitions.gb: unknown field \"max_nodes\""},
      {"a field missing", with({{"gb", missing}}), "\"max_job_gpus\" is required"},
      {"negative", with(limits("max_gpus", -1)), "\"max_gpus\" must be an integer 0..100000000"},
      {"huge", with(limits("max_job_gpus", int64_t{1} << 40)),
       "\"max_job_gpus\" must be an integer 0..100000000"},
      {"a fraction", with(limits("max_running_jobs", 1.5)),
       "\"max_running_jobs\" must be an integer"},
      {"text", with(limits("max_gpus", "64")), "\"max_gpus\" must be an integer"},
      {"a boolean", with(limits("max_gpus", true)), "\"max_gpus\" must be an integer"},
      {"null", with(limits("max_gpus", nullptr)), "\"max_gpus\" must be an integer"},
  };
  const core::Topology t = MakeTopology();
  for (const Case& c : cases) {
    CAPTURE(c.what);
    core::Result<core::TenantConfig> got = common::TenantConfigFromJson(c.tenant);
    REQUIRE_FALSE(got.ok());
    CHECK_MESSAGE(got.message().find(c.message) != std::string::npos, got.message());
    // The log's reader: the same, under "tenant".
    core::Result<Event> e =
        common::EventFromJson(json{{"type", "tenant_configured"}, {"tenant", c.tenant}}, t);
    REQUIRE_FALSE(e.ok());
    CHECK_MESSAGE(e.message().rfind("tenant", 0) == 0, e.message());
  }
}

TEST_CASE("every command round-trips, as JSON and as text") {
  const core::Topology t = MakeTopology();
  std::vector<Command> commands = SampleCommands(t);
  CheckEveryAlternative(commands);
  for (const Command& c : commands) {
    json j = common::CommandToJson(c, t);
    CAPTURE(j.dump());
    CHECK(j.at("type") == common::CommandTypeName(c));
    core::Result<Command> back = common::CommandFromJson(json::parse(j.dump()), t);
    REQUIRE(back.ok());
    CHECK(back.value().index() == c.index());
    CHECK(common::CommandToJson(back.value(), t) == j);
  }
}

TEST_CASE("field values survive the round trip") {
  const core::Topology t = MakeTopology();
  core::Result<Event> e =
      common::EventFromJson(common::EventToJson(core::JobSubmitted{7, MakeRequest()}, t), t);
  REQUIRE(e.ok());
  const auto& sub = std::get<core::JobSubmitted>(e.value());
  CHECK(sub.id == 7);
  CHECK(sub.request.tenant == "org/team");
  CHECK(sub.request.user == "ada");
  CHECK(sub.request.priority == -3);
  CHECK(sub.request.time_limit == 2 * core::kHour);
  CHECK(sub.request.checkpoint_interval == -1);
  CHECK(sub.request.command == MakeRequest().command);
  CHECK(sub.request.process == MakeRequest().process);
  CHECK(common::JobSpecToJson(sub.request.spec) == common::JobSpecToJson(MakeRequest().spec));

  // Logs written before requests carried a command still read, with none.
  nlohmann::json old = common::JobRequestToJson(MakeRequest());
  old.erase("command");
  core::Result<core::JobRequest> back = common::JobRequestFromJson(old);
  REQUIRE(back.ok());
  CHECK(back.value().command.empty());
  // ... and before they carried how the processes start: the defaults.
  for (const char* k : {"launch", "env", "chdir", "output"}) old.erase(k);
  back = common::JobRequestFromJson(old);
  REQUIRE(back.ok());
  CHECK(back.value().process == core::ProcessSpec{});
  old["launch"] = "gpu";
  back = common::JobRequestFromJson(old);
  REQUIRE_FALSE(back.ok());
  CHECK(back.message().find("launch") != std::string::npos);
  old.erase("launch");
  // A name reserved, or a pattern refused, after the job was logged still
  // replays (the daemon must start on its old log); a wrong type does not.
  old["env"] = {{"RANK", "3"}};
  old["output"] = "o-%x.log";
  back = common::JobRequestFromJson(old);
  REQUIRE_MESSAGE(back.ok(), back.message());
  CHECK(back.value().process.env.at("RANK") == "3");
  CHECK(back.value().process.output == "o-%x.log");
  old["env"] = {{"RANK", 3}};
  back = common::JobRequestFromJson(old);
  REQUIRE_FALSE(back.ok());
  CHECK(back.message().find("env.RANK") != std::string::npos);
  old.erase("env");
  old.erase("output");
  old["command"] = {"ok", 3};
  back = common::JobRequestFromJson(old);
  REQUIRE_FALSE(back.ok());
  CHECK(back.message().find("command[1]") != std::string::npos);

  core::Result<Event> te = common::EventFromJson(
      common::EventToJson(core::TenantConfigured{{"x", 1, 2, 3, 4, 0.1}}, t), t);
  REQUIRE(te.ok());
  const core::TenantConfig& tc = std::get<core::TenantConfigured>(te.value()).tenant;
  CHECK(tc.shares == 0.1);  // exactly: doubles are written with enough digits
  CHECK(tc.max_running_jobs == 4);

  // The placement-wait bounds of a request and a tenant round-trip; logs
  // from before them read as 0 (inherit); out-of-range values name the field.
  core::JobRequest waiting = MakeRequest();
  waiting.placement_wait = 45 * core::kMinute;
  back = common::JobRequestFromJson(common::JobRequestToJson(waiting));
  REQUIRE(back.ok());
  CHECK(back.value().placement_wait == 45 * core::kMinute);
  nlohmann::json older = common::JobRequestToJson(waiting);
  older.erase("placement_wait_ms");
  REQUIRE(common::JobRequestFromJson(older).ok());
  CHECK(common::JobRequestFromJson(older).value().placement_wait == 0);
  older["placement_wait_ms"] = -2;
  CHECK(common::JobRequestFromJson(older).message().find("placement_wait_ms") != std::string::npos);
  core::TenantConfig patient{"p", 0, -1, 0, 0, 1.0};
  patient.placement_wait = -1;
  core::Result<core::TenantConfig> tb =
      common::TenantConfigFromJson(common::TenantConfigToJson(patient));
  REQUIRE(tb.ok());
  CHECK(tb.value().placement_wait == -1);
  nlohmann::json tj = common::TenantConfigToJson(patient);
  tj["placement_wait_ms"] = "1h";
  CHECK_FALSE(common::TenantConfigFromJson(tj).ok());

  const core::NodeId b0 = t.FindNode("b0");
  core::Result<Command> c = common::CommandFromJson(
      common::CommandToJson(core::RestartJob{9, {{b0, 3}}, {b0}, LaunchOf({{b0, 3}}, -1, 4, 20005)},
                            t),
      t);
  REQUIRE(c.ok());
  const auto& r = std::get<core::RestartJob>(c.value());
  CHECK(r.ranks == std::vector<core::GpuSlot>{{b0, 3}});
  CHECK(r.spares == std::vector<core::NodeId>{b0});
  CHECK(r.launch.checkpoint_step == -1);
  CHECK(r.launch.restart_count == 4);
  CHECK(r.launch.master_port == 20005);
  // The per-node grouping is rebuilt from the ranks.
  REQUIRE(r.launch.nodes.size() == 1);
  CHECK(r.launch.nodes[0].node == b0);
  CHECK(r.launch.nodes[0].gpus == std::vector<int>{3});
}

TEST_CASE("a batch of node requests keeps every request, in order, by node name") {
  const core::Topology before = MakeTopology(false);
  const core::Topology after = MakeTopology(true);
  const core::NodeStatesRequested batch{
      {{before.FindNode("b1"), core::NodeState::kDown, "agent disconnected for 2000 ms"},
       {before.FindNode("a0"), core::NodeState::kDown, "agent silent for 3000 ms (connected)"},
       {before.FindNode("a1"), core::NodeState::kUp, "registered"}}};
  const json j = common::EventToJson(batch, before);
  const json want = json::parse(R"j({"type": "node_states_requested", "requests": [
      {"node": "b1", "state": "down", "reason": "agent disconnected for 2000 ms"},
      {"node": "a0", "state": "down", "reason": "agent silent for 3000 ms (connected)"},
      {"node": "a1", "state": "up", "reason": "registered"}]})j");
  CHECK(j == want);
  // Read under another node numbering: the same nodes by name.
  core::Result<Event> e = common::EventFromJson(j, after);
  REQUIRE(e.ok());
  const auto& back = std::get<core::NodeStatesRequested>(e.value());
  REQUIRE(back.requests.size() == 3);
  CHECK(back.requests[0].node == after.FindNode("b1"));
  CHECK(back.requests[0].state == core::NodeState::kDown);
  CHECK(back.requests[0].reason == "agent disconnected for 2000 ms");
  CHECK(back.requests[1].node == after.FindNode("a0"));
  CHECK(back.requests[2].node == after.FindNode("a1"));
  CHECK(back.requests[2].state == core::NodeState::kUp);
  CHECK(back.requests[2].reason == "registered");
}

TEST_CASE("a start_job logged before launches were logged still reads") {
  const core::Topology t = MakeTopology();
  const json old = json::parse(R"({"type": "start_job", "id": 3, "ranks": [["a0", 1]],
                                   "spares": []})");
  core::Result<Command> c = common::CommandFromJson(old, t);
  REQUIRE(c.ok());
  const auto& s = std::get<core::StartJob>(c.value());
  CHECK(s.launch.checkpoint_step == -1);
  CHECK(s.launch.restart_count == 0);
  CHECK(s.launch.master_port == 0);
  // A restart_job always carried its step and count.
  const json bad = json::parse(R"({"type": "restart_job", "id": 3, "ranks": [["a0", 1]],
                                   "spares": []})");
  CHECK_FALSE(common::CommandFromJson(bad, t).ok());
}

TEST_CASE("nodes are written by name, so a log survives a renumbering") {
  const core::Topology before = MakeTopology(false);
  const core::Topology after = MakeTopology(true);
  REQUIRE(before.FindNode("b1") != after.FindNode("b1"));
  json j = common::CommandToJson(core::StartJob{1, {{before.FindNode("b1"), 2}}, {}, {}}, before);
  CHECK(j.at("ranks") == json::parse(R"([["b1", 2]])"));
  core::Result<Command> c = common::CommandFromJson(j, after);
  REQUIRE(c.ok());
  CHECK(std::get<core::StartJob>(c.value()).ranks[0].node == after.FindNode("b1"));
}

TEST_CASE("extreme integers round-trip") {
  const core::Topology t = MakeTopology();
  for (int64_t id : {INT64_MIN, int64_t{0}, INT64_MAX}) {
    core::Result<Event> e =
        common::EventFromJson(common::EventToJson(core::CheckpointCompleted{id, id}, t), t);
    REQUIRE(e.ok());
    CHECK(std::get<core::CheckpointCompleted>(e.value()).step == id);
  }
  core::Result<Event> e =
      common::EventFromJson(common::EventToJson(core::RankExited{1, INT32_MIN, INT32_MAX}, t), t);
  REQUIRE(e.ok());
  CHECK(std::get<core::RankExited>(e.value()).rank == INT32_MIN);
}

TEST_CASE("a policy change keeps every field, and a bad one names it") {
  const core::Topology t = MakeTopology();
  core::SchedulerConfig c = *core::SchedulerConfig::ForStack("toposched");
  c.default_checkpoint_interval = core::kNever;
  c.backfill = false;
  c.preempt_grace = 7 * core::kSecond;
  c.fairshare_max_wait = 5 * core::kHour;
  const core::PolicyChanged sent{core::SchedulingPolicy::Of(c), "backfill", "true", "false"};
  json j = common::EventToJson(sent, t);
  CHECK(j.at("policy").at("default_checkpoint_interval_ms") == -1);
  core::Result<Event> back = common::EventFromJson(j, t);
  REQUIRE(back.ok());
  const auto& got = std::get<core::PolicyChanged>(back.value());
  CHECK(got.policy == sent.policy);
  CHECK(got.key == "backfill");
  CHECK(got.new_value == "false");
  CHECK(got.policy.fairshare_max_wait == 5 * core::kHour);
  // A log from before the bound existed has none: 0, as its core ran.
  json older = j;
  older["policy"].erase("fairshare_max_wait_ms");
  back = common::EventFromJson(older, t);
  REQUIRE(back.ok());
  CHECK(std::get<core::PolicyChanged>(back.value()).policy.fairshare_max_wait == 0);
  for (const json& bad : {json(-1), json(31ll * 86400 * 1000), json("1d"), json(nullptr)}) {
    older["policy"]["fairshare_max_wait_ms"] = bad;
    CAPTURE(bad.dump());
    CHECK(common::EventFromJson(older, t).message().find("fairshare_max_wait_ms") !=
          std::string::npos);
  }
  j["policy"]["max_app_failures"] = 0;
  CHECK(common::EventFromJson(j, t).message().find("max_app_failures") != std::string::npos);
  j["policy"]["max_app_failures"] = 3;
  j["policy"]["preempt_grace_ms"] = "7s";
  CHECK(common::EventFromJson(j, t).message().find("preempt_grace_ms") != std::string::npos);
}

TEST_CASE("strict readers name the field and the problem") {
  const core::Topology t = MakeTopology();
  struct Case {
    const char* text;
    const char* message;  // a part of the expected error
  };
  const Case event_cases[] = {
      {R"([1])", "an event is a JSON object"},
      {R"({"id": 1})", "\"type\" is required"},
      {R"({"type": 3})", "\"type\" must be a string"},
      {R"({"type": "job_exploded"})", "unknown event type \"job_exploded\""},
      {R"({"type": "tick", "extra": 1})", "unknown field \"extra\""},
      {R"({"type": "policy_changed", "key": "k", "old": "", "new": ""})", "\"policy\" is required"},
      {R"({"type": "policy_changed", "key": "k", "old": "", "new": "", "policy": {}})",
       "policy: \"backfill\" is required"},
      {R"({"type": "job_cancelled", "id": 1})", "\"reason\" is required"},
      {R"({"type": "job_cancelled", "id": "1", "reason": ""})", "\"id\" must be an integer"},
      {R"({"type": "job_cancelled", "id": 1.5, "reason": ""})", "\"id\" must be an integer"},
      {R"({"type": "job_hold_changed", "id": 1, "hold": 1})", "\"hold\" must be true or false"},
      {R"({"type": "job_finished", "id": 1, "exit_code": 4294967296})", "\"exit_code\""},
      {R"({"type": "heartbeat", "node": "zz"})", "node: unknown node \"zz\""},
      {R"({"type": "heartbeat", "node": 0})", "node: a node is written by its name"},
      {R"({"type": "node_state_requested", "node": "a0", "state": "sleepy", "reason": ""})",
       "unknown node state \"sleepy\""},
      {R"({"type": "node_states_requested"})", "\"requests\" is required"},
      {R"({"type": "node_states_requested", "requests": []})",
       "requests: must be a non-empty array"},
      {R"({"type": "node_states_requested", "requests": {"node": "a0"}})",
       "requests: must be a non-empty array"},
      {R"({"type": "node_states_requested", "requests": [3]})",
       "requests[0]: must be a JSON object"},
      {R"({"type": "node_states_requested", "requests": [
           {"node": "a0", "state": "down", "reason": ""},
           {"node": "a1", "state": "down"}]})",
       "requests[1]: \"reason\" is required"},
      {R"({"type": "node_states_requested", "requests": [
           {"node": "zz", "state": "down", "reason": ""}]})",
       "requests[0].node: unknown node \"zz\""},
      {R"({"type": "node_states_requested", "requests": [
           {"node": "a0", "state": "gone", "reason": ""}]})",
       "requests[0]: \"state\": unknown node state \"gone\""},
      {R"({"type": "node_states_requested", "requests": [
           {"node": "a0", "state": "down", "reason": "", "why": 1}]})",
       "requests[0]: unknown field \"why\""},
      {R"({"type": "node_states_requested", "node": "a0", "requests": [
           {"node": "a0", "state": "down", "reason": ""}]})",
       "unknown field \"node\""},
      {R"({"type": "gpu_event", "node": "a0", "gpu": 0, "kind": "melted", "code": 0})",
       "unknown GPU event kind \"melted\""},
      {R"({"type": "tenant_configured", "tenant": {"name": "x"}})",
       "tenant: \"guaranteed_gpus\" is required"},
      {R"({"type": "tenant_configured", "tenant": {"name": "x", "guaranteed_gpus": 0,
           "borrow_limit_gpus": 0, "max_job_gpus": 0, "max_running_jobs": 0, "shares": "1"}})",
       "\"shares\" must be a number"},
      {R"({"type": "partition_configured"})", "\"partition\" is required"},
      {R"({"type": "partition_configured", "partition": []})", "partition: must be a JSON object"},
      {R"({"type": "partition_configured", "partition": {"name": "p", "nodes": "a0",
           "default_time_ms": 0, "max_time_ms": 0, "max_gpus": 0, "tenants": [],
           "priority_tier": 0, "preemptible": false, "default": false}})",
       "nodes: must be an array"},
      {R"({"type": "partition_configured", "partition": {"name": "p", "nodes": [""],
           "default_time_ms": 0, "max_time_ms": 0, "max_gpus": 0, "tenants": [],
           "priority_tier": 0, "preemptible": false, "default": false}})",
       "nodes[0]: must be a name of 1 to 64 bytes"},
      {R"({"type": "partition_configured", "partition": {"name": "p", "nodes": ["a0"],
           "default_time_ms": -1, "max_time_ms": 0, "max_gpus": 0, "tenants": [],
           "priority_tier": 0, "preemptible": false, "default": false}})",
       "default_time_ms"},
      {R"({"type": "partition_configured", "partition": {"name": "p", "nodes": ["a0"],
           "default_time_ms": 0, "max_time_ms": 0, "max_gpus": 0, "tenants": [],
           "priority_tier": 5000, "preemptible": false, "default": false}})",
       "priority_tier"},
      {R"({"type": "partition_configured", "partition": {"name": "p", "nodes": ["a0"],
           "default_time_ms": 0, "max_time_ms": 0, "max_gpus": 0, "tenants": [],
           "priority_tier": 0, "preemptible": "yes", "default": false}})",
       "\"preemptible\" must be true or false"},
      {R"({"type": "partition_configured", "partition": {"name": "p", "nodes": ["a0"],
           "default_time_ms": 0, "max_time_ms": 0, "max_gpus": 0, "tenants": [],
           "priority_tier": 0, "preemptible": false, "default": false, "extra": 1}})",
       "unknown field \"extra\""},
      {R"({"type": "reservation_configured", "reservation": {"name": "r", "nodes": ["a0"],
           "start_ms": "soon", "end_ms": 5, "tenants": [], "maintenance": false}})",
       "start_ms"},
      {R"({"type": "reservation_configured", "reservation": {"name": "", "nodes": ["a0"],
           "start_ms": 0, "end_ms": 5, "tenants": [], "maintenance": false}})",
       "name"},
      {R"({"type": "reservation_configured", "reservation": {"name": "r", "nodes": ["a0"],
           "start_ms": 0, "end_ms": 5, "tenants": [7], "maintenance": false}})",
       "tenants[0]: must be a name"},
      {R"({"type": "partition_deleted"})", "\"name\" is required"},
      {R"({"type": "reservation_deleted", "name": 3})", "name"},
      {R"({"type": "job_submitted", "id": 1})", "\"request\" is required"},
      {R"({"type": "job_submitted", "id": 1, "request": {"spec": {"gpus": 8}, "tenant": "t",
           "user": "u", "priority": 0, "time_limit_ms": 0}})",
       "request: \"checkpoint_interval_ms\" is required"},
      {R"({"type": "job_submitted", "id": 1, "request": {"spec": {"gpus": 8,
           "parallelism": {"tp": 3}}, "tenant": "t", "user": "u", "priority": 0,
           "time_limit_ms": 0, "checkpoint_interval_ms": 0}})",
       "request.spec.parallelism"},
  };
  for (const Case& c : event_cases) {
    CAPTURE(c.text);
    core::Result<Event> e = common::EventFromJson(json::parse(c.text), t);
    REQUIRE_FALSE(e.ok());
    CHECK(e.message().find(c.message) != std::string::npos);
    CAPTURE(e.message());
  }
  const Case command_cases[] = {
      {R"({"type": "launch"})", "unknown command type \"launch\""},
      {R"({"type": "start_job", "id": 1, "ranks": [["a0"]], "spares": []})",
       "ranks[0]: must be a [node, gpu] pair"},
      {R"({"type": "start_job", "id": 1, "ranks": [["a0", 4]], "spares": []})",
       "ranks[0][1]: GPU must be an integer 0..3"},
      {R"({"type": "start_job", "id": 1, "ranks": [["a0", 0]], "spares": ["nope"]})",
       "spares[0]: unknown node \"nope\""},
      {R"({"type": "start_job", "id": 1, "ranks": {}, "spares": []})", "ranks: must be an array"},
      {R"({"type": "job_state_changed", "id": 1, "state": "zombie", "reason": ""})",
       "unknown job state \"zombie\""},
      {R"({"type": "gpu_health_changed", "node": "a0", "gpu": 0, "health": "meh", "reason": ""})",
       "unknown GPU health \"meh\""},
      {R"({"type": "restart_job", "id": 1, "ranks": [], "spares": [], "checkpoint_step": 0})",
       "\"restart_count\" is required"},
  };
  for (const Case& c : command_cases) {
    CAPTURE(c.text);
    core::Result<Command> r = common::CommandFromJson(json::parse(c.text), t);
    REQUIRE_FALSE(r.ok());
    CAPTURE(r.message());
    CHECK(r.message().find(c.message) != std::string::npos);
  }
}

TEST_CASE("state names parse back for every value") {
  for (int i = 0; i < 8; ++i) {
    const auto s = static_cast<core::JobState>(i);
    CHECK(common::ParseJobState(core::JobStateName(s)) == s);
  }
  for (int i = 0; i < 5; ++i) {
    const auto s = static_cast<core::NodeState>(i);
    CHECK(common::ParseNodeState(core::NodeStateName(s)) == s);
  }
  for (int i = 0; i < 3; ++i) {
    const auto h = static_cast<core::GpuHealth>(i);
    CHECK(common::ParseGpuHealth(core::GpuHealthName(h)) == h);
  }
  CHECK_FALSE(common::ParseJobState("unknown").has_value());
}

TEST_CASE("a client_request_id is checked by one rule") {
  CHECK(common::CheckClientRequestId("0f3a9c1d2e4b5a6978877665544332211").ok());
  CHECK(common::CheckClientRequestId("nightly-2026-11-26:run_2.b").ok());
  CHECK(common::CheckClientRequestId(std::string(64, 'x')).ok());
  CHECK_FALSE(common::CheckClientRequestId("").ok());
  CHECK_FALSE(common::CheckClientRequestId(std::string(65, 'x')).ok());
  for (const char* bad : {"a b", "a/b", "a\nb", "\"quoted\"", "caf\xc3\xa9", "a;rm"}) {
    CAPTURE(bad);
    CHECK(common::CheckClientRequestId(bad).message().find("letters, digits") != std::string::npos);
  }
}

TEST_CASE("a request's dependencies and array task round-trip, absent ones read as none") {
  core::JobRequest r;
  r.spec.gpus = 8;
  r.spec.parallelism.dp = 8;
  r.command = {"/bin/true"};
  nlohmann::json plain = common::JobRequestToJson(r);
  CHECK(!plain.contains("dependencies"));  // other requests read as before
  CHECK(!plain.contains("array"));
  r.dependencies = {{core::DependencyKind::kAfterOk, 12}, {core::DependencyKind::kAfterNotOk, 3}};
  r.array_job = 40;
  r.array_task = 7;
  r.array_throttle = 8;
  core::Result<core::JobRequest> back = common::JobRequestFromJson(common::JobRequestToJson(r));
  REQUIRE(back.ok());
  CHECK(back.value().dependencies == r.dependencies);
  CHECK(back.value().array_job == 40);
  CHECK(back.value().array_task == 7);
  CHECK(back.value().array_throttle == 8);
  CHECK(common::JobRequestFromJson(plain).value().dependencies.empty());
  CHECK(common::JobRequestFromJson(plain).value().array_job == 0);
  CHECK(!plain.contains("client_request_id"));
  r.client_request_id = "a1b2:retry-3";
  CHECK(common::JobRequestFromJson(common::JobRequestToJson(r)).value().client_request_id ==
        "a1b2:retry-3");
  nlohmann::json long_key = common::JobRequestToJson(r);
  long_key["client_request_id"] = std::string(65, 'k');
  CHECK(common::JobRequestFromJson(long_key).message().find("client_request_id") !=
        std::string::npos);
  r.client_request_id.clear();

  struct Bad {
    nlohmann::json deps;
    const char* says;
  };
  for (const Bad& b :
       {Bad{{{{"kind", "after"}, {"job", 1}}}, "dependencies[0].kind"},
        Bad{{{{"kind", "afterok"}, {"job", 0}}}, "dependencies[0]"},
        Bad{{{{"kind", "afterok"}}}, "\"job\" is required"}, Bad{"afterok:1", "dependencies"}}) {
    nlohmann::json j = common::JobRequestToJson(r);
    j["dependencies"] = b.deps;
    core::Result<core::JobRequest> bad = common::JobRequestFromJson(j);
    CAPTURE(b.says);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.message().find(b.says) != std::string::npos);
  }
  nlohmann::json j = common::JobRequestToJson(r);
  j["array"]["task"] = -1;
  CHECK(common::JobRequestFromJson(j).message().find("array") != std::string::npos);
}

// Every field of a request (as its JSON shows) survives the core's snapshot:
// a field added to JobRequest but not to core/src/snapshot.cpp fails here,
// and so does one this test forgets to set.
TEST_CASE("a queued job's whole request survives a snapshot of the core") {
  const core::Topology t = MakeTopology();
  core::SchedulerConfig c = *core::SchedulerConfig::ForStack("toposched");
  c.heartbeats_required = false;
  core::SchedulerCore core(t, c);
  core::JobRequest blocker;
  blocker.spec.gpus = 16;
  blocker.spec.parallelism.dp = 16;
  blocker.command = {"/bin/true"};
  core.Step(core::JobSubmitted{1, blocker}, 0);
  REQUIRE(core.job(1)->state == core::JobState::kRunning);

  core::JobRequest full = MakeRequest();
  full.spec.name = "every-field";
  full.unix_user = "ada";
  full.placement_wait = 5 * core::kMinute;
  full.memory_mb_per_node = 4096;
  full.cpu_millis_per_node = 2500;
  full.dependencies = {{core::DependencyKind::kAfterAny, 1}};
  full.array_job = 2;
  full.array_task = 3;
  full.array_throttle = 4;
  full.process.launch = core::LaunchMode::kNode;
  full.process.env = {{"NCCL_DEBUG", "INFO"}, {"A", "1"}};
  full.process.working_dir = "/home/ada/run";
  full.process.output = "out-%j-%r.log";
  full.process.error = "err-%j.log";
  full.client_request_id = "nightly-2026-11-26:7";
  const nlohmann::json want = common::JobRequestToJson(full);
  const nlohmann::json defaults = common::JobRequestToJson(core::JobRequest{});
  for (auto it = want.begin(); it != want.end(); ++it) {
    CAPTURE(it.key());
    CHECK((!defaults.contains(it.key()) || defaults[it.key()] != it.value()));  // set it above
  }
  core.Step(core::JobSubmitted{2, full}, core::kMinute);
  REQUIRE(core.job(2)->state == core::JobState::kQueued);
  core::SchedulerCore restored(t, c);
  REQUIRE(restored.Restore(core.Snapshot()).ok());
  REQUIRE(restored.job(2) != nullptr);
  CHECK(common::JobRequestToJson(restored.job(2)->request) == want);

  // A snapshot of format version 1 (before client_request_id) still
  // restores: the request without the key, the rest the same.
  core::SchedulerCore old(t, c);
  REQUIRE(old.Restore(core.Snapshot(1)).ok());
  REQUIRE(old.job(2) != nullptr);
  nlohmann::json want_v1 = want;
  want_v1.erase("client_request_id");
  // Before version 8 an auto constraint was a required one.
  want_v1["spec"]["constraints"]["ep"] = {{"required", "hbd"}};
  CHECK(common::JobRequestToJson(old.job(2)->request) == want_v1);
  CHECK(old.Snapshot(1) == core.Snapshot(1));
}
