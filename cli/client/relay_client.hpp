#pragma once
// The connection relay, the command's half (relay_server.hpp is the relay's
// own): how a `topo` command finds its relay and sends a request through it.
//
// The connection relay: one long-lived process per user and server that
// keeps TLS connections to topo-scheduler open, so that a `topo` command
// does not pay for a TLS client of its own (issue 14; docs/cli.md,
// "Connection sharing"). OpenSSL's start-up and a handshake are most of a
// `topo submit`'s CPU, each time a new process; the relay pays them once.
//
//   topo submit ... ──HTTP/1.1 over a Unix socket──> topo relay ──HTTPS──> topo-scheduler
//
// - Where: DIR/relay-<key>-<host>.sock, DIR $XDG_RUNTIME_DIR/topo, else the
//   TLS session cache's directory ($XDG_CACHE_HOME/topo or ~/.cache/topo;
//   this user's, 0700; connection.hpp DefaultRelayDir), <key> the session
//   cache's key of (server URL, CA PEM): a command configured for another
//   server or CA never reaches this relay. The socket is 0600, and
//   each side checks the other's user id (SO_PEERCRED): the relay serves
//   only its own user, and a command talks only to a relay of its own user.
// - What it holds: no token. Each request carries the command's own
//   Authorization header, so the daemon authenticates, scopes and audits
//   every request exactly as if the command had connected itself. The relay
//   verifies the server's certificate as the command would (an ApiClient
//   with the same server, CA and timeout).
// - Lifetime: a command that found no relay answers directly and then starts
//   one (`topo relay`, detached); a connection it keeps to the server is
//   closed after kKeepConnection unused; it exits after idle_exit of no requests,
//   or when its socket file is removed or replaced. Before exiting it
//   removes the socket and answers what was already queued on it.
// - Failures: a relay that cannot reach the server before sending (refused,
//   unresolvable, TLS verification) says so (502, "Topo-Relay: unsent"),
//   and the command goes directly, getting the same errors and replica
//   failover as without a relay. Any other failure is the command's error.
//
// The wire between a command and its relay is HTTP/1.1, one request per
// connection; the request's target has no server path prefix, and only its
// method, target, Authorization, Content-Type and body are forwarded.

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "topo/core/status.hpp"

namespace topo::cli {

namespace relay {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;

// What a relay's own failure answer carries in this header: "unsent" (the
// request was not sent; go directly) or "failed" (it may have been; the body
// says why).
inline constexpr std::string_view kHeader = "Topo-Relay";
// The milliseconds the command still waits, sent with each request: the
// relay's own deadline for it (1 .. 86,400,000; else the relay's timeout).
inline constexpr std::string_view kTimeoutHeader = "Topo-Relay-Timeout-Ms";

// Bounds on what a relay reads from a command.
inline constexpr size_t kMaxHeaderBytes = 16 * 1024;
inline constexpr uint64_t kMaxBodyBytes = uint64_t{1} << 30;
inline constexpr size_t kMaxTargetBytes = 8 * 1024;
// Commands served at once; one more is answered "unsent" (busy).
inline constexpr int kMaxActive = 64;
// Connections kept open to the server between requests, each for at most
// kKeepConnection unused: a login node's relays hold connections (against
// the daemon's max_connections_per_user) only while their users are busy.
inline constexpr size_t kMaxIdleConnections = 16;
inline constexpr std::chrono::milliseconds kKeepConnection{5'000};

// DIR/relay-<key>-<host>.sock, or "" when `dir` is "" or the path would not
// fit a Unix socket address. <host> is HostTag(): a home directory on NFS is
// seen by every login node, and each has its own relay (and lock).
std::string SocketPath(const std::string& dir, std::string_view key);
// This machine's name, as a file name part: up to 32 characters of
// letters, digits, '-' and '.', others as '_'.
std::string HostTag();
enum class Outcome {
  kAnswered,  // `response` is the server's answer
  kNoRelay,   // nothing (of this user) listens on the socket: nothing sent
  kUnsent,    // the relay did not send it to the server: `message` says why
  kFailed,    // it may have reached the server; `message` says what failed
};
struct SendResult {
  Outcome outcome = Outcome::kNoRelay;
  Response response;
  std::string message;
  bool timed_out = false;  // kFailed: the deadline passed
};

// One request through the relay at `socket_path`, everything done by
// `deadline`. `safe_to_repeat`: the request may be sent again (a read, or a
// submission with its client_request_id), so a relay that ended without
// answering counts as kUnsent, not kFailed.
SendResult Send(const std::string& socket_path, const Request& request,
                std::chrono::steady_clock::time_point deadline, bool safe_to_repeat);

}  // namespace relay

}  // namespace topo::cli
