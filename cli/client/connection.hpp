#pragma once
// Where the client verbs find the daemon, the token and the CA: flags, then
// the environment, then the config file, then the daemon's defaults. Each
// setting is looked up on its own (docs/cli.md):
//
//   server   --server      TOPO_SERVER      server = ...      STATE_DIR/endpoint (*),
//                                                             https://127.0.0.1:8443
//            (several, comma-separated or --server repeated: the replicas of
//            one scheduler, tried in order; docs/ha.md)
//   token    --token       TOPO_TOKEN       token = ...       STATE_DIR/admin-token (*)
//            --token-file  TOPO_TOKEN_FILE  token_file = ...
//   ca       --ca          TOPO_CA          ca = ...          STATE_DIR/ca.pem (*)
//   timeout  --timeout     TOPO_TIMEOUT     timeout = ...     30 s
//   share_connection       TOPO_SHARE_CONNECTION              yes
//                          share_connection = yes|no
//   STATE_DIR --state-dir  TOPO_STATE_DIR   state_dir = ...   $XDG_DATA_HOME/toposched
//                                                             (~/.local/share/toposched)
//
// The config file is $XDG_CONFIG_HOME/topo/config (~/.config/topo/config).
// STATE_DIR is the daemon's state directory (its default is the daemon's
// default); STATE_DIR/endpoint is the URL topo-scheduler wrote when it
// started. So one setting, STATE_DIR, reaches a local daemon started with
// --state-dir (or TOPO_STATE_DIR): a STATE_DIR given that way without an
// endpoint file is an error unless the server is given. (*) only for a
// server on this machine (a loopback address or localhost), and the token
// only when the file is readable.
//
// The TLS session cache (tls_session_cache.hpp) lives in $XDG_CACHE_HOME/topo
// (~/.cache/topo); TOPO_DEBUG_TLS=1 prints how each handshake went. The
// connection relay's socket (relay_client.hpp), used while share_connection is on,
// is in $XDG_RUNTIME_DIR/topo or there (DefaultRelayDir).

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/api_client.hpp"
#include "topo/core/status.hpp"

namespace topo::cli {

// The --server, --token, --token-file, --ca, --state-dir and --timeout flags; empty or 0
// when not given.
struct ConnectionFlags {
  std::string server;
  std::string token;
  std::string token_file;
  std::string ca;
  double timeout_s = 0;
  std::string state_dir;
};

// One parsed config file. Paths are already absolute (relative ones are taken
// from the file's directory, "~/" from $HOME).
struct ConfigFile {
  std::string path;
  std::string server;
  std::string token;
  std::string token_file;
  std::string ca;
  std::string state_dir;
  double timeout_s = 0;
  bool share_connection = true;
  // "path:line" of each key, for messages.
  std::string server_at, token_at, token_file_at, ca_at, state_dir_at, timeout_at,
      share_connection_at;
};

// Lines `key = value` with keys server, token, token_file, ca, state_dir, timeout,
// share_connection (yes/no, true/false, on/off, 1/0);
// blank lines and `#` comments (a whole line, or after whitespace). A bad
// line is an error naming path and line.
core::Result<ConfigFile> ParseConfigFile(std::string_view text, const std::string& path,
                                         const std::string& home = "");

// Looks up an environment variable; empty optional when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup ProcessEnvironment();

// $XDG_CONFIG_HOME/topo/config or $HOME/.config/topo/config ("" without HOME).
std::string ConfigFilePath(const EnvLookup& env);
// $XDG_DATA_HOME/toposched or $HOME/.local/share/toposched.
std::string DefaultStateDir(const EnvLookup& env);

struct Connection {
  ClientOptions options;  // options.server: servers[0]
  // Every server given, in order (`--server A,B`, repeated --server,
  // TOPO_SERVER=A,B, `server = A, B`): replicas of one scheduler, of which
  // one leads. Session tries the next when one cannot be reached.
  std::vector<std::string> servers;
  // Where each setting came from: "--server", "TOPO_SERVER", "PATH:LINE",
  // "default", "STATE_DIR/admin-token" ...; token_source "" when no token.
  std::string server_source;
  std::string token_source;
  std::string config_path;  // the config file looked at ("" when none)
  // The daemon state directory looked at, and where it came from
  // ("--state-dir", "TOPO_STATE_DIR", "PATH:LINE", "default").
  std::string state_dir;
  std::string state_dir_source;
  // Whether commands go through the connection relay (options.relay_dir
  // is set then) and start one when none runs.
  bool share_connection = true;
  // Where the relay's socket is (DefaultRelayDir), shared or not.
  std::string relay_dir;
};

// Where the connection relay's socket goes: $XDG_RUNTIME_DIR/topo when
// XDG_RUNTIME_DIR is an absolute path to a directory of this user (a
// per-machine tmpfs, /run/user/UID), else `cache_dir` (the socket's name
// then carries the host's name: a home directory on NFS is seen by every
// login node, each with its own relay).
std::string DefaultRelayDir(const std::string& xdg_runtime_dir, const std::string& cache_dir);

// Applies the precedence above, reading the config file and token files.
// Errors (a bad config line, an unreadable token file, two token settings at
// one level) name the file and the fix.
core::Result<Connection> ResolveConnection(const ConnectionFlags& flags, const EnvLookup& env);

}  // namespace topo::cli
