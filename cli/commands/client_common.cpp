#include "commands/client_common.hpp"

#include <chrono>
#include <iostream>
#include <thread>

#include "client/format.hpp"
#include "commands/commands.hpp"

namespace topo::cli {

namespace {

// 429 answers are retried this many times, when Retry-After is at most
// kMaxRetryWaitS.
constexpr int kRateLimitRetries = 3;
constexpr int kMaxRetryWaitS = 10;

}  // namespace

void AddConnectionFlags(CLI::App& cmd, ConnectionFlags* flags) {
  const std::string group = "Connection (else TOPO_* variables, ~/.config/topo/config)";
  cmd.add_option("--server", flags->server,
                 "topo-scheduler URL (TOPO_SERVER; default https://127.0.0.1:8443); several "
                 "replicas: --server A,B or --server A --server B, tried in order")
      ->type_name("URL")
      ->multi_option_policy(CLI::MultiOptionPolicy::Join)
      ->group(group);
  auto* token = cmd.add_option("--token", flags->token, "API token (TOPO_TOKEN)")
                    ->type_name("TOKEN")
                    ->group(group);
  auto* token_file = cmd.add_option("--token-file", flags->token_file,
                                    "File holding the API token (TOPO_TOKEN_FILE)")
                         ->type_name("FILE")
                         ->group(group);
  token->excludes(token_file);
  cmd.add_option("--ca", flags->ca,
                 "CA certificate (PEM) the server's certificate must chain to (TOPO_CA; default "
                 "the daemon's ca.pem)")
      ->type_name("FILE")
      ->group(group);
  cmd.add_option("--state-dir", flags->state_dir,
                 "State directory of a daemon on this machine: its endpoint, admin-token and "
                 "ca.pem are used for what is not set otherwise (TOPO_STATE_DIR; default "
                 "~/.local/share/toposched)")
      ->type_name("DIR")
      ->group(group);
  cmd.add_option("--timeout", flags->timeout_s,
                 "Seconds for connecting and each request (TOPO_TIMEOUT; default 30)")
      ->type_name("SECONDS")
      ->check(CLI::Range(0.001, 86400.0))
      ->group(group);
}

CLI::App* AddVerb(CLI::App& parent, const std::string& name, const std::string& text) {
  const size_t split = text.find("\n\n");
  CLI::App* cmd = parent.add_subcommand(name, text.substr(0, split));
  if (split != std::string::npos) cmd->footer("\n" + text.substr(split + 2));
  return cmd;
}

ConnectionFlags* SharedConnectionFlags() {
  static ConnectionFlags flags;
  return &flags;
}

Session::Session(Connection connection, std::unique_ptr<ApiClient> client)
    : connection_(std::move(connection)), client_(std::move(client)) {}

std::unique_ptr<Session> Session::Open(const ConnectionFlags& flags, int* exit_code) {
  core::Result<Connection> conn = ResolveConnection(flags, ProcessEnvironment());
  if (!conn.ok()) {
    std::cerr << "topo: " << conn.message() << "\n";
    *exit_code = kExitError;
    return nullptr;
  }
  core::Result<std::unique_ptr<ApiClient>> client = ApiClient::Create(conn.value().options);
  if (!client.ok()) {
    std::cerr << "topo: " << client.message() << "\n";
    *exit_code = kExitError;
    return nullptr;
  }
  return std::unique_ptr<Session>(new Session(std::move(conn.value()), std::move(client.value())));
}

Reply Session::Call(std::string_view method, const std::string& target,
                    const std::optional<nlohmann::json>& body, bool quiet) {
  Reply reply;
  // Safe to send again to another replica even when this one may have got
  // it: reads, and a submission with its client_request_id (the daemon
  // answers a repeat with the job it made).
  const bool repeatable = method == "GET" || method == "HEAD" ||
                          (body && body->is_object() && body->contains("client_request_id"));
  size_t tried = 1;  // servers tried for this call
  for (int attempt = 0;; ++attempt) {
    core::Result<ApiResponse> res = client_->Request(method, target, body);
    // Another replica, when this one did not answer (or answered 503, its
    // leadership lost or not yet won: it acted on nothing) and the request
    // cannot be applied twice that way.
    const bool unanswered = !res.ok();
    const bool unavailable = res.ok() && res.value().status == 503;
    if ((unanswered || unavailable) && tried < connection_.servers.size() &&
        (repeatable || (unanswered && client_->last_failure_unsent()))) {
      const std::string& was = connection_.servers[server_];
      server_ = (server_ + 1) % connection_.servers.size();
      ++tried;
      ClientOptions next = connection_.options;
      next.server = connection_.servers[server_];
      core::Result<std::unique_ptr<ApiClient>> other = ApiClient::Create(next);
      if (other.ok()) {
        if (!quiet) {
          std::cerr << "topo: " << TerminalSafe(was) << " "
                    << (unanswered ? "did not answer" : "is not serving (503)") << "; trying "
                    << TerminalSafe(next.server) << "\n";
        }
        client_ = std::move(other.value());
        --attempt;  // not a rate-limit retry
        continue;
      }
    }
    if (res.ok() && connection_.share_connection && client_->relay_missing() && !relay_started_) {
      // The server answered this command directly; the next one need not.
      relay_started_ = true;
      StartRelay(client_->options(), client_->relay_socket());
    }
    if (!res.ok()) {
      if (!quiet) std::cerr << "topo: " << TerminalSafe(res.message()) << "\n";
      reply.error = res.message();
      reply.exit_code = kExitUnreachable;
      return reply;
    }
    ApiResponse& answer = res.value();
    if (answer.status == 429 && attempt < kRateLimitRetries) {
      int wait = 1;
      if (!answer.retry_after.empty()) wait = std::atoi(answer.retry_after.c_str());
      if (wait >= 0 && wait <= kMaxRetryWaitS) {
        std::this_thread::sleep_for(std::chrono::seconds(std::max(wait, 1)));
        continue;
      }
    }
    reply.status = answer.status;
    reply.exit_code = ExitCodeForHttpStatus(answer.status);
    if (answer.status == 400 && answer.body.is_object() && answer.body.contains("error") &&
        answer.body["error"].is_object() &&
        answer.body["error"].value("code", "") == "infeasible") {
      reply.exit_code = kExitInfeasible;  // the job can never fit the cluster
    }
    if (!answer.ok()) reply.error = answer.ErrorMessage();
    if (!answer.ok() && !quiet) {
      // The server's message quotes what it refused, which may be anyone's name.
      std::cerr << "topo: ";
      if (label_) {
        if (const std::string label = label_(answer.ErrorField()); !label.empty()) {
          std::cerr << TerminalSafe(label) << ": ";
        }
      }
      std::cerr << TerminalSafe(answer.ErrorMessage());
      if (answer.status == 429 && !answer.retry_after.empty()) {
        std::cerr << " (retry after " << TerminalSafe(answer.retry_after) << " s)";
      }
      std::cerr << "\n";
      if (answer.status == 401) {
        if (connection_.token_source.empty()) {
          std::cerr << "topo: no API token was given: use --token or --token-file, set "
                       "TOPO_TOKEN, or add 'token_file = PATH' to "
                    << (connection_.config_path.empty() ? "~/.config/topo/config"
                                                        : connection_.config_path)
                    << "\n";
        } else {
          std::cerr << "topo: the token came from " << connection_.token_source << "\n";
        }
      }
    }
    reply.body = std::move(answer.body);
    return reply;
  }
}

int PostEach(Session& session, const std::vector<std::string>& targets, const std::string& reason,
             const std::function<void(size_t, const nlohmann::json&)>& on_answer) {
  int first_error = kExitOk;
  for (size_t i = 0; i < targets.size(); ++i) {
    std::optional<nlohmann::json> body;
    if (!reason.empty()) body = nlohmann::json{{"reason", reason}};
    Reply reply = session.Call("POST", targets[i], body);
    if (!reply.ok()) {
      if (first_error == kExitOk) first_error = reply.exit_code;
      if (reply.exit_code == kExitUnreachable) break;
      continue;
    }
    on_answer(i, reply.body);
  }
  return first_error;
}

std::optional<int64_t> ParseJobId(const std::string& text) {
  int64_t id = 0;
  bool ok = !text.empty() && text.size() <= 18;
  for (char c : text) {
    if (c < '0' || c > '9') ok = false;
  }
  if (ok) id = std::stoll(text);
  if (!ok || id <= 0) {
    std::cerr << "topo: '" << text << "' is not a job id (a positive number)\n";
    return std::nullopt;
  }
  return id;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void PrintJson(const nlohmann::json& j) {
  std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

std::string Query(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string q;
  for (const auto& [k, v] : params) {
    if (v.empty()) continue;
    q += (q.empty() ? "" : "&") + PercentEncode(k) + "=" + QueryEscape(v);
  }
  return q;
}

}  // namespace topo::cli
