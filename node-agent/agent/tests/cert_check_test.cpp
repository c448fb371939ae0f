// The agent's certificate expiry check (cert_check.hpp) against
// certificates made here with known notAfter times.

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "cert_check.hpp"

using namespace topo::agent;

namespace {

constexpr int64_t kDay = 86400;

// A self-signed certificate valid until not_after, written as PEM to path.
void WriteCert(const std::string& path, int64_t not_after) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), &EVP_PKEY_free);
  REQUIRE(key != nullptr);
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), &X509_free);
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 7);
  ASN1_TIME_set(X509_getm_notBefore(cert.get()), static_cast<time_t>(not_after - 30 * kDay));
  ASN1_TIME_set(X509_getm_notAfter(cert.get()), static_cast<time_t>(not_after));
  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert.get()), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("n0"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  X509_set_pubkey(cert.get(), key.get());
  REQUIRE(X509_sign(cert.get(), key.get(), EVP_sha256()) != 0);
  FILE* f = std::fopen((path + ".tmp").c_str(), "w");
  REQUIRE(f != nullptr);
  PEM_write_X509(f, cert.get());
  std::fclose(f);
  std::filesystem::rename(path + ".tmp", path);  // the watch may be reading it
}

struct TempDir {
  std::string path =
      (std::filesystem::temp_directory_path() / ("topo-cert-check-" + std::to_string(::getpid())))
          .string();
  TempDir() { std::filesystem::create_directories(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
};

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("cert check: reads notAfter, and an unreadable file names --cert") {
  TempDir dir;
  const std::string path = dir.path + "/n0.pem";
  const int64_t not_after = 1900000000;
  WriteCert(path, not_after);
  auto got = ReadCertNotAfter(path);
  REQUIRE_MESSAGE(got.ok(), got.message());
  CHECK(got.value() == not_after);
  auto missing = ReadCertNotAfter(dir.path + "/nope.pem");
  REQUIRE_FALSE(missing.ok());
  CHECK(Has(missing.message(), "--cert " + dir.path + "/nope.pem"));
}

TEST_CASE("cert check: fine, expiring within the window, expired") {
  const int64_t now = 1800000000;
  const std::string file = "/etc/topo-agent/n0.pem";
  CHECK(JudgeCertExpiry(file, "n0", now + 30 * kDay, now, 14).expiry == CertExpiry::kFine);
  CHECK(JudgeCertExpiry(file, "n0", now + 30 * kDay, now, 14).message.empty());

  const ExpiryVerdict soon = JudgeCertExpiry(file, "n0", now + 3 * kDay + 5, now, 14);
  CHECK(soon.expiry == CertExpiry::kExpiresSoon);
  CHECK(Has(soon.message, "warning: certificate /etc/topo-agent/n0.pem expires in 3 day(s)"));
  CHECK(Has(soon.message, "topo-scheduler ca renew --node n0 --out DIR"));
  CHECK(Has(soon.message, "in /etc/topo-agent"));
  // The edge of the window is in it; under a day is said in hours.
  CHECK(JudgeCertExpiry(file, "n0", now + 14 * kDay, now, 14).expiry == CertExpiry::kExpiresSoon);
  CHECK(Has(JudgeCertExpiry(file, "n0", now + 7200, now, 14).message, "expires in 2 hour(s)"));

  const ExpiryVerdict gone = JudgeCertExpiry(file, "n0", now, now, 14);
  CHECK(gone.expiry == CertExpiry::kExpired);
  CHECK(Has(gone.message, "error: certificate /etc/topo-agent/n0.pem expired at"));
  CHECK(Has(gone.message, "topo-scheduler ca renew --node n0"));

  // --cert-warn-days 0: silent until it has expired.
  CHECK(JudgeCertExpiry(file, "n0", now + 60, now, 0).expiry == CertExpiry::kFine);
  CHECK(JudgeCertExpiry(file, "n0", now - 1, now, 0).expiry == CertExpiry::kExpired);
}

TEST_CASE("cert check: the watch says it at start, again each interval, and notices a renewal") {
  TempDir dir;
  const std::string path = dir.path + "/n0.pem";
  const int64_t now = 1800000000;
  WriteCert(path, now + 2 * kDay);
  std::mutex mu;
  std::vector<std::string> lines;
  std::atomic<int64_t> clock{now};
  CertExpiryWatch watch(
      {path, "n0", 14, std::chrono::milliseconds(20)},
      [&](const std::string& line) {
        std::lock_guard lock(mu);
        lines.push_back(line);
      },
      [&] { return clock.load(); });
  REQUIRE(watch.Start().ok());
  {
    std::lock_guard lock(mu);
    REQUIRE(lines.size() == 1);  // at once, before Start returns
    CHECK(Has(lines[0], "warning: certificate " + path + " expires in 2 day(s)"));
  }
  auto count = [&] {
    std::lock_guard lock(mu);
    return lines.size();
  };
  for (int i = 0; i < 200 && count() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(count() >= 3);

  // Renewed on disk, but the running agent still uses the certificate it
  // loaded, which then expires: an error, and the hint to restart.
  WriteCert(path, now + 90 * kDay);
  clock = now + 3 * kDay;
  const size_t before = count();
  for (int i = 0; i < 200 && count() < before + 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  {
    std::lock_guard lock(mu);
    REQUIRE(lines.size() >= before + 2);
    const std::string& last = lines.back();
    CHECK(Has(last, "error: certificate " + path + " expired at"));
    CHECK(Has(last, "restart topo-agent to use it"));
  }
  const auto t0 = std::chrono::steady_clock::now();
  watch.Stop();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
}

TEST_CASE("cert check: a certificate far from expiry says nothing, and no file starts no thread") {
  TempDir dir;
  const std::string path = dir.path + "/n0.pem";
  const int64_t now = 1800000000;
  WriteCert(path, now + 80 * kDay);
  std::vector<std::string> lines;
  CertExpiryWatch quiet(
      {path, "n0", 14, std::chrono::hours(12)},
      [&](const std::string& line) { lines.push_back(line); }, [&] { return now; });
  REQUIRE(quiet.Start().ok());
  quiet.Stop();
  CHECK(lines.empty());

  CertExpiryWatch none(
      {dir.path + "/missing.pem", "n0", 14, std::chrono::hours(12)},
      [&](const std::string& line) { lines.push_back(line); }, [&] { return now; });
  CHECK_FALSE(none.Start().ok());
  CHECK(lines.empty());
}
