#include "client/connection.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace topo::cli {
namespace {

namespace fs = std::filesystem;

// A fresh directory under /tmp, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "topo-cli-test-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string Write(const std::string& rel, const std::string& text) const {
    const fs::path p = path / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
};

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

ConnectionFlags ServerFlag(const std::string& server) {
  ConnectionFlags f;
  f.server = server;
  return f;
}

ConfigFile Parse(std::string_view text) {
  auto r = ParseConfigFile(text, "/home/ada/.config/topo/config", "/home/ada");
  REQUIRE_MESSAGE(r.ok(), r.message());
  return r.value();
}

std::string ParseError(std::string_view text) {
  auto r = ParseConfigFile(text, "/home/ada/.config/topo/config", "/home/ada");
  REQUIRE_FALSE(r.ok());
  return r.message();
}

TEST_CASE("ParseConfigFile: keys, comments, quotes and paths") {
  const ConfigFile c = Parse(
      "# topo client settings\n"
      "\n"
      "server = https://sched.example.com:8443   # production\n"
      "  token_file=~/.config/topo/token\n"
      "ca = \"certs/ca.pem\"\n"
      "timeout = 5s\n");
  CHECK(c.server == "https://sched.example.com:8443");
  CHECK(c.server_at == "/home/ada/.config/topo/config:3");
  CHECK(c.token_file == "/home/ada/.config/topo/token");
  CHECK(c.ca == "/home/ada/.config/topo/certs/ca.pem");
  CHECK(c.timeout_s == 5);
  CHECK(c.token.empty());
  // A '#' inside a value (not after a blank) is part of it.
  CHECK(Parse("token = topo_ab#cd\n").token == "topo_ab#cd");
  CHECK(Parse("ca = /etc/topo/ca.pem").ca == "/etc/topo/ca.pem");
}

TEST_CASE("ParseConfigFile: a bad line names the file and the line") {
  CHECK(ParseError("server = x\nsever = y\n") ==
        "/home/ada/.config/topo/config:2: unknown key 'sever' (keys: server, token, "
        "token_file, ca, state_dir, timeout, share_connection)");
  CHECK(ParseError("share_connection = sometimes\n") ==
        "/home/ada/.config/topo/config:1: share_connection 'sometimes' is not yes or no");
  CHECK(ParseError("share_connection = no\nshare_connection = yes\n") ==
        "/home/ada/.config/topo/config:2: 'share_connection' is already set at "
        "/home/ada/.config/topo/config:1");
  CHECK(ParseError("\n\njust words\n")
            .rfind("/home/ada/.config/topo/config:3: expected 'key = "
                   "value'",
                   0) == 0);
  CHECK(ParseError("token =\n") == "/home/ada/.config/topo/config:1: 'token' has no value");
  CHECK(ParseError("server = a\nserver = b\n") ==
        "/home/ada/.config/topo/config:2: 'server' is already set at "
        "/home/ada/.config/topo/config:1");
  CHECK(ParseError("timeout = soon\n").find("config:1: timeout 'soon'") != std::string::npos);
  CHECK(ParseError("token = a\ntoken_file = b\n").find("both 'token'") != std::string::npos);
}

TEST_CASE("ConfigFilePath and DefaultStateDir follow XDG, else HOME") {
  CHECK(ConfigFilePath(FakeEnv({{"HOME", "/home/ada"}})) == "/home/ada/.config/topo/config");
  CHECK(ConfigFilePath(FakeEnv({{"HOME", "/home/ada"}, {"XDG_CONFIG_HOME", "/cfg"}})) ==
        "/cfg/topo/config");
  // A relative XDG path is ignored, as the spec says.
  CHECK(ConfigFilePath(FakeEnv({{"HOME", "/h"}, {"XDG_CONFIG_HOME", "rel"}})) ==
        "/h/.config/topo/config");
  CHECK(ConfigFilePath(FakeEnv({})).empty());
  CHECK(DefaultStateDir(FakeEnv({{"HOME", "/home/ada"}})) == "/home/ada/.local/share/toposched");
  CHECK(DefaultStateDir(FakeEnv({{"HOME", "/h"}, {"XDG_DATA_HOME", "/data"}})) ==
        "/data/toposched");
}

TEST_CASE("ResolveConnection: defaults with no configuration use the daemon's state dir") {
  TempDir home;
  auto none = ResolveConnection({}, FakeEnv({{"HOME", home.path.string()}}));
  REQUIRE_MESSAGE(none.ok(), none.message());
  CHECK(none.value().options.server == "https://127.0.0.1:8443");
  CHECK(none.value().server_source == "default");
  CHECK(none.value().options.token.empty());
  CHECK(none.value().token_source.empty());
  CHECK(none.value().options.ca_file.empty());
  CHECK(none.value().options.timeout == std::chrono::seconds(30));

  const std::string ca = home.Write(".local/share/toposched/ca.pem", "PEM");
  const std::string tok = home.Write(".local/share/toposched/admin-token", "topo_abc\n");
  auto d = ResolveConnection({}, FakeEnv({{"HOME", home.path.string()}}));
  REQUIRE_MESSAGE(d.ok(), d.message());
  CHECK(d.value().options.ca_file == ca);
  CHECK(d.value().options.token == "topo_abc");
  CHECK(d.value().token_source == tok);

  // XDG_DATA_HOME moves the state directory.
  TempDir data;
  data.Write("toposched/admin-token", "topo_xdg");
  auto x = ResolveConnection(
      {}, FakeEnv({{"HOME", home.path.string()}, {"XDG_DATA_HOME", data.path.string()}}));
  REQUIRE(x.ok());
  CHECK(x.value().options.token == "topo_xdg");
  CHECK(x.value().options.ca_file.empty());

  // The URL a local daemon wrote when it started (its port may not be 8443).
  home.Write(".local/share/toposched/endpoint", "https://127.0.0.1:40123\n");
  auto ep = ResolveConnection({}, FakeEnv({{"HOME", home.path.string()}}));
  REQUIRE(ep.ok());
  CHECK(ep.value().options.server == "https://127.0.0.1:40123");
  CHECK(ep.value().options.token == "topo_abc");
  home.Write(".local/share/toposched/endpoint", "https://0.0.0.0:9443\n");
  CHECK(ResolveConnection({}, FakeEnv({{"HOME", home.path.string()}})).value().options.server ==
        "https://127.0.0.1:9443");
  home.Write(".local/share/toposched/endpoint", "https://10.1.2.3:9443\n");
  CHECK(ResolveConnection({}, FakeEnv({{"HOME", home.path.string()}})).value().options.server ==
        "https://127.0.0.1:8443");
  CHECK(
      ResolveConnection(ServerFlag("https://127.0.0.1:1"), FakeEnv({{"HOME", home.path.string()}}))
          .value()
          .options.server == "https://127.0.0.1:1");
  fs::remove(home.path / ".local/share/toposched/endpoint");

  // The local daemon's admin token is never sent to another server.
  auto remote = ResolveConnection(ServerFlag("https://sched.example.com"),
                                  FakeEnv({{"HOME", home.path.string()}}));
  REQUIRE(remote.ok());
  CHECK(remote.value().options.token.empty());
  CHECK(remote.value().options.ca_file.empty());
  auto localhost =
      ResolveConnection(ServerFlag("localhost:9000"), FakeEnv({{"HOME", home.path.string()}}));
  REQUIRE(localhost.ok());
  CHECK(localhost.value().options.token == "topo_abc");

  // An unreadable admin-token is skipped (another user's daemon).
  if (geteuid() != 0) {
    chmod(tok.c_str(), 0);
    auto unreadable = ResolveConnection({}, FakeEnv({{"HOME", home.path.string()}}));
    REQUIRE(unreadable.ok());
    CHECK(unreadable.value().options.token.empty());
  }
}

TEST_CASE("ResolveConnection: one setting, the state directory, reaches a local daemon") {
  TempDir home, state, other;
  state.Write("endpoint", "https://127.0.0.1:40555\n");
  const std::string tok = state.Write("admin-token", "topo_state\n");
  const std::string ca = state.Write("ca.pem", "PEM");
  home.Write(".local/share/toposched/admin-token", "topo_default");
  other.Write("endpoint", "https://127.0.0.1:40666\n");

  auto check_state = [&](const core::Result<Connection>& r, const std::string& source) {
    REQUIRE_MESSAGE(r.ok(), r.message());
    CHECK(r.value().options.server == "https://127.0.0.1:40555");
    CHECK(r.value().server_source == state.path.string() + "/endpoint");
    CHECK(r.value().options.token == "topo_state");
    CHECK(r.value().token_source == tok);
    CHECK(r.value().options.ca_file == ca);
    CHECK(r.value().options.ca_source.find(source) != std::string::npos);
    CHECK(r.value().state_dir_source == source);
  };
  check_state(ResolveConnection({}, FakeEnv({{"HOME", home.path.string()},
                                             {"TOPO_STATE_DIR", state.path.string()}})),
              "TOPO_STATE_DIR");
  ConnectionFlags flag;
  flag.state_dir = state.path.string();
  check_state(ResolveConnection(flag, FakeEnv({{"HOME", home.path.string()},
                                               {"TOPO_STATE_DIR", other.path.string()}})),
              "--state-dir");
  const std::string config =
      home.Write(".config/topo/config", "state_dir = " + state.path.string() + "\n");
  check_state(ResolveConnection({}, FakeEnv({{"HOME", home.path.string()}})), config + ":1");
  fs::remove(config);

  // The other settings still win, one by one; a remote server gets nothing local.
  auto server = ResolveConnection(
      ServerFlag("https://127.0.0.1:1"),
      FakeEnv({{"HOME", home.path.string()}, {"TOPO_STATE_DIR", state.path.string()}}));
  REQUIRE(server.ok());
  CHECK(server.value().options.server == "https://127.0.0.1:1");
  CHECK(server.value().options.token == "topo_state");
  auto remote = ResolveConnection(
      ServerFlag("https://sched.example.com"),
      FakeEnv({{"HOME", home.path.string()}, {"TOPO_STATE_DIR", state.path.string()}}));
  REQUIRE(remote.ok());
  CHECK(remote.value().options.token.empty());
  CHECK(remote.value().options.ca_file.empty());

  // A state directory given on purpose without an endpoint is an error.
  TempDir empty;
  auto missing = ResolveConnection(
      {}, FakeEnv({{"HOME", home.path.string()}, {"TOPO_STATE_DIR", empty.path.string()}}));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message().find("state directory " + empty.path.string() +
                               " (from TOPO_STATE_DIR) has no endpoint") == 0);
  CHECK(missing.message().find("--state-dir") != std::string::npos);
  CHECK(missing.message().find("--server") != std::string::npos);

  // The TLS session cache goes to XDG_CACHE_HOME, else ~/.cache; TOPO_DEBUG_TLS=1 shows handshakes.
  auto cache = ResolveConnection({}, FakeEnv({{"HOME", home.path.string()},
                                              {"TOPO_STATE_DIR", state.path.string()},
                                              {"TOPO_DEBUG_TLS", "1"}}));
  REQUIRE(cache.ok());
  CHECK(cache.value().options.tls_session_dir == home.path.string() + "/.cache/topo");
  CHECK(cache.value().options.debug_tls);
  auto xdg = ResolveConnection({}, FakeEnv({{"HOME", home.path.string()},
                                            {"TOPO_STATE_DIR", state.path.string()},
                                            {"XDG_CACHE_HOME", "/var/cache/ada"}}));
  REQUIRE(xdg.ok());
  CHECK(xdg.value().options.tls_session_dir == "/var/cache/ada/topo");
  CHECK_FALSE(xdg.value().options.debug_tls);

  // Connection sharing is on by default, its socket beside the session
  // cache; TOPO_SHARE_CONNECTION turns it off, and a bad value names itself.
  CHECK(cache.value().share_connection);
  CHECK(cache.value().options.relay_dir == home.path.string() + "/.cache/topo");
  // The relay's socket prefers XDG_RUNTIME_DIR, when it is this user's directory.
  TempDir runtime;
  auto run_dir = ResolveConnection({}, FakeEnv({{"HOME", home.path.string()},
                                                {"TOPO_STATE_DIR", state.path.string()},
                                                {"XDG_RUNTIME_DIR", runtime.path.string()}}));
  REQUIRE(run_dir.ok());
  CHECK(run_dir.value().options.relay_dir == runtime.path.string() + "/topo");
  CHECK(run_dir.value().options.tls_session_dir == home.path.string() + "/.cache/topo");
  CHECK(DefaultRelayDir("relative/dir", "/c") == "/c");
  CHECK(DefaultRelayDir(runtime.path.string() + "/missing", "/c") == "/c");
  for (const char* off : {"0", "no", "OFF", "false"}) {
    auto unshared = ResolveConnection({}, FakeEnv({{"HOME", home.path.string()},
                                                   {"TOPO_STATE_DIR", state.path.string()},
                                                   {"TOPO_SHARE_CONNECTION", off}}));
    REQUIRE(unshared.ok());
    CHECK_FALSE(unshared.value().share_connection);
    CHECK(unshared.value().options.relay_dir.empty());
  }
  auto bad_share = ResolveConnection({}, FakeEnv({{"HOME", home.path.string()},
                                                  {"TOPO_STATE_DIR", state.path.string()},
                                                  {"TOPO_SHARE_CONNECTION", "maybe"}}));
  REQUIRE_FALSE(bad_share.ok());
  CHECK(bad_share.message() == "TOPO_SHARE_CONNECTION 'maybe' is not 1 or 0 (yes or no)");
}

TEST_CASE("ResolveConnection: flags over environment over config file over defaults") {
  TempDir home;
  home.Write(".local/share/toposched/admin-token", "topo_default");
  home.Write(".config/topo/token", "topo_config_file\n");
  home.Write(".config/topo/config",
             "server = https://config.example:1\n"
             "token_file = token\n"
             "ca = /config/ca.pem\n"
             "timeout = 7\n"
             "share_connection = no\n");
  const std::string env_token_file = home.Write("env-token", "topo_env_file");
  const std::string flag_token_file = home.Write("flag-token", "  topo_flag_file  \n");
  std::map<std::string, std::string> vars = {{"HOME", home.path.string()}};

  auto c = ResolveConnection({}, FakeEnv(vars));
  REQUIRE_MESSAGE(c.ok(), c.message());
  CHECK(c.value().options.server == "https://config.example:1");
  CHECK(c.value().server_source == home.path.string() + "/.config/topo/config:1");
  CHECK(c.value().options.token == "topo_config_file");
  CHECK(c.value().options.ca_file == "/config/ca.pem");
  CHECK(c.value().options.timeout == std::chrono::seconds(7));
  CHECK_FALSE(c.value().share_connection);
  CHECK(c.value().options.relay_dir.empty());

  vars["TOPO_SERVER"] = "https://env.example";
  vars["TOPO_TOKEN"] = "topo_env";
  vars["TOPO_CA"] = "/env/ca.pem";
  vars["TOPO_TIMEOUT"] = "2.5";
  auto e = ResolveConnection({}, FakeEnv(vars));
  REQUIRE_MESSAGE(e.ok(), e.message());
  CHECK(e.value().options.server == "https://env.example");
  CHECK(e.value().server_source == "TOPO_SERVER");
  CHECK(e.value().options.token == "topo_env");
  CHECK_FALSE(e.value().share_connection);  // the config file's, no variable set
  CHECK(e.value().token_source == "TOPO_TOKEN");
  CHECK(e.value().options.ca_file == "/env/ca.pem");
  CHECK(e.value().options.ca_source == "TOPO_CA");
  CHECK(e.value().options.timeout == std::chrono::milliseconds(2500));

  vars.erase("TOPO_TOKEN");
  vars["TOPO_TOKEN_FILE"] = env_token_file;
  auto ef = ResolveConnection({}, FakeEnv(vars));
  REQUIRE(ef.ok());
  CHECK(ef.value().options.token == "topo_env_file");

  ConnectionFlags flags{.server = "https://flag.example:2",
                        .token = "",
                        .token_file = flag_token_file,
                        .ca = "/flag/ca.pem",
                        .timeout_s = 1,
                        .state_dir = ""};
  auto f = ResolveConnection(flags, FakeEnv(vars));
  REQUIRE_MESSAGE(f.ok(), f.message());
  CHECK(f.value().options.server == "https://flag.example:2");
  CHECK(f.value().options.token == "topo_flag_file");
  CHECK(f.value().options.ca_file == "/flag/ca.pem");
  CHECK(f.value().options.ca_source == "--ca");
  CHECK(f.value().options.timeout == std::chrono::seconds(1));
  flags.token_file.clear();
  flags.token = "topo_flag";
  CHECK(ResolveConnection(flags, FakeEnv(vars)).value().options.token == "topo_flag");
}

TEST_CASE("ResolveConnection: errors name the file and the fix") {
  TempDir home;
  std::map<std::string, std::string> vars = {{"HOME", home.path.string()}};
  home.Write(".config/topo/config", "server = https://ok\nbogus\n");
  auto bad_config = ResolveConnection({}, FakeEnv(vars));
  REQUIRE_FALSE(bad_config.ok());
  CHECK(bad_config.message().rfind(home.path.string() + "/.config/topo/config:2: expected", 0) ==
        0);

  home.Write(".config/topo/config", "token_file = missing\n");
  auto missing = ResolveConnection({}, FakeEnv(vars));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message() == "token file " + home.path.string() + "/.config/topo/missing (from " +
                                 home.path.string() + "/.config/topo/config:1): no such file");

  home.Write(".config/topo/config", "server = http://plain:80\n");
  auto http = ResolveConnection({}, FakeEnv(vars));
  REQUIRE_FALSE(http.ok());
  CHECK(http.message().find("HTTPS only") != std::string::npos);
  CHECK(http.message().find("(from " + home.path.string() + "/.config/topo/config:1)") !=
        std::string::npos);

  vars["TOPO_TOKEN"] = "a";
  vars["TOPO_TOKEN_FILE"] = "b";
  home.Write(".config/topo/config", "");
  auto both = ResolveConnection({}, FakeEnv(vars));
  REQUIRE_FALSE(both.ok());
  CHECK(both.message() == "both TOPO_TOKEN and TOPO_TOKEN_FILE are set; unset one");

  const std::string empty = home.Write("empty-token", "\n");
  ConnectionFlags empty_file;
  empty_file.token_file = empty;
  auto e = ResolveConnection(empty_file, FakeEnv({{"HOME", home.path.string()}}));
  REQUIRE_FALSE(e.ok());
  CHECK(e.message().find("is empty") != std::string::npos);

  vars.erase("TOPO_TOKEN_FILE");
  vars["TOPO_TIMEOUT"] = "-3";
  CHECK_FALSE(ResolveConnection({}, FakeEnv(vars)).ok());
}

TEST_CASE("ResolveConnection: several servers, each checked, at most 16") {
  TempDir home;
  const std::map<std::string, std::string> vars = {{"HOME", home.path.string()}};
  ConnectionFlags f;
  f.server = " https://a:8443 ,https://b:9443\nhttps://c";  // a repeated --server joins with \n
  auto ok = ResolveConnection(f, FakeEnv(vars));
  REQUIRE_MESSAGE(ok.ok(), ok.message());
  CHECK(ok.value().servers ==
        std::vector<std::string>{"https://a:8443", "https://b:9443", "https://c"});
  CHECK(ok.value().options.server == "https://a:8443");
  CHECK(ok.value().options.token.empty());  // not all on this machine: no local admin token

  f.server = "https://a:8443,http://plain:80";
  auto plain = ResolveConnection(f, FakeEnv(vars));
  REQUIRE_FALSE(plain.ok());
  CHECK(plain.message().find("HTTPS only") != std::string::npos);
  CHECK(plain.message().find("(from --server)") != std::string::npos);

  f.server = " , ";
  auto none = ResolveConnection(f, FakeEnv(vars));
  REQUIRE_FALSE(none.ok());
  CHECK(none.message().find("no server in") != std::string::npos);

  f.server.clear();
  for (int i = 0; i < 17; ++i)
    f.server += (i ? "," : "") + std::string("https://h") + std::to_string(i);
  auto many = ResolveConnection(f, FakeEnv(vars));
  REQUIRE_FALSE(many.ok());
  CHECK(many.message().find("more than 16 servers") != std::string::npos);
}

TEST_CASE("ParseServerUrl: schemes, ports, IPv6 and mistakes") {
  auto url = [](std::string_view u) {
    auto r = ParseServerUrl(u);
    REQUIRE_MESSAGE(r.ok(), r.message());
    return r.value();
  };
  CHECK(url("https://127.0.0.1:8443").ToString() == "https://127.0.0.1:8443");
  CHECK(url("https://127.0.0.1:8443").host_is_ip);
  CHECK(url("sched.example.com").ToString() == "https://sched.example.com:8443");
  CHECK_FALSE(url("sched.example.com").host_is_ip);
  CHECK(url("HTTPS://Sched:443/").ToString() == "https://Sched:443");
  CHECK(url("https://[::1]:9000").host == "::1");
  CHECK(url("https://[::1]:9000").HostHeader() == "[::1]:9000");
  CHECK(url("https://[::1]").port == "8443");
  CHECK(url("https://proxy/topo/").path_prefix == "/topo");
  CHECK_FALSE(ParseServerUrl("http://x").ok());
  CHECK_FALSE(ParseServerUrl("ftp://x").ok());
  CHECK_FALSE(ParseServerUrl("https://x:0").ok());
  CHECK_FALSE(ParseServerUrl("https://x:99999").ok());
  CHECK_FALSE(ParseServerUrl("https://x:").ok());
  CHECK_FALSE(ParseServerUrl("https://").ok());
  CHECK_FALSE(ParseServerUrl("https://a b").ok());
  CHECK_FALSE(ParseServerUrl("https://user@x").ok());
  CHECK_FALSE(ParseServerUrl("https://x/?q").ok());
  CHECK_FALSE(ParseServerUrl("https://[::1").ok());
  CHECK(IsLoopbackHost("127.0.0.1"));
  CHECK(IsLoopbackHost("127.1.2.3"));
  CHECK(IsLoopbackHost("::1"));
  CHECK(IsLoopbackHost("LocalHost"));
  CHECK_FALSE(IsLoopbackHost("10.0.0.1"));
  CHECK_FALSE(IsLoopbackHost("sched.example.com"));
}

}  // namespace
}  // namespace topo::cli
