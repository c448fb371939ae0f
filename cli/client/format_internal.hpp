#pragma once
// What format.cpp and format_logs.cpp share: lenient readers of the
// server's JSON (a missing field or a wrong type reads as null, "-" or the
// fallback) and the event-line summary. Not part of topo_client's interface.

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/format.hpp"

namespace topo::cli::format_internal {

using json = nlohmann::json;

inline const json& Field(const json& obj, const char* key) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

inline std::string Str(const json& obj, const char* key) { return Cell(Field(obj, key)); }

inline bool IsInt(const json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

inline int64_t Int(const json& obj, const char* key, int64_t fallback = 0) {
  const json& v = Field(obj, key);
  return IsInt(v) ? v.get<int64_t>() : fallback;
}

inline std::string Plural(int64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// "  Key:         value" lines of a details page.
inline void KeyValue(std::ostringstream& os, const std::string& key, const std::string& value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "  %-12s ", (key + ":").c_str());
  os << buf << value << "\n";
}

// Cuts at a character boundary, so the cut never leaves half a UTF-8
// sequence behind.
inline std::string Truncate(std::string s, size_t width) {
  if (s.size() <= width) return s;
  size_t cut = width - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

// The JSON text of a value, never throwing on bad UTF-8 (replaced).
inline std::string Dump(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

// "key=value ..." of an object's fields but `skip`, for event lines and the
// audit log's DETAIL: ranks as a GPU count, lists of names as a hostlist, a
// request as its size and name, an object with a name as the name; strings
// holding blanks quoted as JSON. Every part passes TerminalSafe.
std::string Summarize(const json& obj, const std::vector<std::string>& skip);

}  // namespace topo::cli::format_internal
