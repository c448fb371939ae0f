#pragma once
// RFC 4648 base64 with padding: bytes carried in JSON text, where a string
// must be UTF-8 (etcd's gateway, the agent protocol's log data).
//
// Thread safety: pure functions.

#include <cstddef>
#include <string>
#include <string_view>

#include "topo/core/status.hpp"

namespace topo::common {

std::string Base64Encode(std::string_view bytes);
// Strict: the standard alphabet, padding to a multiple of 4, no whitespace,
// zero padding bits; an error says what is wrong and where.
core::Result<std::string> Base64Decode(std::string_view text);
// The length of Base64Encode of n bytes.
constexpr size_t Base64Length(size_t n) { return (n + 2) / 3 * 4; }

}  // namespace topo::common
