// The launch mode, environment, working directory and output patterns of a
// job (common/job_process.hpp): what the CLI, the daemon and the agent's
// reader all refuse, and the round trip through the API's JSON.

#include "topo/common/job_process.hpp"

#include <doctest/doctest.h>

#include <string>

namespace topo::common {
namespace {

using Json = nlohmann::json;

TEST_CASE("a job's own variables: identifiers, not the agent's, bounded") {
  CHECK(CheckJobEnvVar("NCCL_DEBUG", "INFO").ok());
  CHECK(CheckJobEnvVar("_x1", "").ok());
  CHECK(CheckJobEnvVar("PATH", "/opt/venv/bin:/usr/bin").ok());  // the job's to change
  CHECK(CheckJobEnvVar("OMP_NUM_THREADS", "8").ok());
  for (const char* bad : {"", "1X", "A-B", "A B", "A=B", "Ä"}) {
    CAPTURE(bad);
    const core::Status s = CheckJobEnvVar(bad, "v");
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("not a variable name") != std::string::npos);
  }
  CHECK_FALSE(CheckJobEnvVar(std::string(257, 'A'), "v").ok());
  for (const char* reserved : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "GROUP_RANK",
                               "CUDA_VISIBLE_DEVICES", "TOPO_ANYTHING", "TORCHELASTIC_RUN_ID"}) {
    CAPTURE(reserved);
    const core::Status s = CheckJobEnvVar(reserved, "1");
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("reserved") != std::string::npos);
    CHECK(s.message().find(reserved) != std::string::npos);
  }
  // The agent's own order may be repeated; another order would renumber the GPUs.
  CHECK(CheckJobEnvVar("CUDA_DEVICE_ORDER", "PCI_BUS_ID").ok());
  const core::Status order = CheckJobEnvVar("CUDA_DEVICE_ORDER", "FASTEST_FIRST");
  REQUIRE_FALSE(order.ok());
  CHECK(order.message().find("env.CUDA_DEVICE_ORDER") != std::string::npos);
  CHECK(order.message().find("PCI_BUS_ID") != std::string::npos);
  CHECK_FALSE(CheckJobEnvVar("BIG", std::string(kMaxEnvValueBytes + 1, 'x')).ok());
  CHECK_FALSE(CheckJobEnvVar("NUL", std::string("a\0b", 3)).ok());
  // Many values, each within bounds, over the total.
  std::map<std::string, std::string> env;
  for (int i = 0; i < 3; ++i) env["V" + std::to_string(i)] = std::string(kMaxEnvValueBytes, 'y');
  CHECK(CheckJobEnv(env).message().find("at most") != std::string::npos);
}

TEST_CASE("output patterns take %j, %r and %% only, chdir is absolute") {
  for (const char* good : {"out.log", "/srv/o-%j-%r.log", "100%%.txt", "logs/%j/%r"}) {
    CAPTURE(good);
    CHECK(CheckOutputPattern(good).ok());
  }
  for (const char* bad : {"", "out-%x", "out-%", "dir/", "a\tb"}) {
    CAPTURE(bad);
    CHECK_FALSE(CheckOutputPattern(bad).ok());
  }
  CHECK(CheckOutputPattern("o-%N").message().find("%j (job id)") != std::string::npos);
  CHECK_FALSE(CheckOutputPattern(std::string(kMaxJobPathBytes + 1, 'a')).ok());
  CHECK(ExpandOutputPattern("/o/%j-%r-100%%.log", "17", 3) == "/o/17-3-100%.log");
  CHECK(ExpandOutputPattern("plain", "17", 3) == "plain");
  CHECK(CheckWorkingDir("/home/ada/run").ok());
  CHECK(CheckWorkingDir("run").message().find("absolute") != std::string::npos);
  CHECK_FALSE(CheckWorkingDir("").ok());
  CHECK_FALSE(CheckWorkingDir("/a\nb").ok());
}

TEST_CASE("the API's fields read back as written, and name the field they fail on") {
  core::ProcessSpec spec;
  spec.launch = core::LaunchMode::kNode;
  spec.env = {{"LANG", "C.UTF-8"}};
  spec.working_dir = "/srv/run";
  spec.output = "out-%j-%r.log";
  spec.error = "/srv/err-%j.log";
  Json j = Json::object();
  ProcessSpecToJson(spec, &j);
  CHECK(j == Json::parse(R"({"launch": "node", "env": {"LANG": "C.UTF-8"}, "chdir": "/srv/run",
                             "output": "out-%j-%r.log", "error": "/srv/err-%j.log"})"));
  auto back = ProcessSpecFromJson(j);
  REQUIRE(back.ok());
  CHECK(back.value() == spec);
  // The default writes nothing, and nothing reads as the default.
  Json empty = Json::object();
  ProcessSpecToJson(core::ProcessSpec{}, &empty);
  CHECK(empty.empty());
  CHECK(ProcessSpecFromJson(Json::object()).value() == core::ProcessSpec{});
  // GET /v1/jobs/ID writes every field, the defaults as null (and {} for env).
  Json every = Json::object();
  ProcessSpecToJson(core::ProcessSpec{}, &every, /*every_field=*/true);
  CHECK(every == Json::parse(R"({"launch": "rank", "env": {}, "chdir": null, "output": null,
                                 "error": null})"));
  every = Json::object();
  ProcessSpecToJson(spec, &every, /*every_field=*/true);
  CHECK(every == j);

  struct Case {
    const char* body;
    const char* field;
    const char* says;
  };
  const Case cases[] = {
      {R"({"launch": "gpu"})", "launch", "\"rank\""},
      {R"({"launch": 1})", "launch", "not a launch mode"},
      {R"({"env": ["A=1"]})", "env", "object of strings"},
      {R"({"env": {"A": 1}})", "env", "env.A must be a string"},
      {R"({"env": {"WORLD_SIZE": "2"}})", "env", "reserved"},
      {R"({"env": {"9A": "x"}})", "env", "not a variable name"},
      {R"({"chdir": "run"})", "chdir", "absolute"},
      {R"({"chdir": 5})", "chdir", "string"},
      {R"({"output": "o-%u"})", "output", "%j (job id)"},
      {R"({"error": ""})", "error", "not empty"},
      {R"({"error": ["x"]})", "error", "string"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.body);
    std::string field;
    auto r = ProcessSpecFromJson(Json::parse(c.body), &field);
    REQUIRE_FALSE(r.ok());
    CHECK(field == c.field);
    CHECK(r.message().find(c.says) != std::string::npos);
  }
}

}  // namespace
}  // namespace topo::common
