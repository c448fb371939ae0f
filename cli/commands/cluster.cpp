// topo nodes | drain | resume | gpu clear | events | whoami, and topology
// import/export
// on a running topo-scheduler (docs/cli.md; docs/api.md "Nodes", "Events",
// "Topology").

#include <chrono>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>

#include "client/format.hpp"
#include "client/input.hpp"
#include "client/requests.hpp"
#include "client/submit.hpp"
#include "commands/client_common.hpp"
#include "commands/commands.hpp"
#include "commands/options.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/hostlist.hpp"
#include "topo/common/topology_io.hpp"

namespace topo::cli {

namespace {

using nlohmann::json;

// Events asked for per request.
constexpr int kEventPage = 1000;

bool IsHostlistExpression(const std::string& s) {
  return s.find_first_of("[],") != std::string::npos;
}

const json& NodesOf(const json& body) {
  static const json kEmpty = json::array();
  if (body.is_object() && body.contains("nodes") && body["nodes"].is_array()) {
    return body["nodes"];
  }
  return kEmpty;
}

// ---- nodes

struct NodesArgs {
  std::string name;
  std::string state;
  std::string gpu_type;
  std::string domain;
  std::string partition;
  bool summary = false;
  bool json = false;
};

int RunNodes(const NodesArgs& args) {
  std::set<std::string> wanted;
  const bool expression = IsHostlistExpression(args.name);
  if (expression) {
    core::Result<std::vector<std::string>> names = common::ExpandHostlist(args.name);
    if (!names.ok()) return Fail(names.message());
    wanted.insert(names.value().begin(), names.value().end());
  }
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  if (!args.name.empty() && !expression) {
    Reply reply = session->Call("GET", "/v1/nodes/" + PercentEncode(args.name));
    if (!reply.ok()) return reply.exit_code;
    if (args.json) {
      PrintJson(reply.body);
    } else {
      std::cout << FormatNodeDetails(reply.body);
    }
    return kExitOk;
  }
  std::string query;
  if (!args.gpu_type.empty()) query += "gpu_type=" + PercentEncode(args.gpu_type);
  if (!args.domain.empty()) {
    query += std::string(query.empty() ? "" : "&") + "domain=" + PercentEncode(args.domain);
  }
  if (!args.partition.empty()) {
    query += std::string(query.empty() ? "" : "&") + "partition=" + PercentEncode(args.partition);
  }
  Reply reply = session->Call("GET", "/v1/nodes" + (query.empty() ? "" : "?" + query));
  if (!reply.ok()) return reply.exit_code;
  std::set<std::string> states;
  for (size_t start = 0; start < args.state.size();) {
    size_t comma = args.state.find(',', start);
    if (comma == std::string::npos) comma = args.state.size();
    if (comma > start) states.insert(args.state.substr(start, comma - start));
    start = comma + 1;
  }
  json nodes = json::array();
  for (const json& n : NodesOf(reply.body)) {
    const std::string name = n.value("name", "");
    const std::string state = n.value("state", "");
    if (!wanted.empty() && wanted.count(name) == 0) continue;
    if (!states.empty() && states.count(state) == 0) continue;
    nodes.push_back(n);
  }
  if (args.summary) {
    const json summary = NodeSummary(nodes);
    if (args.json) {
      PrintJson(summary);
    } else {
      std::cout << FormatNodeSummary(summary);
    }
    return kExitOk;
  }
  if (args.json) {
    PrintJson({{"nodes", nodes}});
  } else {
    std::cout << FormatNodeTable(nodes);
  }
  return kExitOk;
}

// ---- drain, resume

struct NodeActionArgs {
  std::string hostlist;
  std::string reason;
  std::string mode;  // drain only; empty: the server's default (graceful)
  bool json = false;
};

int RunNodeAction(const NodeActionArgs& args, const std::string& action) {
  core::Result<json> body = NodeActionBody(args.hostlist, args.reason);
  if (!body.ok()) return Fail(body.message());
  if (!args.mode.empty()) body.value()["mode"] = args.mode;
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply = session->Call("POST", "/v1/nodes/" + action, body.value());
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
  } else {
    std::cout << SummarizeNodesByState(NodesOf(reply.body));
  }
  if (action != "resume") return kExitOk;
  // A node that stays down or drained says why, and the exit status says
  // not every node came up.
  int stayed = 0;
  for (const json& n : NodesOf(reply.body)) {
    if (!n.is_object() || n.value("state", "") == "up") continue;
    if (++stayed <= 20) {
      std::cerr << "topo: " << TerminalSafe(n.value("name", "?")) << " stays "
                << TerminalSafe(n.value("state", "?")) << ": "
                << TerminalSafe(n.value("reason", "")) << "\n";
    }
  }
  if (stayed > 20) std::cerr << "topo: ... and " << stayed - 20 << " more\n";
  return stayed > 0 ? kExitConflict : kExitOk;
}

// ---- gpu clear

struct GpuClearArgs {
  std::vector<std::string> gpus;  // NODE:GPU
  std::string reason;
  bool json = false;
};

int RunGpuClear(const GpuClearArgs& args) {
  std::vector<NodeGpu> targets;
  for (const std::string& g : args.gpus) {
    core::Result<NodeGpu> t = ParseNodeGpu(g);
    if (!t.ok()) return Fail(t.message());
    targets.push_back(t.value());
  }
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  std::vector<std::string> paths;
  for (const NodeGpu& t : targets) paths.push_back(GpuClearTarget(t));
  json answers = json::array();
  const int first_error = PostEach(*session, paths, args.reason, [&](size_t i, const json& node) {
    if (args.json) {
      answers.push_back(node);
      return;
    }
    const NodeGpu& t = targets[i];
    const std::string state = node.is_object() ? node.value("state", "?") : "?";
    std::cout << "Cleared " << TerminalSafe(t.node) << " GPU " << t.gpu << "; "
              << TerminalSafe(t.node) << " is " << TerminalSafe(state) << "\n";
    // The core resumes the node only when nothing else keeps it out.
    if (state != "up") {
      std::cerr << "topo: " << TerminalSafe(t.node) << " stays " << TerminalSafe(state) << ": "
                << TerminalSafe(node.value("reason", "")) << "\n";
    }
  });
  if (args.json) PrintJson({{"nodes", answers}});
  return first_error;
}

// ---- events

struct EventsArgs {
  int64_t after = 0;
  int64_t job = 0;
  int64_t limit = 1000;
  int64_t last = 0;  // > 0: the newest N
  std::string node;
  std::string type;
  bool follow = false;
  double interval_s = 1;
  bool json = false;
};

// Prints one answer's events (or keeps them for --json) and returns the
// newest seq among them (or `after`).
int64_t ShowEvents(const json& events, const EventsArgs& args, json* collected, int64_t after) {
  for (const json& e : events) {
    if (args.json && args.follow) {
      std::cout << e.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    } else if (args.json) {
      collected->push_back(e);
    } else {
      std::cout << FormatEvent(e);
    }
    if (e.is_object() && e.contains("seq") && e["seq"].is_number_integer()) {
      after = std::max(after, e["seq"].get<int64_t>());
    }
  }
  std::cout << std::flush;
  return after;
}

int64_t IntOr(const json& body, const char* key, int64_t fallback) {
  return body.is_object() && body.contains(key) && body[key].is_number_integer()
             ? body[key].get<int64_t>()
             : fallback;
}

int RunEvents(const EventsArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  json collected = json::array();
  json last_seq = nullptr;
  int64_t after = args.after;
  int64_t shown = 0;
  bool header = args.json;  // printed once the first answer came
  const std::vector<std::pair<std::string, std::string>> filters = {
      {"job", args.job > 0 ? std::to_string(args.job) : ""},
      {"node", args.node},
      {"type", args.type}};
  auto get = [&](std::vector<std::pair<std::string, std::string>> params) -> std::optional<json> {
    params.insert(params.end(), filters.begin(), filters.end());
    Reply reply = session->Call("GET", "/v1/events?" + Query(params));
    if (!reply.ok()) {
      exit_code = reply.exit_code;
      return std::nullopt;
    }
    if (!reply.body.is_object() || !reply.body.contains("events") ||
        !reply.body["events"].is_array()) {
      std::cerr << "topo: the server's answer has no \"events\" list\n";
      exit_code = kExitServerError;
      return std::nullopt;
    }
    if (!header) std::cout << EventHeader();
    header = true;
    if (reply.body.contains("last_seq")) last_seq = reply.body["last_seq"];
    return std::move(reply.body);
  };
  if (args.last > 0) {
    // The newest N, in one answer; --follow goes on from the log's end.
    std::optional<json> body =
        get({{"after", std::to_string(after)}, {"last", std::to_string(args.last)}});
    if (!body) return exit_code;
    const json& events = (*body)["events"];
    after = std::max(ShowEvents(events, args, &collected, after), IntOr(*body, "last_seq", after));
    const int64_t from = IntOr(*body, "scanned_from", args.after + 1);
    if (static_cast<int64_t>(events.size()) < args.last && from > args.after + 1) {
      std::cerr << "topo: looked back to event " << from << " and found " << events.size()
                << " of the " << args.last
                << "; older events may match (one request searches a bounded part of the "
                   "log: --after SEQ --limit N pages through it from the oldest)\n";
    }
    if (!args.follow) {
      if (args.json) PrintJson({{"events", collected}, {"last_seq", last_seq}});
      return kExitOk;
    }
  }
  while (true) {
    const int64_t page =
        args.follow ? kEventPage : std::min<int64_t>(kEventPage, args.limit - shown);
    if (page <= 0) break;
    std::optional<json> body =
        get({{"after", std::to_string(after)}, {"limit", std::to_string(page)}});
    if (!body) return exit_code;
    const json& events = (*body)["events"];
    after = ShowEvents(events, args, &collected, after);
    shown += static_cast<int64_t>(events.size());
    // The server searched the log up to scanned_to (a filtered answer may
    // hold fewer events than asked without being at the end).
    after = std::max(after, IntOr(*body, "scanned_to", after));
    const int64_t end = IntOr(*body, "last_seq", after);
    const bool at_end =
        body->contains("scanned_to") ? after >= end : static_cast<int64_t>(events.size()) < page;
    if (!args.follow) {
      if (at_end) break;
      if (shown >= args.limit) {
        if (!args.json) {
          std::cerr << "topo: showed " << shown << " events; more may follow: topo events --after "
                    << after << "\n";
        }
        break;
      }
      continue;
    }
    if (at_end) {
      std::this_thread::sleep_for(
          std::chrono::milliseconds(static_cast<int64_t>(args.interval_s * 1000)));
    }
  }
  if (args.json && !args.follow) PrintJson({{"events", collected}, {"last_seq", last_seq}});
  return kExitOk;
}

// ---- whoami

struct WhoamiArgs {
  bool json = false;
};

int RunWhoami(const WhoamiArgs& args) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply = session->Call("GET", "/v1/whoami");
  if (!reply.ok()) return reply.exit_code;
  if (args.json) {
    PrintJson(reply.body);
    return kExitOk;
  }
  const Connection& c = session->connection();
  auto field = [&](const char* k) {
    return reply.body.is_object() && reply.body.contains(k) ? Cell(reply.body[k]) : "-";
  };
  std::cout << "User:    " << field("user") << "\n"
            << "Tenant:  " << field("tenant") << "\n"
            << "Role:    " << field("role") << "\n"
            << "Server:  " << c.options.server << " (" << c.server_source << ")\n"
            << "Token:   from " << (c.token_source.empty() ? "nowhere" : c.token_source) << "\n"
            << "CA:      "
            << (c.options.ca_file.empty() ? "the system's CA certificates"
                                          : c.options.ca_file + " (" + c.options.ca_source + ")")
            << "\n";
  return kExitOk;
}

// ---- topology import

struct ImportArgs {
  std::string file;
  std::string format;
  int gpus_per_node = 0;
  bool dry_run = false;
  bool drain = false;
  std::string wait;  // with --drain: how long to wait for the nodes to empty
  bool json = false;
};

// "3 added (n8, n9, n10), 1 removed (n6)" from a diff's lists and counts.
std::string DiffLine(const json& diff) {
  if (!diff.is_object()) return "";
  std::string out;
  for (const char* k : {"added", "removed", "moved", "resized", "changed"}) {
    const json& counts = diff.value("counts", json::object());
    const int64_t n = counts.value(k, int64_t{0});
    if (n == 0) continue;
    std::vector<std::string> names;
    for (const json& x : diff.value(k, json::array())) {
      if (x.is_string()) names.push_back(x.get<std::string>());
    }
    out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + k + " (" +
           common::CompressHostlist(names) +
           (static_cast<int64_t>(names.size()) < n ? ",..." : "") + ")";
  }
  const json& counts = diff.value("counts", json::object());
  for (const char* k : {"domains_added", "domains_removed"}) {
    const int64_t n = counts.value(k, int64_t{0});
    if (n > 0) {
      out += (out.empty() ? "" : ", ") + std::to_string(n) + " domain(s) " +
             (std::string_view(k) == "domains_added" ? "added" : "removed");
    }
  }
  if (diff.value("tiers_changed", false))
    out += (out.empty() ? "" : ", ") + std::string("tiers, HBDs or links changed");
  return out.empty() ? "no change" : out;
}

int RunImport(const ImportArgs& args) {
  constexpr InputLimit kTopologyLimit = {
      kMaxTopologyFileBytes, "a topology file",
      "the daemon's default max_topology_bytes for PUT /v1/topology",
      "check the file; a daemon configured for more takes it through the API directly"};
  core::Result<std::string> text = ReadInputFile(args.file, kTopologyLimit);
  if (!text.ok()) return Fail(text.message());
  const std::string shown = args.file == "-" ? "<stdin>" : args.file;
  std::string format = args.format;
  common::TopologyFormat f = common::SniffTopologyFormat(text.value());
  if (!format.empty()) {
    core::Result<common::TopologyFormat> parsed = common::ParseTopologyFormat(format);
    if (!parsed.ok()) return Fail(parsed.message());
    f = parsed.value();
  }
  format = f == common::TopologyFormat::kJson    ? "json"
           : f == common::TopologyFormat::kSlurm ? "slurm"
                                                 : "crux";
  // The daemon parses it too; reading it here names the line before the
  // upload.
  const int gpn = args.gpus_per_node > 0 ? args.gpus_per_node : 8;
  core::Result<core::Topology> local =
      f == common::TopologyFormat::kJson ? common::ParseTopologyJson(text.value())
      : f == common::TopologyFormat::kSlurm
          ? common::ParseSlurmTopology(text.value(), {.gpus_per_node = gpn, .name = "slurm"})
          : common::ParseCruxCsv(text.value(), gpn);
  if (!local.ok()) return Fail(shown + " (" + format + "): " + local.message());

  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  json body = {{"format", format}, {"content", text.value()}};
  if (args.gpus_per_node > 0) body["gpus_per_node"] = args.gpus_per_node;
  if (args.dry_run) body["dry_run"] = true;
  if (args.drain) body["drain"] = true;
  int64_t wait_s = 0;
  if (!args.wait.empty()) {
    core::Result<int64_t> d = ParseDuration(args.wait);
    if (!d.ok()) return Fail("--wait " + args.wait + ": " + d.message());
    wait_s = d.value();
  }
  Reply reply = session->Call("PUT", "/v1/topology", body, /*quiet=*/wait_s > 0);
  if (wait_s > 0 && reply.status == 409) {
    // The refusal drained the nodes the change removes: the same import
    // goes through once their jobs have moved (a checkpoint and a restart
    // elsewhere each). Asked again every few seconds until then.
    std::cerr << "topo: " << reply.error << "\ntopo: waiting up to " << args.wait
              << " for those nodes to drain, then importing again\n";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
    while (reply.status == 409 && std::chrono::steady_clock::now() < deadline) {
      const auto left = deadline - std::chrono::steady_clock::now();
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(std::chrono::seconds(2), left));
      reply = session->Call("PUT", "/v1/topology", body, /*quiet=*/true);
    }
    if (reply.status == 409) {
      std::cerr << "topo: still refused after " << args.wait << ": " << reply.error
                << "\n(the nodes stay draining; run the import again later)\n";
      return reply.exit_code;
    }
  }
  if (!reply.ok()) {
    if (wait_s > 0) std::cerr << "topo: " << reply.error << "\n";
    return reply.exit_code;
  }
  if (args.json) {
    PrintJson(reply.body);
    return kExitOk;
  }
  const json diff = reply.body.is_object() ? reply.body.value("diff", json()) : json();
  if (args.dry_run) {
    const bool applies = reply.body.value("applies", false);
    std::cout << "Dry run: " << (diff.is_object() ? DiffLine(diff) : "a first import") << "\n"
              << (applies
                      ? "It would apply now; nothing changed.\n"
                      : "It would be refused: " + reply.body.value("reason", std::string()) + "\n");
    return applies ? kExitOk : kExitConflict;
  }
  auto field = [&](const char* k) {
    return reply.body.is_object() && reply.body.contains(k) ? Cell(reply.body[k]) : "-";
  };
  std::cout << "Imported topology " << field("name") << ": " << field("nodes") << " nodes, "
            << field("gpus") << " GPUs, " << field("hbds") << " HBDs, " << field("leaves")
            << " leaves, " << field("pods") << " pods\n";
  if (diff.is_object()) {
    std::cout << "Changed under the running jobs: " << DiffLine(diff)
              << ". Jobs, queue, fairshare and node states carried over; added nodes start "
                 "down until their agents register.\n";
  } else {
    std::cout << "Every node starts down: the node agents bring them up, or `topo resume "
                 "HOSTLIST`.\n";
  }
  return kExitOk;
}

}  // namespace

int RunServerTopologyExport(const std::string& format, const std::string& out) {
  int exit_code = kExitOk;
  std::unique_ptr<Session> session = Session::Open(*SharedConnectionFlags(), &exit_code);
  if (!session) return exit_code;
  Reply reply = session->Call("GET", "/v1/topology?" + Query({{"format", format}}));
  if (!reply.ok()) return reply.exit_code;
  if (!reply.body.is_object() || !reply.body.contains("content") ||
      !reply.body["content"].is_string()) {
    std::cerr << "topo: the server's answer has no \"content\"\n";
    return kExitServerError;
  }
  const std::string text = reply.body["content"].get<std::string>();
  const bool newline = !text.empty() && text.back() != '\n';
  if (out.empty() || out == "-") {
    std::cout << text << (newline ? "\n" : "");
    return kExitOk;
  }
  std::ofstream f(out, std::ios::trunc);
  f << text << (newline ? "\n" : "");
  f.close();
  if (!f) return Fail(out + ": write failed");
  return kExitOk;
}

void AddTopologyImport(CLI::App& topology, int* exit_code) {
  auto args = std::make_shared<ImportArgs>();
  CLI::App* cmd = AddVerb(
      topology, "import",
      "Load a topology into topo-scheduler (cluster-admin), or a new version of it under\n"
      "running jobs.\n\n"
      "The first import: every node starts down until its agent or `topo resume` brings it\n"
      "up. A new version applies as a change, by node name: jobs, the queue, fairshare and\n"
      "node states carry over, added nodes start down until their agents register, moved\n"
      "and renamed-domain nodes keep their jobs. A change that removes a node a job holds\n"
      "(or changes its GPU count) is refused naming the jobs: drain the nodes first, or\n"
      "add --drain to have the refused import drain them (graceful: their jobs checkpoint\n"
      "and restart elsewhere), then import again once they are drained, or add --wait\n"
      "to have topo import again by itself once they are.\n"
      "--dry-run prints the change and whether it would apply. The file is checked here\n"
      "first, so errors name the line before the upload.\n\n"
      "Examples:\n"
      "  topo topology import topology.json\n"
      "  topo topology import topology-v2.json --dry-run\n"
      "  topo topology import topology-v2.json --drain   # refused now, nodes draining\n"
      "  topo topology import topology-v2.json --drain --wait 2h   # drain, then apply\n"
      "  topo topology import topology.conf --format slurm --gpus-per-node 4\n"
      "  topo topology export --generate nvl72-64k | topo topology import -");
  cmd->add_option("FILE", args->file, "Topology file (- for standard input)")->required();
  cmd->add_option("--format", args->format,
                  "json, slurm or crux (default: guessed from the content)")
      ->check(CLI::IsMember({"json", "slurm", "crux"}));
  cmd->add_option("--gpus-per-node", args->gpus_per_node,
                  "GPUs per node (Slurm and Crux files do not say; default 8)")
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--dry-run", args->dry_run,
                "Print what would change (nodes added, removed, moved) and whether it would "
                "apply; change nothing (exit 0 if it would apply, else the conflict's status)");
  cmd->add_flag("--drain", args->drain,
                "When jobs hold nodes the change removes or resizes: drain those nodes "
                "(graceful) and exit with the conflict; import again once they are drained")
      ->excludes("--dry-run");
  cmd->add_option("--wait", args->wait,
                  "With --drain: wait up to this long (90m, 2h, 1d) for the drained nodes to "
                  "empty, asking again every 2 s, and apply the import then")
      ->needs("--drain");
  cmd->add_flag("--json", args->json, std::string(kJsonHelp));
  AddConnectionFlags(*cmd, SharedConnectionFlags());
  cmd->callback([args, exit_code] { *exit_code = RunImport(*args); });
}

void RegisterClusterCommands(CLI::App& app, int* exit_code) {
  auto nodes = std::make_shared<NodesArgs>();
  CLI::App* n = AddVerb(
      app, "nodes",
      "List nodes (NAME STATE GPUS TYPE FREE HBD LEAF POD REASON), or show one node's "
      "GPUs.\n\n"
      "FREE counts the healthy GPUs without a job on nodes that are up. HBD, LEAF and "
      "POD are the node's own: on a mixed cluster an NVL72 node's HBD is its rack, an HGX "
      "node's the node.\n\n"
      "Examples:\n"
      "  topo nodes\n"
      "  topo nodes --summary            # per GPU type, pod and partition: up, down, free\n"
      "  topo nodes --partition debug    # the nodes of one partition\n"
      "  topo nodes --gpu-type H100 --state drained,down\n"
      "  topo nodes --domain leaf07      # the nodes under one domain\n"
      "  topo nodes --state drained,down\n"
      "  topo nodes 'gpu[0001-0016]'     # a hostlist filters the list\n"
      "  topo nodes gpu0007              # one node, per GPU");
  n->add_option("NAME", nodes->name, "A node name, or a hostlist to filter by");
  n->add_option("--state", nodes->state,
                "Only these states, comma-separated: up, draining, drained, down, suspect")
      ->check(OneOfList(NodeStateNames(), "a node state"));
  n->add_option("--gpu-type", nodes->gpu_type,
                "Only nodes of this GPU model (case-insensitive; --summary lists the models)");
  n->add_option("--domain", nodes->domain,
                "Only the nodes under this domain (a pod, leaf, HBD or rack name)");
  n->add_option("--partition", nodes->partition,
                "Only the nodes of this partition (topo partition list shows them)")
      ->type_name("NAME");
  n->add_flag("--summary", nodes->summary,
              "Counts instead of nodes: per GPU type, per pod and per partition (when there "
              "are any), nodes up, draining, drained, down and suspect, GPUs and free GPUs");
  n->add_flag("--json", nodes->json, std::string(kJsonHelp));
  AddConnectionFlags(*n, SharedConnectionFlags());
  n->callback([nodes, exit_code] { *exit_code = RunNodes(*nodes); });

  auto drain = std::make_shared<NodeActionArgs>();
  CLI::App* d =
      AddVerb(app, "drain",
              "Drain nodes (cluster-admin): no new work, and their running jobs move.\n\n"
              "--mode graceful (the default): each node's agent asks its jobs to checkpoint,\n"
              "waits until the step is on the persistent tier (--drain-checkpoint-ms at most),\n"
              "stops the ranks, and the jobs restart on other nodes from that step.\n"
              "--mode immediate: the ranks stop now; the jobs restart from their newest stored\n"
              "checkpoint. --mode wait: running jobs keep the nodes until they end.\n"
              "In Slurm mode graceful signals only jobs that declared a checkpoint signal\n"
              "(sbatch --signal=B:USR1@60); while another job runs on a node, that node\n"
              "waits for its jobs to end (docs/slurm.md, \"Checkpoint signals\").\n"
              "A node is drained once no job is left on it. Every name must exist or nothing\n"
              "changes.\n\n"
              "Examples:\n"
              "  topo drain 'gpu[0001-0016],gpu0020' --reason 'bad cable'\n"
              "  topo drain gpu0007 --reason 'PSU swap' --mode immediate\n"
              "  topo drain 'gpu[0100-0199]' --reason 'OS upgrade' --mode wait");
  d->add_option("HOSTLIST", drain->hostlist, "Slurm-style hostlist, e.g. n[0-15],n20")->required();
  d->add_option("--reason", drain->reason, "Why (shown in topo nodes)")->required();
  d->add_option("--mode", drain->mode, "graceful (default), immediate or wait")
      ->check(CLI::IsMember({"graceful", "immediate", "wait"}));
  d->add_flag("--json", drain->json, std::string(kJsonHelp));
  AddConnectionFlags(*d, SharedConnectionFlags());
  d->callback([drain, exit_code] { *exit_code = RunNodeAction(*drain, "drain"); });

  auto resume = std::make_shared<NodeActionArgs>();
  CLI::App* r =
      AddVerb(app, "resume",
              "Bring nodes back up (cluster-admin), including nodes that never registered.\n\n"
              "Examples:\n"
              "  topo resume 'gpu[0001-0016]'");
  r->add_option("HOSTLIST", resume->hostlist, "Slurm-style hostlist, e.g. n[0-15],n20")->required();
  r->add_flag("--json", resume->json, std::string(kJsonHelp));
  AddConnectionFlags(*r, SharedConnectionFlags());
  r->callback([resume, exit_code] { *exit_code = RunNodeAction(*resume, "resume"); });

  CLI::App* gpu = AddVerb(app, "gpu", "Act on GPUs (cluster-admin)");
  gpu->require_subcommand(1);
  auto clear = std::make_shared<GpuClearArgs>();
  CLI::App* gc = AddVerb(
      *gpu, "clear",
      "Mark failed or degraded GPUs healthy again (cluster-admin), after a repair.\n\n"
      "The scheduler logs the change with you as its actor and the audit log records it. A\n"
      "node drained because the GPU failed comes back up, unless another of its GPUs is\n"
      "still failed or an admin drained it (then it stays drained, and this says why on\n"
      "stderr; topo resume brings back a node an admin drained).\n\n"
      "Examples:\n"
      "  topo gpu clear gpu0007:3 --reason 'reseated, passed dcgmi diag'\n"
      "  topo gpu clear gpu0007:3 gpu0007:5");
  gc->add_option("NODE:GPU", clear->gpus, "The node and the GPU's index, e.g. gpu0007:3")
      ->required();
  gc->add_option("--reason", clear->reason, "Why (kept in the audit log)");
  gc->add_flag("--json", clear->json,
               "Print {\"nodes\": [NODE...]}, the server's answer (the node) for each GPU");
  AddConnectionFlags(*gc, SharedConnectionFlags());
  gc->callback([clear, exit_code] { *exit_code = RunGpuClear(*clear); });

  auto events = std::make_shared<EventsArgs>();
  CLI::App* e = AddVerb(
      app, "events",
      "Print the scheduler's event log: each event and the commands it caused.\n\n"
      "Without --follow, prints up to --limit events after --after (or the newest --last N)\n"
      "and stops; with --follow, keeps polling for new ones until interrupted (--json: one\n"
      "JSON object a line). --job, --node and --type keep only the events that name the job\n"
      "or the node (its state, its GPUs, jobs started on it), or are of that type; you see\n"
      "the events of your jobs (admins: all).\n\n"
      "Examples:\n"
      "  topo events --last 20                      # the newest 20\n"
      "  topo events --job 17\n"
      "  topo events --node gpu0007 --last 50       # what happened to a node lately\n"
      "  topo events --type gpu_event,node_state_requested --follow\n"
      "  topo events --after 120000 --limit 50\n"
      "  topo events --follow --json | jq -c .event");
  e->add_option("--after", events->after, "Only events with a larger sequence number")
      ->check(CLI::NonNegativeNumber);
  CLI::Option* limit =
      e->add_option("--limit", events->limit,
                    "At most N events, the oldest after --after (default 1000; not with --follow)")
          ->check(CLI::PositiveNumber);
  e->add_option("--last", events->last, "The newest N events (then --follow goes on from there)")
      ->type_name("N")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}))
      ->excludes(limit);
  e->add_option("--job", events->job, "Only this job's events")->check(CLI::PositiveNumber);
  e->add_option("--node", events->node,
                "Only events that name this node (its state, GPUs, the jobs started on it)")
      ->type_name("NAME");
  std::vector<std::string> types;
  for (std::string_view t : common::EventTypeNames()) types.emplace_back(t);
  e->add_option("--type", events->type, "Only events of these types, comma-separated")
      ->type_name("TYPE[,TYPE...]")
      ->check(OneOfList(types, "an event type"));
  e->add_flag("--follow,-f", events->follow, "Keep printing new events until interrupted");
  e->add_option("--interval", events->interval_s, "Seconds between polls with --follow (default 1)")
      ->check(CLI::Range(0.05, 3600.0));
  e->add_flag("--json", events->json,
              "Print {\"events\": [...], \"last_seq\"} (with --follow: one event a line)");
  AddConnectionFlags(*e, SharedConnectionFlags());
  e->callback([events, exit_code] { *exit_code = RunEvents(*events); });

  auto who = std::make_shared<WhoamiArgs>();
  CLI::App* w =
      AddVerb(app, "whoami",
              "Show who the token belongs to and where the connection settings came from.\n\n"
              "The user, tenant and role, and where the server, token and CA came from; a quick\n"
              "check of the connection settings.\n\n"
              "Examples:\n"
              "  topo whoami\n"
              "  topo whoami --server https://sched.example.com:8443 --ca ca.pem --token-file t");
  w->add_flag("--json", who->json, std::string(kJsonHelp));
  AddConnectionFlags(*w, SharedConnectionFlags());
  w->callback([who, exit_code] { *exit_code = RunWhoami(*who); });
}

}  // namespace topo::cli
