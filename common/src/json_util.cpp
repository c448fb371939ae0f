#include "json_util.hpp"

#include "topo/common/strict_json.hpp"

#include <charconv>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace topo::common::internal {
namespace {

// Tracks where the parser is, so a duplicate key can be reported by path.
struct Frame {
  bool is_array = false;
  std::string key;   // current key, objects
  size_t index = 0;  // current element, arrays
  std::set<std::string> keys;
};

std::string FramePath(const std::vector<Frame>& stack) {
  std::string path;
  // The last frame is the object being read; the ones before lead to it.
  for (size_t i = 0; i + 1 < stack.size(); ++i) {
    path = stack[i].is_array ? Index(path, stack[i].index) : Child(path, stack[i].key);
  }
  return path;
}

void ElementDone(std::vector<Frame>& stack) {
  if (!stack.empty() && stack.back().is_array) ++stack.back().index;
}

std::string StripExceptionId(std::string what) {
  // "[json.exception.parse_error.101] parse error at line 1, ..." -> "parse error at ..."
  if (!what.empty() && what[0] == '[') {
    size_t close = what.find("] ");
    if (close != std::string::npos) what.erase(0, close + 2);
  }
  return what;
}

bool IsScalar(const OrderedJson& v) { return !v.is_array() && !v.is_object(); }

// One-line rendering with a space after ':' and ','.
void WriteFlat(const OrderedJson& v, std::string& out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, value] : v.items()) {
      if (!first) out += ", ";
      first = false;
      out += OrderedJson(key).dump();
      out += ": ";
      WriteFlat(value, out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += ", ";
      WriteFlat(v[i], out);
    }
    out += ']';
  } else {
    out += v.dump();
  }
}

void Write(const OrderedJson& v, size_t indent, size_t column, size_t width, std::string& out) {
  std::string flat;
  WriteFlat(v, flat);
  // Short containers stay on one line unless they hold objects or arrays of
  // containers (a domain with children opens up; a node object does not).
  bool deep = false;
  bool nested = false;
  if (v.is_object() || v.is_array()) {
    for (const auto& item : v) {
      nested = nested || item.is_object() || item.is_array();
      deep = deep || item.is_object();
      if (item.is_array()) {
        for (const auto& inner : item) deep = deep || inner.is_object() || inner.is_array();
      }
    }
  }
  if (IsScalar(v) || v.empty() || (!deep && column + flat.size() <= width)) {
    out += flat;
    return;
  }
  std::string pad(indent + 2, ' ');
  if (v.is_object()) {
    out += "{\n";
    size_t i = 0;
    for (const auto& [key, value] : v.items()) {
      out += pad;
      std::string k = OrderedJson(key).dump() + ": ";
      out += k;
      Write(value, indent + 2, indent + 2 + k.size(), width, out);
      out += ++i < v.size() ? ",\n" : "\n";
    }
    out += std::string(indent, ' ') + "}";
    return;
  }
  out += "[\n";
  if (!nested) {
    // Pack scalars several to a line.
    std::string line;
    for (size_t i = 0; i < v.size(); ++i) {
      std::string item = v[i].dump() + (i + 1 < v.size() ? "," : "");
      if (!line.empty() && pad.size() + line.size() + 1 + item.size() > width) {
        out += pad + line + "\n";
        line.clear();
      }
      if (!line.empty()) line += ' ';
      line += item;
    }
    out += pad + line + "\n";
  } else {
    for (size_t i = 0; i < v.size(); ++i) {
      out += pad;
      Write(v[i], indent + 2, indent + 2, width, out);
      out += i + 1 < v.size() ? ",\n" : "\n";
    }
  }
  out += std::string(indent, ' ') + "]";
}

}  // namespace

core::Result<Json> ParseStrictJson(std::string_view text, std::string* duplicate_path) {
  std::vector<Frame> stack;
  std::string duplicate;
  auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        stack.push_back(Frame{});
        break;
      case Json::parse_event_t::array_start:
        stack.push_back(Frame{true, {}, 0, {}});
        break;
      case Json::parse_event_t::key:
        if (!stack.empty()) {
          Frame& top = stack.back();
          top.key = parsed.get<std::string>();
          if (!top.keys.insert(top.key).second && duplicate.empty()) {
            duplicate = Where(FramePath(stack)) + ": duplicate field \"" + top.key + "\"";
            if (duplicate_path != nullptr) *duplicate_path = Child(FramePath(stack), top.key);
          }
        }
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        ElementDone(stack);
        break;
      case Json::parse_event_t::value:
        ElementDone(stack);
        break;
    }
    return true;
  };
  try {
    Json value = Json::parse(text.begin(), text.end(), callback);
    if (!duplicate.empty()) return core::Status::Error(duplicate);
    return value;
  } catch (const Json::exception& e) {
    return core::Status::Error("invalid JSON: " + StripExceptionId(e.what()));
  }
}

std::string WriteCompact(const OrderedJson& value, size_t width) {
  std::string out;
  Write(value, 0, 0, width, out);
  out += '\n';
  return out;
}

std::string FormatDouble(double value) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (ec != std::errc()) return OrderedJson(value).dump();
  return std::string(buffer, end);
}

bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Lead byte: the sequence length and the range of the second byte.
    size_t length = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      return false;
    }
    if (s.size() - i < length) return false;
    for (size_t k = 1; k < length; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += length;
  }
  return true;
}

}  // namespace topo::common::internal

namespace topo::common {

core::Result<nlohmann::json> ParseJson(std::string_view text, std::string* duplicate) {
  return internal::ParseStrictJson(text, duplicate);
}

}  // namespace topo::common
