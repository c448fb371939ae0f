#pragma once
// Subcommands of `topo`. Each Register* adds its subcommand to the app; the
// callback stores the process exit code in *exit_code.
//
// Exit codes scripts can rely on:
//   0 success (placed), 1 bad input or usage, 2 busy (would fit later),
//   3 infeasible (can never fit as asked; `topo submit`: the job was rejected)
// and for the verbs that talk to topo-scheduler (docs/cli.md):
//   4 not found (404), 5 unauthenticated or forbidden (401, 403),
//   6 conflict: the state forbids it (409), 7 server unreachable, TLS failure
//   or no answer in time, 8 the server rejected the request as invalid (400,
//   413, 415, 431), 9 any other server error (429 after retries, 5xx, ...)

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace topo::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitBusy = 2;
inline constexpr int kExitInfeasible = 3;
inline constexpr int kExitNotFound = 4;
inline constexpr int kExitAuth = 5;
inline constexpr int kExitConflict = 6;
inline constexpr int kExitUnreachable = 7;
inline constexpr int kExitInvalid = 8;
inline constexpr int kExitServerError = 9;

// The exit code for an HTTP status of the daemon's answer.
inline constexpr int ExitCodeForHttpStatus(int status) {
  if (status >= 200 && status < 300) return kExitOk;
  switch (status) {
    case 400:
    case 413:
    case 415:
    case 431:
      return kExitInvalid;
    case 401:
    case 403:
      return kExitAuth;
    case 404:
      return kExitNotFound;
    case 409:
      return kExitConflict;
    default:
      return kExitServerError;
  }
}

void RegisterPlace(CLI::App& app, int* exit_code);
void RegisterTopology(CLI::App& app, int* exit_code);
void RegisterDemo(CLI::App& app, int* exit_code);
void RegisterSim(CLI::App& app, int* exit_code);
// Verbs that talk to topo-scheduler over HTTPS (jobs.cpp, cluster.cpp,
// admin.cpp); `topology import` and the server side of `topology export` are
// added to the topology command by RegisterTopology.
void RegisterSubmit(CLI::App& app, int* exit_code);
// `topo logs` (logs.cpp); RegisterJobCommands adds it among the job verbs.
void RegisterLogs(CLI::App& app, int* exit_code);
// `topo relay` (relay.cpp).
void RegisterRelay(CLI::App& app, int* exit_code);
void RegisterJobCommands(CLI::App& app, int* exit_code);
// `topo history`, `topo report usage` (history.cpp).
void RegisterHistoryCommands(CLI::App& app, int* exit_code);
// `topo submit [flags] -- CMD ARGS...`: main() takes everything after the
// first "--" following `submit` out of argv before parsing (CLI11 would fill
// the SCRIPT positional with CMD) and hands it here, so CMD is always run as
// the command and never read as a batch script.
void SetSubmitCommand(std::vector<std::string> command);
void RegisterClusterCommands(CLI::App& app, int* exit_code);
void RegisterAdminCommands(CLI::App& app, int* exit_code);
// `topo partition`, `topo reservation` (node_sets.cpp).
void RegisterNodeSetCommands(CLI::App& app, int* exit_code);

}  // namespace topo::cli
