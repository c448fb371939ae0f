// The CA's node certificates: lifetime, the issued index, revocation (the
// CRL and the node rule), renewal, and the revocation list the agents'
// listener reloads. End to end with real agents: tests/agent/test_certs.py.

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "daemon/config.hpp"
#include "daemon/pki/pki.hpp"
#include "daemon/pki/revocation.hpp"

using namespace topo::daemon;

namespace {

struct TempState {
  std::string dir;
  explicit TempState(const std::string& name)
      : dir((std::filesystem::temp_directory_path() /
             ("topo-" + name + "-" + std::to_string(::getpid())))
                .string()) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~TempState() { std::filesystem::remove_all(dir); }
};

CertFacts FactsOf(const std::string& pem_path) {
  FILE* f = std::fopen(pem_path.c_str(), "r");
  REQUIRE_MESSAGE(f != nullptr, pem_path);
  std::unique_ptr<X509, decltype(&X509_free)> cert(PEM_read_X509(f, nullptr, nullptr, nullptr),
                                                   &X509_free);
  std::fclose(f);
  REQUIRE(cert != nullptr);
  auto facts = DescribeCertificate(cert.get());
  REQUIRE_MESSAGE(facts.ok(), facts.message());
  return facts.value();
}

uint64_t CrlNumber(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  REQUIRE(f != nullptr);
  X509_CRL* crl = PEM_read_X509_CRL(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  REQUIRE(crl != nullptr);
  auto* n = static_cast<ASN1_INTEGER*>(X509_CRL_get_ext_d2i(crl, NID_crl_number, nullptr, nullptr));
  uint64_t v = 0;
  if (n != nullptr) ASN1_INTEGER_get_uint64(&v, n);
  ASN1_INTEGER_free(n);
  X509_CRL_free(crl);
  return v;
}

bool HaveOpenSsl() { return std::system("command -v openssl >/dev/null 2>&1") == 0; }

int Sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The agents' listener's verify callback under X509_verify_cert, as the TLS
// handshake runs it (OpenSSL's callbacks take no user pointer here).
RevocationList* g_list = nullptr;
PeerVerdict* g_verdict = nullptr;
int VerifyCallback(int ok, X509_STORE_CTX* ctx) {
  return g_list->VerifyPeer(ok != 0, ctx, g_verdict) ? 1 : 0;
}

// X509_V_OK, or the error the verification ended with.
int VerifyAsHandshake(const PkiPaths& pki, const std::string& pem, RevocationList& list,
                      PeerVerdict& verdict) {
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), &X509_STORE_free);
  REQUIRE(X509_STORE_load_file(store.get(), pki.ca_cert.c_str()) == 1);
  X509_STORE_set_verify_cb(store.get(), VerifyCallback);
  FILE* f = std::fopen(pem.c_str(), "r");
  REQUIRE(f != nullptr);
  std::unique_ptr<X509, decltype(&X509_free)> cert(PEM_read_X509(f, nullptr, nullptr, nullptr),
                                                   &X509_free);
  std::fclose(f);
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(),
                                                                      &X509_STORE_CTX_free);
  REQUIRE(X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) == 1);
  g_list = &list;
  g_verdict = &verdict;
  const int rc = X509_verify_cert(ctx.get());
  return rc == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx.get());
}

}  // namespace

TEST_CASE("pki: a node certificate gets the lifetime asked for and is recorded, 0600") {
  TempState t("pki-issue");
  auto p = EnsurePki(t.dir, {});
  REQUIRE_MESSAGE(p.ok(), p.message());
  const int64_t now = ::time(nullptr);
  auto a = IssueNodeCertificate(p.value(), "n1", 1, t.dir + "/n1.pem", t.dir + "/n1-key.pem", now);
  REQUIRE_MESSAGE(a.ok(), a.message());
  const CertFacts f = FactsOf(t.dir + "/n1.pem");
  CHECK(f.node == "n1");
  CHECK(f.not_after == now + 86400);
  CHECK(f.not_before == now - 3600);  // an hour back for clock skew
  CHECK(f.serial == a.value().serial);
  CHECK(a.value().not_after == f.not_after);
  CHECK(a.value().revoked_at == 0);
  // 16 random bytes, top bit clear: at most 32 hex digits, positive.
  CHECK(f.serial.size() <= 32);
  CHECK(f.serial.size() >= 16);
  auto b =
      IssueNodeCertificate(p.value(), "n1", 90, t.dir + "/n1b.pem", t.dir + "/n1b-key.pem", now);
  REQUIRE(b.ok());
  CHECK(b.value().serial != a.value().serial);
  CHECK(FactsOf(t.dir + "/n1b.pem").not_after == now + 90 * 86400);

  auto index = ReadCertIndex(p.value());
  REQUIRE_MESSAGE(index.ok(), index.message());
  REQUIRE(index.value().issued.size() == 2);
  CHECK(index.value().issued[0].serial == a.value().serial);
  CHECK(index.value().issued[1].node == "n1");
  struct stat st {};
  REQUIRE(::stat(p.value().issued_index.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(::stat(p.value().revoked_nodes.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(::stat((t.dir + "/n1-key.pem").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // The daemon's first start leaves an empty CRL, so the path always holds one.
  auto empty = LoadRevocations(p.value());
  REQUIRE_MESSAGE(empty.ok(), empty.message());
  CHECK(empty.value().serials.empty());
  if (HaveOpenSsl()) {
    CHECK(Sh("openssl verify -CAfile " + p.value().ca_cert + " " + t.dir + "/n1.pem") == 0);
  }

  for (const char* bad : {"", "a/b", "has space", "tab\there", ".."}) {
    auto r = IssueNodeCertificate(p.value(), bad, 1, t.dir + "/x.pem", t.dir + "/x-key.pem", now);
    REQUIRE_FALSE(r.ok());
    CHECK(Has(r.message(), "--node"));
  }
  auto zero = IssueNodeCertificate(p.value(), "n1", 0, t.dir + "/x.pem", t.dir + "/x-key.pem", now);
  REQUIRE_FALSE(zero.ok());
  CHECK(Has(zero.message(), "--days 0 is out of range; use 1..3650"));
}

TEST_CASE("pki: the index round-trips and a bad line names the file and the line") {
  CertIndex idx;
  idx.issued.push_back({"7F01", "n1", 100, 200, 0});
  idx.issued.push_back({"0A", "gpu-7.rack2", 110, 210, 150});
  idx.node_revoked_at["gpu-7.rack2"] = 150;
  CertIndex back;
  REQUIRE(ParseIssued(IssuedText(idx), "issued.tsv", back).ok());
  REQUIRE(ParseRevokedNodes(RevokedNodesText(idx), "revoked-nodes.tsv", back).ok());
  REQUIRE(back.issued.size() == 2);
  CHECK(back.issued[1].serial == "0A");
  CHECK(back.issued[1].node == "gpu-7.rack2");
  CHECK(back.issued[1].not_after == 210);
  CHECK(back.issued[1].revoked_at == 150);
  CHECK(back.issued[0].revoked_at == 0);
  CHECK(back.node_revoked_at == idx.node_revoked_at);

  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"# c\n7F\tn1\t1\t2\n", "issued.tsv:2: expected 5 tab-separated fields, got 4"},
      {"xyz\tn1\t1\t2\t-\n", "issued.tsv:1: serial \"xyz\" is not hex"},
      {"7F\tn1\tsoon\t2\t-\n", "issued.tsv:1: not_before and not_after"},
      {"7F\tn1\t1\t2\tyesterday\n", "issued.tsv:1: revoked_at"},
      {"7F\ta b\t1\t2\t-\n", "issued.tsv:1: bad node name"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.text);
    CertIndex i;
    const auto s = ParseIssued(k.text, "issued.tsv", i);
    REQUIRE_FALSE(s.ok());
    CHECK(Has(s.message(), k.expect));
  }
  CertIndex i;
  CHECK(Has(ParseRevokedNodes("n1\t0\n", "revoked-nodes.tsv", i).message(),
            "revoked-nodes.tsv:1: revoked_at"));
}

TEST_CASE("pki: revoke writes a CA-signed CRL of the node's serials, persisted and numbered") {
  TempState t("pki-revoke");
  auto p = EnsurePki(t.dir, {});
  REQUIRE(p.ok());
  const PkiPaths& pki = p.value();
  const int64_t now = ::time(nullptr);
  auto a1 = IssueNodeCertificate(pki, "n1", 30, t.dir + "/a1.pem", t.dir + "/a1-key.pem", now);
  auto a2 = IssueNodeCertificate(pki, "n1", 30, t.dir + "/a2.pem", t.dir + "/a2-key.pem", now);
  auto b = IssueNodeCertificate(pki, "n2", 30, t.dir + "/b.pem", t.dir + "/b-key.pem", now);
  REQUIRE((a1.ok() && a2.ok() && b.ok()));
  const uint64_t first_number = CrlNumber(pki.crl);

  auto r = RevokeNode(pki, "n1", now + 10);
  REQUIRE_MESSAGE(r.ok(), r.message());
  REQUIRE(r.value().revoked.size() == 2);
  CHECK(r.value().revoked_at == now + 10);
  CHECK(CrlNumber(pki.crl) == first_number + 1);

  auto lists = LoadRevocations(pki);
  REQUIRE_MESSAGE(lists.ok(), lists.message());
  CHECK(lists.value().serials.size() == 2);
  CHECK(lists.value().serials.at(a1.value().serial) == now + 10);
  CHECK(lists.value().serials.count(a2.value().serial) == 1);
  CHECK(lists.value().serials.count(b.value().serial) == 0);
  CHECK(lists.value().nodes.at("n1") == now + 10);

  // Persisted: the index knows, and a second revoke finds nothing new but
  // rewrites the CRL (a later number) with the same entries.
  auto index = ReadCertIndex(pki);
  REQUIRE(index.ok());
  CHECK(index.value().issued[0].revoked_at == now + 10);
  CHECK(index.value().issued[2].revoked_at == 0);
  auto again = RevokeNode(pki, "n1", now + 20);
  REQUIRE(again.ok());
  CHECK(again.value().revoked.empty());
  CHECK(again.value().revoked_at == now + 20);
  CHECK(CrlNumber(pki.crl) == first_number + 2);
  CHECK(LoadRevocations(pki).value().serials.at(a1.value().serial) == now + 10);

  // Deleted, it is rebuilt from the index at the next start.
  std::filesystem::remove(pki.crl);
  REQUIRE(EnsurePki(t.dir, {}).ok());
  CHECK(LoadRevocations(pki).value().serials.size() == 2);

  if (HaveOpenSsl()) {
    // OpenSSL's own CRL check agrees: signed by the CA, n1's revoked, n2's fine.
    CHECK(Sh("openssl crl -in " + pki.crl + " -CAfile " + pki.ca_cert + " -noout") == 0);
    const std::string verify =
        "openssl verify -crl_check -CAfile " + pki.ca_cert + " -CRLfile " + pki.crl + " ";
    CHECK(Sh(verify + t.dir + "/a1.pem") != 0);
    CHECK(Sh(verify + t.dir + "/b.pem") == 0);
  }
}

TEST_CASE("pki: the node rule, renew after revoke, and renew --revoke-old") {
  TempState t("pki-renew");
  auto p = EnsurePki(t.dir, {});
  REQUIRE(p.ok());
  const PkiPaths& pki = p.value();
  const int64_t now = ::time(nullptr);
  REQUIRE(
      IssueNodeCertificate(pki, "n1", 30, t.dir + "/old.pem", t.dir + "/old-key.pem", now).ok());
  REQUIRE(RevokeNode(pki, "n1", now).ok());
  const Revocations lists = LoadRevocations(pki).value();

  const auto old_why = RevocationReason(lists, FactsOf(t.dir + "/old.pem"), pki.crl);
  REQUIRE(old_why.has_value());
  CHECK(Has(*old_why, "of node n1 was revoked at " + FormatUtc(now)));
  CHECK(Has(*old_why, "topo-scheduler ca renew --node n1"));
  // A certificate the index never saw (a simulator's), made before the
  // revocation, is refused by the node rule; one for another node is not.
  CertFacts minted{"ABCDEF", "n1", now - 3600, now + 86400};
  const auto minted_why = RevocationReason(lists, minted, pki.crl);
  REQUIRE(minted_why.has_value());
  CHECK(Has(*minted_why, "predates the node's revocation"));
  CHECK_FALSE(RevocationReason(lists, {"ABCDEF", "n2", now - 3600, now + 86400}, pki.crl));

  // Renewed right after the revocation: it starts at the revocation, not
  // an hour back, so the node rule lets it in.
  auto fresh = IssueNodeCertificate(pki, "n1", 30, t.dir + "/new.pem", t.dir + "/new-key.pem", now);
  REQUIRE(fresh.ok());
  const CertFacts nf = FactsOf(t.dir + "/new.pem");
  CHECK(nf.not_before == now);
  CHECK_FALSE(RevocationReason(LoadRevocations(pki).value(), nf, pki.crl));

  // --revoke-old: everything before the renewed one is revoked with it.
  auto second = IssueNodeCertificate(pki, "n1", 30, t.dir + "/2nd.pem", t.dir + "/2nd-key.pem",
                                     now + 5, /*revoke_old=*/true);
  REQUIRE_MESSAGE(second.ok(), second.message());
  const Revocations after = LoadRevocations(pki).value();
  CHECK(RevocationReason(after, nf, pki.crl).has_value());
  CHECK_FALSE(RevocationReason(after, FactsOf(t.dir + "/2nd.pem"), pki.crl));
  CHECK(after.serials.count(fresh.value().serial) == 1);
  CHECK(after.serials.count(second.value().serial) == 0);
}

TEST_CASE("revocation list: reloads when crl.pem changes and fails closed when it breaks") {
  TempState t("pki-reload");
  auto p = EnsurePki(t.dir, {});
  REQUIRE(p.ok());
  const PkiPaths& pki = p.value();
  const int64_t now = ::time(nullptr);
  REQUIRE(IssueNodeCertificate(pki, "n1", 30, t.dir + "/n1.pem", t.dir + "/n1-key.pem", now).ok());
  const CertFacts n1 = FactsOf(t.dir + "/n1.pem");
  std::vector<std::string> logged;
  RevocationList list(pki, [&](const std::string& line) { logged.push_back(line); });
  REQUIRE(list.Load().ok());
  const uint64_t g0 = list.Refresh();
  CHECK(list.Refresh() == g0);  // nothing changed: no reload
  CHECK_FALSE(list.Refusal(n1));

  REQUIRE(RevokeNode(pki, "n1", now).ok());
  CHECK(list.Refusal(n1).has_value());  // the next look sees it
  const uint64_t g1 = list.Refresh();
  CHECK(g1 > g0);

  // A broken file keeps the lists in use, and says so once.
  {
    std::ofstream(pki.crl + ".junk") << "not a CRL\n";
    std::filesystem::rename(pki.crl + ".junk", pki.crl);
  }
  logged.clear();
  CHECK(list.Refusal(n1).has_value());
  CHECK(list.Refresh() == g1);
  REQUIRE(logged.size() == 1);
  CHECK(Has(logged[0], pki.crl + " holds no PEM CRL"));
  // So does a missing one.
  std::filesystem::remove(pki.crl);
  CHECK(list.Refusal(n1).has_value());
  CHECK(Has(logged.back(), "disappeared"));

  // A CRL signed by another CA is not ours: refused at start.
  TempState other("pki-other");
  auto q = EnsurePki(other.dir, {});
  REQUIRE(q.ok());
  std::filesystem::copy_file(q.value().crl, pki.crl);
  RevocationList fresh(pki, [](const std::string&) {});
  const auto s = fresh.Load();
  REQUIRE_FALSE(s.ok());
  CHECK(Has(s.message(), "is not signed by the CA " + pki.ca_cert));
}

TEST_CASE("config: agent_cert_days defaults to 90 and must be 1..3650") {
  DaemonConfig c;
  CHECK(c.agent_cert_days == 90);
  REQUIRE(ApplyConfigText("agent_cert_days = 30\n", "x.conf", c).ok());
  CHECK(c.agent_cert_days == 30);
  for (const char* bad : {"agent_cert_days = 0\n", "agent_cert_days = 3651\n"}) {
    const auto s = ApplyConfigText(bad, "x.conf", c);
    REQUIRE_FALSE(s.ok());
    CHECK(Has(s.message(), "x.conf:1: agent_cert_days: "));
    CHECK(Has(s.message(), "use 1..3650"));
  }
  CHECK(c.agent_cert_days == 30);
}

TEST_CASE("revocation list: the verify callback refuses revoked and says why it refused expired") {
  TempState t("pki-verify");
  auto p = EnsurePki(t.dir, {});
  REQUIRE(p.ok());
  const PkiPaths& pki = p.value();
  const int64_t now = ::time(nullptr);
  REQUIRE(IssueNodeCertificate(pki, "n1", 30, t.dir + "/n1.pem", t.dir + "/n1-key.pem", now).ok());
  // Signed ten days ago for one day.
  REQUIRE(
      IssueNodeCertificate(pki, "n2", 1, t.dir + "/n2.pem", t.dir + "/n2-key.pem", now - 10 * 86400)
          .ok());
  RevocationList list(pki, [](const std::string&) {});
  REQUIRE(list.Load().ok());

  PeerVerdict good;
  CHECK(VerifyAsHandshake(pki, t.dir + "/n1.pem", list, good) == X509_V_OK);
  CHECK(good.refusal.empty());
  CHECK(good.peer.node == "n1");

  PeerVerdict expired;
  CHECK(VerifyAsHandshake(pki, t.dir + "/n2.pem", list, expired) == X509_V_ERR_CERT_HAS_EXPIRED);
  CHECK_FALSE(expired.revoked);
  CHECK(expired.peer.node == "n2");
  CHECK(Has(expired.refusal, "certificate has expired"));
  CHECK(Has(expired.refusal, "topo-scheduler ca renew --node n2"));

  REQUIRE(RevokeNode(pki, "n1", now).ok());
  PeerVerdict revoked;
  CHECK(VerifyAsHandshake(pki, t.dir + "/n1.pem", list, revoked) == X509_V_ERR_CERT_REVOKED);
  CHECK(revoked.revoked);
  CHECK(revoked.peer.node == "n1");
  CHECK(Has(revoked.refusal, "of node n1 was revoked at " + FormatUtc(now)));
}
