// sd_notify without libsystemd (sd_notify.hpp): a datagram socket stands in
// for the service manager, at a path and in the abstract namespace.

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "daemon/sd_notify.hpp"

using topo::daemon::NotifyServiceManager;

namespace {

// A bound AF_UNIX datagram socket: `name` is a path or "@abstract".
class FakeServiceManager {
 public:
  explicit FakeServiceManager(std::string name) : name_(std::move(name)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name_.data(), name_.size());
    if (name_[0] == '@') addr.sun_path[0] = '\0';
    const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size());
    bound_ = ::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), length) == 0;
  }
  ~FakeServiceManager() {
    ::close(fd_);
    if (name_[0] == '/') ::unlink(name_.c_str());
  }
  bool bound() const { return bound_; }
  // The next datagram ("" when none is waiting).
  std::string Receive() {
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
  }

 private:
  std::string name_;
  int fd_ = -1;
  bool bound_ = false;
};

}  // namespace

TEST_CASE("sd_notify: READY=1 reaches a socket named by path") {
  const std::string path = "/tmp/topo-notify-" + std::to_string(::getpid());
  FakeServiceManager manager(path);
  REQUIRE(manager.bound());
  CHECK(NotifyServiceManager(path, "READY=1\nSTATUS=listening").ok());
  CHECK(manager.Receive() == "READY=1\nSTATUS=listening");
}

TEST_CASE("sd_notify: an @abstract name is the abstract namespace") {
  const std::string name = "@topo-notify-" + std::to_string(::getpid());
  FakeServiceManager manager(name);
  REQUIRE(manager.bound());
  CHECK(NotifyServiceManager(name, "READY=1").ok());
  CHECK(manager.Receive() == "READY=1");
}

TEST_CASE("sd_notify: the environment's NOTIFY_SOCKET, and none") {
  const std::string path = "/tmp/topo-notify-env-" + std::to_string(::getpid());
  FakeServiceManager manager(path);
  REQUIRE(manager.bound());
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  CHECK(NotifyServiceManager("READY=1").ok());
  CHECK(manager.Receive() == "READY=1");
  ::unsetenv("NOTIFY_SOCKET");
  // Not started by a service manager: nothing to do, not an error.
  CHECK(NotifyServiceManager("READY=1").ok());
  CHECK(NotifyServiceManager("", "READY=1").ok());
}

TEST_CASE("sd_notify: a bad or unreachable socket is an error naming it") {
  topo::core::Status relative = NotifyServiceManager("run/notify", "READY=1");
  CHECK_FALSE(relative.ok());
  CHECK(relative.message().find("run/notify") != std::string::npos);
  CHECK_FALSE(NotifyServiceManager("/" + std::string(200, 'x'), "READY=1").ok());
  topo::core::Status missing =
      NotifyServiceManager("/tmp/topo-notify-nobody-listens-here", "READY=1");
  CHECK_FALSE(missing.ok());
  CHECK(missing.message().find("topo-notify-nobody-listens-here") != std::string::npos);
}
