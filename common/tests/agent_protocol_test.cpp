// The agent protocol's one reader and writer (common/agent_protocol.hpp):
// round trips of every message, a table of hostile messages that must be
// refused naming their field, and the checked-in schema.

#include "topo/common/agent_protocol.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace topo::proto {
namespace {

Start SampleStart() {
  Start s;
  s.job = 17;
  s.restart_count = 2;
  s.checkpoint_step = 400;
  s.world_size = 16;
  s.master_addr = "10.0.0.7";
  s.master_port = 20017;
  s.group_rank = 1;
  s.group_world_size = 2;
  for (int i = 0; i < 8; ++i) s.ranks.push_back({8 + i, i, 7 - i});
  s.layout = Layout{4, 1, 1, 2, 2, "tp-cp-ep-dp-pp"};
  s.command = {"/usr/bin/python3", "train.py", "--lr", "3e-4", "ünïcode"};
  s.unix_user = "ada";
  s.env = {{"HF_HOME", "/data/hf"}, {"NCCL_DEBUG", "WARN"}};
  s.working_dir = "/home/ada";
  s.launch = core::LaunchMode::kNode;
  s.output = "/home/ada/out-%j-%r.log";
  s.error = "err-%j.log";
  s.memory_mb = 131072;
  s.cpu_millis = 32000;
  return s;
}

template <class Variant, class Parse, class Write>
void RoundTrip(const Variant& m, Parse parse, Write write) {
  const std::string text = write(m);
  std::string field = "unset";
  auto back = parse(text, &field);
  REQUIRE_MESSAGE(back.ok(), text << " -> " << back.message());
  CHECK(back.value() == m);
  CHECK(field.empty());
  CHECK(text.rfind("{\"type\":", 0) == 0);
}

TEST_CASE("every agent message reads back as written") {
  LogsReply data;
  data.req = 3;
  data.offset = 10;
  data.next_offset = 14;
  data.size = 20;
  data.data = "ab\ncd";
  LogsReply error;
  error.req = 4;
  error.error = "no log file on this node";
  const std::vector<AgentMessage> messages = {
      Register{"n01",
               "10.0.0.1",
               {{0, "NVIDIA H100 80GB HBM3", "GPU-1234", 81559}},
               {{17, 3, 4242}},
               "topo-agent 0.2.0",
               kProtocolVersion},
      Heartbeat{99},
      GpuEventReport{3, core::GpuEventKind::kEccDoubleBit, 12},
      RankExited{17, 3, 1, 137, 9, true},
      CheckpointReport{17, 2000, CheckpointTier::kLocal},
      Drained{},
      data,
      error,
      LaunchFailed{17, 0, "no Unix account 'ada' on n01", true},
      Leaving{},
      Started{17, 2},
      StartWaiting{17, 2, 3'600'000, "copying checkpoint step 40 onto the node"},
  };
  for (const AgentMessage& m : messages) RoundTrip(m, ParseAgentMessage, WriteAgentMessage);
}

TEST_CASE("every scheduler message reads back as written") {
  const std::vector<SchedulerMessage> messages = {
      Registered{"n01", 1000, {1, 2, 3}, {}},
      Registered{"n02", 500, {}, 41},
      SampleStart(),
      Stop{17, "cancelled by user:ada"},
      CheckpointRequest{17, "preemption"},
      Drain{DrainMode::kImmediate, "bad cable"},
      LogsRequest{5, 17, 3, -4096, 65536},
      Error{"rank_exited.restart_count: must be an integer", "rank_exited.restart_count",
            "rank_exited"},
  };
  for (const SchedulerMessage& m : messages) {
    RoundTrip(m, ParseSchedulerMessage, WriteSchedulerMessage);
  }
}

TEST_CASE("log data is bytes: NUL, escapes and invalid UTF-8 read back exactly") {
  // Before: data went as JSON text, so a NUL was refused (the user waited
  // for a timeout) and invalid UTF-8 came back as U+FFFD.
  LogsReply r;
  r.req = 1;
  r.offset = 0;
  r.data = std::string("a\0b\x1b[2J\r\xff\xfe\n", 11);
  r.next_offset = static_cast<int64_t>(r.data->size());
  r.size = r.next_offset;
  const std::string text = WriteAgentMessage(r);
  CHECK(text.find("\"data_base64\":\"YQBiG1sySg3//go=\"") != std::string::npos);
  auto back = ParseAgentMessage(text);
  REQUIRE_MESSAGE(back.ok(), back.message());
  CHECK(std::get<LogsReply>(back.value()).data == r.data);
  // Every byte value, in the largest piece an agent may send.
  std::string all;
  while (all.size() < static_cast<size_t>(kMaxLogChunkBytes))
    all += static_cast<char>(all.size() % 256);
  r.data = all;
  r.next_offset = r.size = static_cast<int64_t>(all.size());
  auto big = ParseAgentMessage(WriteAgentMessage(r));
  REQUIRE_MESSAGE(big.ok(), big.message());
  CHECK(std::get<LogsReply>(big.value()).data == all);
}

struct Hostile {
  const char* text;
  const char* field;    // the path the error names
  const char* message;  // a piece of the message
};

// Each row is one message an agent with a valid certificate might send; all
// must be refused, naming the field.
const Hostile kHostileAgentMessages[] = {
    {R"({"type":"gpu_event","gpu":0,"kind":5,"code":79})", "gpu_event.kind", "one of xid"},
    {R"({"type":"gpu_event","gpu":0,"kind":"xid","code":"79"})", "gpu_event.code", "integer"},
    {R"({"type":"gpu_event","gpu":64,"kind":"xid","code":79})", "gpu_event.gpu", "0..63"},
    {R"({"type":"gpu_event","gpu":-1,"kind":"xid","code":79})", "gpu_event.gpu", "0..63"},
    {R"({"type":"gpu_event","gpu":0.5,"kind":"xid","code":79})", "gpu_event.gpu", "integer"},
    {R"({"type":"gpu_event","gpu":0,"kind":"melted","code":79})", "gpu_event.kind", "one of"},
    {R"({"type":"gpu_event","gpu":0,"kind":"xid"})", "gpu_event.code", "missing"},
    {R"({"type":"rank_exited","job":1,"rank":0,"restart_count":"0","exit_code":0,"signal":0,"status_known":true})",
     "rank_exited.restart_count", "integer"},
    {R"({"type":"rank_exited","job":0,"rank":0,"restart_count":0,"exit_code":0,"signal":0,"status_known":true})",
     "rank_exited.job", "1.."},
    {R"({"type":"rank_exited","job":1,"rank":0,"restart_count":0,"exit_code":1e3,"signal":0,"status_known":true})",
     "rank_exited.exit_code", "integer"},
    {R"({"type":"rank_exited","job":1,"rank":0,"restart_count":0,"exit_code":0,"signal":0,"status_known":1})",
     "rank_exited.status_known", "true or false"},
    {R"({"type":"rank_exited","job":18446744073709551615,"rank":0,"restart_count":0,"exit_code":0,"signal":0,"status_known":true})",
     "rank_exited.job", "integer"},
    {R"({"type":"checkpoint","job":1,"step":5,"tier":7})", "checkpoint.tier", "local, persistent"},
    {R"({"type":"checkpoint","job":1,"step":-5,"tier":"local"})", "checkpoint.step", "0.."},
    {R"({"type":"checkpoint","job":1,"step":5,"tier":"local","extra":1})", "checkpoint.extra",
     "unknown field"},
    {R"({"type":"heartbeat","seq":1,"seq":2})", "seq", "twice"},
    {R"({"type":"heartbeat"})", "heartbeat.seq", "missing"},
    {R"({"type":"drained","why":"x"})", "drained.why", "has none"},
    {R"({"type":"leaving","back_in_ms":100})", "leaving.back_in_ms", "has none"},
    {R"({"type":"started","job":0,"restart_count":0})", "started.job", "1.."},
    {R"({"type":"started","job":1,"restart_count":-1})", "started.restart_count", "0.."},
    {R"({"type":"started","job":1})", "started.restart_count", "missing"},
    {R"({"type":"launch_failed","job":1,"restart_count":0,"reason":"","permanent":true})",
     "launch_failed.reason", "empty"},
    {R"({"type":"launch_failed","job":1,"restart_count":0,"reason":"a\nb","permanent":true})",
     "launch_failed.reason", "control"},
    {R"({"type":"logs","req":1,"error":"x","data_base64":"eQ=="})", "logs", "both"},
    {R"({"type":"logs","req":1,"offset":0,"next_offset":5,"size":4,"data_base64":"YWJjZA=="})",
     "logs.next_offset", "<= size"},
    {R"({"type":"logs","req":1,"offset":0,"size":4,"data_base64":"YWJjZA=="})", "logs.next_offset",
     "missing"},
    {R"({"type":"logs","req":1,"offset":0,"next_offset":4,"size":4,"data_base64":"YWJj!A=="})",
     "logs.data_base64", "must be base64"},
    {R"({"type":"logs","req":1,"offset":0,"next_offset":4,"size":4,"data_base64":"YWJjZA"})",
     "logs.data_base64", "multiple of 4"},
    {R"({"type":"logs","req":1,"offset":0,"next_offset":4,"size":4,"data_base64":7})",
     "logs.data_base64", "base64 string"},
    // The old form (protocol 3): data as text is an unknown field now.
    {R"({"type":"logs","req":1,"offset":0,"next_offset":1,"size":1,"data":"x"})", "logs.data",
     "unknown field"},
    {R"({"type":"register","node":"n 1","addr":"a","gpus":[],"ranks":[],"agent":"x","protocol":2})",
     "register.node", "must be a node name"},
    // The one node-name rule (node_name.hpp): an ESC, a slash, 65 bytes.
    {R"({"type":"register","node":"n\u001b[2J","addr":"a","gpus":[],"ranks":[],"agent":"x","protocol":2})",
     "register.node", "must be a node name"},
    {R"({"type":"register","node":"a/b","addr":"a","gpus":[],"ranks":[],"agent":"x","protocol":2})",
     "register.node", "must be a node name"},
    {R"({"type":"register","node":"-n1","addr":"a","gpus":[],"ranks":[],"agent":"x","protocol":2})",
     "register.node", "must be a node name"},
    {R"({"type":"register","node":"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn","addr":"a","gpus":[],"ranks":[],"agent":"x","protocol":2})",
     "register.node", "at most 64"},
    {R"({"type":"register","node":"n1","addr":"a","gpus":[{"index":0,"model":"m","uuid":"u","memory_mb":1},{"index":0,"model":"m","uuid":"v","memory_mb":1}],"ranks":[],"agent":"x","protocol":2})",
     "register.gpus[1].index", "twice"},
    {R"({"type":"register","node":"n1","addr":"a","gpus":{},"ranks":[],"agent":"x","protocol":2})",
     "register.gpus", "array"},
    {R"({"type":"nuke"})", "type", "unknown message type"},
    {R"({"type":7})", "type", "string"},
    {R"({"job":1})", "type", "string"},
    {R"([{"type":"heartbeat","seq":1}])", "", "one JSON object"},
    {R"({"type":"heartbeat","seq":1)", "", "invalid JSON"},
    {R"({"type":"heartbeat","seq":[[[[[[[[[[1]]]]]]]]]]})", "", "nested deeper"},
};

TEST_CASE("hostile agent messages are refused, naming the field") {
  for (const Hostile& h : kHostileAgentMessages) {
    CAPTURE(h.text);
    std::string field = "unset";
    auto m = ParseAgentMessage(h.text, &field);
    REQUIRE_FALSE(m.ok());
    CHECK(field == h.field);
    CHECK(m.message().find(h.message) != std::string::npos);
    if (*h.field != '\0') CHECK(m.message().rfind(h.field, 0) == 0);
  }
}

TEST_CASE("a start that contradicts itself is refused") {
  struct Case {
    void (*mutate)(Start&);
    const char* field;
  };
  const Case cases[] = {
      {[](Start& s) { s.world_size = 15; }, "start.world_size"},
      {[](Start& s) { s.group_rank = 2; }, "start.group_rank"},
      {[](Start& s) { s.ranks[1].local_rank = 0; }, "start.ranks[1].local_rank"},
      {[](Start& s) { s.ranks[1].rank = s.ranks[0].rank; }, "start.ranks[1].rank"},
      {[](Start& s) { s.ranks[1].gpu = s.ranks[0].gpu; }, "start.ranks[1].gpu"},
      {[](Start& s) { s.ranks[0].rank = 16; }, "start.ranks[0].rank"},
      {[](Start& s) { s.command = {""}; }, "start.command[0]"},
      {[](Start& s) { s.command = {std::string(kMaxArgBytes + 1, 'x')}; }, "start.command[0]"},
      {[](Start& s) { s.unix_user = "-rf"; }, "start.unix_user"},
      {[](Start& s) { s.unix_user = ""; }, "start.unix_user"},
      {[](Start& s) { s.env["1BAD"] = "x"; }, "start.env.1BAD"},
      {[](Start& s) { s.working_dir = "relative/dir"; }, "start.working_dir"},
      {[](Start& s) { s.env["RANK"] = "3"; }, "start.env"},
      {[](Start& s) { s.env["TOPO_JOB_ID"] = "3"; }, "start.env"},
      {[](Start& s) { s.output = "out-%x.log"; }, "start.output"},
      {[](Start& s) { s.error = "logs/"; }, "start.error"},
      {[](Start& s) { s.output = "a\nb"; }, "start.output"},
      {[](Start& s) { s.master_port = 80; }, "start.master_port"},
      {[](Start& s) { s.layout.order = "tp-pp"; }, "start.layout"},
  };
  for (const Case& c : cases) {
    Start s = SampleStart();
    c.mutate(s);
    CAPTURE(c.field);
    std::string field;
    auto m = ParseSchedulerMessage(WriteSchedulerMessage(s), &field);
    REQUIRE_FALSE(m.ok());
    CHECK(field == c.field);
  }
  // A command of many arguments, each within the limit, over the total.
  Start s = SampleStart();
  s.command.assign(5, std::string(kMaxArgBytes, 'y'));
  std::string field;
  auto m = ParseSchedulerMessage(WriteSchedulerMessage(s), &field);
  REQUIRE_FALSE(m.ok());
  CHECK(field == "start.command");
}

TEST_CASE("an over-long message is refused before it is parsed") {
  std::string big =
      R"({"type":"heartbeat","seq":1,"pad":")" + std::string(kMaxMessageBytes, 'x') + "\"}";
  auto m = ParseAgentMessage(big);
  REQUIRE_FALSE(m.ok());
  CHECK(m.message().find("at most") != std::string::npos);
}

TEST_CASE("the checked-in schema is the one the tables generate") {
  std::ifstream in(std::string(TOPO_SOURCE_DIR) + "/schema/agent-protocol.schema.json");
  REQUIRE_MESSAGE(in.good(), "schema/agent-protocol.schema.json is missing");
  std::stringstream text;
  text << in.rdbuf();
  CHECK_MESSAGE(
      text.str() == ProtocolSchema().dump(2) + "\n",
      "regenerate it: build/common/topo-protocol-schema > schema/agent-protocol.schema.json");
}

TEST_CASE("the schema names every message and marks required fields") {
  const auto schema = ProtocolSchema();
  const auto& up = schema["$defs"]["agent_to_scheduler"]["oneOf"];
  const auto& down = schema["$defs"]["scheduler_to_agent"]["oneOf"];
  CHECK(up.size() == std::variant_size_v<AgentMessage>);
  CHECK(down.size() == std::variant_size_v<SchedulerMessage>);
  bool found = false;
  for (const auto& m : down) {
    if (m["properties"]["type"]["const"] != "start") continue;
    found = true;
    CHECK(m["additionalProperties"] == false);
    CHECK(m["properties"]["master_port"]["minimum"] == kMinMasterPort);
    CHECK(m["properties"]["ranks"]["items"]["properties"].contains("local_rank"));
  }
  CHECK(found);
}

}  // namespace
}  // namespace topo::proto
