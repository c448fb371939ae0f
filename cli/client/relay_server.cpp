#include "client/relay_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "client/tls_session_cache.hpp"

#include "client/relay_io.hpp"

namespace topo::cli::relay {

using namespace io;  // NOLINT: both halves are made of them
using core::Status;

std::string CheckRequest(const Request& request) {
  if (!KnownMethod(request.method())) {
    return "method '" + std::string(request.method_string()) +
           "' is not one the API uses (GET, HEAD, POST, PUT, PATCH, DELETE)";
  }
  const std::string target(request.target());
  if (target.empty() || target.front() != '/') return "the target must start with '/'";
  if (target.size() > kMaxTargetBytes) {
    return "the target is longer than " + std::to_string(kMaxTargetBytes) + " bytes";
  }
  for (char c : target) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return "the target has a space or control character";
  }
  return "";
}

namespace {

// The relay's state shared by its connection threads.
class Relay {
 public:
  explicit Relay(ClientOptions options) : options_(std::move(options)) {}

  // Serves one command's connection (on its own thread).
  void Handle(int raw_fd) {
    Fd fd(raw_fd);
    if (!PeerIsMe(fd.get())) return;  // another user (root included): closed unanswered
    const Clock::time_point read_by = Clock::now() + options_.timeout;
    http::request_parser<http::string_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    parser.body_limit(kMaxBodyBytes);
    bool got_bytes = false;
    std::string why;
    const ReadEnd end = ReadMessage(fd.get(), parser, read_by, &got_bytes, &why);
    if (end != ReadEnd::kDone) {
      if (end == ReadEnd::kBad) Answer(fd.get(), 400, "failed", "bad request: " + why);
      return;
    }
    Request req = parser.release();
    if (std::string bad = CheckRequest(req); !bad.empty()) {
      Answer(fd.get(), 400, "failed", "bad request: " + bad);
      return;
    }
    std::unique_ptr<ApiClient> client = Take();
    if (!client) {
      core::Result<std::unique_ptr<ApiClient>> made = ApiClient::Create(options_);
      if (!made.ok()) {
        Answer(fd.get(), 502, "unsent", made.message());
        return;
      }
      client = std::move(made.value());
    }
    std::string authorization;
    if (auto it = req.find(http::field::authorization); it != req.end()) {
      authorization = std::string(it->value());
    }
    std::string content_type;
    if (auto it = req.find(http::field::content_type); it != req.end()) {
      content_type = std::string(it->value());
    }
    std::chrono::milliseconds timeout = options_.timeout;
    if (auto it = req.find(std::string(kTimeoutHeader)); it != req.end()) {
      const std::string v(it->value());
      int64_t ms = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
      if (ec == std::errc() && end == v.data() + v.size() && ms >= 1 && ms <= 86'400'000) {
        timeout = std::chrono::milliseconds(ms);
      }
    }
    core::Result<ApiResponse> res =
        client->Forward(std::string(req.method_string()), std::string(req.target()),
                        std::move(req.body()), authorization, content_type, timeout);
    if (!res.ok()) {
      Answer(fd.get(), 502, client->last_failure_unsent() ? "unsent" : "failed", res.message());
      return;
    }
    Response out{static_cast<http::status>(res.value().status), 11};
    if (!res.value().content_type.empty())
      out.set(http::field::content_type, res.value().content_type);
    if (!res.value().retry_after.empty())
      out.set(http::field::retry_after, res.value().retry_after);
    out.body() = std::move(res.value().text);
    out.keep_alive(false);
    out.prepare_payload();
    WriteAll(fd.get(), Serialize(out), Clock::now() + options_.timeout);
    Give(std::move(client));
  }

  // Keeps a client (its connection) for the next request.
  void Give(std::unique_ptr<ApiClient> c) {
    std::lock_guard lock(mu_);
    if (idle_.size() < kMaxIdleConnections) idle_.push_back({std::move(c), Clock::now()});
  }

  // Closes the kept connections unused for kKeepConnection.
  void CloseStale() {
    std::vector<std::unique_ptr<ApiClient>> stale;
    {
      std::lock_guard lock(mu_);
      const Clock::time_point cutoff = Clock::now() - kKeepConnection;
      auto fresh = std::find_if(idle_.begin(), idle_.end(),
                                [&](const Kept& k) { return k.since >= cutoff; });
      for (auto it = idle_.begin(); it != fresh; ++it) stale.push_back(std::move(it->client));
      idle_.erase(idle_.begin(), fresh);
    }
    // Closed here, outside the lock (close_notify).
  }

  bool Enter() {
    std::lock_guard lock(mu_);
    if (active_ >= kMaxActive) return false;
    ++active_;
    last_used_ = Clock::now();
    return true;
  }
  void Leave() {
    std::lock_guard lock(mu_);
    --active_;
    last_used_ = Clock::now();
    done_.notify_all();
  }
  bool Idle(std::chrono::milliseconds idle_exit) {
    std::lock_guard lock(mu_);
    return active_ == 0 && Clock::now() - last_used_ >= idle_exit;
  }
  void WaitForAll() {
    std::unique_lock lock(mu_);
    done_.wait(lock, [&] { return active_ == 0; });
    idle_.clear();  // closes the kept connections (close_notify)
  }

  static void Answer(int fd, int status, std::string_view kind, const std::string& message) {
    Response out{static_cast<http::status>(status), 11};
    out.set(std::string(kHeader), std::string(kind));
    out.set(http::field::content_type, "text/plain; charset=utf-8");
    out.body() = message;
    out.keep_alive(false);
    out.prepare_payload();
    WriteAll(fd, Serialize(out), Clock::now() + std::chrono::seconds(5));
  }

 private:
  // The most recently used kept connection (so a few stay warm and the
  // rest age out), or null.
  std::unique_ptr<ApiClient> Take() {
    std::lock_guard lock(mu_);
    if (idle_.empty()) return nullptr;
    std::unique_ptr<ApiClient> c = std::move(idle_.back().client);
    idle_.pop_back();
    return c;
  }

  struct Kept {
    std::unique_ptr<ApiClient> client;
    Clock::time_point since;  // returned to the pool
  };

  const ClientOptions options_;
  std::mutex mu_;
  std::condition_variable done_;
  int active_ = 0;
  Clock::time_point last_used_ = Clock::now();
  std::vector<Kept> idle_;  // oldest first
};

// The inode of `path`, or 0 when it is gone.
ino_t InodeOf(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return 0;
  return st.st_ino;
}

}  // namespace

Status Serve(const ServeOptions& options) {
  ClientOptions client = options.client;
  client.token.clear();      // never the relay's own: each request brings its own
  client.relay_dir.clear();  // and it talks to the server itself
  core::Result<std::unique_ptr<ApiClient>> first = ApiClient::Create(client);
  if (!first.ok()) return first.status();
  const std::string& dir = options.client.relay_dir;
  if (dir.empty())
    return Status::Error("no cache directory for the relay's socket (set HOME or XDG_CACHE_HOME)");
  if (Status s = CheckPrivateDir(dir, /*create=*/true); !s.ok()) return s;
  const std::string path = SocketPath(dir, first.value()->session_key());
  if (!options.expected_socket.empty() && path != options.expected_socket) {
    return Status::Error("these settings serve " + (path.empty() ? "no socket" : path) + ", not " +
                         options.expected_socket);
  }
  if (path.empty()) {
    return Status::Error("the relay's socket path under " + dir +
                         " is too long for a Unix socket; set XDG_CACHE_HOME to a shorter "
                         "directory");
  }
  // One relay per socket: whoever holds the lock serves; the others leave.
  const std::string lock_path = path.substr(0, path.size() - 5) + ".lock";
  Fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (lock.get() < 0)
    return Status::Error("cannot open " + lock_path + ": " + std::strerror(errno));
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (options.on_ready) options.on_ready(path, /*already=*/true);
    return Status::Ok();
  }

  ::unlink(path.c_str());  // a relay that ended without removing it
  Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (listener.get() < 0) return Status::Error(std::string("socket: ") + std::strerror(errno));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const mode_t old_mask = ::umask(0177);
  const int bound = ::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  ::umask(old_mask);
  if (bound != 0) return Status::Error("cannot bind " + path + ": " + std::strerror(bind_errno));
  if (::listen(listener.get(), 128) != 0) {
    ::unlink(path.c_str());
    return Status::Error("cannot listen on " + path + ": " + std::strerror(errno));
  }
  const ino_t inode = InodeOf(path);
  std::signal(SIGPIPE, SIG_IGN);
  if (options.on_ready) options.on_ready(path, /*already=*/false);

  Relay relay(client);
  relay.Give(std::move(first.value()));  // the first request's client
  auto serve_one = [&relay](int fd) {
    if (!relay.Enter()) {
      Relay::Answer(fd, 503, "unsent", "the connection relay is busy");
      ::close(fd);
      return;
    }
    std::thread([&relay, fd] {
      relay.Handle(fd);
      relay.Leave();
    }).detach();
  };
  for (;;) {
    pollfd p{listener.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, 500);
    if (ready > 0) {
      const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) serve_one(fd);
      relay.CloseStale();
      continue;
    }
    relay.CloseStale();
    if (relay.Idle(options.idle_exit) || InodeOf(path) != inode) break;
  }
  // New commands go directly from now on; those already queued are served.
  if (InodeOf(path) == inode) ::unlink(path.c_str());
  for (;;) {
    const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) break;
    serve_one(fd);
  }
  relay.WaitForAll();
  return Status::Ok();
}

}  // namespace topo::cli::relay
