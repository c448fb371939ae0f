// CheckTcpPortFree (port_check.hpp).

#include "port_check.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace topo::agent {

namespace {

// 0 when the bind worked; the errno of the bind otherwise; -1 when the
// address family does not exist here (no IPv6).
int TryBind(int family, int port) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno == EAFNOSUPPORT ? -1 : errno;
  const int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc = 0;
  if (family == AF_INET) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
  } else {
    // Only the IPv6 side: the IPv4 side was checked on its own.
    (void)::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
  }
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  // No IPv6 address configured at all: nothing to collide with there.
  if (family == AF_INET6 && err == EADDRNOTAVAIL) return -1;
  return err;
}

}  // namespace

core::Status CheckTcpPortFree(int port) {
  if (port < 1 || port > 65535) {
    return core::Status::Error("port " + std::to_string(port) + " is not a TCP port (1-65535)");
  }
  // Both sides, each named where it fails: another process may hold the
  // port on either, or on both.
  std::string in_use, other;
  for (int family : {AF_INET, AF_INET6}) {
    const int err = TryBind(family, port);
    if (err <= 0) continue;
    std::string& to = err == EADDRINUSE ? in_use : other;
    to += std::string(to.empty() ? "" : ", ") + (family == AF_INET ? "IPv4" : "IPv6") +
          " bind: " + std::strerror(err);
  }
  if (!in_use.empty()) {
    return core::Status::Error("port " + std::to_string(port) + " is in use (" + in_use + ")");
  }
  if (!other.empty()) {
    return core::Status::Error("port " + std::to_string(port) + " cannot be bound (" + other + ")");
  }
  return core::Status::Ok();
}

}  // namespace topo::agent
