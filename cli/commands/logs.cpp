// topo logs: a rank's output from its node (docs/cli.md, "Logs"; docs/api.md
// GET /v1/jobs/{id}/logs).
//
// Logs are bytes: the daemon carries them exactly (data_base64). On a
// terminal they are shown safely (LogEscaper: control bytes, bidi controls
// and invalid UTF-8 escaped); piped, redirected or with --raw they are
// written as the rank wrote them.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "client/format.hpp"
#include "commands/client_common.hpp"
#include "commands/commands.hpp"
#include "topo/common/agent_protocol.hpp"
#include "topo/common/base64.hpp"
#include "topo/common/event_json.hpp"

namespace topo::cli {

namespace {

using nlohmann::json;

struct LogsArgs {
  std::string job;
  int rank = 0;
  int64_t tail = -1;        // lines from the end; -1: the whole log
  int64_t tail_bytes = -1;  // bytes from the end
  bool follow = false;
  double interval_s = 1.0;
  bool json = false;
  bool raw = false;
};

// The bytes of one piece of the answer: data_base64 (exact), else the
// older daemons' data text; nullopt when the answer has neither.
std::optional<std::string> PieceBytes(const json& b) {
  if (!b.is_object()) return std::nullopt;
  if (auto it = b.find("data_base64"); it != b.end() && it->is_string()) {
    core::Result<std::string> bytes = common::Base64Decode(it->get_ref<const std::string&>());
    if (bytes.ok()) return std::move(bytes).value();
    return std::nullopt;
  }
  if (auto it = b.find("data"); it != b.end() && it->is_string()) return it->get<std::string>();
  return std::nullopt;
}

// Writes the log's bytes: escaped for a terminal, else exactly.
class LogOutput {
 public:
  explicit LogOutput(bool raw) : escape_(!raw && isatty(STDOUT_FILENO) == 1) {}
  void Write(std::string_view bytes) {
    if (escape_) {
      std::cout << escaper_.Escape(bytes);
    } else {
      std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    std::cout << std::flush;
  }
  void Finish() {
    if (escape_) std::cout << escaper_.Finish() << std::flush;
  }

 private:
  const bool escape_;
  LogEscaper escaper_;
};

int RunLogs(const LogsArgs& args) {
  std::optional<int64_t> id = ParseJobId(args.job);
  if (!id) return kExitError;
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  LogOutput out(args.raw);
  const std::string base =
      "/v1/jobs/" + std::to_string(*id) + "/logs?rank=" + std::to_string(args.rank);
  int64_t offset = args.tail_bytes >= 0 ? -args.tail_bytes : 0;
  std::string node;
  if (args.tail >= 0) {
    // The last N lines: pieces read backwards from the end until they hold
    // N line breaks before the last line (at most kTailReadBytes in all).
    constexpr int64_t kTailReadBytes = 64 << 20;
    Reply last = session->Call("GET", base + "&max=" + std::to_string(proto::kMaxLogChunkBytes) +
                                          "&offset=-" + std::to_string(proto::kMaxLogChunkBytes));
    if (!last.ok()) return last.exit_code;
    const json& b = last.body;
    std::optional<std::string> first = PieceBytes(b);
    if (!first || !b.contains("offset") || !b["offset"].is_number_integer() ||
        !b.contains("next_offset") || !b["next_offset"].is_number_integer()) {
      std::cerr << "topo: the server's answer has no log data\n";
      return kExitServerError;
    }
    node = b.value("node", "");
    std::string text = std::move(*first);
    int64_t start = b["offset"].get<int64_t>();
    const int64_t end = b["next_offset"].get<int64_t>();
    auto breaks = [&] {
      const size_t body = !text.empty() && text.back() == '\n' ? text.size() - 1 : text.size();
      return static_cast<int64_t>(std::count(text.begin(), text.begin() + body, '\n'));
    };
    while (start > 0 && breaks() < args.tail && end - start < kTailReadBytes) {
      const int64_t from = std::max<int64_t>(0, start - proto::kMaxLogChunkBytes);
      Reply piece = session->Call(
          "GET", base + "&max=" + std::to_string(start - from) + "&offset=" + std::to_string(from));
      if (!piece.ok()) return piece.exit_code;
      std::optional<std::string> bytes = PieceBytes(piece.body);
      if (!bytes || piece.body.value("node", "") != node) {
        break;  // the rank moved meanwhile: what was read is its newest
      }
      text = *bytes + text;
      start = from;
    }
    // Keep the last N lines.
    size_t cut = text.size();
    if (cut > 0 && text[cut - 1] == '\n') --cut;
    int64_t lines = 0;
    while (cut > 0 && lines < args.tail) {
      const size_t nl = text.rfind('\n', cut - 1);
      ++lines;
      if (nl == std::string::npos) {
        cut = 0;
        break;
      }
      cut = lines < args.tail ? nl : nl + 1;
    }
    if (args.tail == 0) cut = text.size();
    if (args.json) {
      json piece = b;
      const std::string kept = text.substr(cut);
      piece["offset"] = end - static_cast<int64_t>(kept.size());
      piece["data"] = kept;
      piece["data_base64"] = common::Base64Encode(kept);
      PrintJson(piece);
    } else {
      out.Write(std::string_view(text).substr(cut));
    }
    if (!args.follow) {
      out.Finish();
      return kExitOk;
    }
    offset = end;
  }
  const auto pause = [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(
        static_cast<int64_t>(std::clamp(args.interval_s, 0.05, 60.0) * 1000)));
  };
  const auto ended = [](const std::string& state) {
    const std::optional<core::JobState> s = common::ParseJobState(state);
    return s && core::IsTerminal(*s);
  };
  bool told_waiting = false;
  while (true) {
    // The largest piece an agent may send (the daemon refuses a larger max).
    const std::string target = base + "&max=" + std::to_string(proto::kMaxLogChunkBytes) +
                               "&offset=" + std::to_string(offset);
    Reply reply = session->Call("GET", target, std::nullopt, /*quiet=*/args.follow);
    if (!reply.ok() && args.follow && reply.status == 404) {
      // Following: a rank whose log is not there yet (its launch on a new
      // node still waits: the earlier run's exit, a checkpoint being copied)
      // is waited for while its job runs.
      Reply job = session->Call("GET", "/v1/jobs/" + std::to_string(*id));
      if (!job.ok()) return job.exit_code;
      if (!ended(job.body.value("state", ""))) {
        if (!told_waiting) {
          std::cerr << "topo: no log of rank " << args.rank << " yet (" << TerminalSafe(reply.error)
                    << "); waiting for it\n";
          told_waiting = true;
        }
        pause();
        continue;
      }
    }
    if (!reply.ok()) {
      out.Finish();
      if (args.follow) std::cerr << "topo: " << TerminalSafe(reply.error) << "\n";
      return reply.exit_code;
    }
    told_waiting = false;
    const json& b = reply.body;
    std::optional<std::string> bytes = PieceBytes(b);
    if (!bytes || !b.contains("next_offset") || !b["next_offset"].is_number_integer()) {
      std::cerr << "topo: the server's answer has no log data\n";
      return kExitServerError;
    }
    const std::string where = b.value("node", "");
    if (!node.empty() && where != node) {
      // The rank restarted on another node: its log there starts afresh.
      out.Finish();
      std::cerr << "topo: rank " << args.rank << " now runs on " << TerminalSafe(where) << " (was "
                << TerminalSafe(node) << "); following its log there\n";
      offset = 0;
      node = where;
      continue;
    }
    node = where;
    if (args.json) {
      PrintJson(b);
    } else {
      out.Write(*bytes);
    }
    const int64_t next = b["next_offset"].get<int64_t>();
    const bool more = next < b.value("size", next);
    offset = next;
    if (more) continue;
    if (!args.follow) {
      out.Finish();
      return kExitOk;
    }
    // Follow until the job has ended and everything it wrote is out.
    Reply job = session->Call("GET", "/v1/jobs/" + std::to_string(*id));
    if (!job.ok()) return job.exit_code;
    if (ended(job.body.value("state", ""))) {
      out.Finish();
      return kExitOk;
    }
    pause();
  }
}

}  // namespace

void RegisterLogs(CLI::App& app, int* exit_code) {
  auto logs = std::make_shared<LogsArgs>();
  CLI::App* lg = AddVerb(
      app, "logs",
      "Print a rank's output (stdout and stderr) from its node.\n\n"
      "Read through the scheduler from the node that runs the rank now (or ran it last):\n"
      "after a restart on another node it holds that run's output. --follow keeps printing\n"
      "until the job ends, follows the rank to its new node on a restart, and waits for\n"
      "a log that is not there yet (a rank whose launch still waits) while the job runs.\n\n"
      "Logs are bytes. On a terminal, control characters (ESC, NUL, a CR not ending a\n"
      "line, ...), bidirectional controls and bytes that are not UTF-8 are shown escaped\n"
      "(\\x1b, \\x00, \\r, \\u202e, \\xff), so a rank's output cannot drive the terminal;\n"
      "newlines and tabs stay. Piped or redirected, or with --raw, the bytes are written\n"
      "exactly as the rank wrote them.\n\n"
      "Examples:\n"
      "  topo logs 17                 # rank 0\n"
      "  topo logs 17 --rank 5 --tail 50     # the last 50 lines\n"
      "  topo logs 17 --follow\n"
      "  topo logs 17 > rank0.log     # the exact bytes");
  lg->add_option("JOB", logs->job, "Job id")->required();
  lg->add_option("--rank,-r", logs->rank, "Which rank")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  lg->add_option("--tail,-n", logs->tail, "Only the last N lines")
      ->type_name("N")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  lg->add_option("--tail-bytes", logs->tail_bytes, "Only the last BYTES bytes")
      ->type_name("BYTES")
      ->check(CLI::NonNegativeNumber)
      ->excludes("--tail");
  lg->add_flag("--follow,-f", logs->follow, "Keep printing new output until the job ends");
  lg->add_option("--interval", logs->interval_s, "--follow: seconds between polls")
      ->check(CLI::Range(0.05, 60.0))
      ->capture_default_str();
  lg->add_flag("--raw", logs->raw,
               "Write the bytes as they are, control characters included, also on a terminal");
  lg->add_flag("--json", logs->json,
               "Print each piece as the server's JSON ({job, rank, node, offset, next_offset, "
               "size, data, data_base64})")
      ->excludes("--raw");
  AddConnectionFlags(*lg, SharedConnectionFlags());
  lg->callback([logs, exit_code] { *exit_code = RunLogs(*logs); });
}

}  // namespace topo::cli
