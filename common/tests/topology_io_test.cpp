#include "topo/common/topology_io.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "topo/core/generators.hpp"

namespace topo::common {
namespace {

using core::Topology;

Topology MustJson(std::string_view text) {
  auto r = ParseTopologyJson(text);
  REQUIRE_MESSAGE(r.ok(), r.message());
  return std::move(r).value();
}

Topology MustSlurm(std::string_view text, SlurmTopologyOptions options = {}) {
  auto r = ParseSlurmTopology(text, options);
  REQUIRE_MESSAGE(r.ok(), r.message());
  return std::move(r).value();
}

std::string LinkText(const core::TierLink& l) {
  std::ostringstream out;
  out << l.bandwidth_gbs << "/" << l.latency_us << "/" << l.oversubscription;
  return out.str();
}
std::string LinkText(const std::optional<core::TierLink>& l) {
  return l ? LinkText(*l) : std::string("none");
}

// The first difference in names, tiers, costs, links, HBD, HBD marks, tree
// shape (ids and parents) and nodes, and (with node_details) in the parts and
// their views; empty when the topologies are the same.
std::string FirstDifference(const Topology& a, const Topology& b, bool node_details) {
  auto at = [](std::string what, auto x, auto y) {
    std::ostringstream out;
    out << what << ": " << x << " vs " << y;
    return out.str();
  };
  if (a.name() != b.name()) return at("name", a.name(), b.name());
  if (a.tier_count() != b.tier_count()) return at("tier_count", a.tier_count(), b.tier_count());
  for (int t = 0; t < a.tier_count(); ++t) {
    if (a.tier(t).name != b.tier(t).name) return at("tier name", a.tier(t).name, b.tier(t).name);
    if (a.tier(t).cost != b.tier(t).cost) return at("tier cost", a.tier(t).cost, b.tier(t).cost);
  }
  for (int t = 0; t <= a.tier_count(); ++t) {
    if (!(a.tier(t).link == b.tier(t).link)) {
      return at("tier " + std::to_string(t) + " link", LinkText(a.tier(t).link),
                LinkText(b.tier(t).link));
    }
  }
  if (a.hbd_tier() != b.hbd_tier()) return at("hbd", a.hbd_tier(), b.hbd_tier());
  if (a.domain_count() != b.domain_count())
    return at("domains", a.domain_count(), b.domain_count());
  for (core::DomainId d = 0; d < a.domain_count(); ++d) {
    const core::Domain& x = a.domain(d);
    const core::Domain& y = b.domain(d);
    if (x.name != y.name) return at("domain " + std::to_string(d), x.name, y.name);
    if (x.tier != y.tier || x.parent != y.parent || x.gpus != y.gpus) {
      return at(
          "domain " + x.name + " tier/parent/gpus",
          std::to_string(x.tier) + "/" + std::to_string(x.parent) + "/" + std::to_string(x.gpus),
          std::to_string(y.tier) + "/" + std::to_string(y.parent) + "/" + std::to_string(y.gpus));
    }
    if (a.hbd_marked(d) != b.hbd_marked(d)) {
      return at("domain " + x.name + " HBD mark", a.hbd_marked(d), b.hbd_marked(d));
    }
    if (a.hbd_link(d) != b.hbd_link(d)) {
      return at("domain " + x.name + " HBD link", LinkText(a.hbd_link(d)), LinkText(b.hbd_link(d)));
    }
  }
  for (core::NodeId n = 0; n < a.node_count(); ++n) {
    const core::Node& x = a.node(n);
    const core::Node& y = b.node(n);
    if (x.gpus != y.gpus) return at("node " + x.name + " gpus", x.gpus, y.gpus);
    if (node_details && x.gpu_model != y.gpu_model) {
      return at("node " + x.name + " model", x.gpu_model, y.gpu_model);
    }
    if (node_details && x.features != y.features) return "node " + x.name + " features";
  }
  if (!node_details) return "";
  // Parts follow from models and marks; each view's own HBD, links, costs
  // and domain GPU counts.
  if (a.part_count() != b.part_count()) return at("parts", a.part_count(), b.part_count());
  for (int p = 0; p < a.part_count(); ++p) {
    const core::TopologyPart& x = a.part(p);
    const core::TopologyPart& y = b.part(p);
    if (x.gpu_model != y.gpu_model || x.hbd_tier != y.hbd_tier || x.first_node != y.first_node ||
        x.nodes != y.nodes || x.gpus != y.gpus) {
      return "part " + std::to_string(p);
    }
    if (p > 0 || a.part_count() > 1) {
      std::string view = FirstDifference(a.PartView(p), b.PartView(p), false);
      if (!view.empty()) return "view of part " + std::to_string(p) + ": " + view;
    }
  }
  for (core::NodeId n = 0; n < a.node_count(); ++n) {
    if (a.part_of(n) != b.part_of(n))
      return at("part of " + a.node(n).name, a.part_of(n), b.part_of(n));
  }
  return "";
}

void CheckSameTopology(const Topology& a, const Topology& b, bool node_details = true) {
  CHECK(FirstDifference(a, b, node_details) == "");
}

constexpr std::string_view kTinyJson = R"({
  "version": 1, "name": "tiny", "tiers": ["node", {"name": "leaf", "cost": 5}, "spine"],
  "hbd": "node", "gpus_per_node": 8, "gpu_model": "H100",
  "domains": [
    {"name": "spine0", "children": [
      {"name": "leaf0", "tier": "leaf", "nodes": ["n0", "n1"]},
      {"name": "leaf1", "nodes": ["n2", {"name": "n3", "gpus": 4, "gpu_model": "A100",
                                          "features": ["ib", "nvme"]}]}]},
    {"name": "spine1", "tier": "spine", "children": [
      {"name": "leaf2", "nodes": [{"name": "n4"}]}]}
  ]
})";

TEST_CASE("ParseTopologyJson: the documented example") {
  Topology t = MustJson(kTinyJson);
  CHECK(t.name() == "tiny");
  REQUIRE(t.tier_count() == 3);
  CHECK(t.tier(1).name == "leaf");
  CHECK(t.tier(1).cost == 5.0);
  CHECK(t.tier(2).cost == core::DefaultTierCost(2, 0));
  CHECK(t.hbd_tier() == 0);
  CHECK(t.node_count() == 5);
  CHECK(t.total_gpus() == 8 * 4 + 4);
  const core::Node& n3 = t.node(t.FindNode("n3"));
  CHECK(n3.gpus == 4);
  CHECK(n3.gpu_model == "A100");
  CHECK(n3.features == std::vector<std::string>{"ib", "nvme"});
  CHECK(t.node(t.FindNode("n4")).gpu_model == "H100");
  CHECK(t.domain(t.Ancestor(t.FindNode("n4"), 2)).name == "spine1");
}

TEST_CASE("ParseTopologyJson: node tier only, HBD above the node, defaults") {
  Topology flat = MustJson(R"({"version": 1, "name": "flat", "tiers": ["node"],
                               "nodes": ["a", "b"]})");
  CHECK(flat.tier_count() == 1);
  CHECK(flat.node(0).gpus == 8);  // default gpus_per_node
  CHECK(flat.node(0).gpu_model.empty());

  Topology nvl = MustJson(R"({"version": 1, "name": "nvl", "tiers": ["node", "rack", "leaf"],
      "hbd": "rack", "gpus_per_node": 4,
      "domains": [{"name": "l0", "children": [{"name": "r0", "nodes": ["a", "b"]}]}]})");
  CHECK(nvl.hbd_tier() == 1);
  CHECK(nvl.tier(1).cost == 1.0);
  CHECK(nvl.tier(2).cost == 4.0);
  CHECK(nvl.total_gpus() == 8);
}

// A mixed cluster: racks of two 8-GPU HGX H100 nodes (HBD = node, the
// file's) and two GB200 racks of three 4-GPU nodes, each marked as its HBD
// with its NVLink; each leaf holds one of each.
constexpr std::string_view kMixedJson = R"({
  "version": 1, "name": "mixed", "tiers": ["node", "rack", "leaf", "spine"], "hbd": "node",
  "gpus_per_node": 8, "gpu_model": "H100",
  "domains": [
    {"name": "s0", "children": [
      {"name": "l0", "children": [
        {"name": "hgx0", "nodes": ["h0", "h1"]},
        {"name": "nvl0", "hbd": true, "link": {"bandwidth_gbs": 900, "latency_us": 2},
         "nodes": [{"name": "g0", "gpus": 4, "gpu_model": "GB200"},
                   {"name": "g1", "gpus": 4, "gpu_model": "GB200"},
                   {"name": "g2", "gpus": 4, "gpu_model": "GB200"}]}]},
      {"name": "l1", "children": [
        {"name": "hgx1", "hbd": false, "nodes": ["h2", "h3"]},
        {"name": "nvl1", "tier": "rack", "hbd": true,
         "link": {"bandwidth_gbs": 900, "latency_us": 2, "oversubscription": 1},
         "nodes": [{"name": "g3", "gpus": 4, "gpu_model": "GB200"},
                   {"name": "g4", "gpus": 4, "gpu_model": "GB200"},
                   {"name": "g5", "gpus": 4, "gpu_model": "GB200"}]}]}]}
  ]
})";

TEST_CASE("ParseTopologyJson: marked racks beside HGX nodes make two parts") {
  Topology t = MustJson(kMixedJson);
  CHECK(t.hbd_tier() == 0);  // the file's, for nodes under no mark
  CHECK(t.FindTier("hbd").value() == 0);
  CHECK(t.node_count() == 10);
  CHECK(t.total_gpus() == 4 * 8 + 6 * 4);
  // Depth-first: h0 h1 | g0 g1 g2 | h2 h3 | g3 g4 g5.
  CHECK(t.node(2).name == "g0");
  CHECK(t.node(5).name == "h2");
  const core::DomainId nvl0 = t.FindDomain("nvl0"), nvl1 = t.FindDomain("nvl1");
  CHECK(t.hbd_marked(nvl0));
  CHECK(t.hbd_marked(nvl1));
  CHECK_FALSE(t.hbd_marked(t.FindDomain("hgx0")));
  CHECK_FALSE(t.hbd_marked(t.FindDomain("hgx1")));  // "hbd": false means nothing
  CHECK_FALSE(t.hbd_marked(t.FindDomain("l0")));
  CHECK(t.hbd_link(nvl0) == core::TierLink{900, 2, 1});
  CHECK(t.hbd_link(nvl1) == core::TierLink{900, 2, 1});
  CHECK_FALSE(t.hbd_link(t.FindDomain("hgx0")).has_value());

  REQUIRE(t.part_count() == 2);
  const core::TopologyPart& hgx = t.part(0);
  CHECK(hgx.gpu_model == "H100");
  CHECK(hgx.hbd_tier == 0);
  CHECK(hgx.first_node == 0);
  CHECK(hgx.nodes == 4);
  CHECK(hgx.gpus == 32);
  const core::TopologyPart& nvl = t.part(1);
  CHECK(nvl.gpu_model == "GB200");
  CHECK(nvl.hbd_tier == 1);
  CHECK(nvl.first_node == 2);
  CHECK(nvl.nodes == 6);
  CHECK(nvl.gpus == 24);
  for (const char* n : {"h0", "h1", "h2", "h3"}) CHECK(t.part_of(t.FindNode(n)) == 0);
  for (const char* n : {"g0", "g1", "g2", "g3", "g4", "g5"}) CHECK(t.part_of(t.FindNode(n)) == 1);

  // Whole topology: every node counts.
  const core::DomainId l0 = t.FindDomain("l0"), s0 = t.FindDomain("s0");
  CHECK(t.domain(l0).gpus == 16 + 12);
  CHECK(t.domain(s0).gpus == 56);
  // Each view counts its part's nodes only, and has its own HBD.
  const Topology& v0 = t.PartView(0);
  const Topology& v1 = t.PartView(1);
  CHECK(v0.FindTier("hbd").value() == 0);
  CHECK(v1.FindTier("hbd").value() == 1);
  CHECK(v0.domain(l0).gpus == 16);
  CHECK(v0.domain(t.FindDomain("hgx0")).gpus == 16);
  CHECK(v0.domain(nvl0).gpus == 0);
  CHECK(v0.domain(s0).gpus == 32);
  CHECK(v0.total_gpus() == 32);
  CHECK(v1.domain(l0).gpus == 12);
  CHECK(v1.domain(nvl0).gpus == 12);
  CHECK(v1.domain(t.FindDomain("hgx0")).gpus == 0);
  CHECK(v1.domain(s0).gpus == 24);
  CHECK(v1.total_gpus() == 24);
  CHECK(v0.max_domain_gpus(1) == 16);
  CHECK(v1.max_domain_gpus(1) == 12);
  // The racks' NVLink covers the GB200 view up to the rack; the HGX view
  // keeps the defaults of a node HBD.
  CHECK(v1.tier(0).link == core::TierLink{900, 2, 1});
  CHECK(v1.tier(1).link == core::TierLink{900, 2, 1});
  CHECK(v1.tier(1).cost == 1.0);
  CHECK(v0.tier(1).link == core::DefaultTierLink(1, 0));
  CHECK(v0.tier(1).cost == 4.0);
  CHECK(&t.ViewOf(t.FindNode("g4")) == &v1);
  CHECK(v1.part_of(t.FindNode("h0")) == -1);
  // Views keep the marks.
  CHECK(v0.hbd_marked(nvl0));
}

TEST_CASE("TopologyToJson round trips exactly") {
  SUBCASE("example") {
    Topology t = MustJson(kTinyJson);
    std::string text = TopologyToJson(t);
    CAPTURE(text);
    CheckSameTopology(t, MustJson(text));
    // Nodes equal to the defaults are plain strings; others keep only what differs.
    CHECK(text.find("\"n0\"") != std::string::npos);
    CHECK(text.find(
              R"({"name": "n3", "gpus": 4, "gpu_model": "A100", "features": ["ib", "nvme"]})") !=
          std::string::npos);
    CHECK(text.find(R"({"name": "leaf", "cost": 5.0})") != std::string::npos);
  }
  SUBCASE("flat") {
    Topology t = MustJson(R"({"version": 1, "name": "flat", "tiers": ["node"],
                              "gpu_model": "x", "nodes": ["a", {"name": "b", "gpus": 2}]})");
    CheckSameTopology(t, MustJson(TopologyToJson(t)));
  }
  SUBCASE("mixed: the marks and their links, so the parts too") {
    Topology t = MustJson(kMixedJson);
    std::string text = TopologyToJson(t);
    CAPTURE(text);
    Topology back = MustJson(text);
    CheckSameTopology(t, back);
    REQUIRE(back.part_count() == 2);
    CHECK(back.PartView(1).domain(back.FindDomain("l1")).gpus == 12);
    // The marks are written where they are, with the link (oversubscription
    // 1 left out); unmarked domains say nothing ("hbd": false is not kept).
    const nlohmann::json j = nlohmann::json::parse(text);
    const nlohmann::json& l0 = j["domains"][0]["children"][0]["children"];
    const nlohmann::json& l1 = j["domains"][0]["children"][1]["children"];
    CHECK(l0[1]["name"] == "nvl0");
    CHECK(l0[1]["hbd"] == true);
    CHECK(l0[1]["link"] == nlohmann::json{{"bandwidth_gbs", 900.0}, {"latency_us", 2.0}});
    CHECK(l1[1]["hbd"] == true);
    CHECK_FALSE(l0[0].contains("hbd"));
    CHECK_FALSE(l1[0].contains("hbd"));
    CHECK(text.find("\"link\": {\"bandwidth_gbs\": 900.0, \"latency_us\": 2.0}") !=
          std::string::npos);
    CHECK(TopologyToJson(back) == text);
  }
  SUBCASE("a mark without a link, and a mark on every HBD-tier domain") {
    // Every node under a mark: the topology is its one part, HBD = rack.
    Topology all = MustJson(R"({"version": 1, "name": "racks", "tiers": ["node", "rack", "leaf"],
        "domains": [{"name": "l0", "children": [
          {"name": "r0", "hbd": true, "link": {"bandwidth_gbs": 900, "latency_us": 3},
           "nodes": ["a", "b"]},
          {"name": "r1", "hbd": true, "link": {"bandwidth_gbs": 900, "latency_us": 3},
           "nodes": ["c"]}]}]})");
    CHECK(all.part_count() == 1);
    CHECK(all.hbd_tier() == 1);
    CHECK(all.tier(1).link == core::TierLink{900, 3, 1});
    CheckSameTopology(all, MustJson(TopologyToJson(all)));
    Topology bare = MustJson(R"({"version": 1, "name": "bare", "tiers": ["node", "rack", "leaf"],
        "domains": [{"name": "l0", "children": [
          {"name": "r0", "hbd": true, "nodes": ["a", "b"]},
          {"name": "r1", "nodes": ["c"]}]}]})");
    REQUIRE(bare.part_count() == 2);
    CHECK_FALSE(bare.hbd_link(bare.FindDomain("r0")).has_value());
    CHECK(bare.PartView(0).tier(1).link == core::DefaultTierLink(1, 1));
    std::string text = TopologyToJson(bare);
    const nlohmann::json r0 = nlohmann::json::parse(text)["domains"][0]["children"][0];
    CHECK(r0["hbd"] == true);
    CHECK_FALSE(r0.contains("link"));
    CheckSameTopology(bare, MustJson(text));
  }
  for (const char* name : {"tiny", "nvl72-64k", "cm384-166k", "mixed-10k"}) {
    SUBCASE(name) {
      auto t = core::GenerateTopology(name);
      REQUIRE_MESSAGE(t.ok(), t.message());
      std::string text = TopologyToJson(t.value());
      CheckSameTopology(t.value(), MustJson(text));
      // Compact: many node names share a line.
      if (t.value().node_count() > 100)
        CHECK(std::count(text.begin(), text.end(), '\n') < t.value().node_count());
    }
  }
}

struct BadJson {
  const char* text;
  const char* where;    // the JSON path the message must start with
  const char* problem;  // and a word of what is wrong
};

TEST_CASE("ParseTopologyJson: every error names the path") {
  // {D} is replaced by a valid domains list.
  const BadJson cases[] = {
      {"{", "invalid JSON", "line 1"},
      {"[1]", "top level", "JSON object"},
      {R"({"name": "x", "tiers": ["node"], "nodes": ["a"]})", "top level", "\"version\""},
      {R"({"version": 2, "name": "x", "tiers": ["node"], "nodes": ["a"]})", "top level",
       "must be 1"},
      {R"({"version": 1, "tiers": ["node"], "nodes": ["a"]})", "top level", "\"name\""},
      {R"({"version": 1, "name": "", "tiers": ["node"], "nodes": ["a"]})", "top level",
       "must not be empty"},
      {R"({"version": 1, "name": 3, "tiers": ["node"], "nodes": ["a"]})", "top level",
       "must be a string"},
      {R"({"version": 1, "name": "x", "tiers": ["node"], "nodes": ["a"], "foo": 1})", "top level",
       "unknown field \"foo\"; allowed: version, name"},
      {R"({"version": 1, "name": "x", "nodes": ["a"]})", "top level", "\"tiers\""},
      {R"({"version": 1, "name": "x", "tiers": [], "nodes": ["a"]})", "tiers", "non-empty"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "node"], "nodes": ["a"]})", "tiers[1]",
       "twice"},
      {R"({"version": 1, "name": "x", "tiers": ["node", 3], "nodes": ["a"]})", "tiers[1]",
       "a tier is"},
      {R"({"version": 1, "name": "x", "tiers": [""], "nodes": ["a"]})", "tiers[0]", "empty"},
      {R"({"version": 1, "name": "x", "tiers": [{"name": "node", "cost": -1}], "nodes": ["a"]})",
       "tiers[0]", "positive"},
      {R"({"version": 1, "name": "x", "tiers": [{"name": "node", "bw": 1}], "nodes": ["a"]})",
       "tiers[0]", "unknown field \"bw\""},
      {R"({"version": 1, "name": "x", "tiers": [{"cost": 1}], "nodes": ["a"]})", "tiers[0]",
       "\"name\" is required"},
      {R"({"version": 1, "name": "x", "tiers": ["node"], "hbd": "rack", "nodes": ["a"]})",
       "top level", "\"rack\", which is not in"},
      {R"({"version": 1, "name": "x", "tiers": ["node"], "gpus_per_node": 0, "nodes": ["a"]})",
       "top level", "\"gpus_per_node\" must be an integer 1..64"},
      {R"({"version": 1, "name": "x", "tiers": ["node"], "gpus_per_node": 8.0, "nodes": ["a"]})",
       "top level", "must be an integer"},
      {R"({"version": 1, "name": "x", "tiers": ["node"], "gpu_model": 1, "nodes": ["a"]})",
       "top level", "\"gpu_model\" must be a string"},
      {R"({"version": 1, "name": "x", "tiers": ["node"]})", "top level", "\"nodes\" is required"},
      {R"({"version": 1, "name": "x", "tiers": ["node"], "domains": []})", "top level",
       "not \"domains\""},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"]})", "top level",
       "\"domains\" is required"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"], "nodes": ["a"]})", "top level",
       "nodes go inside"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"], "domains": []})", "domains",
       "non-empty"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"], "domains": ["l0"]})", "domains[0]",
       "is an object"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"], "domains": [{"nodes": ["a"]}]})",
       "domains[0]", "\"name\" is required"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0"}]})",
       "domains[0]", "\"nodes\" is required"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "children": []}]})",
       "domains[0]", "lists \"nodes\", not \"children\""},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf", "spine"],
           "domains": [{"name": "s0", "nodes": ["a"]}]})",
       "domains[0]", "lists \"children\", not \"nodes\""},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf", "spine"],
           "domains": [{"name": "s0", "children": []}]})",
       "domains[0].children", "non-empty"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf", "spine"],
           "domains": [{"name": "s0", "children": [{"name": "l0", "tier": "spine",
           "nodes": ["a"]}]}]})",
       "domains[0].children[0]", "says tier \"spine\" but sits at the depth of tier \"leaf\""},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "nodes": ["a"], "color": "red"}]})",
       "domains[0]", "unknown field \"color\"; allowed: name, tier, nodes"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "nodes": []}]})",
       "domains[0].nodes", "non-empty"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf", "spine"],
           "domains": [{"name": "s0", "children": [{"name": "l0", "nodes": ["a", "b", 
           {"name": "c", "gpus": 65}]}]}]})",
       "domains[0].children[0].nodes[2]", "\"gpus\" must be an integer 1..64 (got 65)"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "nodes": [{"name": "c", "gpus": "8"}]}]})",
       "domains[0].nodes[0]", "must be an integer"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "nodes": [{"name": "c", "gpus": true}]}]})",
       "domains[0].nodes[0]", "must be an integer"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "nodes": [{"name": "c", "ram": 1}]}]})",
       "domains[0].nodes[0]", "unknown field \"ram\"; allowed: name, gpus, gpu_model, features"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "nodes": [{"gpus": 1}]}]})",
       "domains[0].nodes[0]", "\"name\" is required"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "nodes": [""]}]})",
       "domains[0].nodes[0]", "must not be empty"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "nodes": [7]}]})",
       "domains[0].nodes[0]", "a node is a name or an object"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "nodes": [{"name": "c", "features": "ib"}]}]})",
       "domains[0].nodes[0]", "\"features\" must be an array"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "nodes": [{"name": "c", "features": ["ib", 2]}]}]})",
       "domains[0].nodes[0].features[1]", "non-empty string"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "nodes": ["a"]}, {"name": "l1", "nodes": ["b", "a"]}]})",
       "domains[1].nodes[1]", "\"a\" is already used at domains[0].nodes[0]"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "nodes": ["l0"]}]})",
       "domains[0].nodes[0]", "already used at domains[0]"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "nodes": ["a"], "name": "l1"}]})",
       "domains[0]", "duplicate field \"name\""},
      // HBD marks: "hbd" a boolean, "link" only with "hbd": true and checked
      // as a tier link, no HBD inside another.
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "hbd": "yes", "nodes": ["a"]}]})",
       "domains[0]", "\"hbd\" must be true or false (got \"yes\")"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "hbd": 1, "nodes": ["a"]}]})",
       "domains[0]", "\"hbd\" must be true or false (got 1)"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "link": {"bandwidth_gbs": 900, "latency_us": 3},
                        "nodes": ["a"]}]})",
       "domains[0]", "\"link\" is the scale-up link inside an HBD: give it with \"hbd\": true"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "hbd": false,
                        "link": {"bandwidth_gbs": 900, "latency_us": 3}, "nodes": ["a"]}]})",
       "domains[0]", "give it with \"hbd\": true"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf", "spine"],
           "domains": [{"name": "s0", "children": [{"name": "l0", "hbd": true,
             "link": {"bandwidth_gbs": 0, "latency_us": 3}, "nodes": ["a"]}]}]})",
       "domains[0].children[0].link", "\"bandwidth_gbs\" must be a number above 0 .. 1e9 (got 0)"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "hbd": true,
                        "link": {"bandwidth_gbs": "900", "latency_us": 3}, "nodes": ["a"]}]})",
       "domains[0].link", "\"bandwidth_gbs\" must be a number above 0 .. 1e9 (got \"900\")"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "hbd": true,
                        "link": {"bandwidth_gbs": 900, "latency_us": -1}, "nodes": ["a"]}]})",
       "domains[0].link", "\"latency_us\" must be a number above 0"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "hbd": true, "link": {"bandwidth_gbs": 900,
                        "latency_us": 3, "oversubscription": 0.5}, "nodes": ["a"]}]})",
       "domains[0].link", "\"oversubscription\" must be a number 1 .. 1e9 (got 0.5)"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "hbd": true, "link": {"bandwidth_gbs": 900},
                        "nodes": ["a"]}]})",
       "domains[0].link", "\"latency_us\" is required in the link of an HBD"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "hbd": true, "link": 900, "nodes": ["a"]}]})",
       "domains[0].link", "must be an object"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "leaf"],
           "domains": [{"name": "l0", "hbd": true,
                        "link": {"bandwidth_gbs": 900, "latency_us": 3, "bw": 1}, "nodes": ["a"]}]})",
       "domains[0].link",
       "unknown field \"bw\"; allowed: bandwidth_gbs, latency_us, oversubscription"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "rack", "leaf", "spine"],
           "domains": [{"name": "s0", "children": [{"name": "l0", "hbd": true, "children": [
             {"name": "r0", "nodes": ["a"]}, {"name": "r1", "hbd": true, "nodes": ["b"]}]}]}]})",
       "domains[0].children[0].children[1]",
       "domain \"r1\" is marked as an HBD inside HBD \"l0\" (domains[0].children[0]); an HBD "
       "holds no other"},
      {R"({"version": 1, "name": "x", "tiers": ["node", "rack", "leaf"],
           "domains": [{"name": "l0", "hbd": true, "children": [
             {"name": "r0", "hbd": false, "nodes": ["a"]},
             {"name": "r1", "nodes": ["b"]}, {"name": "r2", "hbd": true, "nodes": ["c"]}]}]})",
       "domains[0].children[2]", "inside HBD \"l0\" (domains[0])"},
  };
  for (const BadJson& c : cases) {
    CAPTURE(c.text);
    auto r = ParseTopologyJson(c.text);
    REQUIRE_FALSE(r.ok());
    CAPTURE(r.message());
    CHECK(r.message().starts_with(c.where));
    CHECK(r.message().find(c.problem) != std::string::npos);
  }
}

// --- Slurm topology.conf ---------------------------------------------------

constexpr std::string_view kSlurmTree = R"(# a two-level tree
SwitchName=s0 Nodes=n[01-02]
switchname=s1 nodes=n[03-04] LinkSpeed=100   # keys are case-insensitive

SwitchName=top Switches=s[0-1]
)";

TEST_CASE("ParseSlurmTopology: a tree") {
  Topology t = MustSlurm(kSlurmTree, {.gpus_per_node = 4, .name = "lab"});
  CHECK(t.name() == "lab");
  REQUIRE(t.tier_count() == 3);
  CHECK(t.tier(0).name == "node");
  CHECK(t.tier(1).name == "leaf");
  CHECK(t.tier(2).name == "spine");
  CHECK(t.hbd_tier() == 0);
  CHECK(t.node_count() == 4);
  CHECK(t.total_gpus() == 16);
  CHECK(t.node(0).name == "n01");
  CHECK(t.domain(t.Ancestor(t.FindNode("n03"), 1)).name == "s1");
}

TEST_CASE("ParseSlurmTopology: blocks become an hbd tier, several tops, deep trees") {
  Topology t = MustSlurm(R"(
BlockName=b0 Nodes=n[1-2]
BlockName=b1 Nodes=n[3-4]
BlockName=b2 Nodes=n[5-6]
BlockSizes=2,4
SwitchName=l0 Nodes=n[1-4]
SwitchName=l1 Nodes=n[5-6]
)");
  REQUIRE(t.tier_count() == 3);
  CHECK(t.tier(1).name == "hbd");
  CHECK(t.tier(2).name == "leaf");
  CHECK(t.hbd_tier() == 1);
  CHECK(t.tier_size(2) == 2);  // two top switches: the leaf tier is the top tier
  CHECK(t.domain(t.Ancestor(t.FindNode("n4"), 1)).name == "b1");
  CHECK(t.domain(t.Ancestor(t.FindNode("n4"), 2)).name == "l0");

  Topology deep = MustSlurm(R"(
SwitchName=a Nodes=x1
SwitchName=b Switches=a
SwitchName=c Switches=b
SwitchName=d Switches=c
SwitchName=e Switches=d
)");
  REQUIRE(deep.tier_count() == 6);
  CHECK(deep.tier(3).name == "core");
  CHECK(deep.tier(4).name == "level4");
  CHECK(deep.tier(5).name == "level5");
}

// Blocks beside nodes in no block (Slurm 25.05: a block topology beside the
// tree): leaf l1 holds two GB200 blocks and two HGX nodes.
constexpr std::string_view kSlurmMixed = R"(SwitchName=l0 Nodes=h[1-4]
SwitchName=l1 Nodes=h5,g[1-6],h6
BlockName=nvl0 Nodes=g[1-3]
BlockName=nvl1 Nodes=g[4-6]
SwitchName=s0 Switches=l[0-1]
)";

TEST_CASE("ParseSlurmTopology: nodes in no block beside blocks keep the node HBD") {
  Topology t = MustSlurm(kSlurmMixed, {.gpus_per_node = 4, .name = "mix"});
  REQUIRE(t.tier_count() == 4);
  CHECK(t.tier(1).name == "block");
  CHECK(t.tier(2).name == "leaf");
  CHECK(t.tier(3).name == "spine");
  CHECK(t.hbd_tier() == 0);  // the file's HBD is the node; each block is one
  // Tier-1 domains: the blocks of a leaf in file order, then its nodes in no
  // block as <leaf>.nodes in the leaf's order.
  REQUIRE(t.tier_size(1) == 4);
  CHECK(t.domain(t.tier_first(1)).name == "l0.nodes");
  CHECK(t.domain(t.tier_first(1) + 1).name == "nvl0");
  CHECK(t.domain(t.tier_first(1) + 2).name == "nvl1");
  CHECK(t.domain(t.tier_first(1) + 3).name == "l1.nodes");
  CHECK(t.node(4).name == "g1");
  CHECK(t.node(10).name == "h5");
  CHECK(t.node(11).name == "h6");
  CHECK(t.hbd_marked(t.FindDomain("nvl0")));
  CHECK(t.hbd_marked(t.FindDomain("nvl1")));
  CHECK_FALSE(t.hbd_marked(t.FindDomain("l1.nodes")));
  CHECK_FALSE(t.hbd_link(t.FindDomain("nvl0")).has_value());
  REQUIRE(t.part_count() == 2);
  CHECK(t.part(0).hbd_tier == 0);
  CHECK(t.part(0).nodes == 6);
  CHECK(t.part(0).gpus == 24);
  CHECK(t.part(1).hbd_tier == 1);
  CHECK(t.part(1).first_node == 4);
  CHECK(t.part(1).nodes == 6);
  const core::DomainId l1 = t.FindDomain("l1");
  CHECK(t.domain(l1).gpus == 32);
  CHECK(t.PartView(0).domain(l1).gpus == 8);
  CHECK(t.PartView(1).domain(l1).gpus == 24);
  CHECK(t.PartView(0).FindTier("hbd").value() == 0);
  CHECK(t.PartView(1).FindTier("hbd").value() == 1);
  CHECK(t.PartView(1).max_domain_gpus(1) == 12);

  // The header's blocklink= is the link inside every block.
  Topology linked = MustSlurm("#toposched: blocklink=900:2\n" + std::string(kSlurmMixed));
  CHECK(linked.hbd_link(linked.FindDomain("nvl1")) == core::TierLink{900, 2, 1});
  CHECK(linked.PartView(1).tier(1).link == core::TierLink{900, 2, 1});
  // And hbd= still names the HBD of the nodes in no block.
  Topology leafy = MustSlurm("#toposched: hbd=leaf\n" + std::string(kSlurmMixed));
  CHECK(leafy.hbd_tier() == 2);
  CHECK(leafy.part(0).hbd_tier == 2);
  CHECK(leafy.part(1).hbd_tier == 1);
}

TEST_CASE("ParseSlurmTopology: blocks order the nodes of their leaf") {
  Topology t = MustSlurm(R"(
SwitchName=l0 Nodes=n[1-4]
BlockName=b1 Nodes=n2,n4
BlockName=b0 Nodes=n1,n3
)");
  CHECK(t.domain(t.tier_first(1)).name == "b1");
  CHECK(t.node(0).name == "n2");
  CHECK(t.node(1).name == "n4");
  CHECK(t.node(2).name == "n1");
}

struct BadConf {
  const char* text;
  const char* problem;
};

TEST_CASE("ParseSlurmTopology: every error names the line") {
  const BadConf cases[] = {
      {"SwitchName=s0\n", "line 1: switch \"s0\" has neither Nodes= nor Switches="},
      {"\nSwitchName=s0 Nodes=a Switches=b\n", "line 2: switch \"s0\" lists both"},
      {"SwitchName=s0 Nodes=a[1-\n", "line 1: Nodes=: hostlist"},
      {"SwitchName=s0 Nodes=a[3-1]\n", "runs backwards"},
      {"SwitchName=s0 Nodes=\n", "line 1: Nodes= is empty"},
      {"SwitchName=s0 Nodes=a\nSwitchName=s0 Nodes=b\n",
       "line 2: duplicate switch \"s0\" (first on line 1)"},
      {"# only comments\n\n", "no SwitchName= lines"},
      {"BlockName=b0 Nodes=a\n", "no SwitchName= lines"},
      {"SwitchName=s0 Nodes=a\nSwitchName=s1 Nodes=a\n",
       "line 2: node \"a\" is under switch \"s0\" (line 1) and under switch \"s1\""},
      {"SwitchName=s0 Nodes=a,a\n", "line 1: node \"a\" is listed twice under switch \"s0\""},
      {"SwitchName=s0 Nodes=a\nSwitchName=t0 Switches=s0\nSwitchName=t1 Switches=s0\n",
       "line 3: switch \"s0\" is listed under switch \"t0\" (line 2) and under switch \"t1\""},
      {"SwitchName=s0 Nodes=a\nSwitchName=t0 Switches=s0,s9\n",
       "line 2: switch \"t0\" lists switch \"s9\", which is never defined"},
      {"SwitchName=s0 Nodes=a\nSwitchName=x Switches=y\nSwitchName=y Switches=x\n",
       "switches form a cycle: x -> y -> x"},
      {"SwitchName=s0 Nodes=a\nSwitchName=x Switches=x\n", "line 2: switches form a cycle: x -> x"},
      {"SwitchName=l0 Nodes=a\nSwitchName=l1 Nodes=b\nSwitchName=m Switches=l1\n"
       "SwitchName=t Switches=l0,m\n",
       "line 4: switch \"t\" has children at different levels: \"l0\" is at level 0 but \"m\" is "
       "at "
       "level 1"},
      {"SwitchName=l0 Nodes=a\nSwitchName=l1 Nodes=b\nSwitchName=t Switches=l1\n",
       "line 1: switch \"l0\" has no parent but is at level 0"},
      {"SwitchName=s0 Nodes=a\nBlockName=b0 Nodes=a,z\n",
       "line 2: block \"b0\" lists node \"z\", which is under no switch"},
      {"SwitchName=s0 Nodes=a\nSwitchName=s1 Nodes=b\nBlockName=b0 Nodes=a,b\n",
       "line 3: block \"b0\" spans switch \"s0\" (node \"a\") and switch \"s1\" (node \"b\")"},
      {"SwitchName=s0 Nodes=a,b\nBlockName=b0 Nodes=a\nBlockName=b1 Nodes=a,b\n",
       "line 3: node \"a\" is in block \"b0\" (line 2) and in block \"b1\""},
      // Nodes in no block beside blocks are grouped per leaf as <leaf>.nodes:
      // a name that is taken already is refused, naming both.
      {"SwitchName=l0 Nodes=a,b,c\nBlockName=l0.nodes Nodes=a\n",
       "line 1: switch \"l0\" has nodes in no block, which toposched groups as \"l0.nodes\", but "
       "that is the name of block \"l0.nodes\" (line 2); rename that one"},
      {"SwitchName=l0 Nodes=a,l0.nodes\nBlockName=b0 Nodes=a\n",
       "line 1: switch \"l0\" has nodes in no block, which toposched groups as \"l0.nodes\", but "
       "that is the name of node \"l0.nodes\" (line 1)"},
      {"SwitchName=l0 Nodes=a,b\nSwitchName=l0.nodes Nodes=c\nSwitchName=t Switches=l0,l0.nodes\n"
       "BlockName=b0 Nodes=a,c\n",
       "line 4: block \"b0\" spans switch \"l0\" (node \"a\") and switch \"l0.nodes\""},
      {"SwitchName=l0 Nodes=a,b\nSwitchName=l0.nodes Nodes=c\nSwitchName=t Switches=l0,l0.nodes\n"
       "BlockName=b0 Nodes=a\n",
       "line 1: switch \"l0\" has nodes in no block, which toposched groups as \"l0.nodes\", but "
       "that is the name of switch \"l0.nodes\" (line 2)"},
      {"#toposched: blocklink=900:3\nSwitchName=s0 Nodes=a\nBlockName=b0 Nodes=a\n",
       "line 1: #toposched: blocklink is the link inside blocks beside nodes in no block; this "
       "file has every node in a block"},
      {"#toposched: blocklink=900:3\nSwitchName=s0 Nodes=a\n",
       "line 1: #toposched: blocklink is the link inside blocks beside nodes in no block; this "
       "file has no blocks"},
      {"#toposched: blocklink=0:3\nSwitchName=s0 Nodes=a,b\nBlockName=b0 Nodes=a\n",
       "line 1: #toposched: blocklink is one GBPS:US[:OVERSUBSCRIPTION] of positive numbers (got "
       "\"0:3\")"},
      {"#toposched: blocklink=900:3,900:3\nSwitchName=s0 Nodes=a,b\nBlockName=b0 Nodes=a\n",
       "line 1: #toposched: blocklink is one GBPS"},
      {"#toposched: blocklink=900:3:0.5\nSwitchName=s0 Nodes=a,b\nBlockName=b0 Nodes=a\n",
       "line 1: #toposched: blocklink is one GBPS"},
      {"SwitchName=s0 Nodes=a\nBlockName=b0 Nodes=a\nBlockName=b0 Nodes=a\n",
       "line 3: duplicate block \"b0\" (first on line 2)"},
      {"BlockName=b0\n", "line 1: block \"b0\" has no Nodes="},
      {"BlockName=b0 Switches=s\n", "line 1: a block lists Nodes=, not Switches="},
      {"SwitchName=s0 BlockName=b0 Nodes=a\n", "line 1: a line is either SwitchName= or"},
      {"Nodes=a\n", "line 1: Nodes=/Switches= without SwitchName="},
      {"SwitchName=s0 Nodes=a Color=red\n", "line 1: unknown key \"Color\""},
      {"SwitchName=s0 Nodes=a junk\n", "line 1: expected Key=Value, got \"junk\""},
      {"SwitchName=s0 Nodes=a nodes=b\n", "line 1: \"nodes\" is given twice"},
      {"SwitchName= Nodes=a\n", "line 1: empty switch or block name"},
      {"SwitchName=a Nodes=a\n", "line 1: node \"a\" has the name of switch \"a\""},
      {"SwitchName=s0 Nodes=a\nBlockName=s0 Nodes=a\n", "line 2: block \"s0\" has the name"},
      {"#toposched: tiers=node,leaf,spine\nSwitchName=s0 Nodes=a\n",
       "line 1: #toposched: tiers lists 3 tiers but the file defines 2"},
      {"#toposched: hbd=rack\nSwitchName=s0 Nodes=a\n", "line 1: #toposched: hbd \"rack\""},
      {"#toposched: gpus=0\nSwitchName=s0 Nodes=a\n", "line 1: #toposched: gpus must be"},
      {"#toposched: gpus=8x\nSwitchName=s0 Nodes=a\n", "line 1: #toposched: gpus must be"},
      {"#toposched: color=red\nSwitchName=s0 Nodes=a\n", "line 1: #toposched: unknown key"},
      {"#toposched: name\nSwitchName=s0 Nodes=a\n", "line 1: #toposched: expected key=value"},
      {"#toposched: name=%zz\nSwitchName=s0 Nodes=a\n", "line 1: #toposched: bad value"},
      {"#toposched: costs=1,0\nSwitchName=s0 Nodes=a\n", "line 1: #toposched: costs must be"},
      {"#toposched: costs=1\nSwitchName=s0 Nodes=a\n", "line 1: #toposched: costs lists 1"},
      {"#toposched: tiers=a,a\nSwitchName=s0 Nodes=a\n", "line 1: #toposched: tier \"a\" listed"},
      {"#toposched: name=a\n#toposched: name=b\nSwitchName=s0 Nodes=a\n",
       "line 2: a second #toposched: line"},
  };
  for (const BadConf& c : cases) {
    CAPTURE(c.text);
    auto r = ParseSlurmTopology(c.text);
    REQUIRE_FALSE(r.ok());
    CAPTURE(r.message());
    CHECK(r.message().find(c.problem) != std::string::npos);
  }
  for (int gpus : {0, -8, 65}) {
    auto r = ParseSlurmTopology(kSlurmTree, {.gpus_per_node = gpus});
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().find("gpus per node must be 1..64") != std::string::npos);
  }
}

TEST_CASE("TopologyToSlurm: format and exact round trip") {
  SUBCASE("tree") {
    Topology t = MustSlurm(kSlurmTree, {.gpus_per_node = 4, .name = "lab"});
    std::string conf = TopologyToSlurm(t);
    CHECK(conf ==
          "#toposched: name=lab tiers=node,leaf,spine hbd=node gpus=4\n"
          "SwitchName=s0 Nodes=n[01-02]\n"
          "SwitchName=s1 Nodes=n[03-04]\n"
          "SwitchName=top Switches=s[0-1]\n");
    // The header wins over the options.
    CheckSameTopology(t, MustSlurm(conf, {.gpus_per_node = 2, .name = "other"}));
  }
  SUBCASE("odd names, costs and models survive the header") {
    core::TopologyBuilder b("my lab, 2%", {"node", "rack=nvl", "leaf"}, 1);
    b.SetTierCost(2, 3.5);
    int leaf = b.AddDomain("l0", 2, core::TopologyBuilder::kTop);
    int rack = b.AddDomain("r0", 1, leaf);
    b.AddNode("n1", rack, 4, "GB200 #1");
    b.AddNode("n2", rack, 4, "GB200 #1");
    auto t = std::move(b).Build();
    REQUIRE(t.ok());
    std::string conf = TopologyToSlurm(t.value());
    CAPTURE(conf);
    CHECK(conf.find("costs=1,1,3.5") != std::string::npos);
    CHECK(conf.find("BlockName=r0 Nodes=n[1-2]") != std::string::npos);
    CheckSameTopology(t.value(), MustSlurm(conf));
  }
  SUBCASE("per-node models and features are flagged") {
    Topology t = MustJson(R"({"version": 1, "name": "m", "tiers": ["node", "leaf"],
        "domains": [{"name": "l0", "nodes": ["a", {"name": "b", "gpu_model": "A100",
                                                   "features": ["ib"]}]}]})");
    std::string conf = TopologyToSlurm(t);
    CHECK(conf.find("# warning: per-node GPU models and features") != std::string::npos);
    CheckSameTopology(t, MustSlurm(conf), /*node_details=*/false);
  }
  SUBCASE("hbd at the top tier needs no blocks") {
    Topology t = MustJson(R"({"version": 1, "name": "racks", "tiers": ["node", "rack"],
        "hbd": "rack", "domains": [{"name": "r0", "nodes": ["a", "b"]},
                                   {"name": "r1", "nodes": ["c"]}]})");
    std::string conf = TopologyToSlurm(t);
    CHECK(conf.find("BlockName") == std::string::npos);
    CheckSameTopology(t, MustSlurm(conf));
  }
  SUBCASE("mixed GPU counts leave gpus out of the header") {
    Topology t = MustJson(R"({"version": 1, "name": "mix", "tiers": ["node", "leaf"],
        "domains": [{"name": "l0", "nodes": ["a", {"name": "b", "gpus": 4}]}]})");
    std::string conf = TopologyToSlurm(t);
    CHECK(conf.find("gpus=") == std::string::npos);
    CHECK(conf.find("# warning: nodes have different GPU counts") != std::string::npos);
    CHECK(MustSlurm(conf, {.gpus_per_node = 2}).total_gpus() == 4);
  }
  for (const char* name : {"tiny", "nvl72-64k", "cm384-166k", "meta-24k"}) {
    SUBCASE(name) {
      auto t = core::GenerateTopology(name);
      REQUIRE(t.ok());
      CheckSameTopology(t.value(), MustSlurm(TopologyToSlurm(t.value())));
    }
  }
}

TEST_CASE("TopologyToSlurm: mixed files round trip, blocks for the marked domains") {
  SUBCASE("conf -> topology -> conf") {
    Topology t =
        MustSlurm("#toposched: blocklink=900:2\n" + std::string(kSlurmMixed), {.name = "mix"});
    std::string conf = TopologyToSlurm(t);
    // The groups of nodes in no block are not blocks: their nodes are the
    // leaf's in no BlockName= line.
    CHECK(conf ==
          "#toposched: name=mix tiers=node,block,leaf,spine hbd=node gpus=8 blocklink=900:2\n"
          "BlockName=nvl0 Nodes=g[1-3]\n"
          "BlockName=nvl1 Nodes=g[4-6]\n"
          "SwitchName=l0 Nodes=h[1-4]\n"
          "SwitchName=l1 Nodes=g[1-6],h[5-6]\n"
          "SwitchName=s0 Switches=l[0-1]\n");
    Topology back = MustSlurm(conf);
    CheckSameTopology(t, back);
    CHECK(TopologyToSlurm(back) == conf);
  }
  SUBCASE("JSON -> topology -> conf: the marked racks are the blocks") {
    Topology t = MustJson(R"({"version": 1, "name": "mj", "tiers": ["node", "rack", "leaf"],
        "gpus_per_node": 4, "gpu_model": "GB200",
        "domains": [{"name": "l0", "children": [
          {"name": "r0", "hbd": true, "link": {"bandwidth_gbs": 900, "latency_us": 3},
           "nodes": ["a", "b"]},
          {"name": "l0.nodes", "nodes": ["c"]}]},
          {"name": "l1", "children": [{"name": "l1.nodes", "nodes": ["d", "e"]}]}]})");
    REQUIRE(t.part_count() == 2);
    std::string conf = TopologyToSlurm(t);
    CAPTURE(conf);
    CHECK(conf.find("# warning") == std::string::npos);
    CHECK(conf.find("BlockName=r0 Nodes=a,b\n") != std::string::npos);
    CHECK(conf.find("BlockName=l") == std::string::npos);
    CHECK(conf.find("blocklink=900:3") != std::string::npos);
    CheckSameTopology(t, MustSlurm(conf));
  }
  SUBCASE("what a mixed conf cannot say is flagged") {
    // Unmarked racks other than one <leaf>.nodes after the blocks: merged.
    Topology t = MustJson(R"({"version": 1, "name": "mj", "tiers": ["node", "rack", "leaf"],
        "domains": [{"name": "l0", "children": [
          {"name": "x0", "nodes": ["a"]}, {"name": "x1", "nodes": ["b"]},
          {"name": "r0", "hbd": true, "link": {"bandwidth_gbs": 900, "latency_us": 3},
           "nodes": ["c"]},
          {"name": "r1", "hbd": true, "nodes": ["d"]}]}]})");
    std::string conf = TopologyToSlurm(t);
    CAPTURE(conf);
    CHECK(conf.find("# warning: domains of tier \"rack\" that are not HBDs") != std::string::npos);
    CHECK(conf.find("# warning: the blocks' HBD links differ") != std::string::npos);
    Topology back = MustSlurm(conf);
    CHECK(back.domain(back.tier_first(1) + 2).name == "l0.nodes");
    CHECK(back.part_count() == 2);
    CHECK(back.part(0).hbd_tier == 1);
    CHECK(back.part(0).nodes == 2);
    CHECK(back.node(0).name == "c");

    // Marks on two tiers: left out, and said so.
    Topology two =
        MustJson(R"({"version": 1, "name": "two", "tiers": ["node", "rack", "leaf", "spine"],
        "domains": [{"name": "s0", "children": [
          {"name": "l0", "children": [{"name": "r0", "hbd": true, "nodes": ["a"]}]},
          {"name": "l1", "hbd": true, "children": [{"name": "r1", "nodes": ["b"]}]}]}]})");
    std::string two_conf = TopologyToSlurm(two);
    CHECK(two_conf.find("# warning: the HBD marks of this topology") != std::string::npos);
    CHECK(MustSlurm(two_conf).part_count() == 1);
  }
  SUBCASE("every rack marked, two models: the racks are every node's HBD") {
    Topology t = MustJson(R"({"version": 1, "name": "nv", "tiers": ["node", "rack", "leaf"],
        "gpus_per_node": 4, "domains": [{"name": "l0", "children": [
          {"name": "r0", "hbd": true, "link": {"bandwidth_gbs": 900, "latency_us": 3},
           "nodes": [{"name": "a", "gpu_model": "GB200"}]},
          {"name": "r1", "hbd": true, "link": {"bandwidth_gbs": 900, "latency_us": 3},
           "nodes": [{"name": "b", "gpu_model": "GB300"}]}]}]})");
    REQUIRE(t.part_count() == 2);
    CHECK(t.hbd_tier() == 0);
    std::string conf = TopologyToSlurm(t);
    CAPTURE(conf);
    CHECK(conf.find(" tiers=node,rack,leaf hbd=rack gpus=4 links=900:3,900:3,") !=
          std::string::npos);
    CHECK(conf.find("BlockName=r0 Nodes=a\n") != std::string::npos);
    CHECK(conf.find("blocklink") == std::string::npos);
    Topology back = MustSlurm(conf);
    CHECK(back.hbd_tier() == 1);
    CHECK(back.tier(1).link == core::TierLink{900, 3, 1});
    CHECK(back.tier(1).cost == t.PartView(1).tier(1).cost);
    CHECK(back.tier(2).link == t.PartView(1).tier(2).link);
  }
  SUBCASE("a written name that the reader would make is not risked") {
    // Leaf l0's unmarked rack would read back as "l0.nodes", the name of a
    // block: the marks are left out, with a warning, and the file reads.
    Topology t = MustJson(R"({"version": 1, "name": "c", "tiers": ["node", "rack", "leaf"],
        "domains": [{"name": "l0", "children": [
          {"name": "l0.nodes", "hbd": true, "nodes": ["a"]}, {"name": "r1", "nodes": ["b"]}]}]})");
    std::string conf = TopologyToSlurm(t);
    CHECK(conf.find("# warning: the HBD marks of this topology") != std::string::npos);
    CHECK(MustSlurm(conf).node_count() == 2);
  }
  SUBCASE("mixed-10k") {
    auto t = core::GenerateTopology("mixed-10k");
    REQUIRE_MESSAGE(t.ok(), t.message());
    std::string conf = TopologyToSlurm(t.value());
    CHECK(conf.find("blocklink=900:3") != std::string::npos);
    CHECK(conf.find("BlockName=nvl72-r0 Nodes=gb200-[00-17]\n") != std::string::npos);
    Topology back = MustSlurm(conf);
    // Models and GPU counts are lost (flagged); the marks and the tree are kept.
    CHECK(back.node_count() == t.value().node_count());
    CHECK(back.tier_size(1) == 40 + 4 + 1);  // one group per HGX leaf, the racks
    CHECK(back.hbd_marked(back.FindDomain("nvl72-r3")));
    CHECK(back.part_count() == 2);
    CHECK(back.part(1).nodes == 72);
    CHECK(back.part(1).hbd_tier == 1);
  }
}

TEST_CASE("TopologyToSlurm: what topology.conf cannot say is flagged") {
  // Tiers between the node and the HBD are left out, with a warning.
  Topology t = MustJson(R"({"version": 1, "name": "x", "tiers": ["node", "tray", "hbd", "leaf"],
      "hbd": "hbd", "domains": [{"name": "l0", "children": [{"name": "h0", "children": [
        {"name": "t0", "nodes": ["a", "b"]}]}]}]})");
  std::string conf = TopologyToSlurm(t);
  CHECK(conf.find("# warning: tiers between the node and the HBD tier") != std::string::npos);
  CHECK(conf.find("tiers=node,hbd,leaf hbd=hbd") != std::string::npos);
  Topology back = MustSlurm(conf);
  CHECK(back.tier_count() == 3);
  CHECK(back.node_count() == 2);

  Topology flat = MustJson(R"({"version": 1, "name": "f", "tiers": ["node"], "nodes": ["a"]})");
  std::string flat_conf = TopologyToSlurm(flat);
  CHECK(flat_conf.find("# warning: this topology has only the node tier") != std::string::npos);
  CHECK_FALSE(ParseSlurmTopology(flat_conf).ok());
}

// --- Crux CSV --------------------------------------------------------------

TEST_CASE("ParseCruxCsv: a small file") {
  auto r = ParseCruxCsv(
      "ip,DSW,PSW,ASW\r\n"
      "h1,G1,P1,S1\r\n"
      "h2,G1,P2,S1\r\n"
      "h3,G1,P1,S1\r\n"
      "h4,G1,P1,S2\r\n"
      "\r\n",
      4, "small");
  REQUIRE_MESSAGE(r.ok(), r.message());
  const Topology& t = r.value();
  CHECK(t.name() == "small");
  REQUIRE(t.tier_count() == 4);
  CHECK(t.tier(1).name == "leaf");
  CHECK(t.tier(2).name == "pod");
  CHECK(t.tier(3).name == "core");
  CHECK(t.hbd_tier() == 0);
  CHECK(t.tier_size(1) == 3);  // P1/S1, P1/S2, P2/S1: ASW names repeat across PSWs
  CHECK(t.tier_size(2) == 2);
  CHECK(t.total_gpus() == 16);
  // First-appearance order: P1 before P2; within P1/S1, h1 then h3.
  CHECK(t.domain(t.tier_first(2)).name == "P1");
  CHECK(t.domain(t.tier_first(1)).name == "P1/S1");
  CHECK(t.node(0).name == "h1");
  CHECK(t.node(1).name == "h3");
  CHECK(t.node(3).name == "h2");
}

TEST_CASE("Parsers skip a UTF-8 byte order mark") {
  CHECK(ParseCruxCsv("\xEF\xBB\xBFip,DSW,PSW,ASW\nh1,G1,P1,S1\n").ok());
  CHECK(ParseSlurmTopology("\xEF\xBB\xBFSwitchName=s0 Nodes=a\n").ok());
  CHECK(ParseTopologyJson("\xEF\xBB\xBF{\"version\": 1, \"name\": \"x\", \"tiers\": [\"node\"], "
                          "\"nodes\": [\"a\"]}")
            .ok());
}

TEST_CASE("ParseCruxCsv: errors name the line") {
  const BadConf cases[] = {
      {"", "empty file"},
      {"ip,DSW,PSW\nh1,G1,P1\n", "line 1: expected the header"},
      {"ip,DSW,PSW,ASW\n", "no hosts"},
      {"ip,DSW,PSW,ASW\nh1,G1,P1\n", "line 2: expected 4 columns"},
      {"ip,DSW,PSW,ASW\nh1,G1,P1,S1,x\n", "line 2: expected 4 columns"},
      {"ip,DSW,PSW,ASW\nh1,G1,,S1\n", "line 2: empty PSW field"},
      {"ip,DSW,PSW,ASW\nh1,G1,P1,S1\n\nh1,G1,P1,S2\n",
       "line 4: duplicate ip \"h1\" (first on line 2)"},
      {"ip,DSW,PSW,ASW\nh1,G1,P1,S1\nh2,G2,P1,S1\n",
       "line 3: PSW \"P1\" is under DSW \"G2\" here but under DSW \"G1\" on line 2"},
      {"ip,DSW,PSW,ASW\nh1,G1,P1,S1\nh2,G1,G1,S1\n", "line 3: PSW \"G1\" is also used as DSW"},
  };
  for (const BadConf& c : cases) {
    CAPTURE(c.text);
    auto r = ParseCruxCsv(c.text);
    REQUIRE_FALSE(r.ok());
    CAPTURE(r.message());
    CHECK(r.message().find(c.problem) != std::string::npos);
  }
  CHECK_FALSE(ParseCruxCsv("ip,DSW,PSW,ASW\nh1,G1,P1,S1\n", 0).ok());
}

TEST_CASE("ParseCruxCsv: the real Lingjun file") {
  std::ifstream in(std::string(TOPO_SHARED_DIR) + "/data/topologies/crux-lingjun/topo.csv");
  REQUIRE_MESSAGE(in.good(), "shared data not found under " TOPO_SHARED_DIR);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  CHECK(SniffTopologyFormat(text) == TopologyFormat::kCrux);
  auto r = ParseCruxCsv(text);
  REQUIRE_MESSAGE(r.ok(), r.message());
  const Topology& t = r.value();
  CHECK(t.name() == "crux-847");
  CHECK(t.node_count() == 847);
  CHECK(t.tier_size(1) == 119);
  CHECK(t.tier_size(2) == 3);
  CHECK(t.tier_size(3) == 1);
  CHECK(t.total_gpus() == 6776);
  CHECK(t.max_domain_gpus(1) <= 8 * 8);
  std::multiset<int> pod_hosts;
  for (int i = 0; i < t.tier_size(2); ++i) {
    const core::Domain& d = t.domain(t.tier_first(2) + i);
    pod_hosts.insert(d.node_end - d.node_begin);
  }
  CHECK(pod_hosts == std::multiset<int>{179, 306, 362});
  // And it survives both exports.
  CheckSameTopology(t, MustJson(TopologyToJson(t)));
  CheckSameTopology(t, MustSlurm(TopologyToSlurm(t)));
}

TEST_CASE("Topology formats by name and by content") {
  CHECK(ParseTopologyFormat("json").value() == TopologyFormat::kJson);
  CHECK(ParseTopologyFormat("slurm").value() == TopologyFormat::kSlurm);
  CHECK(ParseTopologyFormat("crux").value() == TopologyFormat::kCrux);
  auto bad = ParseTopologyFormat("yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("\"yaml\"; use json, slurm or crux") != std::string::npos);

  CHECK(SniffTopologyFormat("  \n{\"version\": 1}") == TopologyFormat::kJson);
  CHECK(SniffTopologyFormat("\xEF\xBB\xBF{}") == TopologyFormat::kJson);
  CHECK(SniffTopologyFormat("IP,dsw,PSW,ASW\n") == TopologyFormat::kCrux);
  CHECK(SniffTopologyFormat("SwitchName=s0 Nodes=a\n") == TopologyFormat::kSlurm);
  CHECK(SniffTopologyFormat("# comment\nSwitchName=s0 Nodes=a\n") == TopologyFormat::kSlurm);
  CHECK(SniffTopologyFormat("") == TopologyFormat::kSlurm);
}

}  // namespace
}  // namespace topo::common

// --- Regressions found by the fuzzer (tests/fuzz) ---------------------------

namespace topo::common {
namespace {

TEST_CASE("Slurm and Crux names must be UTF-8, so TopologyToJson cannot throw on them") {
  // Found by fuzz_parsers: a Latin-1 byte in a CSV or topology.conf name was
  // accepted, and TopologyToJson (nlohmann's dump) then threw type_error.316.
  auto crux = ParseCruxCsv("ip,DSW,PSW,ASW\nh1,G1,P1,S\xB7\n");
  REQUIRE_FALSE(crux.ok());
  CHECK(crux.message() == "line 2: ASW field is not valid UTF-8 (names must be)");
  for (const char* conf : {"SwitchName=s\xB7 Nodes=a\n", "SwitchName=s0 Nodes=a,b\xC3\n",
                           "SwitchName=s0 Nodes=a\nSwitchName=t Switches=s0,\xED\xA0\x80\n",
                           "SwitchName=s0 Nodes=a\nBlockName=\xF5 Nodes=a\n"}) {
    CAPTURE(conf);
    auto r = ParseSlurmTopology(conf);
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().find("is not valid UTF-8 (names must be)") != std::string::npos);
  }
  auto header = ParseSlurmTopology("#toposched: name=x%FF\nSwitchName=s0 Nodes=a\n");
  REQUIRE_FALSE(header.ok());
  CHECK(header.message().find("line 1: #toposched: bad value \"x%FF\" for name") == 0);

  // Well-formed UTF-8 stays accepted in the names of switches and other
  // domains, and round-trips through JSON (node names are ASCII: the
  // node-name rule below).
  Topology t = MustSlurm(
      "#toposched: name=r%C3%A9seau model=H%E2%82%AC\n"
      "SwitchName=l\xC3\xA9\xF0\x9F\x98\x80 Nodes=n[1-2]\n");
  CHECK(t.name() == "r\xC3\xA9seau");
  CHECK(t.node(1).name == "n2");
  CheckSameTopology(t, MustJson(TopologyToJson(t)));
  auto c = ParseCruxCsv("ip,DSW,PSW,ASW\nh1,G\xC3\xA9,P1,S1\n");
  REQUIRE_MESSAGE(c.ok(), c.message());
  CheckSameTopology(c.value(), MustJson(TopologyToJson(c.value())));
}

TEST_CASE("Every topology reader refuses node names no agent could register") {
  // An ESC (a terminal escape), a newline, 300 bytes, a slash, a space and a
  // leading dash: each refused where it is written (node_name.hpp).
  const std::string long_name(300, 'n');
  struct Bad {
    std::string name;
    std::string shown;  // as the error shows it
  };
  const Bad names[] = {{"n\x1b"
                        "c",
                        "n\\x1bc"},
                       {"n\n1", "n\\x0a1"},
                       {long_name, long_name.substr(0, 80) + "... (300 bytes)"},
                       {"a/b", "a/b"},
                       {"-n1", "-n1"},
                       {"n\xC3\xA9", "n\\xc3\\xa9"}};
  for (const Bad& b : names) {
    CAPTURE(b.shown);
    const std::string says = "node \"" + b.shown + "\" is not a node name: 1-64 bytes of";
    // JSON: the path of the name, plain and as an object.
    nlohmann::json plain = {
        {"version", 1}, {"name", "x"}, {"tiers", {"node"}}, {"nodes", {"n0", b.name}}};
    auto j = ParseTopologyJson(plain.dump());
    REQUIRE_FALSE(j.ok());
    CHECK(j.message().rfind("nodes[1]: " + says, 0) == 0);
    nlohmann::json object = plain;
    object["nodes"][1] = {{"name", b.name}, {"gpus", 8}};
    auto jo = ParseTopologyJson(object.dump());
    REQUIRE_FALSE(jo.ok());
    CHECK(jo.message().rfind("nodes[1].name: " + says, 0) == 0);
    // topology.conf: the line (a newline would end it: not a name there).
    if (b.name.find('\n') == std::string::npos && b.name.find(' ') == std::string::npos) {
      auto s = ParseSlurmTopology("SwitchName=s0 Nodes=n0\nSwitchName=s1 Nodes=" + b.name + "\n");
      REQUIRE_FALSE(s.ok());
      CHECK(s.message().find("line 2: Nodes=: " + says) == 0);
    }
    // Crux CSV: the line and the column.
    if (b.name.find('\n') == std::string::npos) {
      auto c = ParseCruxCsv("ip,DSW,PSW,ASW\nh1,G1,P1,S1\n" + b.name + ",G1,P1,S1\n");
      REQUIRE_FALSE(c.ok());
      CHECK(c.message().find("line 3: ip: " + says) == 0);
    }
  }
  // The bounds themselves: 64 bytes and the characters of the rule pass.
  const std::string longest = "n" + std::string(63, '-');
  CHECK(ParseSlurmTopology("SwitchName=s0 Nodes=" + longest + ",a.b_C-9\n").ok());
  CHECK_FALSE(ParseSlurmTopology("SwitchName=s0 Nodes=" + longest + "x\n").ok());
  CHECK(ParseCruxCsv("ip,DSW,PSW,ASW\n10.0.0.1,G1,P1,S1\n").ok());
}

TEST_CASE("Topologies deeper than kMaxTiers are rejected before any deep recursion") {
  // Found by fuzz_parsers: a 2,000-switch chain in topology.conf (or domains
  // nested as deep in JSON) took minutes to export as JSON and overflowed the
  // stack.
  auto chain = [](int levels, bool top_down) {
    std::string conf = "SwitchName=s0 Nodes=n0\n";
    std::string upper;
    for (int i = 1; i < levels; ++i) {
      upper = "SwitchName=s" + std::to_string(i) + " Switches=s" + std::to_string(i - 1) + "\n" +
              (top_down ? upper : "");
      if (!top_down) conf += upper;
    }
    return top_down ? upper + conf : conf;
  };
  for (bool top_down : {false, true}) {
    CAPTURE(top_down);
    // With blocks the file has node, hbd and the switch levels: 64 tiers.
    Topology t = MustSlurm(chain(kMaxTiers - 2, top_down) + "BlockName=b Nodes=n0\n");
    CHECK(t.tier_count() == kMaxTiers);
    CheckSameTopology(t, MustSlurm(TopologyToSlurm(t)));
    CheckSameTopology(t, MustJson(TopologyToJson(t)));
    for (int levels : {kMaxTiers - 1, 5000}) {
      auto r = ParseSlurmTopology(chain(levels, top_down));
      REQUIRE_FALSE(r.ok());
      CHECK(r.message().find("switch levels deep; a topology has at most 64 tiers") !=
            std::string::npos);
    }
  }

  auto nested = [](int tiers) {
    std::string names = "\"node\"", domains = "{\"name\": \"d1\", \"nodes\": [\"n\"]}";
    for (int i = 1; i < tiers; ++i) names += ", \"t" + std::to_string(i) + "\"";
    for (int i = 2; i < tiers; ++i) {
      domains = "{\"name\": \"d" + std::to_string(i) + "\", \"children\": [" + domains + "]}";
    }
    return "{\"version\": 1, \"name\": \"deep\", \"tiers\": [" + names + "], \"domains\": [" +
           domains + "]}";
  };
  Topology deepest = MustJson(nested(kMaxTiers));
  CHECK(deepest.tier_count() == kMaxTiers);
  CheckSameTopology(deepest, MustJson(TopologyToJson(deepest)));
  auto r = ParseTopologyJson(nested(kMaxTiers + 1));
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "tiers: at most 64 tiers (got 65)");
}

}  // namespace
}  // namespace topo::common
