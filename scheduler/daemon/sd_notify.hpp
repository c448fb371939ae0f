#pragma once
// Readiness for systemd's Type=notify (packaging/systemd/topo-scheduler.service):
// the sd_notify(3) protocol without libsystemd. The service manager names a
// datagram socket in $NOTIFY_SOCKET; one datagram of `NAME=value` lines
// ("READY=1") tells it the daemon is serving.
//
// Thread safety: stateless; safe from any thread.

#include <string>
#include <string_view>

#include "topo/core/status.hpp"

namespace topo::daemon {

// Sends `message` as one datagram to the AF_UNIX socket `socket_name`: an
// absolute path, or "@name" for the abstract namespace (as systemd writes
// NOTIFY_SOCKET). Outcomes: Ok when sent; Ok and nothing sent when
// socket_name is empty (not started by a service manager); an error naming
// the socket when it is malformed, too long or cannot be reached.
core::Status NotifyServiceManager(std::string_view socket_name, std::string_view message);

// The same to $NOTIFY_SOCKET.
core::Status NotifyServiceManager(std::string_view message);

}  // namespace topo::daemon
