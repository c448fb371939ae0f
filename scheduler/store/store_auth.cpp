// Users, bearer tokens (stored as SHA-256 hashes) and meta values.

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>

#include <nlohmann/json.hpp>

#include "store/store_impl.hpp"
#include "topo/common/auth_json.hpp"

namespace topo::store {
namespace {

using core::Result;
using core::Status;
using internal::Statement;
using internal::Transaction;

constexpr std::string_view kTokenPrefix = "topo_";
constexpr size_t kTokenIdDigits = 12;
constexpr size_t kMinIdDigits = 8;

std::string Hex(const unsigned char* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    out.push_back(kDigits[data[i] >> 4]);
    out.push_back(kDigits[data[i] & 15]);
  }
  return out;
}

bool IsHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

User ReadUser(const Statement& q) {
  return User{q.Text(0), q.Text(1), ParseRole(q.Text(2)).value_or(Role::kUser), q.Int64(3),
              q.Text(4)};
}

Status CheckUser(const User& u) {
  if (u.name.empty()) return Status::Error("a user needs a name");
  if (u.tenant.empty()) return Status::Error("user \"" + u.name + "\" needs a tenant");
  if (u.unix_user.empty()) return Status::Error("user \"" + u.name + "\" needs a unix_user");
  return Status::Ok();
}

// Runs one write statement in its own transaction (durable when Ok) and
// returns the number of rows it changed.
Result<int> WriteOne(Store::Impl& impl, Statement& q) {
  Result<Transaction> tx = Transaction::Begin(impl.db);
  if (!tx.ok()) return tx.status();
  if (Status s = q.Run(); !s.ok()) return s;
  const int changed = q.Changes();
  if (Status s = tx.value().Commit(); !s.ok()) return s;
  return changed;
}

}  // namespace

std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kUser:
      return "user";
    case Role::kTenantAdmin:
      return "tenant-admin";
    case Role::kClusterAdmin:
      return "cluster-admin";
  }
  return "user";
}

std::optional<Role> ParseRole(std::string_view name) {
  for (Role r : {Role::kUser, Role::kTenantAdmin, Role::kClusterAdmin}) {
    if (RoleName(r) == name) return r;
  }
  return std::nullopt;
}

std::string Sha256Hex(std::string_view text) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int size = 0;
  if (EVP_Digest(text.data(), text.size(), digest.data(), &size, EVP_sha256(), nullptr) != 1) {
    return {};  // only on an OpenSSL failure; an empty hash matches no token
  }
  return Hex(digest.data(), size);
}

// ---------------------------------------------------------------- users

Status Store::CreateUser(const User& user) {
  if (Status s = CheckUser(user); !s.ok()) return impl_->Error("creating user", s);
  Result<Statement> q = impl_->db.Prepare(
      "INSERT INTO users(name, tenant, role, created_ms, unix_user) VALUES (?1, ?2, ?3, ?4, ?5) "
      "ON CONFLICT(name) DO NOTHING");
  if (!q.ok()) return impl_->Error("creating user", q.status());
  q.value().Bind(1, user.name).Bind(2, user.tenant).Bind(3, RoleName(user.role));
  q.value().Bind(4, user.created_ms).Bind(5, user.unix_user);
  Result<int> changed = WriteOne(*impl_, q.value());
  if (!changed.ok()) return impl_->Error("creating user \"" + user.name + "\"", changed.status());
  if (changed.value() == 0) {
    return impl_->Error("creating user", "user \"" + user.name +
                                             "\" already exists; update it or pick another name");
  }
  return Status::Ok();
}

Status Store::UpdateUser(const User& user) {
  if (Status s = CheckUser(user); !s.ok()) return impl_->Error("updating user", s);
  Result<Statement> q =
      impl_->db.Prepare("UPDATE users SET tenant = ?2, role = ?3, unix_user = ?4 WHERE name = ?1");
  if (!q.ok()) return impl_->Error("updating user", q.status());
  q.value().Bind(1, user.name).Bind(2, user.tenant).Bind(3, RoleName(user.role));
  q.value().Bind(4, user.unix_user);
  Result<int> changed = WriteOne(*impl_, q.value());
  if (!changed.ok()) return impl_->Error("updating user \"" + user.name + "\"", changed.status());
  if (changed.value() == 0) {
    return impl_->Error("updating user", "no user \"" + user.name + "\"");
  }
  return Status::Ok();
}

Status Store::DeleteUser(std::string_view name) {
  Result<Statement> q = impl_->db.Prepare("DELETE FROM users WHERE name = ?1");
  if (!q.ok()) return impl_->Error("deleting user", q.status());
  q.value().Bind(1, name);
  Result<int> changed = WriteOne(*impl_, q.value());
  const std::string quoted = "\"" + std::string(name) + "\"";
  if (!changed.ok()) return impl_->Error("deleting user " + quoted, changed.status());
  if (changed.value() == 0) return impl_->Error("deleting user", "no user " + quoted);
  return Status::Ok();
}

Result<std::optional<User>> Store::GetUser(std::string_view name) {
  Result<Statement> q = impl_->db.Prepare(
      "SELECT name, tenant, role, created_ms, unix_user FROM users WHERE name = ?1");
  if (!q.ok()) return impl_->Error("reading user", q.status());
  q.value().Bind(1, name);
  Result<bool> row = q.value().Step();
  if (!row.ok()) return impl_->Error("reading user", row.status());
  if (!row.value()) return std::optional<User>();
  return std::optional<User>(ReadUser(q.value()));
}

Result<std::vector<User>> Store::ListUsers(std::optional<std::string_view> tenant) {
  Result<Statement> q = impl_->db.Prepare(
      tenant ? "SELECT name, tenant, role, created_ms, unix_user FROM users WHERE tenant = ?1 "
               "ORDER BY name"
             : "SELECT name, tenant, role, created_ms, unix_user FROM users ORDER BY name");
  if (!q.ok()) return impl_->Error("listing users", q.status());
  if (tenant) q.value().Bind(1, *tenant);
  std::vector<User> users;
  for (;;) {
    Result<bool> row = q.value().Step();
    if (!row.ok()) return impl_->Error("listing users", row.status());
    if (!row.value()) break;
    users.push_back(ReadUser(q.value()));
  }
  return users;
}

Result<std::vector<User>> Store::UsersOfUnixUser(std::string_view unix_user) {
  Result<Statement> q = impl_->db.Prepare(
      "SELECT name, tenant, role, created_ms, unix_user FROM users WHERE unix_user = ?1 "
      "ORDER BY name");
  if (!q.ok()) return impl_->Error("listing users", q.status());
  q.value().Bind(1, unix_user);
  Result<std::vector<User>> users = Collect<User>(q.value(), ReadUser);
  if (!users.ok()) return impl_->Error("listing users", users.status());
  return users;
}

// ---------------------------------------------------------------- granted accounts

namespace {

// The accounts column: a JSON list of names (written only by the store).
std::vector<std::string> ReadAccounts(const std::string& text) {
  std::vector<std::string> out;
  nlohmann::json list = nlohmann::json::parse(text, nullptr, false);
  if (!list.is_array()) return out;
  for (const auto& a : list) {
    if (a.is_string()) out.push_back(a.get<std::string>());
  }
  return out;
}

TenantAccounts ReadGrant(const Statement& q) {
  return TenantAccounts{q.Text(0), ReadAccounts(q.Text(1)), q.Text(2)};
}

}  // namespace

Status Store::SetTenantAccounts(const TenantAccounts& grant) {
  if (grant.tenant.empty()) return impl_->Error("granting accounts", "a grant needs a tenant");
  Result<Statement> q = impl_->db.Prepare(
      grant.empty() ? "DELETE FROM tenant_accounts WHERE tenant = ?1"
                    : "INSERT INTO tenant_accounts(tenant, accounts, unix_group) VALUES (?1, ?2, "
                      "?3) ON CONFLICT(tenant) DO UPDATE SET accounts = excluded.accounts, "
                      "unix_group = excluded.unix_group");
  if (!q.ok()) return impl_->Error("granting accounts", q.status());
  q.value().Bind(1, grant.tenant);
  if (!grant.empty()) {
    q.value().Bind(2, nlohmann::json(grant.accounts).dump()).Bind(3, grant.unix_group);
  }
  Result<int> changed = WriteOne(*impl_, q.value());
  if (!changed.ok()) {
    return impl_->Error("granting accounts to tenant \"" + grant.tenant + "\"", changed.status());
  }
  return Status::Ok();
}

Result<TenantAccounts> Store::GetTenantAccounts(std::string_view tenant) {
  Result<Statement> q = impl_->db.Prepare(
      "SELECT tenant, accounts, unix_group FROM tenant_accounts WHERE tenant = ?1");
  if (!q.ok()) return impl_->Error("reading granted accounts", q.status());
  q.value().Bind(1, tenant);
  Result<bool> row = q.value().Step();
  if (!row.ok()) return impl_->Error("reading granted accounts", row.status());
  if (!row.value()) return TenantAccounts{std::string(tenant), {}, {}};
  return ReadGrant(q.value());
}

Result<std::vector<TenantAccounts>> Store::ListTenantAccounts() {
  Result<Statement> q =
      impl_->db.Prepare("SELECT tenant, accounts, unix_group FROM tenant_accounts ORDER BY tenant");
  if (!q.ok()) return impl_->Error("reading granted accounts", q.status());
  Result<std::vector<TenantAccounts>> grants = Collect<TenantAccounts>(q.value(), ReadGrant);
  if (!grants.ok()) return impl_->Error("reading granted accounts", grants.status());
  return grants;
}

// ---------------------------------------------------------------- tokens

Result<IssuedToken> Store::CreateToken(std::string_view user, TimeMs now_ms) {
  Result<std::optional<User>> owner = GetUser(user);
  if (!owner.ok()) return owner.status();
  if (!owner.value()) {
    return impl_->Error("creating a token",
                        "no user \"" + std::string(user) + "\"; create it first");
  }
  std::array<unsigned char, 32> secret{};
  if (RAND_bytes(secret.data(), static_cast<int>(secret.size())) != 1) {
    return impl_->Error("creating a token", "OpenSSL has no randomness to give");
  }
  return InsertToken(user, std::string(kTokenPrefix) + Hex(secret.data(), secret.size()), now_ms);
}

Result<IssuedToken> Store::CreateTokenFromText(std::string_view user, std::string_view token,
                                               TimeMs now_ms) {
  if (token.size() != kTokenPrefix.size() + 64 ||
      token.substr(0, kTokenPrefix.size()) != kTokenPrefix ||
      !IsHex(token.substr(kTokenPrefix.size()))) {
    return impl_->Error("creating a token",
                        "a token is \"topo_\" and 64 lowercase hex digits (make one with "
                        "`printf 'topo_%s\\n' $(openssl rand -hex 32)`)");
  }
  Result<std::optional<User>> owner = GetUser(user);
  if (!owner.ok()) return owner.status();
  if (!owner.value()) {
    return impl_->Error("creating a token",
                        "no user \"" + std::string(user) + "\"; create it first");
  }
  return InsertToken(user, std::string(token), now_ms);
}

Result<IssuedToken> Store::InsertToken(std::string_view user, std::string token, TimeMs now_ms) {
  IssuedToken issued;
  issued.token = std::move(token);
  const std::string hash = Sha256Hex(issued.token);
  if (hash.empty()) return impl_->Error("creating a token", "OpenSSL could not hash it");
  issued.id = hash.substr(0, kTokenIdDigits);
  Result<Statement> q = impl_->db.Prepare(
      "INSERT INTO tokens(hash, user, created_ms, revoked) VALUES (?1, ?2, ?3, 0)");
  if (!q.ok()) return impl_->Error("creating a token", q.status());
  q.value().Bind(1, hash).Bind(2, user).Bind(3, now_ms);
  Result<int> changed = WriteOne(*impl_, q.value());
  if (!changed.ok()) return impl_->Error("creating a token", changed.status());
  return issued;
}

Result<std::optional<User>> Store::Authenticate(std::string_view token) {
  if (token.substr(0, kTokenPrefix.size()) != kTokenPrefix) return std::optional<User>();
  Result<Statement> q = impl_->db.Prepare(
      "SELECT u.name, u.tenant, u.role, u.created_ms, u.unix_user FROM tokens t JOIN users u ON "
      "u.name = "
      "t.user WHERE t.hash = ?1 AND t.revoked = 0");
  if (!q.ok()) return impl_->Error("checking a token", q.status());
  q.value().Bind(1, Sha256Hex(token));
  Result<bool> row = q.value().Step();
  if (!row.ok()) return impl_->Error("checking a token", row.status());
  if (!row.value()) return std::optional<User>();
  return std::optional<User>(ReadUser(q.value()));
}

Status Store::RevokeToken(std::string_view id_or_token) {
  std::string prefix = id_or_token.substr(0, kTokenPrefix.size()) == kTokenPrefix
                           ? Sha256Hex(id_or_token)
                           : std::string(id_or_token);
  if (prefix.size() < kMinIdDigits || !IsHex(prefix)) {
    return impl_->Error("revoking a token",
                        "give the token's id (at least 8 lowercase hex digits, from `topo token "
                        "list`) or the token itself");
  }
  Result<Statement> find =
      impl_->db.Prepare("SELECT hash FROM tokens WHERE substr(hash, 1, length(?1)) = ?1 LIMIT 2");
  if (!find.ok()) return impl_->Error("revoking a token", find.status());
  find.value().Bind(1, prefix);
  Result<std::vector<std::string>> hashes =
      Collect<std::string>(find.value(), [](const Statement& s) { return s.Text(0); });
  if (!hashes.ok()) return impl_->Error("revoking a token", hashes.status());
  if (hashes.value().empty()) return impl_->Error("revoking a token", "no token " + prefix);
  if (hashes.value().size() > 1) {
    return impl_->Error("revoking a token",
                        "id " + prefix + " matches more than one token; give more digits");
  }
  Result<Statement> q = impl_->db.Prepare("UPDATE tokens SET revoked = 1 WHERE hash = ?1");
  if (!q.ok()) return impl_->Error("revoking a token", q.status());
  q.value().Bind(1, hashes.value().front());
  Result<int> changed = WriteOne(*impl_, q.value());
  if (!changed.ok()) return impl_->Error("revoking a token", changed.status());
  return Status::Ok();
}

Result<std::vector<TokenInfo>> Store::ListTokens(std::optional<std::string_view> user) {
  Result<Statement> q = impl_->db.Prepare(
      user ? "SELECT hash, user, created_ms, revoked FROM tokens WHERE user = ?1 "
             "ORDER BY created_ms, hash"
           : "SELECT hash, user, created_ms, revoked FROM tokens ORDER BY created_ms, hash");
  if (!q.ok()) return impl_->Error("listing tokens", q.status());
  if (user) q.value().Bind(1, *user);
  std::vector<TokenInfo> out;
  for (;;) {
    Result<bool> row = q.value().Step();
    if (!row.ok()) return impl_->Error("listing tokens", row.status());
    if (!row.value()) break;
    const Statement& s = q.value();
    out.push_back(
        TokenInfo{s.Text(0).substr(0, kTokenIdDigits), s.Text(1), s.Int64(2), s.Int64(3) != 0});
  }
  return out;
}

// ---------------------------------------------------------------- meta

// ---------------------------------------------------------------- users and tokens as one value

Result<std::string> Store::ExportAuth() {
  common::AuthRows rows;
  Result<Statement> u = impl_->db.Prepare(
      "SELECT name, tenant, role, created_ms, unix_user FROM users ORDER BY name");
  if (!u.ok()) return impl_->Error("reading the users", u.status());
  Result<std::vector<common::AuthUser>> users =
      Collect<common::AuthUser>(u.value(), [](const Statement& q) {
        return common::AuthUser{q.Text(0), q.Text(1), q.Text(2), q.Int64(3), q.Text(4)};
      });
  if (!users.ok()) return impl_->Error("reading the users", users.status());
  rows.users = std::move(users).value();
  Result<Statement> t =
      impl_->db.Prepare("SELECT hash, user, created_ms, revoked FROM tokens ORDER BY hash");
  if (!t.ok()) return impl_->Error("reading the tokens", t.status());
  Result<std::vector<common::AuthToken>> tokens =
      Collect<common::AuthToken>(t.value(), [](const Statement& q) {
        return common::AuthToken{q.Text(0), q.Text(1), q.Int64(2), q.Int64(3) != 0};
      });
  if (!tokens.ok()) return impl_->Error("reading the tokens", tokens.status());
  rows.tokens = std::move(tokens).value();
  Result<std::vector<TenantAccounts>> grants = ListTenantAccounts();
  if (!grants.ok()) return grants.status();
  for (TenantAccounts& g : grants.value()) {
    rows.tenant_accounts.push_back(
        common::AuthTenantAccounts{g.tenant, std::move(g.accounts), g.unix_group});
  }
  return common::WriteAuthRows(rows);
}

Status Store::ImportAuth(std::string_view text) {
  const std::string doing = "taking users and tokens";
  Result<common::AuthRows> rows = common::ParseAuthRows(text);
  if (!rows.ok()) return impl_->Error(doing, rows.message());
  Result<Transaction> tx = Transaction::Begin(impl_->db);
  if (!tx.ok()) return impl_->Error(doing, tx.status());
  for (const char* sql :
       {"DELETE FROM tokens", "DELETE FROM users", "DELETE FROM tenant_accounts"}) {
    Result<Statement> q = impl_->db.Prepare(sql);
    if (!q.ok()) return impl_->Error(doing, q.status());
    if (Status s = q.value().Run(); !s.ok()) return impl_->Error(doing, s);
  }
  Result<Statement> user = impl_->db.Prepare(
      "INSERT INTO users(name, tenant, role, created_ms, unix_user) VALUES (?1, ?2, ?3, ?4, ?5)");
  if (!user.ok()) return impl_->Error(doing, user.status());
  for (const common::AuthUser& u : rows.value().users) {
    user.value().Reset();
    user.value().Bind(1, u.name).Bind(2, u.tenant).Bind(3, u.role);
    user.value().Bind(4, u.created_ms).Bind(5, u.unix_user);
    if (Status s = user.value().Run(); !s.ok()) return impl_->Error(doing, s);
  }
  Result<Statement> token = impl_->db.Prepare(
      "INSERT INTO tokens(hash, user, created_ms, revoked) VALUES (?1, ?2, ?3, ?4)");
  if (!token.ok()) return impl_->Error(doing, token.status());
  for (const common::AuthToken& t : rows.value().tokens) {
    token.value().Reset();
    token.value().Bind(1, t.hash).Bind(2, t.user).Bind(3, t.created_ms);
    token.value().Bind(4, static_cast<int64_t>(t.revoked ? 1 : 0));
    if (Status s = token.value().Run(); !s.ok()) return impl_->Error(doing, s);
  }
  Result<Statement> grant = impl_->db.Prepare(
      "INSERT INTO tenant_accounts(tenant, accounts, unix_group) VALUES (?1, ?2, ?3)");
  if (!grant.ok()) return impl_->Error(doing, grant.status());
  for (const common::AuthTenantAccounts& g : rows.value().tenant_accounts) {
    if (g.accounts.empty() && g.unix_group.empty()) continue;
    grant.value().Reset();
    grant.value().Bind(1, g.tenant).Bind(2, nlohmann::json(g.accounts).dump());
    grant.value().Bind(3, g.unix_group);
    if (Status s = grant.value().Run(); !s.ok()) return impl_->Error(doing, s);
  }
  if (Status s = tx.value().Commit(); !s.ok()) return impl_->Error(doing, s);
  return Status::Ok();
}

Status Store::SetMeta(std::string_view key, std::string_view value) {
  Result<Statement> q = impl_->db.Prepare(
      "INSERT INTO meta(key, value) VALUES (?1, ?2) "
      "ON CONFLICT(key) DO UPDATE SET value = excluded.value");
  if (!q.ok()) return impl_->Error("writing meta", q.status());
  q.value().Bind(1, key).Bind(2, value);
  Result<int> changed = WriteOne(*impl_, q.value());
  if (!changed.ok())
    return impl_->Error("writing meta \"" + std::string(key) + "\"", changed.status());
  return Status::Ok();
}

Status Store::SetMetas(std::span<const std::pair<std::string, std::string>> values) {
  Result<Statement> q = impl_->db.Prepare(
      "INSERT INTO meta(key, value) VALUES (?1, ?2) "
      "ON CONFLICT(key) DO UPDATE SET value = excluded.value");
  if (!q.ok()) return impl_->Error("writing meta", q.status());
  Result<Transaction> tx = Transaction::Begin(impl_->db);
  if (!tx.ok()) return impl_->Error("writing meta", tx.status());
  for (const auto& [key, value] : values) {
    if (Status s = q.value().Bind(1, key).Bind(2, value).Run(); !s.ok()) {
      return impl_->Error("writing meta \"" + key + "\"", s);
    }
  }
  if (Status s = tx.value().Commit(); !s.ok()) return impl_->Error("writing meta", s);
  return Status::Ok();
}

// ---------------------------------------------------------------- audit

Status Store::AppendAudit(TimeMs time_ms, std::string_view actor, std::string_view action,
                          std::string_view detail_json) {
  Result<Statement> q = impl_->db.Prepare(
      "INSERT INTO audit(time_ms, actor, action, detail) VALUES (?1, ?2, ?3, ?4)");
  if (!q.ok()) return impl_->Error("writing the audit log", q.status());
  q.value().Bind(1, time_ms).Bind(2, actor).Bind(3, action).Bind(4, detail_json);
  Result<int> changed = WriteOne(*impl_, q.value());
  if (!changed.ok()) return impl_->Error("writing the audit log", changed.status());
  return Status::Ok();
}

Result<std::vector<AuditRow>> Store::ListAudit(int64_t after_seq, int limit, bool newest_last_n) {
  Result<Statement> q = impl_->db.Prepare(
      newest_last_n
          ? "SELECT * FROM (SELECT seq, time_ms, actor, action, detail FROM audit WHERE seq > ?1 "
            "ORDER BY seq DESC LIMIT ?2) ORDER BY seq"
          : "SELECT seq, time_ms, actor, action, detail FROM audit WHERE seq > ?1 ORDER BY seq "
            "LIMIT ?2");
  if (!q.ok()) return impl_->Error("reading the audit log", q.status());
  q.value().Bind(1, after_seq).Bind(2, limit);
  Result<std::vector<AuditRow>> rows = Collect<AuditRow>(q.value(), [](const Statement& s) {
    return AuditRow{s.Int64(0), s.Int64(1), s.Text(2), s.Text(3), s.Text(4)};
  });
  if (!rows.ok()) return impl_->Error("reading the audit log", rows.status());
  return rows;
}

Result<std::optional<std::string>> Store::GetMeta(std::string_view key) {
  Result<Statement> q = impl_->db.Prepare("SELECT value FROM meta WHERE key = ?1");
  if (!q.ok()) return impl_->Error("reading meta", q.status());
  q.value().Bind(1, key);
  Result<bool> row = q.value().Step();
  if (!row.ok()) return impl_->Error("reading meta", row.status());
  if (!row.value()) return std::optional<std::string>();
  return std::optional<std::string>(q.value().Text(0));
}

}  // namespace topo::store
