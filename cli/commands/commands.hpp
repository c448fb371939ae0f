#pragma once
// Subcommands of `topo`. Each Register* adds its subcommand to the app; the
// callback stores the process exit code in *exit_code.
//
// Exit codes scripts can rely on:
//   0 success (placed), 1 bad input or usage, 2 busy (would fit later),
//   3 infeasible (can never fit as asked)

#include <CLI/CLI.hpp>

namespace topo::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitBusy = 2;
inline constexpr int kExitInfeasible = 3;

void RegisterPlace(CLI::App& app, int* exit_code);
void RegisterTopology(CLI::App& app, int* exit_code);
void RegisterDemo(CLI::App& app, int* exit_code);
void RegisterSim(CLI::App& app, int* exit_code);

}  // namespace topo::cli
