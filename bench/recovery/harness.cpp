#include "harness.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace topo::bench {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------- daemon

bool Daemon::Start(const std::string& binary, const std::string& config) {
  char tmpl[] = "/tmp/topo-bench-recovery-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return false;
  dir_ = tmpl;
  std::ofstream(dir_ + "/bench.conf") << config;
  pid_ = fork();
  if (pid_ == 0) {
    const std::string log = dir_ + "/daemon.log";
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (f != nullptr) dup2(fileno(stdout), 2);
    execl(binary.c_str(), binary.c_str(), "--state-dir", dir_.c_str(), "--listen", "127.0.0.1:0",
          "--config", (dir_ + "/bench.conf").c_str(), nullptr);
    _exit(127);
  }
  for (int i = 0; i < 400; ++i) {
    const std::string url = Slurp(dir_ + "/endpoint");
    if (!url.empty() && url.back() == '\n') {
      url_ = Trim(url);
      port_ = std::stoi(url_.substr(url_.rfind(':') + 1));
      token_ = Trim(Slurp(dir_ + "/admin-token"));
      return true;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::cerr << "bench_recovery: topo-scheduler did not start:\n" << Log();
  return false;
}

void Daemon::Stop() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 600 && waitpid(pid_, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (waitpid(pid_, &status, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
    pid_ = -1;
  }
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  dir_.clear();
}

std::string Daemon::Log() const {
  const std::string all = Slurp(dir_ + "/daemon.log");
  return all.size() > 4000 ? all.substr(all.size() - 4000) : all;
}

Json Daemon::Call(const std::string& method, const std::string& target, const Json& body) {
  ssl::context tls(ssl::context::tls_client);
  tls.load_verify_file(dir_ + "/ca.pem");
  tls.set_verify_mode(ssl::verify_peer);
  net::io_context ioc;
  beast::ssl_stream<beast::tcp_stream> stream(ioc, tls);
  tcp::resolver resolver(ioc);
  beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(120));
  beast::get_lowest_layer(stream).connect(resolver.resolve("127.0.0.1", std::to_string(port_)));
  stream.handshake(ssl::stream_base::client);
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::authorization, "Bearer " + token_);
  req.set(http::field::content_type, "application/json");
  if (!body.is_null()) req.body() = body.dump();
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1ull << 30);
  http::read(stream, buf, parser);
  const auto& res = parser.get();
  if (res.result_int() >= 300) {
    throw std::runtime_error(method + " " + target + ": " + std::to_string(res.result_int()) + " " +
                             res.body().substr(0, 500));
  }
  return Json::parse(res.body());
}

// ---------------------------------------------------------------- simulator

bool SimProcess::Launch(const std::string& agent_bin, const std::vector<std::string>& args,
                        const std::string& log_path) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return false;
  if (pipe2(out, O_CLOEXEC) != 0) return false;
  pid_ = fork();
  if (pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (log >= 0) dup2(log, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(agent_bin.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(agent_bin.c_str(), argv.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  in_fd_ = in[1];
  out_fd_ = out[0];
  reader_ = std::thread([this] { ReadLoop(); });
  return pid_ > 0;
}

void SimProcess::ReadLoop() {
  std::string pending;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      Json j = Json::parse(pending.begin() + static_cast<std::ptrdiff_t>(start),
                           pending.begin() + static_cast<std::ptrdiff_t>(nl), nullptr, false);
      if (!j.is_object()) continue;
      const std::string ev = j.value("ev", "");
      std::lock_guard lock(mu_);
      if (ev == "ready") {
        ready_ = true;
      } else if (ev == "start") {
        starts_[{j.value("job", int64_t{0}), j.value("restart_count", 0)}].push_back(
            Start{j.value("node", ""), j.value("t", int64_t{0}),
                  j.value("checkpoint_step", int64_t{-1})});
      } else if (ev == "ckpt") {
        ckpts_[{j.value("job", int64_t{0}), j.value("step", int64_t{0})}] =
            j.value("t", int64_t{0});
      } else if (ev == "ack") {
        acks_.push_back(j);
      } else if (ev == "status") {
        status_ = j;
        ++status_count_;
      } else {
        continue;
      }
      cv_.notify_all();
    }
    pending.erase(0, start);
  }
  std::lock_guard lock(mu_);
  exited_ = true;
  cv_.notify_all();
}

void SimProcess::Send(const std::string& line) {
  const std::string text = line + "\n";
  size_t done = 0;
  while (in_fd_ >= 0 && done < text.size()) {
    const ssize_t n = write(in_fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

bool SimProcess::WaitFor(const std::function<bool()>& pred, int64_t timeout_ms) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return pred(); });
}

Json SimProcess::Status(int64_t timeout_ms) {
  int64_t before;
  {
    std::lock_guard lock(mu_);
    before = status_count_;
  }
  Send("status");
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                    [&] { return status_count_ > before || exited_; }) ||
      status_count_ == before) {
    return nullptr;
  }
  return status_;
}

Json SimProcess::Command(const std::string& line, int64_t timeout_ms) {
  size_t before;
  {
    std::lock_guard lock(mu_);
    before = acks_.size();
  }
  Send(line);
  std::unique_lock lock(mu_);
  Json found;
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    for (size_t i = before; i < acks_.size(); ++i) {
      if (acks_[i].value("cmd", "") == line) {
        found = acks_[i];
        return true;
      }
    }
    return exited_;
  });
  return found;
}

void SimProcess::Stop() {
  if (pid_ > 0) {
    Send("quit");
    int status = 0;
    for (int i = 0; i < 200 && waitpid(pid_, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (waitpid(pid_, &status, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
    pid_ = -1;
  }
  if (in_fd_ >= 0) close(in_fd_);
  in_fd_ = -1;
  if (reader_.joinable()) reader_.join();
  if (out_fd_ >= 0) close(out_fd_);
  out_fd_ = -1;
}

// ---------------------------------------------------------------- /proc

double CpuSeconds(pid_t pid) {
  const std::string stat = Slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream in(stat.substr(paren + 2));
  std::string field;
  // Fields after the command: state(3) ... utime(14) stime(15).
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && (in >> field); ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double RssMiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

int64_t OpenFileLimit(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/limits");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Max open files", 0) == 0) {
      std::istringstream fields(line.substr(14));
      std::string soft;
      fields >> soft;
      if (soft == "unlimited") return INT64_MAX;
      return std::stoll(soft);
    }
  }
  return -1;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace topo::bench
