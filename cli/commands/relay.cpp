// `topo relay`: the connection relay (client/relay_client.hpp, relay_server.hpp), and how a command
// starts one in the background.

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "client/relay_server.hpp"
#include "client/tls_session_cache.hpp"
#include "commands/client_common.hpp"
#include "commands/commands.hpp"

namespace topo::cli {

namespace {

struct RelayArgs {
  double idle_exit_s = 30;
  std::string socket;
};

int RunRelay(const RelayArgs& args) {
  core::Result<Connection> conn = ResolveConnection(*SharedConnectionFlags(), ProcessEnvironment());
  if (!conn.ok()) {
    std::cerr << "topo: " << conn.message() << "\n";
    return kExitError;
  }
  relay::ServeOptions options;
  options.client = conn.value().options;
  options.client.relay_dir = conn.value().relay_dir;
  options.idle_exit = std::chrono::milliseconds(static_cast<int64_t>(args.idle_exit_s * 1000));
  options.expected_socket = args.socket;  // started by a command: its socket, or nothing
  if (::isatty(2) == 1) {
    // By hand in a terminal: say what it serves (a started one has no terminal).
    const std::string server = options.client.server;
    const double idle_s = args.idle_exit_s;
    options.on_ready = [server, idle_s](const std::string& socket, bool already) {
      if (already) {
        std::cerr << "topo relay: another relay already serves " << socket << " for " << server
                  << "\n";
      } else {
        std::cerr << "topo relay: serving " << socket << " for " << server << "; exits after "
                  << idle_s << " s without a request (Ctrl-C ends it now)\n";
      }
    };
  }
  if (core::Status s = relay::Serve(options); !s.ok()) {
    std::cerr << "topo: relay: " << s.message() << "\n";
    return kExitError;
  }
  return kExitOk;
}

}  // namespace

void StartRelay(const ClientOptions& options, const std::string& socket) {
  // A directory the relay would refuse (another user's, or writable by
  // others) gets no relay: not one started, and failing, per command.
  if (!CheckPrivateDir(options.relay_dir, /*create=*/true).ok()) return;
  std::vector<std::string> words = {"topo",         "relay",    "--server",
                                    options.server, "--socket", socket};
  if (!options.ca_file.empty()) {
    // The relay works from / (it holds no directory busy): the CA by its
    // absolute path.
    char* absolute = ::realpath(options.ca_file.c_str(), nullptr);
    if (absolute == nullptr) return;
    words.push_back("--ca");
    words.push_back(absolute);
    std::free(absolute);
  }
  // Everything the child needs is made before fork: after it, only
  // async-signal-safe calls until exec.
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const pid_t child = ::fork();
  if (child < 0) return;
  if (child > 0) {
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    return;
  }
  // The child: a session of its own, and a grandchild that init adopts, so
  // that the relay outlives the command and is nobody's zombie.
  ::setsid();
  if (::fork() != 0) ::_exit(0);
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
  }
  ::closefrom(3);
  if (::chdir("/") != 0) ::_exit(127);
  ::execv("/proc/self/exe", argv.data());
  ::_exit(127);
}

void RegisterRelay(CLI::App& app, int* exit_code) {
  static RelayArgs args;
  CLI::App* cmd = AddVerb(
      app, "relay",
      "Keep connections to topo-scheduler open for this user's topo commands.\n\n"
      "Every topo command that talks to the scheduler first looks for a relay of its own\n"
      "user serving the same server and CA, on a Unix socket in $XDG_RUNTIME_DIR/topo or\n"
      "~/.cache/topo (mode 0600; both ends check each other's user id). Through it, a command "
      "skips OpenSSL's\n"
      "start-up and the TLS handshake: a fraction of the CPU per command, which counts\n"
      "when scripts submit thousands of jobs. The relay holds no token: each request\n"
      "carries the command's own, and the scheduler checks it as always.\n\n"
      "A command that finds no relay answers directly, then starts one in the background;\n"
      "it exits after --idle-exit seconds without a request. So there is nothing to run by\n"
      "hand: `topo relay` in a terminal serves in the foreground (for a look at what it\n"
      "does). Turn sharing off with TOPO_SHARE_CONNECTION=0 or `share_connection = no` in\n"
      "~/.config/topo/config (docs/cli.md, \"Connection sharing\").\n\n"
      "Examples:\n"
      "  topo relay --idle-exit 600          # serve for this shell's session of work\n"
      "  TOPO_SHARE_CONNECTION=0 topo queue  # this command directly, no relay");
  AddConnectionFlags(*cmd, SharedConnectionFlags());
  cmd->add_option("--idle-exit", args.idle_exit_s,
                  "Seconds without a request after which the relay exits (default 30)")
      ->type_name("SECONDS")
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--socket", args.socket,
                  "The socket path the starting command expects; the relay refuses to serve "
                  "another (set by the command that starts it)")
      ->type_name("PATH");
  cmd->callback([exit_code] { *exit_code = RunRelay(args); });
}

}  // namespace topo::cli
