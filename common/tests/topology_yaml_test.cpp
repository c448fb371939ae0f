#include <doctest/doctest.h>

#include <string>

#include "topo/common/topology_io.hpp"

namespace topo::common {
namespace {

constexpr const char* kYaml = R"(---
- topology: fabric
  cluster_default: true
  tree:
    switches:
      - switch: spine
        children: leaf[1-2]
      - switch: leaf1
        nodes: n[1-4]
      - switch: leaf2
        nodes: n[5-8]
- topology: nvl
  cluster_default: false
  block:
    block_sizes: [2, 4]
    blocks:
      - block: b1
        nodes: n[1-2]
      - block: b2
        nodes: n[3-4]
      - block: b3
        nodes: n[5-6]
      - block: b4
        nodes: n[7-8]
- topology: none
  flat: true
)";

TEST_CASE("SlurmTopologyYamlToConf: tree and blocks become one topology") {
  auto conf = SlurmTopologyYamlToConf(kYaml);
  REQUIRE_MESSAGE(conf.ok(), conf.message());
  CHECK(conf.value().find("SwitchName=spine Switches=leaf[1-2]\n") != std::string::npos);
  CHECK(conf.value().find("SwitchName=leaf1 Nodes=n[1-4]\n") != std::string::npos);
  CHECK(conf.value().find("BlockName=b3 Nodes=n[5-6]\n") != std::string::npos);
  auto topo = ParseSlurmTopology(conf.value());
  REQUIRE_MESSAGE(topo.ok(), topo.message());
  CHECK(topo.value().node_count() == 8);
  CHECK(topo.value().tier(topo.value().hbd_tier()).name == "hbd");
  CHECK(topo.value().total_gpus() == 64);
}

TEST_CASE("SlurmTopologyYamlToConf: blocks beside nodes in no block make a mixed cluster") {
  // Slurm 25.05+: a block topology beside the tree; here the blocks cover
  // leaf2's nodes only (two NVL racks), leaf1's HGX nodes are in none.
  auto conf = SlurmTopologyYamlToConf(R"(---
- topology: fabric
  cluster_default: true
  tree:
    switches:
      - switch: spine
        children: leaf[1-2]
      - switch: leaf1
        nodes: h[1-4]
      - switch: leaf2
        nodes: g[1-4]
- topology: nvl
  block:
    blocks:
      - block: nvl1
        nodes: g[1-2]
      - block: nvl2
        nodes: g[3-4]
)");
  REQUIRE_MESSAGE(conf.ok(), conf.message());
  auto topo = ParseSlurmTopology(conf.value());
  REQUIRE_MESSAGE(topo.ok(), topo.message());
  const core::Topology& t = topo.value();
  CHECK(t.hbd_tier() == 0);
  CHECK(t.tier(1).name == "block");
  CHECK(t.FindDomain("leaf1.nodes") != core::kNoDomain);
  CHECK(t.hbd_marked(t.FindDomain("nvl2")));
  REQUIRE(t.part_count() == 2);
  CHECK(t.part(0).hbd_tier == 0);
  CHECK(t.part(0).nodes == 4);
  CHECK(t.part(1).hbd_tier == 1);
  CHECK(t.PartView(1).max_domain_gpus(1) == 16);
}

TEST_CASE("SlurmTopologyYamlToConf: errors name the entry and the fix") {
  auto bad = [](const char* text) { return SlurmTopologyYamlToConf(text).message(); };
  CHECK(bad("topology: x").find("must be a list of topologies") != std::string::npos);
  CHECK(bad("- topology: x\n  flat: true\n").find("only flat") != std::string::npos);
  CHECK(bad("- topology: x\n  tree: {switches: [{switch: s, nodes: n1}]}\n  colour: red\n")
            .find("unknown key 'colour'") != std::string::npos);
  CHECK(bad("- topology: x\n  tree: {switches: [{switch: s}]}\n").find("exactly one of nodes") !=
        std::string::npos);
  CHECK(bad("- topology: x\n  tree: {switches: [{switch: s, nodes: n1}]}\n  block: {}\n")
            .find("exactly one of tree:, block: or flat:") != std::string::npos);
  CHECK(bad("- topology: x\n  block: {blocks: [{block: b}]}\n").find("are both needed") !=
        std::string::npos);
  CHECK(bad("- [unclosed").find("topology.yaml line") != std::string::npos);
}

TEST_CASE("SlurmTopologyYamlToConf: node names follow the rule, and no value writes a line") {
  auto bad = [](const std::string& text) { return SlurmTopologyYamlToConf(text).message(); };
  const std::string tree = "- topology: x\n  tree: {switches: [{switch: s, nodes: \"";
  // An ESC, a newline and 300 bytes in a node name: refused naming the entry.
  CHECK(bad(tree + "n\\ec\"}]}\n")
            .find("entry 1.tree.switches[0]: nodes \"n\\x1bc\" holds a blank, a control "
                  "character") != std::string::npos);
  CHECK(bad(tree + "n1\\nSwitchName=evil Nodes=n9\"}]}\n")
            .find("entry 1.tree.switches[0]: nodes \"n1\\x0aSwitchName=evil Nodes=n9\" holds a "
                  "blank, a control character or '='") != std::string::npos);
  CHECK(bad(tree + std::string(300, 'n') + "\"}]}\n").find("is not a node name") !=
        std::string::npos);
  CHECK(bad(tree + "n[1-2],b/c\"}]}\n").find("node \"b/c\" is not a node name") !=
        std::string::npos);
  // Switch and block names cannot smuggle a key or a line into topology.conf.
  CHECK(bad("- topology: x\n  tree: {switches: [{switch: \"s Nodes=n9\", nodes: n1}]}\n")
            .find("switch \"s Nodes=n9\" holds a blank") != std::string::npos);
  CHECK(bad("- topology: x\n  block: {blocks: [{block: \"b\\nSwitchName=t\", nodes: n1}]}\n")
            .find("entry 1.block.blocks[0]: block \"b\\x0aSwitchName=t\" holds") !=
        std::string::npos);
  CHECK(SlurmTopologyYamlToConf(tree + "n[1-2],a.b_C-9\"}]}\n").ok());
}

}  // namespace
}  // namespace topo::common
