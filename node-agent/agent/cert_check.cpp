// Certificate expiry warnings for topo-agent (cert_check.hpp).

#include "cert_check.hpp"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <utility>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

namespace topo::agent {
namespace {

std::string Utc(int64_t t) {
  const time_t tt = static_cast<time_t>(t);
  struct tm tm {};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string RenewHint(const std::string& cert_file, const std::string& node) {
  std::string dir = std::filesystem::path(cert_file).parent_path().string();
  if (dir.empty()) dir = ".";
  return "renew it on the scheduler's host with `topo-scheduler ca renew --node " + node +
         " --out DIR`, install " + node + ".pem and " + node + "-key.pem in " + dir +
         " and restart topo-agent";
}

}  // namespace

core::Result<int64_t> ReadCertNotAfter(const std::string& cert_file) {
  using core::Status;
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_file(cert_file.c_str(), "r"), &BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr, &X509_free);
  ERR_clear_error();
  if (!cert) return Status::Error("--cert " + cert_file + ": no PEM certificate there");
  struct tm tm {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert.get()), &tm) != 1) {
    ERR_clear_error();
    return Status::Error("--cert " + cert_file + ": the certificate's notAfter is unreadable");
  }
  return static_cast<int64_t>(::timegm(&tm));
}

ExpiryVerdict JudgeCertExpiry(const std::string& cert_file, const std::string& node,
                              int64_t not_after, int64_t now, int warn_days) {
  ExpiryVerdict v;
  if (now >= not_after) {
    v.expiry = CertExpiry::kExpired;
    v.message = "error: certificate " + cert_file + " expired at " + Utc(not_after) +
                "; the scheduler refuses it: " + RenewHint(cert_file, node);
  } else if (not_after - now <= int64_t{warn_days} * 86400) {
    const int64_t left = not_after - now;
    const std::string in = left >= 86400 ? std::to_string(left / 86400) + " day(s)"
                                         : std::to_string(left / 3600) + " hour(s)";
    v.expiry = CertExpiry::kExpiresSoon;
    v.message = "warning: certificate " + cert_file + " expires in " + in + ", at " +
                Utc(not_after) + " (--cert-warn-days " + std::to_string(warn_days) + "); " +
                RenewHint(cert_file, node);
  }
  return v;
}

void LogAgentLine(const std::string& node, const std::string& message) {
  // The same line as agent.cpp's own log, so both read as one log.
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t{};
  gmtime_r(&ts.tv_sec, &t);
  char when[32];
  std::strftime(when, sizeof when, "%H:%M:%S", &t);
  std::fprintf(stderr, "%s.%03ld topo-agent %s: %s\n", when, ts.tv_nsec / 1000000, node.c_str(),
               message.c_str());
  std::fflush(stderr);
}

CertExpiryWatch::CertExpiryWatch(Options options, Logger log, Clock clock)
    : o_(std::move(options)), log_(std::move(log)), clock_(std::move(clock)) {}

CertExpiryWatch::~CertExpiryWatch() { Stop(); }

core::Status CertExpiryWatch::Start() {
  core::Result<int64_t> not_after = ReadCertNotAfter(o_.cert_file);
  if (!not_after.ok()) return not_after.status();
  in_use_not_after_ = not_after.value();
  CheckOnce();
  thread_ = std::thread([this] { Loop(); });
  return core::Status::Ok();
}

void CertExpiryWatch::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CertExpiryWatch::CheckOnce() {
  ExpiryVerdict v =
      JudgeCertExpiry(o_.cert_file, o_.node, in_use_not_after_, clock_(), o_.warn_days);
  if (v.expiry == CertExpiry::kFine) return;
  // A renewed file does not help until the agent restarts and loads it.
  core::Result<int64_t> on_disk = ReadCertNotAfter(o_.cert_file);
  if (on_disk.ok() && on_disk.value() != in_use_not_after_) {
    v.message += " (" + o_.cert_file + " now holds a certificate valid until " +
                 Utc(on_disk.value()) + ": restart topo-agent to use it)";
  }
  log_(v.message);
}

void CertExpiryWatch::Loop() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  std::unique_lock lock(mu_);
  while (!wake_.wait_for(lock, o_.interval, [this] { return stop_; })) {
    lock.unlock();
    CheckOnce();
    lock.lock();
  }
}

}  // namespace topo::agent
