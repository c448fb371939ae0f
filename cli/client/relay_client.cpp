// The connection relay, the command's half (relay_client.hpp).

#include "client/relay_client.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

#include "client/relay_io.hpp"

namespace topo::cli::relay {

using namespace io;  // NOLINT: this half is made of them

std::string HostTag() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "host";
  std::string tag;
  for (const char* c = name; *c != '\0' && tag.size() < 32; ++c) {
    const auto u = static_cast<unsigned char>(*c);
    tag += std::isalnum(u) || *c == '-' || *c == '.' ? *c : '_';
  }
  return tag.empty() ? "host" : tag;
}

std::string SocketPath(const std::string& dir, std::string_view key) {
  if (dir.empty() || key.empty()) return "";
  std::string path = dir + "/relay-" + std::string(key.substr(0, 16)) + "-" + HostTag() + ".sock";
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) return "";
  return path;
}

SendResult Send(const std::string& socket_path, const Request& request, Clock::time_point deadline,
                bool safe_to_repeat) {
  SendResult out;
  if (socket_path.empty()) return out;
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return out;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return out;
  // Only a relay of this user may see the request (and its token).
  if (!PeerIsMe(fd.get())) {
    out.message = socket_path + " is served by another user; not used";
    return out;
  }
  Request copy = request;
  copy.keep_alive(false);
  copy.prepare_payload();
  if (!WriteAll(fd.get(), Serialize(copy), deadline)) {
    // A relay reads a whole request before it forwards any of it.
    out.outcome = Outcome::kUnsent;
    out.message = "the connection relay did not take the request";
    return out;
  }
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxBodyBytes);
  parser.header_limit(kMaxHeaderBytes);
  bool got_bytes = false;
  std::string why;
  switch (ReadMessage(fd.get(), parser, deadline, &got_bytes, &why)) {
    case ReadEnd::kDone:
      break;
    case ReadEnd::kTimedOut:
      out.outcome = Outcome::kFailed;
      out.timed_out = true;
      out.message = "timed out";
      return out;
    case ReadEnd::kClosedEarly:
    case ReadEnd::kBad:
      out.outcome = !got_bytes && safe_to_repeat ? Outcome::kUnsent : Outcome::kFailed;
      out.message =
          got_bytes ? "the connection relay's answer was cut off" + (why.empty() ? "" : ": " + why)
                    : "the connection relay ended without answering";
      return out;
  }
  out.response = parser.release();
  const auto relay_says = out.response.find(std::string(kHeader));
  if (relay_says != out.response.end()) {
    const std::string v(relay_says->value());
    out.outcome = v == "unsent" ? Outcome::kUnsent : Outcome::kFailed;
    out.message = out.response.body();
    return out;
  }
  out.outcome = Outcome::kAnswered;
  return out;
}

}  // namespace topo::cli::relay
