#include "client/connection.hpp"

#include "client/tls_session_cache.hpp"

#include <sys/stat.h>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

namespace topo::cli {

using core::Result;
using core::Status;

namespace {

constexpr std::string_view kDefaultServer = "https://127.0.0.1:8443";
// Replicas one command may try (docs/ha.md: three or five in practice).
constexpr size_t kMaxServers = 16;
constexpr double kDefaultTimeoutS = 30;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// "~/x" -> $HOME/x; a relative path is taken from `base_dir`.
std::string ExpandPath(const std::string& value, const std::string& base_dir,
                       const std::string& home) {
  if ((value == "~" || value.rfind("~/", 0) == 0) && !home.empty()) {
    return home + value.substr(1);
  }
  if (!value.empty() && value.front() != '/' && !base_dir.empty()) return base_dir + "/" + value;
  return value;
}

// Seconds: "30", "2.5", "30s".
std::optional<double> ParseTimeout(std::string_view text) {
  std::string t(Trim(text));
  if (!t.empty() && t.back() == 's') t.pop_back();
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(v) || v <= 0 || v > 86400) return std::nullopt;
  return v;
}

// yes/no, true/false, on/off, 1/0 (any case).
std::optional<bool> ParseSwitch(std::string_view text) {
  std::string t(Trim(text));
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "yes" || t == "true" || t == "on" || t == "1") return true;
  if (t == "no" || t == "false" || t == "off" || t == "0") return false;
  return std::nullopt;
}

bool IsAbsolute(const std::optional<std::string>& dir) {
  return dir && !dir->empty() && dir->front() == '/';
}

enum class ReadOutcome { kOk, kMissing, kError };
ReadOutcome ReadWholeFile(const std::string& path, std::string* out, std::string* error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      *error = "no such file";
      return ReadOutcome::kMissing;
    }
    *error = "cannot read it (permissions?)";
    return ReadOutcome::kError;
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return ReadOutcome::kOk;
}

}  // namespace

std::string DefaultRelayDir(const std::string& xdg_runtime_dir, const std::string& cache_dir) {
  if (!xdg_runtime_dir.empty() && xdg_runtime_dir.front() == '/') {
    struct stat st {};
    if (::lstat(xdg_runtime_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
        st.st_uid == ::geteuid()) {
      return xdg_runtime_dir + "/topo";
    }
  }
  return cache_dir;
}

namespace {

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The token in a file: its content without surrounding whitespace.
Result<std::string> ReadTokenFile(const std::string& path, const std::string& source) {
  std::string text, error;
  if (ReadWholeFile(path, &text, &error) != ReadOutcome::kOk) {
    return Status::Error("token file " + path + " (from " + source + "): " + error);
  }
  std::string token(Trim(text));
  if (token.empty()) return Status::Error("token file " + path + " (from " + source + ") is empty");
  if (token.find_first_of(" \t\r\n") != std::string::npos) {
    return Status::Error("token file " + path + " (from " + source +
                         ") holds more than one word; it must hold the token alone");
  }
  return token;
}

// The URL a local topo-scheduler wrote to STATE_DIR/endpoint when it
// started, if it is on this machine; "" otherwise. A wildcard listen address
// (0.0.0.0, ::) is reached through 127.0.0.1.
std::string LocalEndpoint(const std::string& state_dir) {
  if (state_dir.empty()) return "";
  std::string text, error;
  if (ReadWholeFile(state_dir + "/endpoint", &text, &error) != ReadOutcome::kOk) return "";
  Result<ServerUrl> url = ParseServerUrl(Trim(text));
  if (!url.ok()) return "";
  ServerUrl u = url.value();
  if (u.host == "0.0.0.0" || u.host == "::") u.host = "127.0.0.1";
  if (!IsLoopbackHost(u.host)) return "";
  return u.ToString();
}

}  // namespace

Result<ConfigFile> ParseConfigFile(std::string_view text, const std::string& path,
                                   const std::string& home) {
  ConfigFile out;
  out.path = path;
  const std::string dir = Dirname(path);
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    const std::string at = path + ":" + std::to_string(line_no);
    // A comment starts with '#' at the start or after whitespace.
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(line[i - 1])))) {
        line = line.substr(0, i);
        break;
      }
    }
    line = Trim(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return Status::Error(at +
                           ": expected 'key = value' (keys: server, token, token_file, ca, "
                           "state_dir, timeout, share_connection), got '" +
                           std::string(line) + "'");
    }
    const std::string key(Trim(line.substr(0, eq)));
    std::string value(Trim(line.substr(eq + 1)));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    if (value.empty()) return Status::Error(at + ": '" + key + "' has no value");
    auto set = [&](std::string* field, std::string* field_at, std::string v) -> Status {
      if (!field_at->empty()) {
        return Status::Error(at + ": '" + key + "' is already set at " + *field_at);
      }
      *field = std::move(v);
      *field_at = at;
      return Status::Ok();
    };
    Status s;
    if (key == "server") {
      s = set(&out.server, &out.server_at, value);
    } else if (key == "token") {
      s = set(&out.token, &out.token_at, value);
    } else if (key == "token_file") {
      s = set(&out.token_file, &out.token_file_at, ExpandPath(value, dir, home));
    } else if (key == "ca") {
      s = set(&out.ca, &out.ca_at, ExpandPath(value, dir, home));
    } else if (key == "state_dir") {
      s = set(&out.state_dir, &out.state_dir_at, ExpandPath(value, dir, home));
    } else if (key == "timeout") {
      std::optional<double> t = ParseTimeout(value);
      if (!t) {
        return Status::Error(at + ": timeout '" + value +
                             "' is not a number of seconds (0..86400]");
      }
      if (!out.timeout_at.empty()) {
        return Status::Error(at + ": 'timeout' is already set at " + out.timeout_at);
      }
      out.timeout_s = *t;
      out.timeout_at = at;
    } else if (key == "share_connection") {
      std::optional<bool> on = ParseSwitch(value);
      if (!on) {
        return Status::Error(at + ": share_connection '" + value + "' is not yes or no");
      }
      if (!out.share_connection_at.empty()) {
        return Status::Error(at + ": 'share_connection' is already set at " +
                             out.share_connection_at);
      }
      out.share_connection = *on;
      out.share_connection_at = at;
    } else {
      return Status::Error(at + ": unknown key '" + key +
                           "' (keys: server, token, token_file, ca, state_dir, timeout, "
                           "share_connection)");
    }
    if (!s.ok()) return s;
  }
  if (!out.token_at.empty() && !out.token_file_at.empty()) {
    return Status::Error(out.token_file_at + ": both 'token' (" + out.token_at +
                         ") and 'token_file' are set; keep one");
  }
  return out;
}

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::string ConfigFilePath(const EnvLookup& env) {
  if (std::optional<std::string> x = env("XDG_CONFIG_HOME"); IsAbsolute(x)) {
    return *x + "/topo/config";
  }
  std::optional<std::string> home = env("HOME");
  if (!home || home->empty()) return "";
  return *home + "/.config/topo/config";
}

std::string DefaultStateDir(const EnvLookup& env) {
  if (std::optional<std::string> x = env("XDG_DATA_HOME"); IsAbsolute(x)) {
    return *x + "/toposched";
  }
  std::optional<std::string> home = env("HOME");
  if (!home || home->empty()) return "";
  return *home + "/.local/share/toposched";
}

Result<Connection> ResolveConnection(const ConnectionFlags& flags, const EnvLookup& env) {
  Connection out;
  const std::string home = env("HOME").value_or("");
  auto env_value = [&](const char* name) -> std::string {
    std::optional<std::string> v = env(name);
    return v ? std::string(Trim(*v)) : std::string();
  };

  // The config file, when there is one.
  ConfigFile config;
  out.config_path = ConfigFilePath(env);
  if (!out.config_path.empty()) {
    std::string text, error;
    switch (ReadWholeFile(out.config_path, &text, &error)) {
      case ReadOutcome::kOk: {
        Result<ConfigFile> parsed = ParseConfigFile(text, out.config_path, home);
        if (!parsed.ok()) return parsed.status();
        config = parsed.value();
        break;
      }
      case ReadOutcome::kMissing:
        break;
      case ReadOutcome::kError:
        return Status::Error("config file " + out.config_path + ": " + error);
    }
  }

  // The daemon's state directory: the one place a local daemon's endpoint,
  // admin token and CA are read from.
  std::string state_dir = DefaultStateDir(env);
  std::string state_dir_source;  // "" for the default
  if (!flags.state_dir.empty()) {
    state_dir = flags.state_dir;
    state_dir_source = "--state-dir";
  } else if (std::string v = env_value("TOPO_STATE_DIR"); !v.empty()) {
    state_dir = v;
    state_dir_source = "TOPO_STATE_DIR";
  } else if (!config.state_dir.empty()) {
    state_dir = config.state_dir;
    state_dir_source = config.state_dir_at;
  }
  out.state_dir = state_dir;
  out.state_dir_source = state_dir_source.empty() ? "default" : state_dir_source;

  // server
  if (!flags.server.empty()) {
    out.options.server = flags.server;
    out.server_source = "--server";
  } else if (std::string v = env_value("TOPO_SERVER"); !v.empty()) {
    out.options.server = v;
    out.server_source = "TOPO_SERVER";
  } else if (!config.server.empty()) {
    out.options.server = config.server;
    out.server_source = config.server_at;
  } else if (std::string endpoint = LocalEndpoint(state_dir); !endpoint.empty()) {
    out.options.server = endpoint;
    out.server_source = state_dir + "/endpoint";
  } else if (!state_dir_source.empty()) {
    // A state directory named on purpose that holds no endpoint is a
    // mistake (a typo, or a daemon not started); the default port would be
    // some other daemon.
    return Status::Error("state directory " + state_dir + " (from " + state_dir_source +
                         ") has no endpoint file of a daemon on this machine: start "
                         "topo-scheduler --state-dir " +
                         state_dir + ", or give the server with --server");
  } else {
    out.options.server = std::string(kDefaultServer);
    out.server_source = "default";
  }
  // Several servers: separated by commas (or newlines, from a repeated
  // --server), blanks around them ignored.
  bool local = true;
  {
    std::string item;
    const std::string all = out.options.server + ",";
    for (char c : all) {
      if (c != ',' && c != '\n') {
        item += c;
        continue;
      }
      const size_t b = item.find_first_not_of(" \t");
      const size_t e = item.find_last_not_of(" \t");
      if (b != std::string::npos) out.servers.push_back(item.substr(b, e - b + 1));
      item.clear();
    }
    if (out.servers.empty()) {
      return Status::Error("no server in '" + out.options.server + "' (from " + out.server_source +
                           "): give a URL such as https://sched:8443");
    }
    if (out.servers.size() > kMaxServers) {
      return Status::Error("more than " + std::to_string(kMaxServers) + " servers (from " +
                           out.server_source + ")");
    }
    for (const std::string& s : out.servers) {
      Result<ServerUrl> url = ParseServerUrl(s);
      if (!url.ok()) {
        return Status::Error(url.message() + (out.server_source == "default"
                                                  ? ""
                                                  : " (from " + out.server_source + ")"));
      }
      // The daemon's own files apply only to a daemon on this machine.
      local = local && IsLoopbackHost(url.value().host);
    }
    out.options.server = out.servers.front();
  }

  // token
  if (!flags.token.empty() && !flags.token_file.empty()) {
    return Status::Error("give --token or --token-file, not both");
  }
  const std::string env_token = env_value("TOPO_TOKEN");
  const std::string env_token_file = env_value("TOPO_TOKEN_FILE");
  if (!flags.token.empty()) {
    out.options.token = flags.token;
    out.token_source = "--token";
  } else if (!flags.token_file.empty()) {
    Result<std::string> t = ReadTokenFile(flags.token_file, "--token-file");
    if (!t.ok()) return t.status();
    out.options.token = t.value();
    out.token_source = "--token-file " + flags.token_file;
  } else if (!env_token.empty() || !env_token_file.empty()) {
    if (!env_token.empty() && !env_token_file.empty()) {
      return Status::Error("both TOPO_TOKEN and TOPO_TOKEN_FILE are set; unset one");
    }
    if (!env_token.empty()) {
      out.options.token = env_token;
      out.token_source = "TOPO_TOKEN";
    } else {
      Result<std::string> t = ReadTokenFile(env_token_file, "TOPO_TOKEN_FILE");
      if (!t.ok()) return t.status();
      out.options.token = t.value();
      out.token_source = "TOPO_TOKEN_FILE " + env_token_file;
    }
  } else if (!config.token.empty()) {
    out.options.token = config.token;
    out.token_source = config.token_at;
  } else if (!config.token_file.empty()) {
    Result<std::string> t = ReadTokenFile(config.token_file, config.token_file_at);
    if (!t.ok()) return t.status();
    out.options.token = t.value();
    out.token_source = config.token_file_at + " (" + config.token_file + ")";
  } else if (local && !state_dir.empty()) {
    const std::string path = state_dir + "/admin-token";
    std::string text, error;
    if (ReadWholeFile(path, &text, &error) == ReadOutcome::kOk && !Trim(text).empty()) {
      out.options.token = std::string(Trim(text));
      out.token_source = path;
    }
  }

  // ca
  if (!flags.ca.empty()) {
    out.options.ca_file = flags.ca;
    out.options.ca_source = "--ca";
  } else if (std::string v = env_value("TOPO_CA"); !v.empty()) {
    out.options.ca_file = v;
    out.options.ca_source = "TOPO_CA";
  } else if (!config.ca.empty()) {
    out.options.ca_file = config.ca;
    out.options.ca_source = config.ca_at;
  } else if (local && !state_dir.empty() && FileExists(state_dir + "/ca.pem")) {
    out.options.ca_file = state_dir + "/ca.pem";
    out.options.ca_source = state_dir_source.empty()
                                ? "the daemon's default state directory"
                                : "the state directory, from " + state_dir_source;
  }

  out.options.tls_session_dir =
      DefaultCacheDir(env("XDG_CACHE_HOME").value_or(""), env("HOME").value_or(""));
  out.options.debug_tls = env_value("TOPO_DEBUG_TLS") == "1";

  // connection sharing (relay_client.hpp): on unless TOPO_SHARE_CONNECTION or the
  // config file says no
  out.share_connection = true;
  if (std::string v = env_value("TOPO_SHARE_CONNECTION"); !v.empty()) {
    std::optional<bool> on = ParseSwitch(v);
    if (!on) return Status::Error("TOPO_SHARE_CONNECTION '" + v + "' is not 1 or 0 (yes or no)");
    out.share_connection = *on;
  } else if (!config.share_connection_at.empty()) {
    out.share_connection = config.share_connection;
  }
  out.relay_dir = DefaultRelayDir(env_value("XDG_RUNTIME_DIR"), out.options.tls_session_dir);
  if (out.share_connection) out.options.relay_dir = out.relay_dir;

  // timeout
  double timeout_s = kDefaultTimeoutS;
  if (flags.timeout_s > 0) {
    timeout_s = flags.timeout_s;
  } else if (std::string v = env_value("TOPO_TIMEOUT"); !v.empty()) {
    std::optional<double> t = ParseTimeout(v);
    if (!t) return Status::Error("TOPO_TIMEOUT '" + v + "' is not a number of seconds (0..86400]");
    timeout_s = *t;
  } else if (config.timeout_s > 0) {
    timeout_s = config.timeout_s;
  }
  out.options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000 + 0.5));
  if (out.options.timeout.count() < 1) out.options.timeout = std::chrono::milliseconds(1);
  return out;
}

}  // namespace topo::cli
