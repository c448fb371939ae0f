// libFuzzer target for the text parsers of common/ (topo_common) and of the
// etcd gateway's answers (scheduler/ha/gateway.cpp).
//
// The first byte of the input selects the parser (byte % 16; past 14, % 8), the rest is its
// text; the seed corpus (tests/fuzz/corpus) starts each file with the digit (':' for 10, ';'
// for 11, '<' for 12, '=' for 13, '>' for 14):
//
//   0 ParseJobSpec          JobSpecFromJson(JobSpecToJson(x)) == x, and
//                           through text too
//   1 ParseTopologyJson     ParseTopologyJson(TopologyToJson(t)) gives t back
//   2 ParseSlurmTopology    JSON round trip; TopologyToSlurm reads back
//                           exactly where topology_io.hpp promises it
//   3 ParseCruxCsv          JSON round trip, Slurm round trip as above
//   4 EventFromJson         EventToJson is a fixed point of the reader
//   5 CommandFromJson       CommandToJson likewise
//   6 ParseTraceCsv         must not crash
//   7 ParseKalosCsv         must not crash
//   8 ParseAgentMessage     WriteAgentMessage reads back equal, a fixed point
//   9 ParseSchedulerMessage WriteSchedulerMessage likewise
//  10 ParseSlurmRankMap     FormatSlurmRankMap reads back equal, a fixed point
//  11 etcd gateway answers  every ha/gateway.hpp reader on the JSON (what an
//                           etcd member, or anything on its port, sends the
//                           daemon); Base64Decode, whose output encodes back
//                           to the input
//  12 etcd records          ha/records.hpp: a snapshot manifest, a split
//                           batch header and an applied seq each read back
//                           equal once written; SeqOfKey must not crash; a
//                           compressed batch's text compresses and reads
//                           back to the same text
//  13 ParseAuthRows         the users and tokens an HA replica takes from
//                           etcd (common/auth_json.hpp): WriteAuthRows reads
//                           back to the same rows
//  14 the user API          common/user_api.hpp; the second byte (less
//                           '0', % 11: a digit or ':' in the corpus, as the
//                           first) picks the reader: 0 submit request,
//                           1 submit answer, 2 job view, 3 job list, 4 node
//                           view, 5 node list, 6 Slurm line, 7 partition
//                           request, 8 reservation request, 9 partition
//                           list, 10 reservation list; each written reads
//                           back equal, a fixed point, and a client's
//                           lenient reading of the text never crashes
//
// Parsers return core::Result and must never throw: nothing is caught here,
// so an exception, a sanitizer report or a broken round trip (Fail below,
// which aborts) is a crash that libFuzzer saves. `make fuzz` runs it (README).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ha/gateway.hpp"
#include "ha/records.hpp"
#include "topo/common/agent_protocol.hpp"
#include "topo/common/auth_json.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/hostlist.hpp"
#include "topo/common/job_io.hpp"
#include "topo/common/slurm_rank_map.hpp"
#include "topo/common/topology_io.hpp"
#include "topo/common/trace_io.hpp"
#include "topo/common/user_api.hpp"
#include "topo/core/job.hpp"
#include "topo/core/topology.hpp"

namespace {

using namespace topo;
using nlohmann::json;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_parsers: round-trip violation: %s\n", what.c_str());
  std::fflush(stderr);
  __builtin_trap();
}

void Require(bool ok, const std::string& what) {
  if (!ok) Fail(what);
}

// ---------------------------------------------------------------- job spec

bool SameJob(const core::JobSpec& a, const core::JobSpec& b) {
  const core::Parallelism& p = a.parallelism;
  const core::Parallelism& q = b.parallelism;
  if (a.name != b.name || a.gpus != b.gpus || a.gpus_per_node != b.gpus_per_node ||
      a.spares != b.spares) {
    return false;
  }
  if (p.tp != q.tp || p.cp != q.cp || p.ep != q.ep || p.pp != q.pp || p.dp != q.dp ||
      p.order != q.order) {
    return false;
  }
  for (size_t k = 0; k < a.constraints.size(); ++k) {
    if (a.constraints[k].strength != b.constraints[k].strength ||
        a.constraints[k].tier != b.constraints[k].tier) {
      return false;
    }
  }
  return true;
}

void FuzzJobSpec(std::string_view text) {
  core::Result<core::JobSpec> job = common::ParseJobSpec(text);
  if (!job.ok()) return;
  Require(core::ValidateJobSpec(job.value()).ok(), "ParseJobSpec gave an invalid spec");
  json j = common::JobSpecToJson(job.value());
  core::Result<core::JobSpec> back = common::JobSpecFromJson(j);
  Require(back.ok(), "JobSpecFromJson(JobSpecToJson(x)) failed: " + back.message());
  Require(SameJob(job.value(), back.value()), "JobSpecFromJson(JobSpecToJson(x)) != x");
  Require(common::JobSpecToJson(back.value()) == j, "JobSpecToJson is not a fixed point");
  std::string dumped = j.dump();
  core::Result<core::JobSpec> reread = common::ParseJobSpec(dumped);
  Require(reread.ok(), "ParseJobSpec(JobSpecToJson(x).dump()) failed: " + reread.message());
  Require(SameJob(job.value(), reread.value()), "ParseJobSpec(JobSpecToJson(x).dump()) != x");
}

// ---------------------------------------------------------------- topologies

// The first difference between two topologies (names, tiers, costs, HBD,
// HBD marks and the parts they make, tree shape, nodes); empty when they are
// the same.
std::string Difference(const core::Topology& a, const core::Topology& b) {
  if (a.name() != b.name()) return "name";
  if (a.tier_count() != b.tier_count()) return "tier count";
  for (int t = 0; t < a.tier_count(); ++t) {
    if (a.tier(t).name != b.tier(t).name) return "tier name " + std::to_string(t);
    if (a.tier(t).cost != b.tier(t).cost) return "tier cost " + std::to_string(t);
  }
  if (a.hbd_tier() != b.hbd_tier()) return "hbd tier";
  if (a.domain_count() != b.domain_count()) return "domain count";
  for (core::DomainId d = 0; d < a.domain_count(); ++d) {
    const core::Domain& x = a.domain(d);
    const core::Domain& y = b.domain(d);
    if (x.name != y.name || x.tier != y.tier || x.parent != y.parent ||
        x.node_begin != y.node_begin || x.node_end != y.node_end || x.gpus != y.gpus ||
        x.child_begin != y.child_begin || x.child_end != y.child_end) {
      return "domain " + std::to_string(d);
    }
    auto cx = a.children(d);
    auto cy = b.children(d);
    if (!std::equal(cx.begin(), cx.end(), cy.begin(), cy.end())) {
      return "children of domain " + std::to_string(d);
    }
    if (a.hbd_marked(d) != b.hbd_marked(d) || a.hbd_link(d) != b.hbd_link(d)) {
      return "HBD mark of domain " + std::to_string(d);
    }
  }
  if (a.part_count() != b.part_count()) return "part count";
  for (int p = 0; p < a.part_count(); ++p) {
    if (a.part(p).hbd_tier != b.part(p).hbd_tier || a.part(p).nodes != b.part(p).nodes ||
        a.part(p).gpu_model != b.part(p).gpu_model) {
      return "part " + std::to_string(p);
    }
  }
  if (a.node_count() != b.node_count()) return "node count";
  for (core::NodeId n = 0; n < a.node_count(); ++n) {
    const core::Node& x = a.node(n);
    const core::Node& y = b.node(n);
    if (x.name != y.name || x.gpus != y.gpus || x.gpu_model != y.gpu_model ||
        x.features != y.features) {
      return "node " + std::to_string(n);
    }
  }
  return "";
}

// Whether every domain and node name can be written in topology.conf: no
// blanks or '#' (token and comment syntax), no ',', '[' or ']' (hostlists).
bool SlurmNames(const core::Topology& t) {
  auto ok = [](const std::string& name) {
    return name.find_first_of(std::string_view(" \t\r\n#,[]", 9)) == std::string::npos;
  };
  for (core::DomainId d = 0; d < t.domain_count(); ++d) {
    if (d != t.root() && !ok(t.domain(d).name)) return false;
  }
  for (core::NodeId n = 0; n < t.node_count(); ++n) {
    if (!ok(t.node(n).name)) return false;
  }
  return true;
}

// topology_io.hpp: the Slurm round trip is exact when the tiers below the
// leaf switches are the node tier and at most one HBD tier, and node GPU
// counts and models are uniform (docs/formats.md: features are lost too).
// HBD marks (mixed clusters) are exact only in some shapes (docs/formats.md,
// which unit tests check): not promised here.
bool SlurmExact(const core::Topology& t) {
  if (t.tier_count() < 2 || !SlurmNames(t)) return false;
  for (core::DomainId d = t.node_count(); d < t.root(); ++d) {
    if (t.hbd_marked(d)) return false;
  }
  if (t.hbd_tier() > 1 && t.hbd_tier() != t.tier_count() - 1) return false;
  for (core::NodeId n = 0; n < t.node_count(); ++n) {
    const core::Node& x = t.node(n);
    if (x.gpus != t.node(0).gpus || x.gpu_model != t.node(0).gpu_model || !x.features.empty()) {
      return false;
    }
  }
  return true;
}

void CheckTopology(const core::Topology& t, std::string_view source) {
  const std::string where(source);
  // JSON: exact for every topology.
  std::string text = common::TopologyToJson(t);
  core::Result<core::Topology> back = common::ParseTopologyJson(text);
  Require(back.ok(), where + ": ParseTopologyJson(TopologyToJson(t)) failed: " + back.message());
  std::string diff = Difference(t, back.value());
  Require(diff.empty(), where + ": ParseTopologyJson(TopologyToJson(t)) differs in " + diff);
  Require(common::TopologyToJson(back.value()) == text,
          where + ": TopologyToJson does not re-export identically");

  // Slurm: reads back whenever the names can be written, exactly where
  // promised.
  if (t.tier_count() < 2 || !SlurmNames(t)) {
    (void)common::TopologyToSlurm(t);
    return;
  }
  std::string conf = common::TopologyToSlurm(t);
  core::Result<core::Topology> from_conf = common::ParseSlurmTopology(conf);
  Require(from_conf.ok(),
          where + ": ParseSlurmTopology(TopologyToSlurm(t)) failed: " + from_conf.message());
  if (!SlurmExact(t)) return;
  diff = Difference(t, from_conf.value());
  Require(diff.empty(), where + ": ParseSlurmTopology(TopologyToSlurm(t)) differs in " + diff);
  Require(common::TopologyToSlurm(from_conf.value()) == conf,
          where + ": TopologyToSlurm does not re-export identically");
}

// Hostlists in topology.conf may expand to 1,000,000 names each (by design),
// and a name is as long as its item: a few bytes of input make millions of
// nodes, or megabytes of names. That is a slow input, not a bug, so inputs
// whose Nodes=/Switches= lists expand to more than kMaxSlurmNameBytes in all
// are skipped. A name is at most as long as its expression, so expanding
// with a limit of budget / length names never allocates past the budget.
// (A conservative copy of the reader's tokenizing: lines, '#' comments,
// blank-separated Key=Value tokens, keys in any case.)
constexpr size_t kMaxSlurmNameBytes = 512 * 1024;

bool SlurmWithinBudget(std::string_view text) {
  size_t budget = kMaxSlurmNameBytes;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    line = line.substr(0, line.find('#'));
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      size_t token_start = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
      std::string_view token = line.substr(token_start, i - token_start);
      size_t eq = token.find('=');
      if (eq == std::string_view::npos) continue;
      std::string key(token.substr(0, eq));
      for (char& c : key) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
      if (key != "nodes" && key != "switches") continue;
      std::string_view expr = token.substr(eq + 1);
      size_t limit = budget / std::max<size_t>(expr.size(), 1);
      if (limit == 0) return false;
      core::Result<std::vector<std::string>> names = common::ExpandHostlist(expr, limit);
      if (!names.ok()) {
        // Over budget, or malformed (the reader rejects it too).
        if (names.message().find("past the limit") != std::string::npos) return false;
        continue;
      }
      for (const std::string& name : names.value()) budget -= std::min(budget, name.size());
    }
  }
  return true;
}

void FuzzTopologyJson(std::string_view text) {
  (void)common::SniffTopologyFormat(text);
  core::Result<core::Topology> t = common::ParseTopologyJson(text);
  if (t.ok()) CheckTopology(t.value(), "json");
}

void FuzzSlurm(std::string_view text) {
  if (!SlurmWithinBudget(text)) return;
  core::Result<core::Topology> t = common::ParseSlurmTopology(text);
  if (t.ok()) CheckTopology(t.value(), "slurm");
}

void FuzzCrux(std::string_view text) {
  core::Result<core::Topology> t = common::ParseCruxCsv(text);
  if (t.ok()) CheckTopology(t.value(), "crux");
}

// ---------------------------------------------------------------- events

// 2 leaves x 2 nodes x 4 GPUs; the seed corpus names these nodes.
const core::Topology& EventTopology() {
  static const core::Topology topology = [] {
    core::TopologyBuilder b("fuzz", {"node", "leaf"}, 0);
    int l0 = b.AddDomain("leaf0", 1, core::TopologyBuilder::kTop);
    int l1 = b.AddDomain("leaf1", 1, core::TopologyBuilder::kTop);
    b.AddNode("n0", l0, 4);
    b.AddNode("n1", l0, 4);
    b.AddNode("n2", l1, 4);
    b.AddNode("n3", l1, 4);
    core::Result<core::Topology> t = std::move(b).Build();
    if (!t.ok()) Fail("event topology: " + t.message());
    return std::move(t).value();
  }();
  return topology;
}

// Reader, writer, reader again: the writer's output must read back and be
// written the same (text included, as the store logs it).
template <typename From, typename To>
void CheckFixedPoint(std::string_view text, From from, To to, const std::string& what) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  const core::Topology& topo = EventTopology();
  auto x = from(j, topo);
  if (!x.ok()) return;
  json written = to(x.value(), topo);
  auto back = from(written, topo);
  Require(back.ok(), what + ": reading the writer's output failed: " + back.message());
  Require(to(back.value(), topo) == written, what + ": the writer is not a fixed point");
  std::string dumped = written.dump();
  json reparsed = json::parse(dumped, nullptr, /*allow_exceptions=*/false);
  Require(!reparsed.is_discarded(), what + ": the writer's text does not parse");
  auto from_text = from(reparsed, topo);
  Require(from_text.ok(), what + ": reading the writer's text failed: " + from_text.message());
  Require(to(from_text.value(), topo) == written, what + ": text round trip differs");
}

void FuzzEvent(std::string_view text) {
  CheckFixedPoint(
      text, [](const json& j, const core::Topology& t) { return common::EventFromJson(j, t); },
      [](const core::Event& e, const core::Topology& t) { return common::EventToJson(e, t); },
      "event");
}

void FuzzCommand(std::string_view text) {
  CheckFixedPoint(
      text, [](const json& j, const core::Topology& t) { return common::CommandFromJson(j, t); },
      [](const core::Command& c, const core::Topology& t) { return common::CommandToJson(c, t); },
      "command");
}

// ---------------------------------------------------------------- agent protocol

template <typename Parse, typename Write>
void FuzzProtocol(std::string_view text, Parse parse, Write write, const char* what) {
  auto m = parse(text);
  if (!m.ok()) return;
  const std::string once = write(m.value());
  auto back = parse(once);
  Require(back.ok(), std::string(what) + " written does not read back: " + back.message());
  Require(back.value() == m.value(), std::string(what) + " reads back different");
  Require(write(back.value()) == once, std::string(what) + " writer is not a fixed point");
}

// ---------------------------------------------------------------- user API

// A strict reader with a Reading parameter, read strictly.
template <typename Parse>
auto Strictly(Parse parse) {
  return [parse](std::string_view t) { return parse(t, nullptr, api::Reading::kStrict); };
}

// A reader of a parsed body (the daemon parses it first) on text: text that
// is not a JSON object is no request.
template <typename Read>
auto FromJson(Read read) {
  return [read](std::string_view t) -> decltype(read(json(), nullptr)) {
    json j = json::parse(t.begin(), t.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return core::Status::Error("not JSON");
    return read(j, nullptr);
  };
}

void FuzzUserApi(std::string_view text) {
  if (text.empty()) return;
  // Less '0': the corpus's digit is the reader ('0' % 7 was the Slurm
  // line, so every seed fuzzed that one reader).
  const unsigned which = static_cast<unsigned char>(text[0] - '0') % 11;
  text.remove_prefix(1);
  switch (which) {
    case 0:
      FuzzProtocol(
          text, [](std::string_view t) { return api::ParseSubmitRequest(t); },
          api::WriteSubmitRequest, "submit request");
      break;
    case 1:
      FuzzProtocol(text, Strictly(api::ParseSubmitAnswer), api::WriteSubmitAnswer, "submit answer");
      (void)api::ParseSubmitAnswer(text, nullptr, api::Reading::kClient);
      break;
    case 2:
      FuzzProtocol(text, Strictly(api::ParseJobView), api::WriteJobView, "job view");
      (void)api::ParseJobView(text, nullptr, api::Reading::kClient);
      break;
    case 3:
      FuzzProtocol(text, Strictly(api::ParseJobList), api::WriteJobList, "job list");
      (void)api::ParseJobList(text, nullptr, api::Reading::kClient);
      break;
    case 4:
      FuzzProtocol(text, Strictly(api::ParseNodeView), api::WriteNodeView, "node view");
      (void)api::ParseNodeView(text, nullptr, api::Reading::kClient);
      break;
    case 5:
      FuzzProtocol(text, Strictly(api::ParseNodeList), api::WriteNodeList, "node list");
      break;
    case 6:
      FuzzProtocol(
          text, [](std::string_view t) { return api::ParseSlurmSubmitLine(t); },
          api::WriteSlurmSubmitLine, "Slurm line");
      break;
    case 7:
      FuzzProtocol(text, FromJson(api::ReadPartitionRequest), api::WritePartitionRequest,
                   "partition request");
      break;
    case 8:
      FuzzProtocol(text, FromJson(api::ReadReservationRequest), api::WriteReservationRequest,
                   "reservation request");
      break;
    case 9:
      FuzzProtocol(text, Strictly(api::ParsePartitionList), api::WritePartitionList,
                   "partition list");
      (void)api::ParsePartitionList(text, nullptr, api::Reading::kClient);
      break;
    case 10:
      FuzzProtocol(text, Strictly(api::ParseReservationList), api::WriteReservationList,
                   "reservation list");
      (void)api::ParseReservationList(text, nullptr, api::Reading::kClient);
      break;
  }
}

// ---------------------------------------------------------------- Slurm rank map

void FuzzSlurmRankMap(std::string_view text) {
  auto m = common::ParseSlurmRankMap(text);
  if (!m.ok()) return;
  const std::string once = common::FormatSlurmRankMap(m.value());
  auto back = common::ParseSlurmRankMap(once);
  Require(back.ok(), "rank map written does not read back: " + back.message());
  Require(back.value().nodes == m.value().nodes, "rank map nodes read back different");
  Require(back.value().ranks.size() == m.value().ranks.size(),
          "rank map ranks read back different");
  for (size_t r = 0; r < m.value().ranks.size(); ++r) {
    Require(back.value().ranks[r].node == m.value().ranks[r].node &&
                back.value().ranks[r].gpu == m.value().ranks[r].gpu,
            "rank map rank " + std::to_string(r) + " reads back different");
  }
  Require(common::FormatSlurmRankMap(back.value()) == once, "rank map writer is not a fixed point");
}

// ---------------------------------------------------------------- etcd gateway

void FuzzEtcdGateway(std::string_view text) {
  if (core::Result<std::string> bytes = ha::Base64Decode(text); bytes.ok()) {
    Require(ha::Base64Encode(bytes.value()) == text, "base64: decode then encode");
  }
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  (void)ha::ParseHeader(j, "header");
  (void)ha::ParseRangeResponse(j);
  (void)ha::ParsePutResponse(j);
  (void)ha::ParseDeleteRangeResponse(j);
  (void)ha::ParseTxnResponse(j);
  (void)ha::ParseLeaseGrantResponse(j);
  (void)ha::ParseLeaseKeepAliveResponse(j);
  (void)ha::ParseWatchMessage(j);
  (void)ha::GatewayErrorMessage(j);
}

// The values topo-scheduler keeps in etcd beside the log (ha/records.hpp):
// what parses writes back and parses to the same record.
void FuzzEtcdRecords(std::string_view text) {
  if (core::Result<ha::SnapshotManifest> m = ha::ParseSnapshotManifest(text); m.ok()) {
    core::Result<ha::SnapshotManifest> back =
        ha::ParseSnapshotManifest(ha::EncodeSnapshotManifest(m.value()));
    Require(back.ok() && back.value() == m.value(), "snapshot manifest: write then read");
  }
  if (core::Result<int64_t> a = ha::ParseAppliedSeq(text); a.ok()) {
    Require(ha::ParseAppliedSeq(std::to_string(a.value())).value() == a.value(),
            "applied seq: write then read");
  }
  std::string rest;
  (void)ha::SeqOfKey(text, "/toposched/t/log/", &rest);
  if (core::Result<std::string> t = ha::JsonText(text); t.ok()) {
    core::Result<std::string> again = ha::CompressJsonText(t.value());
    Require(again.ok() && ha::JsonText(again.value()).value() == t.value(),
            "compressed batch: compress then read");
  }
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  core::Result<std::optional<ha::BatchParts>> p = ha::ParseBatchParts(j);
  if (p.ok() && p.value()) {
    core::Result<std::optional<ha::BatchParts>> back =
        ha::ParseBatchParts(json::parse(ha::EncodeBatchParts(*p.value())));
    Require(back.ok() && back.value() && *back.value() == *p.value(),
            "split batch header: write then read");
  }
}

// The users-and-tokens value an HA replica takes from etcd: whatever parses
// writes back to a value that parses to the same rows.
void FuzzAuth(std::string_view text) {
  core::Result<common::AuthRows> rows = common::ParseAuthRows(text);
  if (!rows.ok()) return;
  core::Result<common::AuthRows> back = common::ParseAuthRows(common::WriteAuthRows(rows.value()));
  Require(back.ok() && back.value() == rows.value(), "users and tokens: write then read");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const unsigned selector = data[0] % 16;
  switch (selector < 15 ? selector : selector % 8) {
    case 0:
      FuzzJobSpec(text);
      break;
    case 1:
      FuzzTopologyJson(text);
      break;
    case 2:
      FuzzSlurm(text);
      break;
    case 3:
      FuzzCrux(text);
      break;
    case 4:
      FuzzEvent(text);
      break;
    case 5:
      FuzzCommand(text);
      break;
    case 6:
      (void)common::ParseTraceCsv(text);
      break;
    case 7:
      (void)common::ParseKalosCsv(text);
      break;
    case 8:
      FuzzProtocol(
          text, [](std::string_view t) { return proto::ParseAgentMessage(t); },
          [](const proto::AgentMessage& m) { return proto::WriteAgentMessage(m); },
          "agent message");
      break;
    case 9:
      FuzzProtocol(
          text, [](std::string_view t) { return proto::ParseSchedulerMessage(t); },
          [](const proto::SchedulerMessage& m) { return proto::WriteSchedulerMessage(m); },
          "scheduler message");
      break;
    case 10:
      FuzzSlurmRankMap(text);
      break;
    case 11:
      FuzzEtcdGateway(text);
      break;
    case 12:
      FuzzEtcdRecords(text);
      break;
    case 13:
      FuzzAuth(text);
      break;
    case 14:
      FuzzUserApi(text);
      break;
  }
  return 0;
}
