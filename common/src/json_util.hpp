#pragma once
// Internal helpers for the strict JSON readers and the compact writer of
// common/. Not installed; only common/src includes this.
//
// Paths are written the way a person finds the spot in their file:
// "domains[0].children[3].nodes[2]"; the empty path is the top level.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "topo/core/status.hpp"

namespace topo::common::internal {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

inline std::string Where(std::string_view path) {
  return path.empty() ? std::string("top level") : std::string(path);
}
inline std::string Child(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
}
inline std::string Index(std::string_view path, size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}
inline core::Status PathError(std::string_view path, std::string_view problem) {
  return core::Status::Error(Where(path) + ": " + std::string(problem));
}

// A short rendering of a value for "(got ...)" in messages.
inline std::string Shown(const Json& v) {
  // Strings that are not UTF-8 (in a value built in memory) show U+FFFD.
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

inline std::string_view TypeName(const Json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

// Rejects keys that are not in `allowed`, naming them all in the message.
inline core::Status CheckFields(const Json& object, std::string_view path,
                                std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || key == a;
    if (known) continue;
    std::string list;
    for (std::string_view a : allowed) {
      if (!list.empty()) list += ", ";
      list += a;
    }
    return PathError(path, "unknown field \"" + key + "\"; allowed: " + list);
  }
  return core::Status::Ok();
}

// An integer (not a float such as 8.0 or 8.5, not a string, not a boolean)
// within [lo, hi].
inline core::Result<int64_t> GetInt(const Json& object, std::string_view path, std::string_view key,
                                    int64_t lo, int64_t hi) {
  const Json& v = object.at(std::string(key));
  std::string want = "\"" + std::string(key) + "\" must be an integer " + std::to_string(lo) +
                     ".." + std::to_string(hi);
  if (!v.is_number_integer()) return PathError(path, want + " (got " + Shown(v) + ")");
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo)
      return PathError(path, want + " (got " + Shown(v) + ")");
    return static_cast<int64_t>(u);
  }
  int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) return PathError(path, want + " (got " + Shown(v) + ")");
  return i;
}

inline core::Result<std::string> GetString(const Json& object, std::string_view path,
                                           std::string_view key, bool allow_empty) {
  const Json& v = object.at(std::string(key));
  if (!v.is_string()) {
    return PathError(path, "\"" + std::string(key) + "\" must be a string (got " +
                               std::string(TypeName(v)) + ")");
  }
  std::string s = v.get<std::string>();
  if (s.empty() && !allow_empty) {
    return PathError(path, "\"" + std::string(key) + "\" must not be empty");
  }
  return s;
}

// Parses text, rejecting duplicate keys (nlohmann would keep the last one
// silently) and reporting syntax errors with their line and column.
// duplicate_path, when given, gets the path of the first duplicate key.
core::Result<Json> ParseStrictJson(std::string_view text, std::string* duplicate_path = nullptr);

// Compact, readable layout: containers that fit in the line stay on one line,
// arrays of scalars are packed several to a line, the rest is indented.
std::string WriteCompact(const OrderedJson& value, size_t width = 100);

// Shortest decimal text that reads back as the same double.
std::string FormatDouble(double value);

// Whether s is well-formed UTF-8 (RFC 3629: no overlong forms, surrogates or
// code points past U+10FFFF). Names read from topology.conf or CSV must be,
// or the JSON writer (nlohmann) throws on them.
bool IsUtf8(std::string_view s);

}  // namespace topo::common::internal
