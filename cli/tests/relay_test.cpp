// The connection relay's boundaries (client/relay_client.hpp, relay_server.hpp): what it accepts
// from a command, where its socket goes, and a command's side when no relay
// (of this user) listens. The relay against a real daemon, other users and
// hostile clients on its socket: tests/daemon/test_relay.py.

#include "client/relay_server.hpp"

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

namespace topo::cli {
namespace {

namespace http = boost::beast::http;

relay::Request Make(http::verb verb, std::string target) {
  relay::Request r{verb, target, 11};
  return r;
}

TEST_CASE("relay: CheckRequest, a row per hostile request") {
  struct Row {
    const char* name;
    relay::Request request;
    const char* error_part;  // "" when it may be forwarded
  };
  relay::Request brew{http::verb::unknown, "/v1/jobs", 11};
  brew.method_string("BREW");
  const Row rows[] = {
      {"a read", Make(http::verb::get, "/v1/jobs?all=1"), ""},
      {"a submission", Make(http::verb::post, "/v1/jobs"), ""},
      {"a cancel", Make(http::verb::delete_, "/v1/jobs/7"), ""},
      {"a patch", Make(http::verb::patch, "/v1/tenants/a"), ""},
      {"an unknown method", brew, "method 'BREW'"},
      {"a method the API has no use for", Make(http::verb::connect, "/v1/jobs"),
       "method 'CONNECT'"},
      {"an absolute-form target", Make(http::verb::get, "https://evil.example/v1/jobs"),
       "must start with '/'"},
      {"an empty target", Make(http::verb::get, ""), "must start with '/'"},
      {"a target with a space", Make(http::verb::get, "/v1/jobs x"), "space or control"},
      {"a target with a control character", Make(http::verb::get, "/v1/jobs\x7f"),
       "space or control"},
      {"a target of 8 KiB and one byte", Make(http::verb::get, "/" + std::string(8192, 'a')),
       "longer than 8192 bytes"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    const std::string error = relay::CheckRequest(row.request);
    if (std::string(row.error_part).empty()) {
      CHECK(error == "");
    } else {
      CHECK(error.find(row.error_part) != std::string::npos);
    }
  }
  CHECK(relay::CheckRequest(Make(http::verb::get, "/" + std::string(8191, 'a'))) == "");
}

TEST_CASE(
    "relay: SocketPath names the server's key and this host, and fits a Unix socket address") {
  const std::string key = "0123456789abcdef0123456789abcdef";
  const std::string host = relay::HostTag();
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof name - 1) == 0);
  const std::string plain(name);
  if (plain.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") ==
      std::string::npos) {
    CHECK(host == plain.substr(0, 32));  // a plain host name, as it is
  }
  CHECK(host.size() <= 32);
  CHECK(host.find('/') == std::string::npos);
  CHECK(relay::SocketPath("/home/ada/.cache/topo", key) ==
        "/home/ada/.cache/topo/relay-0123456789abcdef-" + host + ".sock");
  CHECK(relay::SocketPath("", key) == "");
  CHECK(relay::SocketPath("/home/ada/.cache/topo", "") == "");
  // sun_path holds 108 bytes with its NUL: a longer path shares nothing.
  const size_t room = sizeof(sockaddr_un{}.sun_path) - 1;
  const std::string fixed = "/relay-0123456789abcdef-" + host + ".sock";
  CHECK(relay::SocketPath(std::string(room - fixed.size(), 'd'), key).size() == room);
  CHECK(relay::SocketPath(std::string(room - fixed.size() + 1, 'd'), key) == "");
}

TEST_CASE("relay: Send finds no relay where none listens, and sends nothing") {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("relay-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "relay-x.sock").string();
  relay::Request req = Make(http::verb::post, "/v1/jobs");
  // No file.
  CHECK(relay::Send(path, req, deadline, false).outcome == relay::Outcome::kNoRelay);
  // A socket file nobody listens on (a relay that was killed): refused.
  {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, path.size());
    REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
    ::close(fd);
  }
  CHECK(relay::Send(path, req, deadline, false).outcome == relay::Outcome::kNoRelay);
  // Sharing off (no path).
  CHECK(relay::Send("", req, deadline, false).outcome == relay::Outcome::kNoRelay);
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "relay: a listener that closes without answering is unsent only for a repeatable request") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("relay-test2-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "relay-y.sock").string();
  const int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, path.size());
  REQUIRE(::bind(listener, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 4) == 0);
  for (const bool repeatable : {false, true}) {
    CAPTURE(repeatable);
    std::thread closer([listener] {
      const int fd = ::accept(listener, nullptr, nullptr);
      char buf[4096];
      (void)::recv(fd, buf, sizeof buf, 0);
      ::close(fd);
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    relay::SendResult r =
        relay::Send(path, Make(http::verb::post, "/v1/jobs"), deadline, repeatable);
    closer.join();
    // Nothing came back: it may or may not have been sent on.
    CHECK(r.outcome == (repeatable ? relay::Outcome::kUnsent : relay::Outcome::kFailed));
    CHECK(r.message == "the connection relay ended without answering");
  }
  ::close(listener);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace topo::cli
