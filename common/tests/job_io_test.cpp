#include "topo/common/job_io.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "topo/core/generators.hpp"

namespace topo::common {
namespace {

using core::GroupKind;
using core::JobSpec;
using core::Strength;
using nlohmann::json;

JobSpec Must(std::string_view text) {
  auto r = ParseJobSpec(text);
  REQUIRE_MESSAGE(r.ok(), r.message());
  return std::move(r).value();
}

constexpr std::string_view kLlama = R"({
  "name": "llama", "gpus": 4096, "gpus_per_node": 8,
  "parallelism": {"tp": 8, "cp": 1, "ep": 8, "pp": 4, "dp": 128, "order": "tp-cp-ep-dp-pp"},
  "constraints": {"tp": {"required": "hbd"}, "ep": {"required": "hbd"},
                  "pp": {"preferred": "leaf"}, "dp": "none"},
  "spares": 2,
  "gpu_types": ["H100", "H200"],
  "exclude": "gpu[0013,0027]"
})";

TEST_CASE("ParseJobSpec: the documented example") {
  JobSpec job = Must(kLlama);
  CHECK(job.name == "llama");
  CHECK(job.gpus == 4096);
  CHECK(job.gpus_per_node == 8);
  CHECK(job.parallelism.tp == 8);
  CHECK(job.parallelism.cp == 1);
  CHECK(job.parallelism.ep == 8);
  CHECK(job.parallelism.pp == 4);
  CHECK(job.parallelism.dp == 128);
  CHECK(core::FormatRankOrder(job.parallelism.order) == "tp-cp-ep-dp-pp");
  CHECK(job.constraint(GroupKind::kTp).strength == Strength::kRequired);
  CHECK(job.constraint(GroupKind::kTp).tier == "hbd");
  CHECK(job.constraint(GroupKind::kPp).strength == Strength::kPreferred);
  CHECK(job.constraint(GroupKind::kPp).tier == "leaf");
  CHECK(job.constraint(GroupKind::kDp).strength == Strength::kNone);
  CHECK(job.spares == 2);
  CHECK(job.selection.gpu_types == std::vector<std::string>{"H100", "H200"});
  CHECK(job.selection.exclude == std::vector<std::string>{"gpu0013", "gpu0027"});
}

TEST_CASE("ParseJobSpec: defaults and derived dp") {
  JobSpec minimal = Must(R"({"gpus": 16})");
  CHECK(minimal.name.empty());
  CHECK(minimal.gpus_per_node == 0);
  CHECK(minimal.parallelism.tp == 1);
  CHECK(minimal.parallelism.pp == 1);
  CHECK(minimal.parallelism.dp == 16);
  CHECK(minimal.spares == 0);
  // Core defaults for constraints are kept where the spec says nothing.
  const auto defaults = JobSpec::DefaultConstraints();
  for (GroupKind k : core::kAllGroupKinds) {
    CHECK(minimal.constraint(k).strength == defaults[static_cast<int>(k)].strength);
    CHECK(minimal.constraint(k).tier == defaults[static_cast<int>(k)].tier);
  }

  JobSpec derived = Must(R"({"gpus": 64, "parallelism": {"tp": 8, "pp": 2}})");
  CHECK(derived.parallelism.dp == 4);

  // Overriding one kind leaves the others at their defaults.
  JobSpec one = Must(R"({"gpus": 8, "constraints": {"tp": {"preferred": "leaf"}}})");
  CHECK(one.constraint(GroupKind::kTp).strength == Strength::kPreferred);
  CHECK(one.constraint(GroupKind::kEp).strength == Strength::kAuto);
  CHECK(one.constraint(GroupKind::kEp).tier == "hbd");
  JobSpec none = Must(R"({"gpus": 8, "constraints": {"tp": "none"}})");
  CHECK(none.constraint(GroupKind::kTp).strength == Strength::kNone);

  // ep may be left out of the order when it is 1.
  JobSpec order = Must(R"({"gpus": 8, "parallelism": {"tp": 2, "order": "tp-cp-dp-pp"}})");
  CHECK(order.parallelism.order.size() == 4);
}

struct BadSpec {
  const char* text;
  const char* problem;  // must appear in the message (path and fix)
};

TEST_CASE("ParseJobSpec: errors name the field and the fix") {
  const BadSpec cases[] = {
      {"{", "invalid JSON"},
      {"[]", "top level: a job spec is a JSON object"},
      {R"({})", "top level: \"gpus\" is required"},
      {R"({"gpus": 8, "foo": 1})",
       "top level: unknown field \"foo\"; allowed: name, gpus, gpus_per_node, parallelism, "
       "constraints, spares"},
      {R"({"gpus": 8, "priority": 3})", "unknown field \"priority\""},
      {R"({"gpus": 8.5})", "top level: \"gpus\" must be an integer 1..10000000 (got 8.5)"},
      {R"({"gpus": 8.0})", "\"gpus\" must be an integer"},
      {R"({"gpus": "8"})", "\"gpus\" must be an integer 1..10000000 (got \"8\")"},
      {R"({"gpus": true})", "\"gpus\" must be an integer 1..10000000 (got true)"},
      {R"({"gpus": 0})", "\"gpus\" must be an integer 1..10000000 (got 0)"},
      {R"({"gpus": -8})", "(got -8)"},
      {R"({"gpus": 10000001})", "(got 10000001)"},
      {R"({"gpus": 99999999999999999999})", "must be an integer"},
      {R"({"gpus": 8, "name": 7})", "top level: \"name\" must be a string"},
      {R"({"gpus": 8, "gpus_per_node": 65})", "\"gpus_per_node\" must be an integer 0..64"},
      {R"({"gpus": 8, "spares": -1})", "\"spares\" must be an integer 0..100000"},
      {R"({"gpus": 8, "pids_max": 0})", "\"pids_max\" must be an integer 1..4194304 (got 0)"},
      {R"({"gpus": 8, "pids_max": 4194305})", "\"pids_max\" must be an integer 1..4194304"},
      {R"({"gpus": 8, "pids_max": "512"})", "\"pids_max\" must be an integer"},
      {R"({"gpus": 8, "pids_max": 512.5})", "\"pids_max\" must be an integer"},
      {R"({"gpus": 8, "parallelism": 8})", "parallelism: must be an object"},
      {R"({"gpus": 8, "parallelism": {"tp": 8, "sp": 2}})",
       "parallelism: unknown field \"sp\"; allowed: tp, cp, ep, pp, dp, order"},
      {R"({"gpus": 8, "parallelism": {"tp": 0}})",
       "parallelism: \"tp\" must be an integer 1..10000000 (got 0)"},
      {R"({"gpus": 8, "parallelism": {"pp": 2.5}})", "parallelism: \"pp\" must be an integer"},
      {R"({"gpus": 8, "parallelism": {"cp": null}})", "parallelism: \"cp\" must be an integer"},
      {R"({"gpus": 8, "parallelism": {"order": 5}})", "parallelism: \"order\" must be a string"},
      {R"({"gpus": 8, "parallelism": {"order": "tp-xx"}})",
       "parallelism: \"order\": rank order 'tp-xx': unknown dimension 'xx'"},
      {R"({"gpus": 100, "parallelism": {"tp": 8}})",
       "parallelism: \"dp\" is derived as gpus / (tp x cp x pp), but gpus 100 is not a multiple "
       "of 8; set \"gpus\" to a multiple of 8 (e.g. 96 or 104) or change tp, cp or pp"},
      {R"({"gpus": 4, "parallelism": {"tp": 8}})", "(e.g. 8)"},
      {R"({"gpus": 64, "parallelism": {"tp": 8, "dp": 4}})",
       "parallelism: tp x cp x pp x dp = 8 x 1 x 1 x 4 = 32, but gpus is 64; make the product "
       "equal gpus"},
      {R"({"gpus": 64, "parallelism": {"tp": 10000000, "cp": 10000000, "pp": 10000000,
                                        "dp": 10000000}})",
       "= more than 64, but gpus is 64"},
      {R"({"gpus": 64, "parallelism": {"tp": 10000000, "cp": 10000000, "pp": 10000000}})",
       "is not a multiple of more than 64"},
      {R"({"gpus": 48, "parallelism": {"tp": 8, "ep": 4}})", "ep 4 does not divide dp 6"},
      {R"({"gpus": 16, "parallelism": {"tp": 2, "pp": 2, "order": "tp-dp"}})", "leaves out 'pp'"},
      {R"({"gpus": 8, "constraints": []})", "constraints: must be an object"},
      {R"({"gpus": 8, "constraints": {"xp": "none"}})",
       "constraints: unknown field \"xp\"; allowed: tp, cp, ep, pp, dp"},
      {R"({"gpus": 8, "constraints": {"tp": "strict"}})",
       "constraints.tp: a constraint is \"none\", {\"required\": \"<tier>\"}, "
       "{\"preferred\": \"<tier>\"} or {\"auto\": \"<tier>\"} (got \"strict\")"},
      {R"({"gpus": 8, "constraints": {"tp": 1}})", "constraints.tp: a constraint is"},
      {R"({"gpus": 8, "constraints": {"tp": {}}})",
       "constraints.tp: give exactly one of \"required\", \"preferred\" or \"auto\""},
      {R"({"gpus": 8, "constraints": {"ep": {"auto": ""}}})",
       "constraints.ep: \"auto\" must not be empty"},
      // Node selection.
      {R"({"gpus": 8, "gpu_types": "H100"})", "gpu_types: must be an array of names"},
      {R"({"gpus": 8, "gpu_types": [1]})", "gpu_types[0]: must be a string"},
      {R"({"gpus": 8, "gpu_types": ["H100 SXM"]})", "gpu_types[0] holds a blank"},
      {R"({"gpus": 8, "gpu_types": [""]})", "gpu_types[0] must be 1..64 bytes"},
      {R"({"gpus": 8, "features": ["ib,nvme"]})", "features[0] holds a blank, a comma"},
      {R"({"gpus": 8, "features": ["a\u001b[2J"]})", "features[0] holds a blank"},
      {R"({"gpus": 8, "nodelist": ["n1"]})", "\"nodelist\" must be a string"},
      {R"({"gpus": 8, "nodelist": ""})", "\"nodelist\" must not be empty"},
      {R"({"gpus": 8, "nodelist": "n[1-"})", "nodelist: "},
      {R"({"gpus": 8, "exclude": "n[1-200000]"})", "exclude: "},
      {R"({"gpus": 8, "exclude": "n\u001b"})", "exclude: node \"n\\x1b\" is not a node name"},
      {R"({"gpus": 8, "nodelist": "n[1-2]", "exclude": "n2"})",
       "node 'n2' is in both nodelist and exclude"},
      {R"({"gpus": 8, "avoid": 3})", "\"avoid\" must be a string"},
      {R"({"gpus": 8, "constraints": {"pp": {"required": "hbd", "preferred": "leaf"}}})",
       "constraints.pp: give exactly one"},
      {R"({"gpus": 8, "constraints": {"ep": {"mandatory": "hbd"}}})",
       "constraints.ep: unknown field \"mandatory\"; allowed: required, preferred, auto"},
      {R"({"gpus": 8, "constraints": {"dp": {"required": ""}}})",
       "constraints.dp: \"required\" must not be empty"},
      {R"({"gpus": 8, "constraints": {"cp": {"preferred": 3}}})",
       "constraints.cp: \"preferred\" must be a string"},
      {R"({"gpus": 8, "gpus": 16})", "top level: duplicate field \"gpus\""},
      {R"({"gpus": 8, "parallelism": {"tp": 2, "tp": 4}})", "parallelism: duplicate field \"tp\""},
  };
  for (const BadSpec& c : cases) {
    CAPTURE(c.text);
    auto r = ParseJobSpec(c.text);
    REQUIRE_FALSE(r.ok());
    CAPTURE(r.message());
    CHECK(r.message().find(c.problem) != std::string::npos);
  }
}

TEST_CASE("JobSpecToJson writes every field and round trips") {
  json j = JobSpecToJson(Must(kLlama));
  CHECK(j == json::parse(R"({
    "name": "llama", "gpus": 4096, "gpus_per_node": 8,
    "parallelism": {"tp": 8, "cp": 1, "ep": 8, "pp": 4, "dp": 128, "order": "tp-cp-ep-dp-pp"},
    "constraints": {"tp": {"required": "hbd"}, "cp": "none", "ep": {"required": "hbd"},
                    "pp": {"preferred": "leaf"}, "dp": "none"},
    "spares": 2, "gpu_types": ["H100", "H200"], "exclude": "gpu[0013,0027]"})"));

  const char* specs[] = {
      R"({"gpus": 1})",
      R"({"gpus": 24, "name": "", "gpus_per_node": 4, "spares": 7})",
      R"({"gpus": 8, "pids_max": 4096})",
      R"({"gpus": 512, "parallelism": {"tp": 4, "cp": 2, "ep": 4, "pp": 8, "order": "pp-dp-ep-cp-tp"},
          "constraints": {"tp": "none", "cp": {"required": "leaf"}, "ep": {"preferred": "pod"},
                          "pp": {"required": "cluster"}, "dp": {"preferred": "spine"}}})",
      R"({"gpus": 6, "parallelism": {"tp": 3, "order": "dp-tp"}})",
      R"({"gpus": 16, "constraints": {"ep": {"auto": "leaf"}}, "gpu_types": ["H100", "h200"],
          "features": ["ib", "nvme"], "nodelist": "gpu[001-002],x7", "avoid": "gpu009"})",
      R"({"gpus": 16, "exclude": "gpu[010-012],gpu020"})",
  };
  for (const char* text : specs) {
    CAPTURE(text);
    JobSpec a = Must(text);
    json once = JobSpecToJson(a);
    auto b = JobSpecFromJson(once);
    REQUIRE_MESSAGE(b.ok(), b.message());
    CHECK(JobSpecToJson(b.value()) == once);
    CHECK(b.value().name == a.name);
    CHECK(b.value().gpus == a.gpus);
    CHECK(b.value().gpus_per_node == a.gpus_per_node);
    CHECK(b.value().spares == a.spares);
    CHECK(b.value().pids_max == a.pids_max);
    CHECK(b.value().selection == a.selection);
    CHECK(b.value().parallelism.dp == a.parallelism.dp);
    CHECK(b.value().parallelism.order == a.parallelism.order);
    for (GroupKind k : core::kAllGroupKinds) {
      CHECK(b.value().constraint(k).strength == a.constraint(k).strength);
      CHECK(b.value().constraint(k).tier == a.constraint(k).tier);
    }
    // The text form parses back the same way.
    CHECK(JobSpecToJson(Must(once.dump())) == once);
  }
}

TEST_CASE("PlacementToJson names nodes and GPUs") {
  auto topology = core::GenerateTopology("tiny");
  REQUIRE(topology.ok());
  const core::Topology& t = topology.value();
  core::Placement placed;
  placed.outcome = core::PlaceOutcome::kPlaced;
  placed.ranks = {{0, 0}, {0, 1}, {3, 7}};
  placed.spares = {5};
  json j = PlacementToJson(placed, t);
  CHECK(j["outcome"] == "placed");
  CHECK(j["reason"] == "");
  REQUIRE(j["ranks"].size() == 3);
  CHECK(j["ranks"][2] == json{{"rank", 2}, {"node", t.node(3).name}, {"gpu", 7}});
  CHECK(j["spares"] == json::array({t.node(5).name}));

  core::Placement busy;
  busy.outcome = core::PlaceOutcome::kBusy;
  busy.reason = "needs 64 free GPUs in one spine";
  json b = PlacementToJson(busy, t);
  CHECK(b["outcome"] == "busy");
  CHECK(b["reason"] == "needs 64 free GPUs in one spine");
  CHECK(b["ranks"] == json::array());
  CHECK(b["spares"] == json::array());
  core::Placement never;
  CHECK(PlacementToJson(never, t)["outcome"] == "infeasible");
}

TEST_CASE("MetricsToJson: nulls, counts and the named tier histogram") {
  auto topology = core::GenerateTopology("tiny");
  REQUIRE(topology.ok());
  const core::Topology& t = topology.value();
  core::PlacementMetrics m;
  m.tp_in_hbd = 1.0;
  m.leaf_span_ratio = 1.5;
  m.pod_span_ratio = 1.0;
  m.leaves_spanned = 3;
  m.pods_spanned = 1;
  m.min_leaves = 2;
  m.min_pods = 1;
  m.comm_cost = 40;
  m.comm_cost_bound = 32;
  m.required_met = false;
  for (auto& h : m.tier_histogram) h.assign(t.root_tier() + 1, 0);
  m.tier_histogram[static_cast<int>(GroupKind::kTp)][0] = 4;
  m.tier_histogram[static_cast<int>(GroupKind::kPp)][1] = 1;
  m.tier_histogram[static_cast<int>(GroupKind::kDp)][t.root_tier()] = 2;
  json j = MetricsToJson(m, t);
  CHECK(j["tp_in_hbd"] == 1.0);
  CHECK(j["ep_in_hbd"].is_null());
  CHECK(j["comm_cost_ratio"].is_null());
  CHECK(j["leaf_span_ratio"] == 1.5);
  CHECK(j["leaves_spanned"] == 3);
  CHECK(j["min_leaves"] == 2);
  CHECK(j["pods_spanned"] == 1);
  CHECK(j["min_pods"] == 1);
  CHECK(j["comm_cost"] == 40.0);
  CHECK(j["comm_cost_bound"] == 32.0);
  CHECK(j["required_met"] == false);
  CHECK(j["tier_histogram"] == json::parse(R"({"tp": {"node": 4}, "cp": {}, "ep": {},
                                                "pp": {"leaf": 1}, "dp": {"cluster": 2}})"));
  m.comm_cost_ratio = 1.25;
  CHECK(MetricsToJson(m, t)["comm_cost_ratio"] == 1.25);
}

TEST_CASE("MetricsToJson of a real evaluation") {
  auto topology = core::GenerateTopology("tiny");
  REQUIRE(topology.ok());
  const core::Topology& t = topology.value();
  JobSpec job = Must(R"({"gpus": 16, "parallelism": {"tp": 8}})");
  std::vector<core::GpuSlot> ranks;
  for (int r = 0; r < 16; ++r) ranks.push_back({r / 8, r % 8});
  json j = MetricsToJson(core::Evaluate(job, t, ranks), t);
  CHECK(j["tp_in_hbd"] == 1.0);
  CHECK(j["required_met"] == true);
  CHECK(j["tier_histogram"]["tp"] == json{{"node", 2}});
}

}  // namespace
}  // namespace topo::common
