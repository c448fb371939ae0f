#include <doctest/doctest.h>

#include "gpu/gpu_backend.hpp"

using namespace topo::agent::gpu;
namespace core = topo::core;

TEST_CASE("health events map onto core::GpuEvent") {
  HealthEvent e{3, HealthEventKind::kXid, 79, true, 5, ""};
  auto c = ToCoreEvent(e, 42);
  REQUIRE(c);
  CHECK(c->node == 42);
  CHECK(c->gpu == 3);
  CHECK(c->kind == core::GpuEventKind::kXid);
  CHECK(c->code == 79);

  struct Case {
    HealthEventKind kind;
    int64_t code;
    core::GpuEventKind want;
    int want_code;
  };
  for (const Case& k :
       {Case{HealthEventKind::kEccSingleBit, 120, core::GpuEventKind::kEccSingleBit, 120},
        Case{HealthEventKind::kEccDoubleBit, 1, core::GpuEventKind::kEccDoubleBit, 1},
        Case{HealthEventKind::kThermal, 0, core::GpuEventKind::kThermal, 0},
        Case{HealthEventKind::kOffBus, 0, core::GpuEventKind::kOffBus, 0},
        Case{HealthEventKind::kCleared, 0, core::GpuEventKind::kCleared, 0},
        Case{HealthEventKind::kEccSingleBit, int64_t{1} << 40, core::GpuEventKind::kEccSingleBit,
             2147483647}}) {
    HealthEvent h;
    h.gpu = 1;
    h.kind = k.kind;
    h.code = k.code;
    auto out = ToCoreEvent(h, 7);
    REQUIRE(out);
    CHECK(out->kind == k.want);
    CHECK(out->code == k.want_code);
    CHECK(out->node == 7);
  }
  HealthEvent off;
  off.kind = HealthEventKind::kThermal;
  off.on = false;
  CHECK_FALSE(ToCoreEvent(off, 0));
}

TEST_CASE("event descriptions and names") {
  CHECK(DescribeEvent({2, HealthEventKind::kXid, 79, true, 0, "injected"}) ==
        "gpu 2: XID 79 (injected)");
  CHECK(HealthEventKindName(HealthEventKind::kOffBus) == "off-bus");
  CHECK(ParseBackendChoice("nvml") == BackendChoice::kNvml);
  CHECK(ParseBackendChoice("simulated") == BackendChoice::kSimulated);
  CHECK(ParseBackendChoice("auto") == BackendChoice::kAuto);
  CHECK_FALSE(ParseBackendChoice("cuda"));
}

TEST_CASE("inject lines parse, bad lines name their line number") {
  auto ok = ParseInjectCommands(
      "# faults\nxid 3 79\n\necc 1 5 2\nthermal 0 on\nthermal 0 off\n"
      "offbus 7\nlost 6\nclear 7\n",
      8);
  REQUIRE(ok.ok());
  const auto& c = ok.value();
  REQUIRE(c.size() == 7);
  CHECK((c[0].kind == HealthEventKind::kXid && c[0].gpu == 3 && c[0].a == 79));
  CHECK((c[1].kind == HealthEventKind::kEccSingleBit && c[1].a == 5 && c[1].b == 2));
  CHECK((c[2].kind == HealthEventKind::kThermal && c[2].a == 1));
  CHECK((c[3].kind == HealthEventKind::kThermal && c[3].a == 0));
  CHECK((c[4].kind == HealthEventKind::kOffBus && c[4].gpu == 7));
  CHECK((c[5].kind == HealthEventKind::kOffBus && c[5].gpu == 6));
  CHECK((c[6].kind == HealthEventKind::kCleared && c[6].gpu == 7));

  auto bad = ParseInjectCommands(
      "xid 3 79\nxid 9 79\nfrob 1\nxid 1\nthermal 1 hot\necc 1 x 2\n"
      "xid one 79\nxid 1 -4\necc 1 0 0\n",
      8);
  REQUIRE_FALSE(bad.ok());
  const std::string& m = bad.message();
  CHECK(m.find("line 1") == std::string::npos);
  CHECK(m.find("line 2: GPU 9 out of range (this node has GPUs 0-7)") != std::string::npos);
  CHECK(m.find("line 3: unknown fault 'frob'") != std::string::npos);
  CHECK(m.find("line 4: 'xid' takes 2 argument(s): xid GPU CODE") != std::string::npos);
  CHECK(m.find("line 5: thermal takes 'on' or 'off'") != std::string::npos);
  CHECK(m.find("line 6: ECC counts must be numbers") != std::string::npos);
  CHECK(m.find("line 7: GPU 'one' is not a number") != std::string::npos);
  CHECK(m.find("line 8: XID code '-4'") != std::string::npos);
  CHECK(m.find("line 9: ECC counts are both 0") != std::string::npos);
}

TEST_CASE("simulated config file") {
  auto r = ParseSimulatedConfig(R"({"gpus": 4, "model": "B200", "memory_gib": 192})");
  REQUIRE(r.ok());
  CHECK(r.value().gpus == 4);
  CHECK(r.value().model == "B200");
  CHECK(r.value().memory_total == (192ULL << 30));
  auto d = ParseSimulatedConfig("{}");
  REQUIRE(d.ok());
  CHECK(d.value().gpus == 8);
  CHECK(d.value().model == "H100");
  CHECK(ParseSimulatedConfig("{\"gpus\": 0}").message().find("1 to 64") != std::string::npos);
  CHECK(ParseSimulatedConfig("{\"gpus\": \"8\"}").message().find("integer") != std::string::npos);
  CHECK(ParseSimulatedConfig("{\"gpu\": 8}").message().find("unknown key \"gpu\"") !=
        std::string::npos);
  CHECK(ParseSimulatedConfig("{gpus: 8").message().find("not valid JSON") != std::string::npos);
  CHECK(LoadSimulatedConfig("/nonexistent/x.json").message().find("cannot read") !=
        std::string::npos);
}
