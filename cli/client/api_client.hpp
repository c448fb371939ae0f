#pragma once
// ApiClient: a blocking HTTPS client of the topo-scheduler API (docs/api.md),
// for the `topo` verbs, the end-to-end tests and the API benchmark.
//
//   auto client = ApiClient::Create({.server = "https://127.0.0.1:8443",
//                                    .token = "topo_...", .ca_file = "ca.pem"});
//   auto reply = client.value()->Request("GET", "/v1/jobs?all=1");
//   if (reply.ok() && reply.value().ok()) ... reply.value().body["jobs"] ...
//
// TLS 1.2+ through OpenSSL: the server certificate must chain to the CA file
// (or to the system's CAs when there is none) and name the server's host (DNS
// name, sent as SNI too) or IP address. Each Request has one deadline for
// resolving, connecting, the handshake, sending and the whole answer. The
// connection is kept open between requests while the server allows it. An IP
// literal is connected to without a resolver. With tls_session_dir set, the
// session the server hands out (a TLS 1.3 ticket, after the handshake) is
// saved there once the answer is in, and the next ApiClient for the same
// server and CA offers it (tls_session_cache.hpp). Closing sends TLS
// close_notify without waiting for the server's. With relay_dir set, a
// request first goes through the connection relay serving this server and
// CA, when one is running (relay_client.hpp); TLS is then never set up in this
// process.
//
// Thread safety: one ApiClient per thread.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "topo/core/status.hpp"

namespace topo::cli {

// "https://host[:port][/prefix]"; the scheme may be left out. The port
// defaults to 8443 (topo-scheduler's). IPv6 literals go in brackets.
struct ServerUrl {
  std::string host;         // without brackets
  std::string port;         // digits
  std::string path_prefix;  // "" or "/prefix" (no trailing slash)
  bool host_is_ip = false;

  std::string HostHeader() const;  // "host:port", "[::1]:8443"
  std::string ToString() const;    // "https://host:port/prefix"
};
core::Result<ServerUrl> ParseServerUrl(std::string_view url);
// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(std::string_view host);

struct ClientOptions {
  std::string server = "https://127.0.0.1:8443";
  std::string token;    // empty: no Authorization header
  std::string ca_file;  // PEM file of trusted CAs; empty: the system's CAs
  // Where ca_file came from, for error messages ("--ca", "TOPO_CA", ...).
  std::string ca_source;
  std::chrono::milliseconds timeout{30'000};
  std::string user_agent = "topo/0.1.0";
  // Where the TLS session of the last connection is kept for the next
  // process to resume (tls_session_cache.hpp); "" keeps none.
  std::string tls_session_dir;
  // Prints how each handshake went ("tls: resumed", "tls: full handshake")
  // and why a cached session was not used, to stderr (TOPO_DEBUG_TLS=1).
  bool debug_tls = false;
  // Where the connection relay's socket is looked for (relay_client.hpp); "" sends
  // every request directly.
  std::string relay_dir;
};

struct ApiResponse {
  int status = 0;
  nlohmann::json body;  // the parsed JSON body; null when empty or not JSON
  std::string text;     // the raw body
  std::string retry_after;
  std::string content_type;

  bool ok() const { return status >= 200 && status < 300; }
  // The server's {"error": {"message"}}, else "server answered 502 Bad Gateway".
  std::string ErrorMessage() const;
  // The server's {"error": {"field"}}, or "".
  std::string ErrorField() const;
};

class ApiClient {
 public:
  // Checks the URL and loads the CA file; errors name them (no network yet).
  static core::Result<std::unique_ptr<ApiClient>> Create(ClientOptions options);
  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  // One HTTP request. `target` is the path and query ("/v1/jobs?all=1"),
  // already percent-encoded. An error means no HTTP answer came: the server
  // is unreachable, TLS failed, or the deadline passed; the message says which
  // and what to check. Any HTTP status is a success here.
  core::Result<ApiResponse> Request(std::string_view method, std::string_view target,
                                    const std::optional<nlohmann::json>& body = std::nullopt);

  // Sends `body` as it is, with `authorization` as the Authorization header
  // ("" for none) instead of "Bearer " + options.token: what the connection
  // relay forwards for the command that asked it, within that command's
  // `timeout`. The answer's text is not parsed (body stays null).
  core::Result<ApiResponse> Forward(std::string_view method, std::string_view target,
                                    std::string body, std::string_view authorization,
                                    std::string_view content_type,
                                    std::chrono::milliseconds timeout);

  const ClientOptions& options() const;
  // SessionKey(server URL, CA PEM): names this server's files in the cache.
  const std::string& session_key() const;
  // The relay socket looked for ("" without options.relay_dir).
  const std::string& relay_socket() const;
  // True once a request found no relay on relay_socket(): the caller may
  // start one (`topo relay`) for the next command.
  bool relay_missing() const;
  // Requests answered through the relay.
  int requests_relayed() const;
  const ServerUrl& url() const;
  // Connections opened so far (a reused connection opens none).
  int connections_opened() const;
  // Of those, how many resumed a TLS session (an abbreviated handshake).
  int handshakes_resumed() const;
  // After a Request error: true when it failed before any byte of the
  // request was sent (resolving, connecting, the handshake), so the server
  // cannot have acted on it and it may go to another server whatever it is.
  bool last_failure_unsent() const;

 private:
  struct Impl;
  explicit ApiClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Percent-encodes one path segment or query value (RFC 3986 unreserved
// characters stay; with keep_slash, '/' stays too).
std::string PercentEncode(std::string_view text, bool keep_slash = false);
// Percent-encodes a query value; '/', ',', ':' and '@' stay as they are
// (allowed in a query, and easier to read in logs).
std::string QueryEscape(std::string_view text);

}  // namespace topo::cli
