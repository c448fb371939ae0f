#pragma once
// Where the client verbs find the daemon, the token and the CA: flags, then
// the environment, then the config file, then the daemon's defaults. Each
// setting is looked up on its own (docs/cli.md):
//
//   server   --server      TOPO_SERVER      server = ...      STATE_DIR/endpoint (*),
//                                                             https://127.0.0.1:8443
//   token    --token       TOPO_TOKEN       token = ...       STATE_DIR/admin-token (*)
//            --token-file  TOPO_TOKEN_FILE  token_file = ...
//   ca       --ca          TOPO_CA          ca = ...          STATE_DIR/ca.pem (*)
//   timeout  --timeout     TOPO_TIMEOUT     timeout = ...     30 s
//
// The config file is $XDG_CONFIG_HOME/topo/config (~/.config/topo/config);
// STATE_DIR is $XDG_DATA_HOME/toposched (~/.local/share/toposched), the
// daemon's default; STATE_DIR/endpoint is the URL topo-scheduler wrote when
// it started. (*) only for a server on this machine (a loopback address or
// localhost), and the token only when the file is readable.

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "client/api_client.hpp"
#include "topo/core/status.hpp"

namespace topo::cli {

// The --server, --token, --token-file, --ca and --timeout flags; empty or 0
// when not given.
struct ConnectionFlags {
  std::string server;
  std::string token;
  std::string token_file;
  std::string ca;
  double timeout_s = 0;
};

// One parsed config file. Paths are already absolute (relative ones are taken
// from the file's directory, "~/" from $HOME).
struct ConfigFile {
  std::string path;
  std::string server;
  std::string token;
  std::string token_file;
  std::string ca;
  double timeout_s = 0;
  // "path:line" of each key, for messages.
  std::string server_at, token_at, token_file_at, ca_at, timeout_at;
};

// Lines `key = value` with keys server, token, token_file, ca, timeout;
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
  ClientOptions options;
  // Where each setting came from: "--server", "TOPO_SERVER", "PATH:LINE",
  // "default", "STATE_DIR/admin-token" ...; token_source "" when no token.
  std::string server_source;
  std::string token_source;
  std::string config_path;  // the config file looked at ("" when none)
};

// Applies the precedence above, reading the config file and token files.
// Errors (a bad config line, an unreadable token file, two token settings at
// one level) name the file and the fix.
core::Result<Connection> ResolveConnection(const ConnectionFlags& flags, const EnvLookup& env);

}  // namespace topo::cli
