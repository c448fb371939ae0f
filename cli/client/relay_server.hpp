#pragma once
// The connection relay, the relay's half (relay_client.hpp says what a relay
// is and how a command reaches one): `topo relay` serving its socket.

#include <chrono>
#include <functional>
#include <string>

#include "client/api_client.hpp"
#include "client/relay_client.hpp"
#include "topo/core/status.hpp"

namespace topo::cli {

namespace relay {

struct ServeOptions {
  ClientOptions client;  // the relay's own: server, CA, timeout, session dir; no token
  std::chrono::milliseconds idle_exit{30'000};
  // The socket the starting command looks for (`topo relay --socket`):
  // settings that name another one are an error. "" accepts any.
  std::string expected_socket;
  // Told the socket once it is served, or that another relay serves it
  // (`already` true; Serve then returns at once).
  std::function<void(const std::string& socket, bool already)> on_ready;
};

// Serves the relay socket of `options.client` (ApiClient::relay_socket with
// relay_dir = the session dir) until idle_exit passes without a request, or
// the socket file is removed or replaced. Ok at once when another relay
// already serves it. Errors: the directory is not this user's and private,
// the socket is not expected_socket, or it cannot be made.
core::Status Serve(const ServeOptions& options);

// Checks one request a command sent: method, target, size. "" when it may
// be forwarded, else why not (the relay answers 400 with it).
std::string CheckRequest(const Request& request);

}  // namespace relay

}  // namespace topo::cli
