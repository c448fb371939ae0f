// sd_notify(3) without libsystemd (sd_notify.hpp).

#include "daemon/sd_notify.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace topo::daemon {

using core::Status;

Status NotifyServiceManager(std::string_view socket_name, std::string_view message) {
  if (socket_name.empty()) return Status::Ok();
  const std::string where = "NOTIFY_SOCKET " + std::string(socket_name);
  if (socket_name[0] != '/' && socket_name[0] != '@') {
    return Status::Error(where + ": not an absolute path or an @abstract name");
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_name.size() > sizeof addr.sun_path - (socket_name[0] == '/' ? 1 : 0)) {
    return Status::Error(where + ": longer than a unix socket address");
  }
  std::memcpy(addr.sun_path, socket_name.data(), socket_name.size());
  // An abstract name starts with a NUL and is exactly as long as given.
  if (socket_name[0] == '@') addr.sun_path[0] = '\0';
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_name.size() +
                                             (socket_name[0] == '/' ? 1 : 0));
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Error(where + ": socket: " + std::strerror(errno));
  const ssize_t sent = ::sendto(fd, message.data(), message.size(), MSG_NOSIGNAL,
                                reinterpret_cast<const sockaddr*>(&addr), length);
  const int err = errno;
  ::close(fd);
  if (sent < 0) return Status::Error(where + ": " + std::strerror(err));
  if (static_cast<size_t>(sent) != message.size()) {
    return Status::Error(where + ": the message was cut short");
  }
  return Status::Ok();
}

Status NotifyServiceManager(std::string_view message) {
  const char* name = std::getenv("NOTIFY_SOCKET");
  return NotifyServiceManager(name == nullptr ? std::string_view() : std::string_view(name),
                              message);
}

}  // namespace topo::daemon
