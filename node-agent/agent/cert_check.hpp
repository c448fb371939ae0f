#pragma once
// topo-agent's warning before its client certificate expires (main.cpp).
//
// The scheduler refuses an expired certificate at the TLS handshake, and an
// agent that cannot connect takes its node down: the warning comes early
// enough (--cert-warn-days, 14 by default) for someone to run
// `topo-scheduler ca renew` first. The check runs at start and then every
// 12 hours: a warning while the certificate expires within the window, an
// error once it has expired, each naming the file and the renew command.
//
// The agent reads its certificate once, at start (agent.cpp builds its TLS
// context then): the watch keeps judging that certificate, and says so
// when the file has since been replaced by one the agent is not using yet.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "topo/core/status.hpp"

namespace topo::agent {

// The notAfter (Unix seconds) of the first certificate in a PEM file;
// errors name --cert and the file.
core::Result<int64_t> ReadCertNotAfter(const std::string& cert_file);

enum class CertExpiry { kFine, kExpiresSoon, kExpired };

struct ExpiryVerdict {
  CertExpiry expiry = CertExpiry::kFine;
  std::string message;  // empty when kFine: "warning: ..." or "error: ..."
};

// Judges a certificate with not_after at `now`: expired when now >=
// not_after, expiring soon when within warn_days (0: only expired is said).
ExpiryVerdict JudgeCertExpiry(const std::string& cert_file, const std::string& node,
                              int64_t not_after, int64_t now, int warn_days);

// One line in the agent's log format ("HH:MM:SS.mmm topo-agent NODE: msg")
// on stderr, written at once.
void LogAgentLine(const std::string& node, const std::string& message);

// Runs the check at Start and then every `interval` on a thread of its own
// until Stop (or destruction). The thread only reads the certificate file
// and logs; it shares nothing with the agent's event loop, which is why it
// can live in main.cpp without a timer inside the agent. Signals are
// blocked on it, so they keep reaching the agent's handlers.
// Thread safety: Start and Stop from one thread.
class CertExpiryWatch {
 public:
  using Clock = std::function<int64_t()>;  // Unix seconds
  using Logger = std::function<void(const std::string&)>;

  struct Options {
    std::string cert_file;
    std::string node;
    int warn_days = 14;
    std::chrono::milliseconds interval = std::chrono::hours(12);
  };

  CertExpiryWatch(Options options, Logger log, Clock clock);
  ~CertExpiryWatch();
  CertExpiryWatch(const CertExpiryWatch&) = delete;
  CertExpiryWatch& operator=(const CertExpiryWatch&) = delete;

  // Reads the certificate (an error when it cannot, and no thread starts),
  // checks it now, then starts the periodic checks.
  core::Status Start();
  // Ends the thread at once (it waits on a condition variable, not a sleep).
  void Stop();

 private:
  void CheckOnce();
  void Loop();

  const Options o_;
  const Logger log_;
  const Clock clock_;
  int64_t in_use_not_after_ = 0;  // the certificate the agent loaded at start
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace topo::agent
