#pragma once
// What both halves of the connection relay (relay_client.hpp,
// relay_server.hpp) do on a Unix socket: bounded writes and reads of one
// HTTP message by a deadline, and who is at the other end. Internal to them.

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

namespace topo::cli::relay::io {

namespace http = boost::beast::http;
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

// A file descriptor closed when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

inline int MillisLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
}

// The user id of the process at the other end of a Unix socket.
inline bool PeerIsMe(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == ::geteuid();
}

// Writes all of `bytes` by the deadline; false on an error or timeout.
inline bool WriteAll(int fd, std::string_view bytes, Clock::time_point deadline) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      const int wait = MillisLeft(deadline);
      if (wait == 0 || ::poll(&p, 1, wait) <= 0) return false;
      continue;
    }
    return false;
  }
  return true;
}

enum class ReadEnd { kDone, kClosedEarly, kTimedOut, kBad };

// Feeds what arrives on `fd` to `parser` until it holds a whole message.
// *got_bytes says whether anything arrived at all.
template <class Parser>
ReadEnd ReadMessage(int fd, Parser& parser, Clock::time_point deadline, bool* got_bytes,
                    std::string* why) {
  std::string pending;
  char chunk[16384];
  *got_bytes = false;
  while (!parser.is_done()) {
    pollfd p{fd, POLLIN, 0};
    const int wait = MillisLeft(deadline);
    if (wait == 0) return ReadEnd::kTimedOut;
    const int ready = ::poll(&p, 1, wait);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return ReadEnd::kTimedOut;
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) {
      if (!pending.empty() || !*got_bytes) return ReadEnd::kClosedEarly;
      boost::system::error_code ec;
      parser.put_eof(ec);
      if (ec) return ReadEnd::kClosedEarly;
      break;
    }
    *got_bytes = true;
    pending.append(chunk, static_cast<size_t>(n));
    while (!pending.empty() && !parser.is_done()) {
      boost::system::error_code ec;
      const size_t used = parser.put(asio::buffer(pending), ec);
      pending.erase(0, used);
      if (ec == http::error::need_more) break;
      if (ec) {
        *why = ec.message();
        return ReadEnd::kBad;
      }
      if (used == 0) break;
    }
  }
  return ReadEnd::kDone;
}

template <class Message>
std::string Serialize(Message& message) {
  std::ostringstream out;
  out << message;
  return out.str();
}

inline bool KnownMethod(http::verb v) {
  return v == http::verb::get || v == http::verb::head || v == http::verb::post ||
         v == http::verb::put || v == http::verb::delete_ || v == http::verb::patch;
}

}  // namespace topo::cli::relay::io
