#pragma once
// The users and token hashes as one JSON value: what an HA leader writes to
// etcd's `auth` key and every replica takes whole (docs/ha.md, Users and
// tokens). One definition of its fields and their checks, for the store that
// writes and reads it and for the fuzzer.
//
//   {"users": [{"name", "tenant", "role", "created_ms", "unix_user"}],
//    "tokens": [{"hash", "user", "created_ms", "revoked"}],
//    "tenant_accounts": [{"tenant", "accounts": [NAME, ...], "unix_group"}]}
//
// "tenant_accounts" (the Unix accounts granted to tenants, docs/api.md) may
// be absent: a value written before grants existed has none.
//
// Thread safety: pure functions.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "topo/core/status.hpp"

namespace topo::common {

struct AuthUser {
  std::string name;
  std::string tenant;
  std::string role;  // "user", "tenant-admin" or "cluster-admin"
  int64_t created_ms = 0;
  std::string unix_user;
  bool operator==(const AuthUser&) const = default;
};

struct AuthToken {
  std::string hash;  // the token's SHA-256, 64 lowercase hex digits
  std::string user;
  int64_t created_ms = 0;
  bool revoked = false;
  bool operator==(const AuthToken&) const = default;
};

struct AuthTenantAccounts {
  std::string tenant;
  std::vector<std::string> accounts;
  std::string unix_group;  // "" for none
  bool operator==(const AuthTenantAccounts&) const = default;
};

struct AuthRows {
  std::vector<AuthUser> users;
  std::vector<AuthToken> tokens;
  std::vector<AuthTenantAccounts> tenant_accounts;
  bool operator==(const AuthRows&) const = default;
};

inline constexpr size_t kMaxAuthRows = 100000;
inline constexpr size_t kMaxAuthBytes = 16u << 20;
inline constexpr size_t kMaxGrantAccounts = 1000;

// The value, in the rows' order.
std::string WriteAuthRows(const AuthRows& rows);

// Reads and checks a value: strict JSON (duplicate keys refused), an object
// of exactly those lists, each row an object of exactly its fields, each
// of its type and size (names, tenants and unix users 1-256 bytes without
// NUL, roles as above, created_ms an integer >= 0, hashes 64 lowercase hex
// digits, revoked a boolean, a grant's accounts at most kMaxGrantAccounts
// names of 1-256 bytes without NUL and its unix_group at most 256 such
// bytes), no user, hash or granted tenant twice, every token's user among
// the users, at most kMaxAuthRows rows and kMaxAuthBytes bytes.
// Errors name the row and field ("users[3]: \"role\" must be user,
// tenant-admin or cluster-admin").
core::Result<AuthRows> ParseAuthRows(std::string_view text);

}  // namespace topo::common
