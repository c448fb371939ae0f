// SystemStopping (topo/agent/system_state.hpp).

#include "topo/agent/system_state.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "spawn.hpp"

extern char** environ;

namespace topo::agent {

bool SystemStopping(const std::string& systemctl, int timeout_ms) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return false;
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  ::posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  char arg0[] = "systemctl";
  char arg1[] = "is-system-running";
  char* argv[] = {arg0, arg1, nullptr};
  // A process group of its own, so a command that does not answer is
  // killed with whatever it started.
  posix_spawnattr_t attr;
  ::posix_spawnattr_init(&attr);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  ::posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, systemctl.c_str(), &actions, &attr, argv, environ);
  ::posix_spawnattr_destroy(&attr);
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (spawned != 0) {
    ::close(out[0]);
    return false;
  }
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool timed_out = false;
  bool ended = false;  // the command closed its output
  while (text.size() < 256) {
    char buf[64];
    const ssize_t n = ReadBefore(out[0], buf, sizeof buf, deadline);
    if (n == kReadTimedOut) {
      timed_out = true;
      break;
    }
    if (n <= 0) {
      ended = true;
      break;
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  // Late, or more than any answer: not waited for.
  if (!ended) ::kill(-pid, SIGKILL);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  return !timed_out && text == "stopping";
}

}  // namespace topo::agent
