#include "client/format.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "client/api_client.hpp"
#include "client/requests.hpp"
#include "commands/commands.hpp"

namespace topo::cli {
namespace {

using nlohmann::json;

void UseUtc() {
  setenv("TZ", "UTC", 1);
  tzset();
}

// 2026-01-01 00:00:00 UTC.
constexpr int64_t kT0 = 1767225600000;

// A job view as `topo show` reads the server's answer (common/user_api.hpp).
api::JobView Job(const json& j) {
  std::string field;
  core::Result<api::JobView> v = api::ReadJobView(j, &field, api::Reading::kClient);
  REQUIRE_MESSAGE(v.ok(), v.message());
  return v.value();
}
// A list of them as `topo queue` reads a page.
std::vector<api::JobView> Jobs(const json& list) {
  core::Result<api::JobList> v = api::ReadJobList({{"jobs", list}}, nullptr, api::Reading::kClient);
  REQUIRE_MESSAGE(v.ok(), v.message());
  return v.value().jobs;
}

TEST_CASE("Table: padded columns, right-aligned numbers, no trailing blanks") {
  Table t({"ID", "NAME", "GPUS"});
  t.AlignRight(0);
  t.AlignRight(2);
  t.AddRow({"7", "a", "8"});
  t.AddRow({"12", "longer-name", "4096"});
  t.AddRow({"3"});  // missing cells are empty
  CHECK(t.Render() ==
        "ID  NAME         GPUS\n"
        " 7  a               8\n"
        "12  longer-name  4096\n"
        " 3\n");
}

TEST_CASE("LogEscaper: a rank's bytes made safe for a terminal, lines kept, pieces joined") {
  LogEscaper e;
  static constexpr char kLog[] = "a\0b\x1b[2Jc\td\r\ne\rf\xff\n";
  CHECK(e.Escape(std::string(kLog, sizeof kLog - 1)) == "a\\x00b\\x1b[2Jc\td\r\ne\\rf\\xff\n");
  CHECK(e.Finish().empty());
  // A character and a CRLF split between two pieces stay whole.
  LogEscaper split;
  std::string out = split.Escape("caf\xc3");
  out += split.Escape("\xa9 \xe2\x80");
  out += split.Escape("\xae ok\r");
  out += split.Escape("\nend\r");
  CHECK(out == "caf\xc3\xa9 \\u202e ok\r\nend");
  CHECK(split.Finish() == "\\r");  // a CR the log ends on ends no line
  // A sequence that never completes is escaped at the end.
  LogEscaper cut;
  CHECK(cut.Escape("x\xe2\x80") == "x");
  CHECK(cut.Finish() == "\\xe2\\x80");
}

TEST_CASE("TerminalSafe: control characters, C1, bidi controls and bad UTF-8 become escapes") {
  CHECK(TerminalSafe("plain name-1.2_x/y") == "plain name-1.2_x/y");
  CHECK(TerminalSafe("a\nb\rc\td") == "a\\nb\\rc\\td");
  CHECK(TerminalSafe("\x1b[2J\x1b]0;title\x07") == "\\x1b[2J\\x1b]0;title\\x07");
  CHECK(TerminalSafe(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(TerminalSafe("del\x7f") == "del\\x7f");
  // C1 as UTF-8 (U+009B is CSI) and as a lone byte.
  CHECK(TerminalSafe("\xc2\x9b"
                     "31m") == "\\u009b31m");
  CHECK(TerminalSafe("\x9b"
                     "31m") == "\\x9b31m");
  // Bidi embeddings, overrides and isolates; line and paragraph separators.
  CHECK(TerminalSafe("job\xe2\x80\xaegnp.exe") == "job\\u202egnp.exe");
  CHECK(TerminalSafe("\xe2\x80\xaa\xe2\x81\xa6\xe2\x81\xa9\xe2\x80\xa8") ==
        "\\u202a\\u2066\\u2069\\u2028");
  // Other text is kept: accents, CJK, emoji, a backslash.
  CHECK(TerminalSafe("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x9a\x80 a\\b") ==
        "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x9a\x80 a\\b");
  // Malformed UTF-8: overlong, surrogate, truncated, past U+10FFFF.
  CHECK(TerminalSafe("\xc0\x8a") == "\\xc0\\x8a");
  CHECK(TerminalSafe("\xed\xa0\x80") == "\\xed\\xa0\\x80");
  CHECK(TerminalSafe("x\xe2\x80") == "x\\xe2\\x80");
  CHECK(TerminalSafe("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");
  // Idempotent: Cell() and Table may both apply it.
  for (const char* s : {"a\nb", "\x1b[31m", "\xe2\x80\xae", "\xff", "a\\nb"}) {
    CHECK(TerminalSafe(TerminalSafe(s)) == TerminalSafe(s));
  }
}

TEST_CASE("A hostile job name cannot forge a row, color the table or reverse it") {
  UseUtc();
  // Bob names his job so that, printed raw, admin's `topo queue` would show
  // an extra job of alice's, or a cleared screen, or a reversed line.
  // Built as structs: the reader refuses some of these bytes (a tenant name
  // holds none), and the table must be safe whatever a view holds.
  std::vector<api::JobView> jobs(2);
  jobs[0].id = 41;
  jobs[0].name = "x\n42  org/a     alice  prod  running  4096  512  9:99:99  started";
  jobs[0].tenant = "org/b";
  jobs[0].user = "bob";
  jobs[0].reason = "\x1b[2J\x1b[1;1Hfake";
  jobs[0].gpus = 8;
  jobs[0].nodes = 1;
  jobs[1].id = 43;
  jobs[1].name =
      "\xe2\x80\xae"
      "gninnur";
  jobs[1].tenant = "org/b\x9b";
  jobs[1].user = "bob\xc2\x85";
  jobs[1].gpus = 8;
  jobs[1].nodes = 1;
  const std::string out = FormatJobTable(jobs, kT0);
  // A header and two rows: three lines, nothing else.
  CHECK(std::count(out.begin(), out.end(), '\n') == 3);
  for (char c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    CHECK_MESSAGE((c == '\n' || (u >= 0x20 && u != 0x7f)), "raw control byte ", int(u));
  }
  CHECK(out.find("\xe2\x80\xae") == std::string::npos);
  CHECK(out.find("\xc2\x85") == std::string::npos);
  CHECK(out.find("x\\n42  org/a     alice") != std::string::npos);
  CHECK(out.find("\\x1b[2J\\x1b[1;1Hfake") != std::string::npos);
  CHECK(out.find("\\u202egninnur") != std::string::npos);
  CHECK(out.find("org/b\\x9b") != std::string::npos);
  CHECK(out.find("bob\\u0085") != std::string::npos);
  // The same in text output, event lines and generic tables.
  const api::JobView job =
      Job({{"id", 41}, {"name", "a\nb"}, {"state", "held"}, {"reason", "r\x1b[0m"}});
  const std::string details = FormatJobDetails(job, kT0, false);
  CHECK(details.find("Job 41: a\\nb\n") == 0);
  CHECK(details.find("held (r\\x1b[0m)") != std::string::npos);
  const std::string event = FormatEvent({{"seq", 1},
                                         {"time_ms", kT0},
                                         {"actor", "bob\n"},
                                         {"event",
                                          {{"type", "job_submitted"},
                                           {"k\x1b", "v w\x1b"},
                                           {"request", {{"spec", {{"name", "n\r"}}}}}}}});
  CHECK(std::count(event.begin(), event.end(), '\n') == 1);
  CHECK(event.find("bob\\n") != std::string::npos);
  CHECK(event.find("k\\x1b=\"v w\\u001b\"") != std::string::npos);
  CHECK(event.find("n\\r") != std::string::npos);
  const std::string users = FormatObjectTable(
      json::array({json{{"name", "eve\n1  admin"}, {"tags", json::array({"\xe2\x81\xa6"})}}}),
      {"name", "tags"});
  CHECK(std::count(users.begin(), users.end(), '\n') == 2);
  CHECK(users.find("eve\\n1  admin") != std::string::npos);
  // Structured values are JSON-escaped, and bidi controls escaped on top.
  CHECK(users.find("[\"\\u2066\"]") != std::string::npos);
}

// Every string of `v` with hostile bytes appended; with `add_fields`, a
// hostile extra field (key and value) in every object too.
json Poison(const json& v, bool add_fields) {
  const std::string bad = "\n\r\x1b[2J\x07\x7f\xc2\x9b\xe2\x80\xae\xe2\x81\xa6\xff";
  if (v.is_string()) return v.get<std::string>() + bad;
  if (v.is_array()) {
    json out = json::array();
    for (const json& x : v) out.push_back(Poison(x, add_fields));
    return out;
  }
  if (!v.is_object()) return v;
  json out = json::object();
  for (auto it = v.begin(); it != v.end(); ++it) out[it.key()] = Poison(it.value(), add_fields);
  if (add_fields) out["x" + bad] = json::array({bad});
  return out;
}

// Every string of a job view with the same hostile bytes appended: the
// formatters trust no string of a view, whatever the reader let through.
api::JobView PoisonView(api::JobView v) {
  const std::string bad = "\n\r\x1b[2J\x07\x7f\xc2\x9b\xe2\x80\xae\xe2\x81\xa6\xff";
  for (std::string* s : {&v.name, &v.tenant, &v.user, &v.reason}) *s += bad;
  if (v.dependency) *v.dependency += bad;
  if (v.accounting) {
    for (std::string& n : v.accounting->node_names) n += bad;
    for (api::RunView& r : v.accounting->runs) {
      for (std::string& n : r.node_names) n += bad;
      if (r.end_reason) *r.end_reason += bad;
    }
  }
  if (v.detail) {
    api::JobDetail& d = *v.detail;
    if (d.spec) d.spec->name += bad;
    if (d.process) {
      for (std::string& a : d.process->command) a += bad;
      std::map<std::string, std::string> env;
      for (const auto& [k, value] : d.process->env) env[k + bad] = value + bad;
      d.process->env = env;
      for (auto* p : {&d.process->chdir, &d.process->output, &d.process->error}) {
        if (*p) **p += bad;
      }
    }
    for (api::RankView& r : d.ranks) r.node += bad;
    for (std::string& n : d.spares) n += bad;
    if (d.placement) {
      for (auto* level : {&d.placement->hbds, &d.placement->leaves, &d.placement->pods}) {
        for (api::DomainGpus& g : *level) g.name += bad;
      }
    }
    if (d.metrics) {
      std::map<std::string, std::map<std::string, int>> h;
      for (const auto& [kind, tiers] : d.metrics->tier_histogram) {
        for (const auto& [tier, n] : tiers) h[kind + bad][tier + bad] = n;
      }
      d.metrics->tier_histogram = h;
    }
    if (d.predicted) d.predicted->model += bad;
    for (api::JobEventView& e : d.history) {
      for (std::string* x : {&e.actor, &e.type}) *x += bad;
      if (e.reason) *e.reason += bad;
    }
    for (api::IncidentView& i : d.incidents) {
      for (std::string* x : {&i.cause, &i.actor, &i.reason}) *x += bad;
    }
  }
  return v;
}

// No byte a terminal acts on in any line: no control character but the
// newlines that end lines, no C1, bidi control or separator, nothing that
// is not UTF-8.
bool Inert(const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(start, nl - start);
    if (TerminalSafe(line) != line) return false;
    start = nl + 1;
  }
  return true;
}

size_t Lines(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

TEST_CASE("Every formatter: hostile strings in any field stay inert and on their own line") {
  UseUtc();
  const json job = json::parse(R"({
    "id": 17, "name": "llama", "tenant": "org/team", "user": "ada", "state": "running",
    "reason": "started", "gpus": 16, "nodes": 2, "priority": 5, "queue_position": 3,
    "submit_ms": 1767225000000, "start_ms": 1767225540000, "time_limit_s": 7200,
    "restarts": 1, "checkpoint_step": 300,
    "spec": {"name": "llama", "gpus": 16, "parallelism": {"tp": 8, "dp": 2, "order": "tp-dp"}},
    "spares": ["n9"],
    "placement": {"nodes": 2, "hbds": [{"name": "n0", "gpus": 8}, {"name": "n1", "gpus": 8}],
                  "leaves": [{"name": "leaf0", "gpus": 16}], "pods": [{"name": "pod0", "gpus": 16}]},
    "metrics": {"tp_in_hbd": 1.0, "note": "m", "tier_histogram": {"tp": {"node": 2}}},
    "ranks": [{"rank": 0, "node": "n0", "gpu": 0}],
    "incidents": [{"time_ms": 1767225000000, "cause": "xid", "detection_ms": 10,
                   "restart_ms": 20, "checkpoint_step": 3, "lost_work_s": 5, "reason": "r"}],
    "history": [{"seq": 4, "time_ms": 1767225000000, "actor": "ada", "type": "job_submitted",
                 "state": "queued", "reason": "q"}]})");
  const json node = json::parse(R"({"name": "n0", "state": "up", "reason": "r", "gpus": 2,
    "hbd": "n0", "leaf": "l0", "pod": "p0", "gpu_health": ["healthy", "failed"],
    "gpu_jobs": [17, 0], "gpu_history": [{"time_ms": 1767225000000, "gpu": 1,
    "health": "failed", "kind": "xid", "reason": "79"}]})");
  const json tenant = {{"name", "org/team"}, {"guaranteed_gpus", 64}, {"shares", 1.5}};
  const json entry = json::parse(R"({"seq": 42, "time_ms": 1767225600000, "actor": "ada",
    "event": {"type": "job_submitted", "id": 7, "note": "two words", "nodes": ["n1", "n2"],
              "request": {"spec": {"gpus": 64, "name": "x"}, "tenant": "org", "user": "u"}},
    "commands": [{"type": "start_job", "id": 7, "command": ["sh", "-c", "echo"],
                  "node": {"name": "n0"}, "env": {"A": "b"}}]})");
  const api::JobView view = Job(job);
  const std::vector<std::function<std::string(const api::JobView&)>> formatters = {
      [](const api::JobView& j) { return FormatJobTable({j}, kT0); },
      [](const api::JobView& j) { return FormatJobDetails(j, kT0, true); },
  };
  for (const auto& f : formatters) {
    CHECK(Inert(f(PoisonView(view))));
    // The same fields with hostile values: not one line more.
    CHECK(Lines(f(PoisonView(view))) == Lines(f(view)));
  }
  // A view whose names break their rules does not read at all ("topo: the
  // server's job view does not read: ..."), and says so in one line.
  core::Result<api::JobView> refused =
      api::ReadJobView(Poison(job, true), nullptr, api::Reading::kClient);
  REQUIRE_FALSE(refused.ok());
  CHECK(Lines(TerminalSafe(refused.message())) == 0);
  // Hostile extra fields (a newer daemon's, or not) are not read at all.
  json extra = job;
  extra["x\n\x1b[2J"] = json::array({"\x1b"});
  CHECK(Job(extra) == view);
  const std::vector<std::pair<std::function<std::string(const json&)>, json>> others = {
      {[](const json& j) { return FormatNodeTable(json::array({j})); }, node},
      {[](const json& j) { return FormatNodeDetails(j); }, node},
      {[](const json& j) { return SummarizeNodesByState(json::array({j})); }, node},
      {[](const json& j) { return FormatTenantTable(json::array({j})); }, tenant},
      {[](const json& j) { return FormatQuota(j); }, tenant},
      {[](const json& j) { return FormatEvent(j); }, entry},
      {[](const json& j) {
         return FormatObjectTable(json::array({j}), {"name", "gpu_jobs"});
       },
       node},
  };
  for (const auto& [f, sample] : others) {
    const std::string hostile = f(Poison(sample, true));
    CAPTURE(hostile);
    CHECK(Inert(hostile));
    CHECK(Lines(f(Poison(sample, false))) == Lines(f(sample)));
  }
}

TEST_CASE("FormatElapsed and FormatSeconds") {
  CHECK(FormatElapsed(0) == "0:00");
  CHECK(FormatElapsed(-5) == "0:00");
  CHECK(FormatElapsed(65'000) == "1:05");
  CHECK(FormatElapsed(3'723'000) == "1:02:03");
  CHECK(FormatElapsed(93'784'000) == "1-02:03:04");
  CHECK(FormatSeconds(7200) == "2h");
  CHECK(FormatSeconds(5400) == "1h30m");
  CHECK(FormatSeconds(90061) == "1d1h1m1s");
}

TEST_CASE("FormatJobTable: the squeue-like list of GET /v1/jobs") {
  UseUtc();
  const json jobs = json::parse(R"([
    {"id": 17, "name": "llama-70b", "tenant": "org/team", "user": "ada", "state": "running",
     "reason": "started", "gpus": 4096, "nodes": 512, "priority": 0,
     "submit_ms": 1767225000000, "start_ms": 1767222000000, "end_ms": null,
     "time_limit_s": 7200, "restarts": 0, "checkpoint_step": -1, "queue_position": null},
    {"id": 18, "name": "a-very-long-job-name-that-goes-on-and-on-forever", "tenant": "org",
     "user": "bob", "state": "queued", "reason": "waiting for 64 GPUs", "gpus": 64,
     "nodes": 8, "submit_ms": 1767225500000, "start_ms": null, "end_ms": null,
     "queue_position": 1},
    {"id": 19, "name": "", "tenant": "org", "user": "bob", "state": "completed",
     "reason": "", "gpus": 8, "nodes": 1, "start_ms": 1767200000000,
     "end_ms": 1767200065000}
  ])");
  CHECK(FormatJobTable(Jobs(jobs), kT0) ==
        "ID  TENANT    USER  NAME                              STATE      GPUS  NODES     TIME  "
        "REASON\n"
        "17  org/team  ada   llama-70b                         running    4096    512  1:00:00  "
        "started\n"
        "18  org       bob   a-very-long-job-name-that-goe...  queued       64      8     0:00  "
        "#1 waiting for 64 GPUs\n"
        "19  org       bob                                     completed     8      1     1:05\n");
  // Missing fields read as their defaults (a client's reading), an empty
  // page as no rows.
  CHECK(FormatJobTable(Jobs(json::array({json{{"id", 1}}})), kT0) ==
        "ID  TENANT  USER  NAME  STATE   GPUS  NODES  TIME  REASON\n"
        " 1                      queued     0      -  0:00\n");
  CHECK(FormatJobTable(Jobs(json::array()), kT0) ==
        "ID  TENANT  USER  NAME  STATE  GPUS  NODES  TIME  REASON\n");
}

TEST_CASE("FormatStartTime and topo queue --start: starts, and estimates marked as such") {
  UseUtc();
  // kT0 is 2026-01-01 00:00 UTC; the estimate is the same day, at 01:05.
  const json head = {{"id", 2},
                     {"state", "queued"},
                     {"start_ms", nullptr},
                     {"estimated_start_ms", kT0 + 65 * 60000}};
  CHECK(FormatStartTime(Job(head), kT0) == "~01:05 (est.)");
  // Another day than now: the date too.
  CHECK(FormatStartTime(Job(head), kT0 + 2 * 86400000LL) == "~2026-01-01 01:05 (est.)");
  // No estimate: nothing invented.
  CHECK(FormatStartTime(Job({{"state", "queued"}, {"estimated_start_ms", nullptr}}), kT0) == "-");
  CHECK(FormatStartTime(Job({{"state", "held"}}), kT0) == "-");
  // Started jobs show when they did, unmarked; a requeued job waits again.
  CHECK(FormatStartTime(Job({{"state", "running"}, {"start_ms", kT0 - 3600000}}), kT0) ==
        "2025-12-31 23:00");
  CHECK(FormatStartTime(Job({{"state", "completed"}, {"start_ms", kT0}}), kT0) == "00:00");
  CHECK(FormatStartTime(Job({{"state", "queued"}, {"start_ms", kT0 - 60000}}), kT0) == "-");
  const json jobs = json::array(
      {{{"id", 1}, {"state", "running"}, {"gpus", 48}, {"nodes", 6}, {"start_ms", kT0}}, head});
  CHECK(FormatJobTable(Jobs(jobs), kT0 + 60000, /*start_column=*/true) ==
        "ID  TENANT  USER  NAME  STATE    GPUS  NODES  START          TIME  REASON\n"
        " 1                      running    48      6  00:00          1:00\n"
        " 2                      queued      0      -  ~01:05 (est.)  0:00\n");
  const std::string shown = FormatJobDetails(Job(head), kT0, false);
  CHECK(shown.find("Starts:      ~2026-01-01 01:05:00 (est.") != std::string::npos);
  CHECK(FormatJobDetails(Job({{"id", 3}, {"state", "queued"}}), kT0, false).find("Starts") ==
        std::string::npos);
}

TEST_CASE("human output shows no sentinels: -1 steps, 0 nodes, hidden jobs, event types") {
  const json queued = {{"id", 5},
                       {"state", "queued"},
                       {"gpus", 64},
                       {"nodes", 0},
                       {"checkpoint_step", -1},
                       {"restarts", 0},
                       {"incidents", json::array({{{"time_ms", kT0},
                                                   {"cause", "node_state_requested"},
                                                   {"checkpoint_step", -1},
                                                   {"reason", "node n3 is down"}}})}};
  const std::string text = FormatJobDetails(Job(queued), kT0, false);
  CHECK(text.find("64 (not placed)") != std::string::npos);
  CHECK(text.find("0 nodes") == std::string::npos);
  CHECK(text.find("no checkpoint yet") != std::string::npos);
  CHECK(text.find("-1") == std::string::npos);
  CHECK(text.find("node lost") != std::string::npos);
  CHECK(text.find("node_state_requested") == std::string::npos);
  const json placed = {
      {"id", 6}, {"state", "running"}, {"gpus", 16}, {"nodes", 2}, {"checkpoint_step", 40}};
  CHECK(FormatJobDetails(Job(placed), kT0, false).find("16 on 2 nodes") != std::string::npos);
  // topo queue: the queued job's NODES is "-", the running one's its count.
  CHECK(FormatJobTable(Jobs(json::array({queued, placed})), kT0) ==
        "ID  TENANT  USER  NAME  STATE    GPUS  NODES  TIME  REASON\n"
        " 5                      queued     64      -  0:00\n"
        " 6                      running    16      2  0:00\n");
  CHECK(FormatJobDetails(Job(placed), kT0, false).find("checkpoint step 40") != std::string::npos);
  const json node = {{"name", "n0"},
                     {"state", "up"},
                     {"gpu_jobs", {0, 7, -1}},
                     {"gpu_health", {"healthy", "healthy", "healthy"}}};
  const std::string n = FormatNodeDetails(node);
  CHECK(n.find("another tenant's") != std::string::npos);
  CHECK(n.find("-1") == std::string::npos);
}

TEST_CASE("FormatJobDetails: how the processes start, with variable names but no values") {
  json job = {{"id", 21},
              {"state", "queued"},
              {"command", {"sh", "-c", "exec torchrun --nnodes $GROUP_WORLD_SIZE"}},
              {"launch", "node"},
              {"env", {{"WANDB_API_KEY", "s3cr3t-value"}, {"NCCL_DEBUG", "INFO"}}},
              {"chdir", "/data/run"},
              {"output", "out-%j-%r.log"},
              {"error", "/var/err-%j.log"}};
  std::string text = FormatJobDetails(Job(job), kT0, false);
  CHECK(text.find("Command:     sh -c 'exec torchrun --nnodes $GROUP_WORLD_SIZE'\n") !=
        std::string::npos);
  CHECK(text.find("Launch:      node (one process per node)\n") != std::string::npos);
  CHECK(text.find("Env:         NCCL_DEBUG, WANDB_API_KEY (names only") != std::string::npos);
  CHECK(text.find("s3cr3t") == std::string::npos);
  CHECK(text.find("INFO") == std::string::npos);
  CHECK(text.find("Directory:   /data/run\n") != std::string::npos);
  CHECK(text.find("Output:      out-%j-%r.log (in /data/run)\n") != std::string::npos);
  CHECK(text.find("Error:       /var/err-%j.log\n") != std::string::npos);

  // The defaults say what they mean; a hostile value cannot move the cursor.
  job = {{"id", 22},          {"state", "queued"},     {"command", {"python3", "it's\x1b[2J.py"}},
         {"launch", "rank"},  {"env", json::object()}, {"chdir", nullptr},
         {"output", nullptr}, {"error", nullptr}};
  text = FormatJobDetails(Job(job), kT0, false);
  CHECK(text.find("Command:     python3 'it'\\''s\\x1b[2J.py'\n") != std::string::npos);
  CHECK(text.find("Launch:      rank (one process per GPU)\n") != std::string::npos);
  CHECK(text.find("Output:      the agent's log (topo logs 22)\n") != std::string::npos);
  for (const char* absent : {"Env:", "Directory:", "Error:", "\x1b"}) {
    CAPTURE(absent);
    CHECK(text.find(absent) == std::string::npos);
  }
  // A long batch script is cut.
  job["command"] = {"/bin/sh", "-c", std::string(1000, 'x')};
  text = FormatJobDetails(Job(job), kT0, false);
  CHECK(text.find("xxx...'") == std::string::npos);
  CHECK(text.find("xxx...\n") != std::string::npos);
}

TEST_CASE("FormatJobDetails: placement per level, metrics, ranks and history") {
  UseUtc();
  json job = json::parse(R"({
    "id": 17, "name": "llama", "tenant": "org/team", "user": "ada", "state": "running",
    "reason": "started", "gpus": 16, "nodes": 2, "priority": 5,
    "submit_ms": 1767225000000, "start_ms": 1767225540000, "end_ms": null,
    "time_limit_s": 7200, "restarts": 1, "checkpoint_step": 300, "queue_position": null,
    "spec": {"name": "llama", "gpus": 16, "parallelism": {"tp": 8, "dp": 2}},
    "spares": ["n9"],
    "placement": {"nodes": 2, "hbds": [{"name": "n0", "gpus": 8}, {"name": "n1", "gpus": 8}],
                  "leaves": [{"name": "leaf0", "gpus": 16}], "pods": [{"name": "pod0", "gpus": 16}]},
    "metrics": {"tp_in_hbd": 1.0, "ep_in_hbd": null, "leaves_spanned": 1,
                "required_met": true, "tier_histogram": {"tp": {"node": 2}, "dp": {}}},
    "history": [{"seq": 4, "time_ms": 1767225000000, "actor": "ada", "type": "job_submitted",
                 "state": "queued", "reason": ""}]
  })");
  job["ranks"] = json::array();
  for (int r = 0; r < 16; ++r) {
    job["ranks"].push_back({{"rank", r}, {"node", r < 8 ? "n0" : "n1"}, {"gpu", r % 8}});
  }
  const std::string text = FormatJobDetails(Job(job), kT0, false);
  CHECK(text.rfind("Job 17: llama\n  State:       running (started)\n", 0) == 0);
  CHECK(text.find("  Layout:      tp 8 cp 1 ep 1 pp 1 dp 2, order tp-cp-ep-dp-pp\n") !=
        std::string::npos);
  CHECK(text.find("  Started:     2026-01-01 00:59:00 (ran 1:00 of 2:00:00)") == std::string::npos);
  CHECK(text.find("  Started:     2025-12-31 23:59:00 (ran 1:00 of 2:00:00)\n") !=
        std::string::npos);
  CHECK(text.find("  HBDs:        2 HBDs: 2 x 8 GPUs (n[0-1])\n") != std::string::npos);
  CHECK(text.find("  Leaves:      1 leaf: 1 x 16 GPUs (leaf0)\n") != std::string::npos);
  CHECK(text.find("  Spares:      n9\n") != std::string::npos);
  CHECK(text.find("  tp_in_hbd                 1\n") != std::string::npos);
  CHECK(text.find("  tp groups by widest tier  node 2\n") != std::string::npos);
  CHECK(text.find("Ranks:\n") != std::string::npos);  // 16 ranks: all shown
  CHECK(text.find("    15  n1      7\n") != std::string::npos);
  CHECK(text.find("job_submitted") != std::string::npos);

  for (int r = 16; r < 40; ++r) job["ranks"].push_back({{"rank", r}, {"node", "n2"}, {"gpu", 0}});
  CHECK(FormatJobDetails(Job(job), kT0, false).find("Ranks (first 16 of 40; --ranks for all):") !=
        std::string::npos);
  CHECK(FormatJobDetails(Job(job), kT0, false).find("    39  n2") == std::string::npos);
  CHECK(FormatJobDetails(Job(job), kT0, true).find("    39  n2") != std::string::npos);
  // Anything but an object does not read (topo show says so, and prints nothing else).
  CHECK_FALSE(api::ReadJobView(json("x"), nullptr, api::Reading::kClient).ok());
}

TEST_CASE("FormatNodeTable, node details and the drain summary") {
  const json nodes = json::parse(R"([
    {"name": "n0", "state": "up", "reason": "", "gpus": 4, "gpu_model": "GB200", "hbd": "n0",
     "leaf": "l0", "pod": "p0", "gpu_health": ["healthy", "failed", "healthy", "healthy"],
     "gpu_jobs": [17, 0, 0, 0]},
    {"name": "n1", "state": "drained", "reason": "bad cable", "gpus": 4, "hbd": "n1",
     "leaf": "l0", "pod": "p0", "gpu_health": ["healthy", "healthy", "healthy", "healthy"],
     "gpu_jobs": [0, 0, 0, 0]}
  ])");
  CHECK(FormatNodeTable(nodes) ==
        "NAME  STATE    GPUS  TYPE   FREE  HBD  LEAF  POD  REASON\n"
        "n0    up          4  GB200     2  n0   l0    p0   -\n"
        "n1    drained     4  -         0  n1   l0    p0   bad cable\n");
  // --summary: per GPU type and per pod, in order of first appearance.
  const json summary = NodeSummary(nodes);
  CHECK(summary["by_gpu_type"] ==
        json::parse(R"j([{"name": "GB200", "nodes": 1, "up": 1, "draining": 0, "drained": 0,
                         "down": 0, "suspect": 0, "gpus": 4, "free": 2},
                        {"name": "(none)", "nodes": 1, "up": 0, "draining": 0, "drained": 1,
                         "down": 0, "suspect": 0, "gpus": 4, "free": 0}])j"));
  CHECK(summary["by_pod"][0]["nodes"] == 2);
  CHECK(summary["by_pod"][0]["free"] == 2);
  CHECK(FormatNodeSummary(summary).find("GPU TYPE  NODES  UP  DRAINING  DRAINED  DOWN  SUSPECT  "
                                        "GPUS  FREE\nGB200         1   1         0        0     0"
                                        "        0     4     2\n") == 0);
  const std::string d = FormatNodeDetails(nodes[0]);
  CHECK(d.find("    0  healthy   17\n") != std::string::npos);
  CHECK(d.find("    1  failed     -\n") != std::string::npos);
  json more = nodes;
  more.push_back({{"name", "n2"}, {"state", "drained"}});
  more.push_back({{"name", "n3"}, {"state", "drained"}});
  CHECK(SummarizeNodesByState(more) == "1 node up: n0\n3 nodes drained: n[1-3]\n");
}

TEST_CASE("Tenants, quotas, events and generic tables") {
  UseUtc();
  const json tenant = {{"name", "org/team"}, {"guaranteed_gpus", 64}, {"borrow_limit_gpus", -1},
                       {"max_job_gpus", 0},  {"max_running_jobs", 4}, {"shares", 1.5},
                       {"usage_gpus", 72},   {"running_jobs", 2},     {"queued_jobs", 1}};
  CHECK(FormatTenantTable(json::array({tenant})) ==
        "NAME      GUARANTEED  BORROW LIMIT  MAX JOB GPUS  MAX RUNNING  SHARES  USAGE  RUNNING  "
        "QUEUED  PARTITION LIMITS\n"
        "org/team          64          none          none            4     1.5     72        2  "
        "     1  -\n");
  // A parent's usage includes its sub-tenants'; its own is shown apart.
  json parent = tenant;
  parent["name"] = "org";
  parent["own_usage_gpus"] = 8;
  parent["own_running_jobs"] = 2;
  parent["own_queued_jobs"] = 0;
  const std::string rolled = FormatTenantTable(json::array({parent}));
  CHECK(rolled.find("72 (own 8)") != std::string::npos);
  CHECK(rolled.find("       2  ") != std::string::npos);  // running: the same, shown once
  CHECK(rolled.find("1 (own 0)") != std::string::npos);
  CHECK(FormatQuota(parent).find("  Its own:           8 GPUs, 2 running, 0 queued (the rest: "
                                 "sub-tenants)\n") != std::string::npos);
  const std::string q = FormatQuota(tenant);
  CHECK(q.find("Its own") == std::string::npos);  // no own_* fields, or the same: not repeated
  CHECK(q.find("  Borrow limit:      none\n") != std::string::npos);
  CHECK(q.find("  In use:            72 GPUs, 2 running, 1 queued\n") != std::string::npos);
  CHECK(q.find("Unix accounts") == std::string::npos);  // nothing granted, nothing shown
  json granted = tenant;
  granted["unix_accounts"] = {"ada", "bob"};
  granted["unix_group"] = "team";
  CHECK(FormatQuota(granted).find("  Unix accounts:     ada, bob; members of group team\n") !=
        std::string::npos);

  const json entry = json::parse(R"({"seq": 42, "time_ms": 1767225600000, "actor": "ada",
    "event": {"type": "job_submitted", "id": 7,
              "request": {"spec": {"gpus": 64, "name": "x"}, "tenant": "org"}},
    "commands": [{"type": "start_job", "id": 7, "ranks": [["n0", 0], ["n0", 1]],
                  "spares": ["n3", "n4"]}]})");
  CHECK(FormatEvent(entry) ==
        "      42  2026-01-01 00:00:00  ada           job_submitted id=7 request=gpus 64, x, "
        "tenant org\n"
        "                                             -> start_job id=7 ranks=2 GPUs "
        "spares=n[3-4]\n");
  const json tenant_event = {
      {"seq", 43},
      {"actor", "admin"},
      {"event",
       {{"type", "tenant_configured"}, {"tenant", {{"name", "org/team"}, {"shares", 2}}}}}};
  CHECK(FormatEvent(tenant_event).find("tenant_configured tenant=org/team\n") != std::string::npos);
  // A start from no checkpoint is logged with checkpoint_step -1: shown as none.
  const json fresh_start = json::parse(R"({"seq": 44, "actor": "scheduler",
    "event": {"type": "job_submitted", "id": 8},
    "commands": [{"type": "start_job", "id": 8, "checkpoint_step": -1, "restart_count": 0},
                 {"type": "start_job", "id": 9, "checkpoint_step": 1200}]})");
  const std::string started = FormatEvent(fresh_start);
  CHECK(started.find("-> start_job checkpoint_step=none id=8 restart_count=0\n") !=
        std::string::npos);
  CHECK(started.find("-> start_job checkpoint_step=1200 id=9\n") != std::string::npos);
  CHECK(started.find("-1") == std::string::npos);
  CHECK(EventHeader() == "     SEQ  TIME                 ACTOR         EVENT\n");

  const json tokens = json::parse(R"([
    {"id": "0a1b2c3d4e5f", "user": "ada", "created_ms": 1767225600000, "scopes": ["x"]},
    {"id": "ffff0000aaaa", "user": "bob", "created_ms": null, "revoked": true}])");
  CHECK(FormatObjectTable(tokens, {"id", "user", "created_ms", "last_used_ms", "revoked"}) ==
        "ID            USER  CREATED              REVOKED\n"
        "0a1b2c3d4e5f  ada   2026-01-01 00:00:00  -\n"
        "ffff0000aaaa  bob   -                    yes\n");
}

TEST_CASE("FormatAuditTable: time, actor, action, what it was done to, the rest") {
  UseUtc();
  const json rows = json::parse(R"([
    {"seq": 1, "time_ms": 1767225600000, "actor": "user:root", "action": "user.create",
     "detail": {"user": "ada", "tenant": "org/a", "role": "user", "unix_user": "ada"}},
    {"seq": 2, "time_ms": 1767225660000, "actor": "user:root", "action": "token.create",
     "detail": {"user": "ada", "id": "0a1b2c3d4e5f"}},
    {"seq": 3, "time_ms": 1767225720000, "actor": "user:root", "action": "gpu.clear",
     "detail": {"node": "n0", "gpu": 3, "was": "failed", "reason": "reseated"}},
    {"seq": 4, "time_ms": 1767225780000, "actor": "user:ada", "action": "job.checkpoint",
     "detail": {"job": 17, "reason": "before the upgrade"}},
    {"seq": 5, "time_ms": 1767225840000, "actor": "user:root", "action": "topology.import",
     "detail": {"name": "tiny", "nodes": 8}},
    {"seq": 6, "time_ms": null, "actor": "agent:n1", "action": "agent.refused",
     "detail": {"node": "n1", "field": "gpu_event.gpu"}},
    {"seq": 7, "action": "x.y", "detail": null}
  ])");
  CHECK(FormatAuditTable(rows) ==
        "TIME                 ACTOR      ACTION           TARGET              DETAIL\n"
        "2026-01-01 00:00:00  user:root  user.create      user ada            role=user "
        "tenant=org/a unix_user=ada\n"
        "2026-01-01 00:01:00  user:root  token.create     token 0a1b2c3d4e5f  user=ada\n"
        "2026-01-01 00:02:00  user:root  gpu.clear        n0:3                reason=reseated "
        "was=failed\n"
        "2026-01-01 00:03:00  user:ada   job.checkpoint   job 17              reason=\"before the "
        "upgrade\"\n"
        "2026-01-01 00:04:00  user:root  topology.import  topology tiny       nodes=8\n"
        "-                    agent:n1   agent.refused    n1                  "
        "field=gpu_event.gpu\n"
        "-                    -          x.y              -                   -\n");
  // A hostile actor or detail cannot start a line of its own.
  const json evil = json::array({{{"actor", "user:x\n2026  forged"},
                                  {"action", "user.create"},
                                  {"detail", {{"user", "a\x1b[2J"}}}}});
  const std::string out = FormatAuditTable(evil);
  CHECK(std::count(out.begin(), out.end(), '\n') == 2);
  CHECK(out.find('\x1b') == std::string::npos);
}

TEST_CASE("Exit codes from HTTP statuses") {
  CHECK(ExitCodeForHttpStatus(200) == kExitOk);
  CHECK(ExitCodeForHttpStatus(201) == kExitOk);
  CHECK(ExitCodeForHttpStatus(204) == kExitOk);
  CHECK(ExitCodeForHttpStatus(400) == kExitInvalid);
  CHECK(ExitCodeForHttpStatus(413) == kExitInvalid);
  CHECK(ExitCodeForHttpStatus(415) == kExitInvalid);
  CHECK(ExitCodeForHttpStatus(431) == kExitInvalid);
  CHECK(ExitCodeForHttpStatus(401) == kExitAuth);
  CHECK(ExitCodeForHttpStatus(403) == kExitAuth);
  CHECK(ExitCodeForHttpStatus(404) == kExitNotFound);
  CHECK(ExitCodeForHttpStatus(409) == kExitConflict);
  CHECK(ExitCodeForHttpStatus(405) == kExitServerError);
  CHECK(ExitCodeForHttpStatus(429) == kExitServerError);
  CHECK(ExitCodeForHttpStatus(500) == kExitServerError);
  CHECK(ExitCodeForHttpStatus(503) == kExitServerError);
  CHECK(ExitCodeForHttpStatus(302) == kExitServerError);
  // The documented numbers.
  CHECK(kExitNotFound == 4);
  CHECK(kExitAuth == 5);
  CHECK(kExitConflict == 6);
  CHECK(kExitUnreachable == 7);
  CHECK(kExitInvalid == 8);
  CHECK(kExitServerError == 9);
}

TEST_CASE("Hostlists go to the daemon as written, after a local check") {
  auto body = NodeActionBody("gpu[0001-0016],gpu0020", "bad cable");
  REQUIRE_MESSAGE(body.ok(), body.message());
  CHECK(body.value() == json{{"nodes", "gpu[0001-0016],gpu0020"}, {"reason", "bad cable"}});
  CHECK(NodeActionBody("n1", "").value() == json{{"nodes", "n1"}});
  auto bad = NodeActionBody("n[1-", "x");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("n[1-") != std::string::npos);
  CHECK_FALSE(NodeActionBody("n[5-1]", "").ok());
  CHECK_FALSE(NodeActionBody("", "").ok());
}

QuotaFlags Quota(std::string guaranteed, std::string borrow, std::string max_job,
                 std::string max_running, std::string shares) {
  QuotaFlags q;
  q.guaranteed = std::move(guaranteed);
  q.borrow_limit = std::move(borrow);
  q.max_job_gpus = std::move(max_job);
  q.max_running_jobs = std::move(max_running);
  q.shares = std::move(shares);
  return q;
}

TEST_CASE("Quota bodies carry only the fields given, none maps to the API's value") {
  CHECK(QuotaSetBody({}).value() == json::object());
  auto all = QuotaSetBody(Quota("64", "none", "none", "3", "2.5"));
  REQUIRE_MESSAGE(all.ok(), all.message());
  CHECK(all.value() == json{{"guaranteed_gpus", 64},
                            {"borrow_limit_gpus", -1},
                            {"max_job_gpus", 0},
                            {"max_running_jobs", 3},
                            {"shares", 2.5}});
  CHECK(QuotaSetBody(Quota("", "128", "", "", "")).value() == json{{"borrow_limit_gpus", 128}});
  CHECK(QuotaSetBody(Quota("none", "", "", "", "")).message() ==
        "--guaranteed: 'none' is not a whole number >= 0");
  CHECK_FALSE(QuotaSetBody(Quota("", "", "-1", "", "")).ok());
  CHECK_FALSE(QuotaSetBody(Quota("", "", "", "", "0")).ok());
  CHECK_FALSE(QuotaSetBody(Quota("", "", "", "", "x")).ok());
  QuotaFlags wait;
  wait.placement_wait = "2h";
  CHECK(QuotaSetBody(wait).value() == json{{"placement_wait_s", 7200}});
  wait.placement_wait = "never";
  CHECK(QuotaSetBody(wait).value() == json{{"placement_wait_s", -1}});
  wait.placement_wait = "default";
  CHECK(QuotaSetBody(wait).value() == json{{"placement_wait_s", 0}});
  wait.placement_wait = "later";
  CHECK(QuotaSetBody(wait).message().find("--placement-wait: 'later'") == 0);
  QuotaFlags grant;
  grant.unix_accounts = "ada,bob";
  grant.unix_group = "team";
  CHECK(QuotaSetBody(grant).value() ==
        json{{"unix_accounts", {"ada", "bob"}}, {"unix_group", "team"}});
  grant.unix_accounts = "none";
  grant.unix_group = "none";
  CHECK(QuotaSetBody(grant).value() == json{{"unix_accounts", json::array()}, {"unix_group", ""}});
  grant.unix_accounts = "ada,,bob";
  CHECK(QuotaSetBody(grant).message().find("--unix-accounts: 'ada,,bob' has an empty name") == 0);
}

TEST_CASE("Targets: tenant paths keep slashes, queries are escaped") {
  CHECK(TenantTarget("org/team") == "/v1/tenants/org/team");
  CHECK(TenantTarget("a b") == "/v1/tenants/a%20b");
  JobFilter none;
  CHECK(JobsTarget(none, "", 1000) == "/v1/jobs?limit=1000");
  JobFilter team;
  team.all = true;
  team.tenant = "org/team";
  team.states = "running,queued";
  CHECK(JobsTarget(team, "17", 500) ==
        "/v1/jobs?all=1&tenant=org/team&state=running,queued&after=17&limit=500");
  JobFilter odd;
  odd.tenant = "a&b=c";
  CHECK(JobsTarget(odd, "", 1) == "/v1/jobs?tenant=a%26b%3Dc&limit=1");
  JobFilter ada;
  ada.user = "ada@example.com";
  ada.states = "queued,held";
  CHECK(JobsTarget(ada, "", 10) == "/v1/jobs?user=ada@example.com&state=queued,held&limit=10");
  CHECK(DescribeJobFilter(ada) == "user ada@example.com, state queued,held");
  CHECK(DescribeJobFilter(none).empty());
  CHECK(PercentEncode("ada@example.com") == "ada%40example.com");
  REQUIRE(ParseNodeGpu("gpu0007:3").ok());
  CHECK(ParseNodeGpu("gpu0007:3").value().node == "gpu0007");
  CHECK(ParseNodeGpu("gpu0007:3").value().gpu == 3);
  CHECK(GpuClearTarget(ParseNodeGpu("n0:12").value()) == "/v1/nodes/n0/gpus/12/clear");
  CHECK(GpuClearTarget({"a b", 1}) == "/v1/nodes/a%20b/gpus/1/clear");
  for (const char* bad : {"gpu0007", "gpu0007:", ":3", "n0:x", "n0:-1", "n0:123", "n0:3 "}) {
    CAPTURE(bad);
    CHECK(ParseNodeGpu(bad).message().find("is not NODE:GPU") != std::string::npos);
  }
  CHECK(QueryEscape("ada@example.com") == "ada@example.com");
}

}  // namespace
}  // namespace topo::cli
