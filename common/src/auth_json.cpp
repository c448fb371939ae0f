// The users-and-tokens value (auth_json.hpp).

#include "topo/common/auth_json.hpp"

#include <algorithm>
#include <initializer_list>
#include <set>

#include <nlohmann/json.hpp>

#include "topo/common/strict_json.hpp"

namespace topo::common {

using core::Result;
using core::Status;
using nlohmann::json;

namespace {

Status OnlyFields(const json& row, std::initializer_list<std::string_view> fields,
                  const std::string& where) {
  if (!row.is_object()) return Status::Error(where + " must be an object");
  for (auto it = row.begin(); it != row.end(); ++it) {
    if (std::find(fields.begin(), fields.end(), it.key()) == fields.end()) {
      return Status::Error(where + ": unknown field \"" + it.key() + "\"");
    }
  }
  return Status::Ok();
}

// A string field of 1..max_bytes bytes without NUL.
Result<std::string> Text(const json& row, const char* field, const std::string& where,
                         size_t max_bytes = 256) {
  auto it = row.find(field);
  if (it == row.end() || !it->is_string()) {
    return Status::Error(where + ": \"" + field + "\" must be a string");
  }
  const std::string& v = it->get_ref<const std::string&>();
  if (v.empty() || v.size() > max_bytes || v.find('\0') != std::string::npos) {
    return Status::Error(where + ": \"" + field + "\" must be 1 to " + std::to_string(max_bytes) +
                         " bytes without NUL");
  }
  return v;
}

Result<int64_t> Time(const json& row, const std::string& where) {
  auto it = row.find("created_ms");
  if (it == row.end() || !it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX) || it->get<int64_t>() < 0) {
    return Status::Error(where + ": \"created_ms\" must be an integer >= 0");
  }
  return it->get<int64_t>();
}

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

std::string WriteAuthRows(const AuthRows& rows) {
  nlohmann::ordered_json users = nlohmann::ordered_json::array();
  for (const AuthUser& u : rows.users) {
    users.push_back({{"name", u.name},
                     {"tenant", u.tenant},
                     {"role", u.role},
                     {"created_ms", u.created_ms},
                     {"unix_user", u.unix_user}});
  }
  nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
  for (const AuthToken& t : rows.tokens) {
    tokens.push_back(
        {{"hash", t.hash}, {"user", t.user}, {"created_ms", t.created_ms}, {"revoked", t.revoked}});
  }
  nlohmann::ordered_json grants = nlohmann::ordered_json::array();
  for (const AuthTenantAccounts& g : rows.tenant_accounts) {
    grants.push_back(
        {{"tenant", g.tenant}, {"accounts", g.accounts}, {"unix_group", g.unix_group}});
  }
  return nlohmann::ordered_json{{"users", std::move(users)},
                                {"tokens", std::move(tokens)},
                                {"tenant_accounts", std::move(grants)}}
      .dump();
}

Result<AuthRows> ParseAuthRows(std::string_view text) {
  if (text.size() > kMaxAuthBytes) {
    return Status::Error(std::to_string(text.size()) + " bytes, more than " +
                         std::to_string(kMaxAuthBytes));
  }
  Result<json> parsed = ParseJson(text);
  if (!parsed.ok()) return Status::Error("not JSON: " + parsed.message());
  const json& doc = parsed.value();
  if (Status s = OnlyFields(doc, {"users", "tokens", "tenant_accounts"}, "the value"); !s.ok()) {
    return s;
  }
  if (!doc.contains("users") || !doc["users"].is_array() || !doc.contains("tokens") ||
      !doc["tokens"].is_array()) {
    return Status::Error("\"users\" and \"tokens\" must both be lists");
  }
  const json no_grants = json::array();
  const json& grants = doc.contains("tenant_accounts") ? doc["tenant_accounts"] : no_grants;
  if (!grants.is_array()) return Status::Error("\"tenant_accounts\" must be a list");
  if (doc["users"].size() + doc["tokens"].size() + grants.size() > kMaxAuthRows) {
    return Status::Error("more than " + std::to_string(kMaxAuthRows) + " users and tokens");
  }
  AuthRows out;
  std::set<std::string> names;
  for (size_t i = 0; i < doc["users"].size(); ++i) {
    const json& row = doc["users"][i];
    const std::string where = "users[" + std::to_string(i) + "]";
    if (Status s = OnlyFields(row, {"name", "tenant", "role", "created_ms", "unix_user"}, where);
        !s.ok()) {
      return s;
    }
    Result<std::string> name = Text(row, "name", where);
    Result<std::string> tenant = Text(row, "tenant", where);
    Result<std::string> role = Text(row, "role", where, 32);
    Result<std::string> unix_user = Text(row, "unix_user", where);
    Result<int64_t> created = Time(row, where);
    for (const Status& s :
         {name.status(), tenant.status(), role.status(), unix_user.status(), created.status()}) {
      if (!s.ok()) return s;
    }
    if (role.value() != "user" && role.value() != "tenant-admin" &&
        role.value() != "cluster-admin") {
      return Status::Error(where + ": \"role\" must be user, tenant-admin or cluster-admin");
    }
    if (!names.insert(name.value()).second) {
      return Status::Error(where + ": user \"" + name.value() + "\" appears twice");
    }
    out.users.push_back(
        AuthUser{name.value(), tenant.value(), role.value(), created.value(), unix_user.value()});
  }
  std::set<std::string> hashes;
  for (size_t i = 0; i < doc["tokens"].size(); ++i) {
    const json& row = doc["tokens"][i];
    const std::string where = "tokens[" + std::to_string(i) + "]";
    if (Status s = OnlyFields(row, {"hash", "user", "created_ms", "revoked"}, where); !s.ok()) {
      return s;
    }
    Result<std::string> hash = Text(row, "hash", where, 64);
    Result<std::string> user = Text(row, "user", where);
    Result<int64_t> created = Time(row, where);
    for (const Status& s : {hash.status(), user.status(), created.status()}) {
      if (!s.ok()) return s;
    }
    if (hash.value().size() != 64 || !IsLowerHex(hash.value())) {
      return Status::Error(where + ": \"hash\" must be 64 lowercase hex digits (a SHA-256)");
    }
    if (!names.count(user.value())) {
      return Status::Error(where + ": its user \"" + user.value() + "\" is not among the users");
    }
    auto revoked = row.find("revoked");
    if (revoked == row.end() || !revoked->is_boolean()) {
      return Status::Error(where + ": \"revoked\" must be true or false");
    }
    if (!hashes.insert(hash.value()).second) {
      return Status::Error(where + ": a hash that appears twice");
    }
    out.tokens.push_back(
        AuthToken{hash.value(), user.value(), created.value(), revoked->get<bool>()});
  }
  std::set<std::string> granted;
  for (size_t i = 0; i < grants.size(); ++i) {
    const json& row = grants[i];
    const std::string where = "tenant_accounts[" + std::to_string(i) + "]";
    if (Status s = OnlyFields(row, {"tenant", "accounts", "unix_group"}, where); !s.ok()) return s;
    Result<std::string> tenant = Text(row, "tenant", where);
    if (!tenant.ok()) return tenant.status();
    if (!granted.insert(tenant.value()).second) {
      return Status::Error(where + ": tenant \"" + tenant.value() + "\" appears twice");
    }
    AuthTenantAccounts g{tenant.value(), {}, {}};
    auto accounts = row.find("accounts");
    if (accounts == row.end() || !accounts->is_array() || accounts->size() > kMaxGrantAccounts) {
      return Status::Error(where + ": \"accounts\" must be a list of at most " +
                           std::to_string(kMaxGrantAccounts) + " names");
    }
    for (const json& a : *accounts) {
      if (!a.is_string() || a.get_ref<const std::string&>().empty() ||
          a.get_ref<const std::string&>().size() > 256 ||
          a.get_ref<const std::string&>().find('\0') != std::string::npos) {
        return Status::Error(where +
                             ": every one of \"accounts\" must be 1 to 256 bytes without NUL");
      }
      g.accounts.push_back(a.get<std::string>());
    }
    auto group = row.find("unix_group");
    if (group == row.end() || !group->is_string() ||
        group->get_ref<const std::string&>().size() > 256 ||
        group->get_ref<const std::string&>().find('\0') != std::string::npos) {
      return Status::Error(where +
                           ": \"unix_group\" must be a string of at most 256 bytes without NUL");
    }
    g.unix_group = group->get<std::string>();
    out.tenant_accounts.push_back(std::move(g));
  }
  return out;
}

}  // namespace topo::common
