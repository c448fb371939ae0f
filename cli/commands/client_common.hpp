#pragma once
// What the verbs that talk to topo-scheduler share: the connection flags, one
// request with its error reporting, and small helpers.

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "client/api_client.hpp"
#include "client/connection.hpp"

namespace topo::cli {

// --server, --token, --token-file, --ca, --timeout (in the group
// "Connection"). Every verb binds the same ConnectionFlags, so a flag given
// on a parent command ("topo users --server X create ...") counts too.
void AddConnectionFlags(CLI::App& cmd, ConnectionFlags* flags);
// A subcommand whose help text is `text`: the first paragraph is the summary
// that `topo --help` lists, the rest (details, examples) ends `--help`.
CLI::App* AddVerb(CLI::App& parent, const std::string& name, const std::string& text);
// The one ConnectionFlags of this process.
ConnectionFlags* SharedConnectionFlags();

// Shared flag text and examples.
inline constexpr std::string_view kJsonHelp = "Print the server's JSON answer (for scripts)";

struct Reply {
  int exit_code = 0;  // kExitOk on a 2xx answer
  int status = 0;     // HTTP status; 0 when no answer came
  nlohmann::json body;
  std::string error;  // not ok: what Call prints (the server's message), also when quiet
  bool ok() const { return exit_code == 0; }
};

// One connection to the daemon for the length of a command.
class Session {
 public:
  // Resolves the settings and checks them; on error prints "topo: ..." and
  // returns null with *exit_code set.
  static std::unique_ptr<Session> Open(const ConnectionFlags& flags, int* exit_code);

  // Sends the request; a 429 is retried (after Retry-After, within the
  // timeout). Not 2xx: prints "topo: <server message>" (and a hint for 401)
  // to stderr, unless quiet, and returns the exit code of the status.
  Reply Call(std::string_view method, const std::string& target,
             const std::optional<nlohmann::json>& body = std::nullopt, bool quiet = false);

  const Connection& connection() const { return connection_; }

  // Errors that name a request field are printed after label(field) when it
  // is not empty: "topo: --time 40d (job.sh:3): ...".
  void LabelFields(std::function<std::string(std::string_view field)> label) {
    label_ = std::move(label);
  }

 private:
  Session(Connection connection, std::unique_ptr<ApiClient> client);
  Connection connection_;
  std::unique_ptr<ApiClient> client_;
  size_t server_ = 0;  // the index in connection_.servers that client_ talks to
  bool relay_started_ = false;
  std::function<std::string(std::string_view)> label_;
};

// POSTs to each target in turn, with {"reason"} when reason is not empty, and
// hands every 2xx answer to on_answer(index, body). Returns the first
// failure's exit code (kExitOk when none); stops at an unreachable server,
// where every other request would fail the same way.
int PostEach(Session& session, const std::vector<std::string>& targets, const std::string& reason,
             const std::function<void(size_t, const nlohmann::json&)>& on_answer);

// A job id: digits, > 0. Prints the error and returns nullopt otherwise.
std::optional<int64_t> ParseJobId(const std::string& text);
// Milliseconds since the epoch, now.
int64_t NowMs();
// Indented JSON and a newline on stdout.
void PrintJson(const nlohmann::json& j);
// "a=1&b=x%20y" from pairs whose value is not empty.
std::string Query(const std::vector<std::pair<std::string, std::string>>& params);

// Starts `topo relay` for `options`' server and CA in the background,
// detached from this command, to serve `socket` (relay.cpp).
void StartRelay(const ClientOptions& options, const std::string& socket);

// `topo topology import` (cluster.cpp), added under the topology command.
void AddTopologyImport(CLI::App& topology, int* exit_code);
// `topo topology export` with neither --topology nor --generate: the
// daemon's topology, as json or slurm, to `out` ("" or "-": stdout).
int RunServerTopologyExport(const std::string& format, const std::string& out);

}  // namespace topo::cli
