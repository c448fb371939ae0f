// The user API's one reader and writer per struct (common/user_api.hpp):
// round trips over many seeded random values, hostile requests that must be
// refused naming their field, a client's lenient reading, the flattened
// parts of a job view, and the checked-in schema.

#include "topo/common/user_api.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "topo/common/agent_protocol.hpp"

namespace topo::api {
namespace {

using nlohmann::json;

// Seeded values, so a failure names the same value on every run.
class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}
  int64_t Int(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  double Real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
  bool Coin() { return Int(0, 1) == 1; }
  template <class T>
  std::optional<T> Maybe(T v) {
    return Coin() ? std::optional<T>(std::move(v)) : std::nullopt;
  }
  // Printable text, sometimes with UTF-8, quotes, backslashes or a tab.
  std::string Text(size_t max_len, bool controls = true) {
    static const std::vector<std::string> kPieces = {"a", "Z",  "0",  "-", "_",    ".", "/",
                                                     " ", "\"", "\\", "é", "日本", "%j"};
    std::string s;
    const size_t n = static_cast<size_t>(Int(0, static_cast<int64_t>(max_len)));
    while (s.size() < n) {
      s += controls && Int(0, 20) == 0 ? std::string("\t") : kPieces[Int(0, kPieces.size() - 1)];
    }
    return s;
  }
  std::string Word(size_t max_len) {
    std::string s(static_cast<size_t>(Int(1, static_cast<int64_t>(max_len))), 'a');
    for (char& c : s) c = "abcdefghijklmnopqrstuvwxyz0123456789"[Int(0, 35)];
    return s;
  }

 private:
  std::mt19937 rng_;
};

core::JobSpec RandomSpec(Gen& g) {
  core::JobSpec spec;
  spec.name = g.Text(40);
  spec.parallelism.tp = static_cast<int>(g.Int(1, 8));
  spec.parallelism.pp = static_cast<int>(g.Int(1, 4));
  spec.parallelism.dp = static_cast<int>(g.Int(1, 16));
  spec.gpus = spec.parallelism.tp * spec.parallelism.pp * spec.parallelism.dp;
  spec.spares = static_cast<int>(g.Int(0, 2));
  if (g.Coin()) spec.constraints[0] = {core::Strength::kPreferred, "leaf"};
  if (g.Int(0, 4) == 0) {
    core::ModelSpec model;
    model.preset = "llama3-70b";
    spec.model = model;
  }
  return spec;
}

SubmitRequest RandomSubmit(Gen& g) {
  SubmitRequest r;
  r.spec = RandomSpec(g);
  r.tenant = g.Maybe(g.Word(10) + "/" + g.Word(10));
  r.priority = g.Maybe(static_cast<int>(g.Int(kMinPriority, kMaxPriority)));
  r.time_limit_s = g.Maybe(g.Int(1, kMaxTimeLimitS));
  r.checkpoint_interval_s =
      g.Maybe(g.Coin() ? int64_t{-1} : g.Int(kMinCheckpointIntervalS, kMaxIntervalS));
  r.placement_wait_s = g.Maybe(g.Int(-1, kMaxIntervalS));
  r.command = {"python3", g.Text(30)};
  for (int i = static_cast<int>(g.Int(0, 3)); i > 0; --i) r.command.push_back(g.Text(200));
  r.memory_mb_per_node = g.Maybe(g.Int(1, kMaxMemoryMbPerNode));
  r.cpus_per_node = g.Maybe(g.Real(kMinCpusPerNode, kMaxCpusPerNode));
  r.launch = g.Maybe(g.Coin() ? core::LaunchMode::kNode : core::LaunchMode::kRank);
  if (g.Coin()) {
    std::map<std::string, std::string> env;
    for (int i = static_cast<int>(g.Int(0, 4)); i > 0; --i) {
      env["V_" + g.Word(8)] = g.Text(50);
    }
    r.env = env;
  }
  r.chdir = g.Maybe("/home/" + g.Word(12));
  r.output = g.Maybe("out-%j-%r.log");
  r.error = g.Maybe("/var/" + g.Word(5) + "/err-%j.log");
  r.dependency = g.Maybe("afterok:" + std::to_string(g.Int(1, 99999)));
  r.array = g.Maybe("0-" + std::to_string(g.Int(0, 99)) + "%" + std::to_string(g.Int(1, 8)));
  r.client_request_id = g.Maybe(g.Word(16) + ":" + g.Word(8));
  r.partition = g.Maybe("p_" + g.Word(10));
  r.reservation = g.Maybe(g.Word(20) + ".r-1");
  return r;
}

// Distinct node names, as the readers of node sets insist.
std::vector<std::string> RandomNodeNames(Gen& g) {
  std::vector<std::string> names;
  const int first = static_cast<int>(g.Int(0, 50));
  for (int i = first + static_cast<int>(g.Int(0, 20)); i >= first; --i) {
    names.push_back((g.Coin() ? "gb" : "x") + std::to_string(i));
  }
  return names;
}

PartitionRequest RandomPartitionRequest(Gen& g) {
  PartitionRequest p;
  p.name = g.Word(64);
  p.nodes = RandomNodeNames(g);
  p.max_time_s = g.Maybe(g.Int(0, kMaxTimeLimitS));
  if (p.max_time_s && *p.max_time_s > 0) p.default_time_s = g.Maybe(g.Int(0, *p.max_time_s));
  p.max_gpus = g.Maybe(static_cast<int>(g.Int(0, kMaxReservationGpus)));
  if (g.Coin()) p.tenants = std::vector<std::string>{g.Word(8), g.Word(4) + "/" + g.Word(4)};
  p.priority_tier = g.Maybe(static_cast<int>(g.Int(-1000, 1000)));
  p.preemptible = g.Maybe(g.Coin());
  p.is_default = g.Maybe(g.Coin());
  return p;
}

ReservationRequest RandomReservationRequest(Gen& g) {
  ReservationRequest r;
  r.name = g.Word(30);
  if (g.Coin()) {
    r.nodes = RandomNodeNames(g);
  } else {
    r.gpus = static_cast<int>(g.Int(1, kMaxReservationGpus));
    r.partition = g.Maybe(g.Word(10));
  }
  r.start_ms = g.Maybe(g.Int(0, kMaxTimeMs / 2));
  if (g.Coin()) {
    r.duration_s = g.Int(1, kMaxReservationS);
  } else {
    r.end_ms = r.start_ms.value_or(0) + g.Int(1, 1000000);
  }
  if (g.Coin()) r.tenants = std::vector<std::string>{g.Word(8)};
  r.maintenance = g.Maybe(g.Coin());
  return r;
}

PartitionView RandomPartitionView(Gen& g) {
  PartitionView v;
  v.name = g.Word(20);
  v.nodes = "gb[000-" + std::to_string(g.Int(100, 999)) + "]";
  v.node_count = static_cast<int>(g.Int(1, 1000));
  v.gpus = v.node_count * 8;
  v.up_nodes = static_cast<int>(g.Int(0, v.node_count));
  v.free_gpus = static_cast<int>(g.Int(0, v.gpus));
  v.default_time_s = g.Int(0, kMaxTimeLimitS);
  v.max_time_s = g.Int(0, kMaxTimeLimitS);
  v.max_gpus = static_cast<int>(g.Int(0, 4096));
  if (g.Coin()) v.tenants = {g.Word(8)};
  v.priority_tier = static_cast<int>(g.Int(-1000, 1000));
  v.preemptible = g.Coin();
  v.is_default = g.Coin();
  return v;
}

ReservationView RandomReservationView(Gen& g) {
  ReservationView v;
  v.name = g.Word(20);
  v.nodes = "n" + g.Word(3) + ",x1";
  v.node_count = 2;
  v.gpus = static_cast<int>(g.Int(0, 16));
  v.start_ms = g.Int(0, kMaxTimeMs / 2);
  v.end_ms = v.start_ms + g.Int(1, 1000000);
  if (g.Coin()) v.tenants = {g.Word(8)};
  v.maintenance = g.Coin();
  v.state = g.Coin() ? ReservationState::kActive : ReservationState::kPlanned;
  return v;
}

JobView RandomJob(Gen& g, bool parts) {
  JobView j;
  j.id = g.Int(1, proto::kMaxJobId);
  j.name = g.Text(60);
  j.tenant = g.Word(8);
  j.user = g.Word(8);
  j.state = static_cast<core::JobState>(g.Int(0, 7));
  j.reason = g.Text(100);
  j.gpus = static_cast<int>(g.Int(1, 100000));
  j.nodes = static_cast<int>(g.Int(0, 10000));
  j.priority = static_cast<int>(g.Int(kMinPriority, kMaxPriority));
  j.submit_ms = g.Int(0, kMaxTimeMs);
  j.start_ms = g.Maybe(g.Int(0, kMaxTimeMs));
  j.end_ms = g.Maybe(g.Int(0, kMaxTimeMs));
  j.time_limit_s = g.Int(0, kMaxTimeLimitS);
  j.restarts = static_cast<int>(g.Int(0, 100));
  j.checkpoint_step = g.Int(-1, 1000000);
  j.queue_position = g.Maybe(static_cast<int>(g.Int(1, 5000)));
  j.estimated_start_ms = g.Maybe(g.Int(0, kMaxTimeMs));
  j.predicted_slowdown = g.Maybe(g.Real(1, 5));
  j.dependency = g.Maybe("afterany:" + std::to_string(g.Int(1, 100)));
  j.array = g.Maybe(
      ArrayTask{g.Int(1, 1000), static_cast<int>(g.Int(0, 999)), static_cast<int>(g.Int(0, 8))});
  j.partition = g.Maybe(g.Word(12));
  j.reservation = g.Maybe(g.Word(12));
  if (!parts) return j;
  if (g.Coin()) {
    JobAccounting a;
    a.node_names = {"n" + g.Word(3), "n" + g.Word(3)};
    a.queue_wait_s = g.Maybe(g.Real(-10, 1e6));
    a.exit_code = g.Maybe(static_cast<int>(g.Int(-1, 383)));
    a.gpu_hours = g.Real(0, 1e6);
    for (int r = 1; r <= g.Int(0, 3); ++r) {
      a.runs.push_back({r, g.Int(0, kMaxTimeMs), g.Maybe(g.Int(0, kMaxTimeMs)),
                        static_cast<int>(g.Int(0, 64)), 2, a.node_names, g.Maybe(g.Text(40)),
                        g.Maybe(static_cast<int>(g.Int(0, 255))), g.Real(0, 100)});
    }
    j.accounting = a;
  }
  if (g.Coin()) {
    JobDetail d;
    d.spec = g.Maybe(RandomSpec(g));
    if (g.Coin()) {
      JobProcessView p;
      p.command = {"sh", "-c", g.Text(80)};
      p.launch = g.Coin() ? core::LaunchMode::kNode : core::LaunchMode::kRank;
      p.env = {{"NCCL_DEBUG", "INFO"}};
      p.chdir = g.Maybe(std::string("/srv/run"));
      p.output = g.Maybe(std::string("o-%j.log"));
      p.limits = {g.Int(0, 1 << 20), g.Real(0, 64)};
      d.process = p;
    }
    for (int r = 0; r < g.Int(0, 8); ++r) d.ranks.push_back({r, "n" + g.Word(2), r % 8});
    d.spares = {"n9"};
    if (g.Coin()) d.placement = PlacementView{2, {{"hbd0", 8}}, {{"leaf0", 16}}, {{"pod0", 16}}};
    if (g.Coin()) {
      MetricsView m;
      m.tp_in_hbd = 1.0;
      m.leaf_span_ratio = g.Real(1, 3);
      m.comm_cost = g.Real(0, 1e9);
      m.tier_histogram["tp"]["hbd"] = 2;
      m.required_met = g.Coin();
      d.metrics = m;
    }
    if (g.Coin()) d.predicted = PredictionView{1.5, 1.2, 1.25, "custom", {1, 0.1}, {1, 0.05}};
    d.history.push_back({g.Int(1, 1000), g.Int(0, kMaxTimeMs), "ada", "job_submitted",
                         g.Maybe(core::JobState::kQueued), g.Maybe(g.Text(30))});
    if (g.Coin()) {
      d.incidents.push_back({g.Int(0, kMaxTimeMs), "gpu_event", "agent:n1", "xid 79", 0,
                             g.Maybe(g.Int(0, 100000)), g.Coin(), g.Int(-1, 1000),
                             g.Maybe(static_cast<int>(g.Int(0, 9))), g.Real(0, 3600)});
    }
    j.detail = d;
  }
  return j;
}

NodeView RandomNode(Gen& g, bool history) {
  NodeView n;
  n.name = "n" + g.Word(6);
  n.state = static_cast<core::NodeState>(g.Int(0, 4));
  n.reason = g.Text(60);
  n.gpus = static_cast<int>(g.Int(0, 8));
  n.free = static_cast<int>(g.Int(0, n.gpus));
  n.hbd = "hbd" + g.Word(2);
  n.leaf = "leaf" + g.Word(2);
  n.pod = "pod" + g.Word(2);
  for (int i = 0; i < n.gpus; ++i) {
    n.gpu_health.push_back(static_cast<core::GpuHealth>(g.Int(0, 2)));
    n.gpu_jobs.push_back(g.Int(-1, 1000));
  }
  for (int i = static_cast<int>(g.Int(0, 3)); i > 0; --i) n.partitions.push_back(g.Word(6));
  n.reservation = g.Maybe(g.Word(6));
  if (history) {
    n.gpu_history = std::vector<GpuHealthEventView>{
        {g.Int(1, 100), 0, core::GpuHealth::kFailed, "xid 79", g.Int(0, kMaxTimeMs)}};
  }
  return n;
}

SlurmSubmitLine RandomSlurm(Gen& g) {
  SlurmSubmitLine l;
  l.v = g.Maybe(1);
  l.op = static_cast<SlurmOp>(g.Int(0, 2));
  l.uid = g.Maybe(g.Int(-1, kMaxSlurmNumber));
  for (std::optional<std::string>* s :
       {&l.name, &l.account, &l.partition, &l.comment, &l.features, &l.req_nodes, &l.exc_nodes,
        &l.tres_per_job, &l.tres_per_node, &l.tres_per_socket, &l.tres_per_task}) {
    *s = g.Maybe(g.Text(40));
  }
  for (std::optional<int64_t>* n :
       {&l.min_nodes, &l.max_nodes, &l.time_limit_min, &l.req_switch, &l.wait4switch, &l.segment}) {
    *n = g.Maybe(g.Int(-1, kMaxSlurmNumber));
  }
  l.exclusive_topo = g.Maybe(g.Coin());
  l.batch = g.Maybe(g.Coin());
  l.array = g.Maybe(g.Coin());
  if (g.Coin()) l.env = std::map<std::string, std::string>{{"TOPO_LAYOUT", "tp=8,pp=2"}};
  return l;
}

// A Read* of a parsed object as a Parse* of text.
template <class Read>
auto ParseJsonWith(Read read) {
  return
      [read](std::string_view text, std::string* field) { return read(json::parse(text), field); };
}

template <class T, class Parse, class Write>
void RoundTrip(const T& value, Parse parse, Write write) {
  const std::string text = write(value);
  std::string field = "unset";
  auto back = parse(text, &field);
  REQUIRE_MESSAGE(back.ok(), text << " -> " << back.message());
  CHECK(back.value() == value);
  CHECK(field.empty());
  CHECK(write(back.value()) == text);  // the writer is a fixed point
}

TEST_CASE("every user API struct reads back as written, over many values") {
  Gen g(20261202);
  auto strict = [](auto parse) {
    return [parse](std::string_view t, std::string* f) { return parse(t, f, Reading::kStrict); };
  };
  for (int i = 0; i < 300; ++i) {
    CAPTURE(i);
    RoundTrip(RandomSubmit(g), ParseSubmitRequest, WriteSubmitRequest);
    RoundTrip(RandomJob(g, true), strict(ParseJobView), WriteJobView);
    RoundTrip(RandomNode(g, g.Coin()), strict(ParseNodeView), WriteNodeView);
    RoundTrip(RandomSlurm(g), ParseSlurmSubmitLine, WriteSlurmSubmitLine);
    SubmitAnswer a{RandomJob(g, false), g.Maybe(true), std::nullopt, std::nullopt};
    if (g.Coin()) {
      a.ids = std::vector<int64_t>{a.job.id, a.job.id + 1};
      a.tasks = std::vector<int>{0, 1};
    }
    RoundTrip(a, strict(ParseSubmitAnswer), WriteSubmitAnswer);
    RoundTrip(RandomPartitionRequest(g), ParseJsonWith(ReadPartitionRequest),
              WritePartitionRequest);
    RoundTrip(RandomReservationRequest(g), ParseJsonWith(ReadReservationRequest),
              WriteReservationRequest);
    RoundTrip(RandomPartitionView(g), strict(ParsePartitionView), WritePartitionView);
    RoundTrip(RandomReservationView(g), strict(ParseReservationView), WriteReservationView);
  }
  PartitionList partitions;
  ReservationList reservations;
  for (int i = 0; i < 5; ++i) partitions.partitions.push_back(RandomPartitionView(g));
  for (int i = 0; i < 5; ++i) reservations.reservations.push_back(RandomReservationView(g));
  RoundTrip(partitions, strict(ParsePartitionList), WritePartitionList);
  RoundTrip(reservations, strict(ParseReservationList), WriteReservationList);
  JobList list;
  NodeList nodes;
  for (int i = 0; i < 20; ++i) list.jobs.push_back(RandomJob(g, i % 2 == 0));
  list.next_after = 77;
  for (int i = 0; i < 20; ++i) nodes.nodes.push_back(RandomNode(g, false));
  RoundTrip(list, strict(ParseJobList), WriteJobList);
  RoundTrip(nodes, strict(ParseNodeList), WriteNodeList);
  RoundTrip(JobList{}, strict(ParseJobList), WriteJobList);
}

struct Hostile {
  std::string text;
  const char* field;
  const char* message;
};

// A submission's body with one field changed (raw JSON text of the value).
std::string Body(const std::string& extra) {
  return R"({"spec":{"gpus":8},"command":["true"])" + (extra.empty() ? "" : "," + extra) + "}";
}

TEST_CASE("hostile submissions are refused, naming the field") {
  const std::vector<Hostile> cases = {
      {"{}", "spec", "spec: missing; give the job spec v1"},
      {R"({"spec":{"gpus":8}})", "command", "command: missing; say what every rank runs"},
      {R"({"spec":{"gpus":"8"},"command":["x"]})", "spec", "gpus"},
      {R"({"spec":{"gpus":12,"parallelism":{"tp":8}},"command":["x"]})", "spec", "multiple"},
      {Body(R"("color":"red")"), "color", "color: unknown field; allowed: spec, tenant"},
      {Body(R"("tenant":"../etc")"), "tenant", "must be a tenant name"},
      {Body(R"("tenant":"")"), "tenant", "must not be empty"},
      {Body(R"("priority":1000)"), "priority", "-100..100"},
      {Body(R"("priority":1.5)"), "priority", "integer"},
      {Body(R"("time_limit_s":0)"), "time_limit_s", "1..2592000"},
      {Body(R"("time_limit_s":"2h")"), "time_limit_s", "integer"},
      {Body(R"("checkpoint_interval_s":0)"), "checkpoint_interval_s", "-1 (never) or 60"},
      {Body(R"("checkpoint_interval_s":59)"), "checkpoint_interval_s", "below the minimum of 60"},
      {Body(R"("placement_wait_s":-2)"), "placement_wait_s", "-1..604800"},
      {R"({"spec":{"gpus":8},"command":[]})", "command", "must not be empty"},
      {R"({"spec":{"gpus":8},"command":"ls -l"})", "command", "must be an array"},
      {R"({"spec":{"gpus":8},"command":["ls",3]})", "command[1]", "must be a string"},
      {R"({"spec":{"gpus":8},"command":[""]})", "command[0]", "program must not be empty"},
      {R"({"spec":{"gpus":8},"command":["a\u0000b"]})", "command[0]", "NUL"},
      {Body(R"("memory_mb_per_node":0)"), "memory_mb_per_node", "1..1073741824"},
      {Body(R"("cpus_per_node":"lots")"), "cpus_per_node", "must be a number 0.001..100000"},
      {Body(R"("cpus_per_node":-2)"), "cpus_per_node", "number"},
      {Body(R"("cpus_per_node":true)"), "cpus_per_node", "number"},
      {Body(R"("launch":"gpu")"), "launch", "must be one of rank, node"},
      {Body(R"("env":["A=1"])"), "env", "object of strings"},
      {Body(R"("env":{"A":1})"), "env.A", "must be a string"},
      {Body(R"("env":{"A-B":"1"})"), "env.A-B", "variable name"},
      {Body(R"("env":{"WORLD_SIZE":"1"})"), "env.WORLD_SIZE", "reserved"},
      {Body(R"("env":{"TOPO_JOB_ID":"1"})"), "env.TOPO_JOB_ID", "reserved"},
      {Body(R"("env":{"CUDA_DEVICE_ORDER":"FASTEST_FIRST"})"), "env.CUDA_DEVICE_ORDER", "renumber"},
      {Body(R"("chdir":"run")"), "chdir", "absolute"},
      {Body(R"("chdir":"/a\nb")"), "chdir", "control character"},
      {Body(R"("output":"o-%N.log")"), "output", "%j (job id)"},
      {Body(R"("output":"/tmp/")"), "output", "directory"},
      {Body(R"("output":"")"), "output", "must not be empty"},
      {Body(R"("error":2)"), "error", "must be a string"},
      {Body(R"("dependency":12)"), "dependency", "must be a string"},
      {Body(R"("dependency":"after:1")"), "dependency", "dependency"},
      {Body(R"("array":"9-1")"), "array", "array"},
      {Body(R"("client_request_id":7)"), "client_request_id", "must be a string"},
      {Body(R"("client_request_id":"")"), "client_request_id", "must not be empty"},
      {Body(R"("client_request_id":"a\nb")"), "client_request_id", "letters, digits"},
      {Body(R"("client_request_id":")" + std::string(65, 'k') + "\""), "client_request_id",
       "at most 64"},
      {R"({"spec":{"gpus":8},"command":["x"],"command":["y"]})", "command", "twice"},
      {"[1]", "", "JSON object"},
      {R"({"spec":)", "", "invalid JSON"},
      {std::string(100, '[') + std::string(100, ']'), "", "nested deeper"},
  };
  for (const Hostile& h : cases) {
    CAPTURE(h.text);
    std::string field = "unset";
    auto r = ParseSubmitRequest(h.text, &field);
    REQUIRE_FALSE(r.ok());
    CHECK(field == h.field);
    CHECK_MESSAGE(r.message().find(h.message) != std::string::npos, r.message());
    if (*h.field != '\0') CHECK(r.message().rfind(h.field, 0) == 0);
  }
  // The same reader over a parsed body.
  std::string field;
  auto r = ReadSubmitRequest(json::parse(Body(R"("priority":-101)")), &field);
  REQUIRE_FALSE(r.ok());
  CHECK(field == "priority");
}

TEST_CASE("hostile partition and reservation requests are refused, naming the field") {
  const std::string many = std::to_string(100001);
  const std::vector<Hostile> partitions = {
      {R"({"nodes":"n1"})", "name", "name: missing; name the partition"},
      {R"({"name":"gpu"})", "nodes", "nodes: missing; give its nodes"},
      {R"({"name":"-gpu","nodes":"n1"})", "name", "must be a partition or reservation name"},
      {R"({"name":".gpu","nodes":"n1"})", "name", "not starting with - or ."},
      {R"({"name":"a/b","nodes":"n1"})", "name", "must be a partition or reservation name"},
      {R"({"name":")" + std::string(65, 'p') + R"(","nodes":"n1"})", "name", "at most 64"},
      {R"({"name":"","nodes":"n1"})", "name", "must not be empty"},
      {R"({"name":7,"nodes":"n1"})", "name", "must be a string"},
      {R"({"name":"gpu","nodes":""})", "nodes", "must name at least one node"},
      {R"({"name":"gpu","nodes":[]})", "nodes", "must name at least one node"},
      {R"({"name":"gpu","nodes":5})", "nodes", "must be a hostlist such as"},
      {R"({"name":"gpu","nodes":{"n1":1}})", "nodes", "must be a hostlist such as"},
      {R"({"name":"gpu","nodes":[5]})", "nodes[0]", "must be a node name"},
      {R"({"name":"gpu","nodes":"n[1-"})", "nodes", "nodes: "},
      {R"({"name":"gpu","nodes":"n[0-)" + many + R"(]"})", "nodes", "nodes: "},
      {R"({"name":"gpu","nodes":"n1,n1"})", "nodes", "names node n1 twice"},
      {R"({"name":"gpu","nodes":["n1","n\u001b"]})", "nodes", "is not a node name"},
      {R"({"name":"gpu","nodes":[")" + std::string(65, 'n') + R"("]})", "nodes",
       "is not a node name"},
      {R"({"name":"gpu","nodes":"n1","max_time_s":-1})", "max_time_s", "0..2592000"},
      {R"({"name":"gpu","nodes":"n1","max_time_s":"2h"})", "max_time_s", "integer"},
      {R"({"name":"gpu","nodes":"n1","default_time_s":2592001})", "default_time_s", "0..2592000"},
      {R"({"name":"gpu","nodes":"n1","default_time_s":7200,"max_time_s":3600})", "default_time_s",
       "more than max_time_s"},
      {R"({"name":"gpu","nodes":"n1","max_gpus":-8})", "max_gpus", "integer 0.."},
      {R"({"name":"gpu","nodes":"n1","priority_tier":1001})", "priority_tier", "-1000..1000"},
      {R"({"name":"gpu","nodes":"n1","tenants":"org"})", "tenants", "must be an array"},
      {R"({"name":"gpu","nodes":"n1","tenants":["../etc"]})", "tenants[0]", "tenant name"},
      {R"({"name":"gpu","nodes":"n1","preemptible":"yes"})", "preemptible", "true or false"},
      {R"({"name":"gpu","nodes":"n1","default":1})", "default", "true or false"},
      {R"({"name":"gpu","nodes":"n1","is_default":true})", "is_default", "unknown field"},
  };
  for (const Hostile& h : partitions) {
    CAPTURE(h.text);
    std::string field = "unset";
    auto r = ReadPartitionRequest(json::parse(h.text), &field);
    REQUIRE_FALSE(r.ok());
    CHECK(field == h.field);
    CHECK_MESSAGE(r.message().find(h.message) != std::string::npos, r.message());
  }
  const std::vector<Hostile> reservations = {
      {R"({"name":"r","duration_s":60})", "nodes", "give the nodes"},
      {R"({"name":"r","nodes":"n1","gpus":8,"duration_s":60})", "gpus", "not both"},
      {R"({"name":"r","nodes":"n1"})", "duration_s", "give the window's length"},
      {R"({"name":"r","nodes":"n1","duration_s":60,"end_ms":5})", "end_ms", "not both"},
      {R"({"name":"r","nodes":"n1","start_ms":10,"end_ms":5})", "end_ms", "is not after start_ms"},
      {R"({"name":"r","nodes":"n1","start_ms":10,"end_ms":10})", "end_ms", "is not after"},
      {R"({"name":"r","nodes":"n1","start_ms":-1,"duration_s":60})", "start_ms", "integer 0.."},
      {R"({"name":"r","nodes":"n1","duration_s":0})", "duration_s", "integer 1.."},
      {R"({"name":"r","nodes":"n1","duration_s":-60})", "duration_s", "integer 1.."},
      {R"({"name":"r","nodes":"n1","duration_s":"1h"})", "duration_s", "integer"},
      {R"({"name":"r","nodes":"n1","end_ms":253402300800000})", "end_ms", "integer 1.."},
      {R"({"name":"r","gpus":0,"duration_s":60})", "gpus", "integer 1.."},
      {R"({"name":"r","gpus":"8","duration_s":60})", "gpus", "integer"},
      {R"({"name":"r","nodes":"n1","partition":"gpu","duration_s":60})", "partition",
       "only chooses where the nodes"},
      {R"({"name":"r","gpus":8,"partition":"-gpu","duration_s":60})", "partition",
       "partition or reservation name"},
      {R"({"name":"r","nodes":"n1","duration_s":60,"maintenance":"yes"})", "maintenance",
       "true or false"},
      {R"({"name":"r","nodes":"n[0-)" + many + R"(]","duration_s":60})", "nodes", "nodes: "},
      {R"({"name":"r b","nodes":"n1","duration_s":60})", "name", "partition or reservation name"},
  };
  for (const Hostile& h : reservations) {
    CAPTURE(h.text);
    std::string field = "unset";
    auto r = ReadReservationRequest(json::parse(h.text), &field);
    REQUIRE_FALSE(r.ok());
    CHECK(field == h.field);
    CHECK_MESSAGE(r.message().find(h.message) != std::string::npos, r.message());
  }
  // An array of 100,001 nodes is refused by its size, before any name is read.
  json body = {{"name", "big"}, {"nodes", std::vector<std::string>(100001, "n1")}};
  std::string field;
  auto r = ReadPartitionRequest(body, &field);
  REQUIRE_FALSE(r.ok());
  CHECK(field == "nodes");
  CHECK(r.message().find("has 100001 nodes; at most 100000") != std::string::npos);
  // A submission's partition and reservation are names by the same rule.
  for (const char* key : {"partition", "reservation"}) {
    for (const char* bad : {R"(5)", R"("")", R"("-x")", R"("a b")"}) {
      CAPTURE(bad);
      std::string f;
      auto s = ParseSubmitRequest(Body("\"" + std::string(key) + "\":" + bad), &f);
      REQUIRE_FALSE(s.ok());
      CHECK(f == key);
    }
  }
}

TEST_CASE("the Slurm line: what the plugin and the tests send reads, the rest is refused") {
  const std::string plugin =
      R"({"v":1,"op":"submit","uid":1000,"name":"train","account":"research","partition":null,)"
      R"("comment":"topo: tp=8,pp=4","features":null,"req_nodes":null,"exc_nodes":null,)"
      R"("tres_per_job":null,"tres_per_node":"gres:gpu:8","min_nodes":4,"max_nodes":4,)"
      R"("time_limit_min":-1,"req_switch":-1,"wait4switch":-1,"batch":true,"array":false,)"
      R"("env":{"TOPO_LAYOUT":"tp=8"}})";
  auto line = ParseSlurmSubmitLine(plugin);
  REQUIRE_MESSAGE(line.ok(), line.message());
  CHECK(line.value().op == SlurmOp::kSubmit);
  CHECK(line.value().min_nodes == 4);
  CHECK(!line.value().partition);
  CHECK(line.value().env->at("TOPO_LAYOUT") == "tp=8");
  CHECK(!line.value().segment);
  CHECK(!line.value().tres_per_task);
  // Node selection as Slurm 22.05's sbatch fills it (-w, -x, -C,
  // --gpus-per-task): text here; service_slurm.cpp reads what it means.
  auto selecting = ParseSlurmSubmitLine(
      R"({"op":"test","features":"ib&nvme","req_nodes":"gpu[0001,0003]","exc_nodes":"gpu0002",)"
      R"("tres_per_socket":"gres:gpu:h100:1","tres_per_task":"gres:gpu:h100:1"})");
  REQUIRE_MESSAGE(selecting.ok(), selecting.message());
  CHECK(selecting.value().req_nodes == "gpu[0001,0003]");
  CHECK(selecting.value().tres_per_task == "gres:gpu:h100:1");
  CHECK(selecting.value().tres_per_socket == "gres:gpu:h100:1");
  CHECK(ParseSlurmSubmitLine(R"({"op":"refresh"})").ok());
  const std::vector<Hostile> cases = {
      {R"({"op":"nuke"})", "op", "must be one of submit, test, refresh"},
      {R"({"uid":1})", "op", "missing"},
      {R"({"op":"test","v":2})", "v", "1..1"},
      {R"({"op":"test","min_nodes":"4"})", "min_nodes", "integer"},
      {R"({"op":"test","min_nodes":4294967295})", "min_nodes", "-1..4294967294"},
      {R"({"op":"test","comment":5})", "comment", "string"},
      {R"({"op":"test","tres_per_task":8})", "tres_per_task", "string"},
      {R"({"op":"test","batch":"yes"})", "batch", "true or false"},
      {R"({"op":"test","env":{"HOME":"/root"}})", "env.HOME", "TOPO_"},
      {R"({"op":"test","colour":1})", "colour", "unknown field"},
      {R"({"op":"test","op":"submit"})", "op", "twice"},
  };
  for (const Hostile& h : cases) {
    CAPTURE(h.text);
    std::string field = "unset";
    auto l = ParseSlurmSubmitLine(h.text, &field);
    REQUIRE_FALSE(l.ok());
    CHECK(field == h.field);
    CHECK_MESSAGE(l.message().find(h.message) != std::string::npos, l.message());
  }
}

TEST_CASE("a job view's parts are there when their fields are, whole") {
  Gen g(7);
  JobView j = RandomJob(g, false);
  json summary = json::parse(WriteJobView(j));
  CHECK_FALSE(summary.contains("runs"));
  CHECK_FALSE(summary.contains("ranks"));
  CHECK(summary["start_ms"].is_null() == !j.start_ms);  // nullable: written as null
  auto back = ReadJobView(summary);
  REQUIRE(back.ok());
  CHECK_FALSE(back.value().accounting);
  CHECK_FALSE(back.value().detail);
  // One field of a part brings the whole part, whose other fields must be there.
  summary["gpu_hours"] = 1.5;
  std::string field;
  auto partial = ReadJobView(summary, &field);
  REQUIRE_FALSE(partial.ok());
  CHECK(field == "node_names");
  // A client's reading: unknown fields ignored, absent ones their defaults.
  summary["from_a_newer_daemon"] = {1, 2};
  auto client = ReadJobView(summary, &field, Reading::kClient);
  REQUIRE_MESSAGE(client.ok(), client.message());
  CHECK(client.value().accounting->gpu_hours == 1.5);
  CHECK(client.value().accounting->runs.empty());
  auto older = ParseJobView(R"({"id": 5, "state": "held"})", &field, Reading::kClient);
  REQUIRE(older.ok());
  CHECK(older.value().state == core::JobState::kHeld);
  // Types still count for a client.
  CHECK_FALSE(ParseJobView(R"({"id": "5"})", &field, Reading::kClient).ok());
  CHECK(field == "id");
  CHECK_FALSE(ParseJobView(R"({"id": 5, "state": "held"})", &field).ok());
}

TEST_CASE("a node view's lists match its GPUs") {
  Gen g(3);
  NodeView n = RandomNode(g, false);
  n.gpus = 4;
  n.gpu_health.assign(4, core::GpuHealth::kHealthy);
  n.gpu_jobs.assign(3, 0);
  n.free = 0;
  std::string field;
  CHECK_FALSE(ParseNodeView(WriteNodeView(n), &field).ok());
  CHECK(field == "gpu_jobs");
  n.gpu_jobs.assign(4, 0);
  n.free = 5;
  CHECK_FALSE(ParseNodeView(WriteNodeView(n), &field).ok());
  CHECK(field == "free");
}

// Every property of a flattened struct, once: two fields of one object
// with one name would overwrite each other in the writer.
TEST_CASE("no two fields of one object share a name") {
  Gen g(11);
  JobView j = RandomJob(g, false);
  j.accounting = JobAccounting{};
  j.detail = JobDetail{};
  j.detail->process = JobProcessView{};
  const auto schema = ApiSchema()["$defs"];
  CHECK(json::parse(WriteJobView(j)).size() == schema["job_view"]["properties"].size());
  SubmitAnswer a{j, true, std::vector<int64_t>{1}, std::vector<int>{0}};
  CHECK(json::parse(WriteSubmitAnswer(a)).size() == schema["submit_answer"]["properties"].size());
  SubmitRequest r = RandomSubmit(g);
  r.tenant = "t";
  r.priority = 1;
  r.time_limit_s = r.checkpoint_interval_s = r.placement_wait_s = r.memory_mb_per_node = 60;
  r.cpus_per_node = 1;
  r.launch = core::LaunchMode::kRank;
  r.env = std::map<std::string, std::string>{};
  r.chdir = r.error = r.output = "/x";
  r.dependency = "afterok:1";
  r.array = "0-1";
  r.client_request_id = "k";
  r.partition = "p";
  r.reservation = "r";
  CHECK(json::parse(WriteSubmitRequest(r)).size() == schema["submit_request"]["properties"].size());
}

// The fuzzer's seeds of the user API (tests/fuzz/corpus/api-*.json: '>' and
// the reader's digit, then the text) read strictly, so the fuzzer starts
// from messages that go deep.
TEST_CASE("the fuzz corpus's user API seeds read") {
  const std::vector<std::pair<std::string, int>> seeds = {
      {"api-submit.json", 0},         {"api-submit-answer.json", 1},    {"api-job-view.json", 2},
      {"api-job-list.json", 3},       {"api-node-view.json", 4},        {"api-node-list.json", 5},
      {"api-slurm-line.json", 6},     {"api-partition.json", 7},        {"api-reservation.json", 8},
      {"api-partition-list.json", 9}, {"api-reservation-list.json", 10}};
  for (const auto& seed : seeds) {
    // Not a structured binding: clang 14 cannot capture those (CAPTURE).
    const std::string& name = seed.first;
    const int reader = seed.second;
    CAPTURE(name);
    std::ifstream in(std::string(TOPO_SOURCE_DIR) + "/tests/fuzz/corpus/" + name);
    REQUIRE(in.good());
    std::stringstream text;
    text << in.rdbuf();
    const std::string t = text.str();
    REQUIRE(t.size() > 2);
    CHECK(t[0] == '>');
    CHECK(t[1] - '0' == reader);  // ':' for 10
    const std::string body = t.substr(2);
    std::string field;
    core::Status st = core::Status::Ok();
    switch (reader) {
      case 0:
        st = ParseSubmitRequest(body, &field).status();
        break;
      case 1:
        st = ParseSubmitAnswer(body, &field).status();
        break;
      case 2:
        st = ParseJobView(body, &field).status();
        break;
      case 3:
        st = ParseJobList(body, &field).status();
        break;
      case 4:
        st = ParseNodeView(body, &field).status();
        break;
      case 5:
        st = ParseNodeList(body, &field).status();
        break;
      case 6:
        st = ParseSlurmSubmitLine(body, &field).status();
        break;
      case 7:
        st = ReadPartitionRequest(nlohmann::json::parse(body), &field).status();
        break;
      case 8:
        st = ReadReservationRequest(nlohmann::json::parse(body), &field).status();
        break;
      case 9:
        st = ParsePartitionList(body, &field).status();
        break;
      default:
        st = ParseReservationList(body, &field).status();
        break;
    }
    CHECK_MESSAGE(st.ok(), st.message());
  }
}

TEST_CASE("the checked-in API schema is the one the tables generate") {
  std::ifstream in(std::string(TOPO_SOURCE_DIR) + "/schema/api.schema.json");
  REQUIRE_MESSAGE(in.good(), "schema/api.schema.json is missing");
  std::stringstream text;
  text << in.rdbuf();
  CHECK_MESSAGE(text.str() == ApiSchema().dump(2) + "\n",
                "regenerate it: build/common/topo-api-schema > schema/api.schema.json");
  const auto defs = ApiSchema()["$defs"];
  const auto& submit = defs["submit_request"];
  CHECK(submit["additionalProperties"] == false);
  CHECK(submit["required"] == nlohmann::ordered_json::array({"spec", "command"}));
  CHECK(submit["properties"]["spec"]["$ref"] == "urn:toposched:schema:job:1");
  CHECK(defs["job_view"]["properties"]["start_ms"]["anyOf"][1]["type"] == "null");
  // A part's fields are the view's, never required.
  CHECK(defs["job_view"]["properties"].contains("runs"));
  for (const auto& r : defs["job_view"]["required"]) CHECK(r != "runs");
}

}  // namespace
}  // namespace topo::api
