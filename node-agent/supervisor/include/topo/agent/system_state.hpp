#pragma once
// Whether this machine is shutting down, for an agent that is being
// stopped: on a restart or an upgrade it says `leaving` (its ranks run on
// and the scheduler waits for the next agent); when the whole machine goes
// down its ranks go too, so it does not, and the scheduler finds the node
// down after the short grace of a closed connection.

#include <string>

namespace topo::agent {

// systemd's own answer: `SYSTEMCTL is-system-running` prints "stopping"
// while the manager shuts the machine down. Anything else (running,
// degraded, offline where systemd is not PID 1, no systemctl, no answer
// within timeout_ms: the command and what it started are killed) is false.
// Blocking (at most timeout_ms); thread-safe (posix_spawn, no shared state).
bool SystemStopping(const std::string& systemctl = "/usr/bin/systemctl", int timeout_ms = 1000);

}  // namespace topo::agent
