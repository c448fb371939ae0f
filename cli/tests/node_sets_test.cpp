// `topo partition`, `topo reservation` and `topo nodes --summary` without a
// daemon: the request bodies built from flags (checked by the API's reader,
// errors naming the flag) and the tables.

#include <doctest/doctest.h>

#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "client/format.hpp"
#include "client/requests.hpp"

namespace topo::cli {
namespace {

using nlohmann::json;

// 2026-01-01 00:00:00 UTC.
constexpr int64_t kT0 = 1767225600000;

PartitionFlags Partition(std::string name, std::string nodes) {
  PartitionFlags f;
  f.name = std::move(name);
  f.nodes = std::move(nodes);
  return f;
}

ReservationFlags Reservation(std::string name) {
  ReservationFlags f;
  f.name = std::move(name);
  return f;
}

TEST_CASE("topo partition create: the flags become POST /v1/partitions, only those given") {
  auto plain = PartitionCreateRequest(Partition("gpu", "n[0-3]"));
  REQUIRE_MESSAGE(plain.ok(), plain.message());
  CHECK(json::parse(api::WritePartitionRequest(plain.value())) ==
        json{{"name", "gpu"}, {"nodes", "n[0-3]"}});
  PartitionFlags all = Partition("debug", "gb[000-007],x9");
  all.max_time = "2d";
  all.default_time = "1h30m";
  all.max_gpus = "16";
  all.tenants = "org/a,lab";
  all.priority_tier = "-20";
  all.preemptible = true;
  all.is_default = true;
  auto r = PartitionCreateRequest(all);
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(json::parse(api::WritePartitionRequest(r.value())) == json{{"name", "debug"},
                                                                   {"nodes", "gb[000-007],x9"},
                                                                   {"default_time_s", 5400},
                                                                   {"max_time_s", 172800},
                                                                   {"max_gpus", 16},
                                                                   {"tenants", {"org/a", "lab"}},
                                                                   {"priority_tier", -20},
                                                                   {"preemptible", true},
                                                                   {"default", true}});
  CHECK(r.value().nodes.size() == 9);
}

TEST_CASE("topo partition create: every mistake is caught before sending, naming the flag") {
  struct Bad {
    PartitionFlags flags;
    const char* says;
  };
  auto with = [](auto set) {
    PartitionFlags f = Partition("gpu", "n[0-3]");
    set(f);
    return f;
  };
  const Bad bad[] = {
      {Partition("gpu", ""), "--nodes is required"},
      {Partition("gpu", "n[0-"), "--nodes n[0-: "},
      {Partition("gpu", "n[1-200000]"), "--nodes n[1-200000]: "},
      {Partition("gpu", "n1,n1"), "--nodes: nodes: names node n1 twice"},
      {Partition("gpu", "bad\x1bname"), "--nodes: nodes: node \"bad\\x1bname\" is not a node name"},
      {Partition("-gpu", "n1"), "NAME: name: must be a partition or reservation name"},
      {Partition(std::string(65, 'g'), "n1"), "NAME: name: is 65 bytes; at most 64"},
      {with([](PartitionFlags& f) { f.max_time = "40x"; }), "--max-time: duration '40x'"},
      {with([](PartitionFlags& f) { f.max_time = "31d"; }),
       "--max-time: max_time_s: must be an integer 0..2592000"},
      {with([](PartitionFlags& f) { f.default_time = "soon"; }), "--default-time: duration"},
      {with([](PartitionFlags& f) {
         f.default_time = "2h";
         f.max_time = "1h";
       }),
       "--default-time: default_time_s: is 7200 s, more than max_time_s (3600 s)"},
      {with([](PartitionFlags& f) { f.max_gpus = "-1"; }),
       "--max-gpus: '-1' is not a whole number"},
      {with([](PartitionFlags& f) { f.priority_tier = "1001"; }),
       "--priority-tier: '1001' is not a whole number -1000..1000"},
      {with([](PartitionFlags& f) { f.priority_tier = "x"; }), "--priority-tier: 'x'"},
      {with([](PartitionFlags& f) { f.tenants = "org/a,,lab"; }),
       "--tenants: tenants[1]: must not be empty"},
      {with([](PartitionFlags& f) { f.tenants = "Org"; }),
       "--tenants: tenants[0]: must be a tenant"},
  };
  for (const Bad& b : bad) {
    core::Result<api::PartitionRequest> r = PartitionCreateRequest(b.flags);
    CAPTURE(b.says);
    REQUIRE_FALSE(r.ok());
    CHECK_MESSAGE(r.message().find(b.says) != std::string::npos, r.message());
  }
}

TEST_CASE("topo reservation create: nodes or GPUs, a start and a duration or an end") {
  ReservationFlags f = Reservation("maint");
  f.nodes = "n[0-1]";
  f.start = "now+1h";
  f.duration = "4h";
  f.maintenance = true;
  f.tenants = "org";
  auto r = ReservationCreateRequest(f, kT0);
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(json::parse(api::WriteReservationRequest(r.value())) == json{{"name", "maint"},
                                                                     {"nodes", "n[0-1]"},
                                                                     {"start_ms", kT0 + 3600000},
                                                                     {"duration_s", 14400},
                                                                     {"tenants", {"org"}},
                                                                     {"maintenance", true}});
  ReservationFlags g = Reservation("demo");
  g.gpus = "64";
  g.partition = "gpu";
  g.end = "2026-01-02T00:00Z";
  auto by_gpus = ReservationCreateRequest(g, kT0);
  REQUIRE_MESSAGE(by_gpus.ok(), by_gpus.message());
  CHECK(json::parse(api::WriteReservationRequest(by_gpus.value())) ==
        json{{"name", "demo"},
             {"gpus", 64},
             {"start_ms", kT0},  // no --start: now
             {"end_ms", kT0 + 86400000},
             {"partition", "gpu"}});

  struct Bad {
    ReservationFlags flags;
    const char* says;
  };
  auto with = [](auto set) {
    ReservationFlags x = Reservation("r");
    x.nodes = "n1";
    x.duration = "1h";
    set(x);
    return x;
  };
  const Bad bad[] = {
      {with([](ReservationFlags& x) { x.nodes.clear(); }), "give the nodes to hold (--nodes"},
      {with([](ReservationFlags& x) { x.gpus = "8"; }), "--nodes and --gpus: give one"},
      {with([](ReservationFlags& x) {
         x.nodes.clear();
         x.gpus = "0";
       }),
       "--gpus: give 1.."},
      {with([](ReservationFlags& x) { x.duration.clear(); }), "how long? give --duration"},
      {with([](ReservationFlags& x) { x.end = "now+2h"; }), "--duration and --end: give one"},
      {with([](ReservationFlags& x) {
         x.duration.clear();
         x.start = "now+2h";
         x.end = "now+1h";
       }),
       "--end now+1h is not after --start now+2h"},
      {with([](ReservationFlags& x) { x.start = "tomorrow"; }), "--start: \"tomorrow\""},
      {with([](ReservationFlags& x) { x.duration = "-1h"; }), "--duration: duration '-1h'"},
      {with([](ReservationFlags& x) { x.partition = "gpu"; }),
       "--partition: partition: only chooses where the nodes of \"gpus\" come from"},
      {with([](ReservationFlags& x) { x.tenants = "../etc"; }), "--tenants: tenants[0]"},
      {with([](ReservationFlags& x) { x.name = "a/b"; }), "NAME: name: must be a partition or"},
  };
  for (const Bad& b : bad) {
    core::Result<api::ReservationRequest> r = ReservationCreateRequest(b.flags, kT0);
    CAPTURE(b.says);
    REQUIRE_FALSE(r.ok());
    CHECK_MESSAGE(r.message().find(b.says) != std::string::npos, r.message());
  }
  CHECK(NodeSetFieldFlag("max_time_s") == "--max-time");
  CHECK(NodeSetFieldFlag("tenants[3]") == "--tenants");
  CHECK(NodeSetFieldFlag("start_ms") == "--start");
  CHECK(NodeSetFieldFlag("spec") == "");
  CHECK(PartitionTarget("gpu.a") == "/v1/partitions/gpu.a");
  CHECK(ReservationTarget("m_1") == "/v1/reservations/m_1");
}

TEST_CASE("Partition and reservation tables: the default marked, bounds of 0 as -, local time") {
  setenv("TZ", "UTC", 1);
  tzset();
  api::PartitionView gpu;
  gpu.name = "gpu";
  gpu.nodes = "n[0-5]";
  gpu.node_count = 6;
  gpu.gpus = 48;
  gpu.up_nodes = 5;
  gpu.free_gpus = 24;
  gpu.max_time_s = 172800;
  gpu.default_time_s = 14400;
  gpu.is_default = true;
  api::PartitionView debug;
  debug.name = "debug";
  debug.nodes = "n[6-7]";
  debug.node_count = 2;
  debug.gpus = 16;
  debug.up_nodes = 2;
  debug.free_gpus = 16;
  debug.max_gpus = 8;
  debug.priority_tier = 10;
  debug.preemptible = true;
  debug.tenants = {"org/a", "lab"};
  CHECK(FormatPartitionTable({gpu, debug}) ==
        "NAME   NODES   GPUS   UP  FREE  DEFAULT-TIME  MAX-TIME  MAX-GPUS  TIER  PREEMPT  TENANTS\n"
        "gpu*   n[0-5]    48  5/6    24  4h            2d               -     0  no       all\n"
        "debug  n[6-7]    16  2/2    16  -             -                8    10  yes      "
        "org/a,lab\n");
  const std::string d = FormatPartitionDetails(debug);
  CHECK(d.find("Partition debug\n") == 0);
  CHECK(d.find("Max GPUs:    8 per job\n") != std::string::npos);
  CHECK(d.find("Tenants:     org/a,lab\n") != std::string::npos);
  CHECK(FormatPartitionDetails(gpu).find("Partition gpu (the default)\n") == 0);

  api::ReservationView m;
  m.name = "maint";
  m.nodes = "n[0-1]";
  m.node_count = 2;
  m.gpus = 16;
  m.start_ms = kT0;
  m.end_ms = kT0 + 4 * 3600000;
  m.maintenance = true;
  m.state = api::ReservationState::kActive;
  CHECK(FormatReservationTable({m}) ==
        "NAME   STATE   START                END                  NODES   GPUS  TENANTS  "
        "MAINTENANCE\n"
        "maint  active  2026-01-01 00:00:00  2026-01-01 04:00:00  n[0-1]    16  any      yes\n");
  CHECK(FormatReservationDetails(m).find("Reservation maint (active, maintenance)\n") == 0);
  CHECK(FormatReservationDetails(m).find("End:         2026-01-01 04:00:00 (4h)\n") !=
        std::string::npos);
}

TEST_CASE("topo nodes --summary groups by partition, a node counted in each of its partitions") {
  const json nodes = json::parse(R"([
    {"name": "n0", "state": "up", "gpus": 8, "pod": "p0", "partitions": ["gpu", "debug"],
     "gpu_health": ["healthy"], "gpu_jobs": [0]},
    {"name": "n1", "state": "down", "gpus": 8, "pod": "p0", "partitions": ["gpu"],
     "gpu_health": ["healthy"], "gpu_jobs": [0]},
    {"name": "n2", "state": "up", "gpus": 8, "pod": "p0", "partitions": []}
  ])");
  const json summary = NodeSummary(nodes);
  CHECK(summary["by_partition"] ==
        json::parse(R"j([{"name": "gpu", "nodes": 2, "up": 1, "draining": 0, "drained": 0,
                         "down": 1, "suspect": 0, "gpus": 16, "free": 1},
                        {"name": "debug", "nodes": 1, "up": 1, "draining": 0, "drained": 0,
                         "down": 0, "suspect": 0, "gpus": 8, "free": 1}])j"));
  const std::string text = FormatNodeSummary(summary);
  CHECK(text.find("\nPARTITION  NODES  UP") != std::string::npos);
  CHECK(text.find("\ngpu            2   1") != std::string::npos);
  // No partitions: no third table.
  const json plain = json::parse(R"([{"name": "n0", "state": "up", "gpus": 8, "pod": "p0"}])");
  CHECK(NodeSummary(plain)["by_partition"] == json::array());
  CHECK(FormatNodeSummary(NodeSummary(plain)).find("PARTITION") == std::string::npos);
}

}  // namespace
}  // namespace topo::cli
