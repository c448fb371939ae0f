// Reading a request (route.hpp): the body, fields, query parameters, names.

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>

#include "daemon/api/route.hpp"
#include "topo/common/strict_json.hpp"
#include "topo/common/user_api.hpp"

namespace topo::daemon {

using core::ErrorCode;
using core::Result;
using core::Status;

const std::string& Route::param(std::string_view name) const {
  static const std::string kNone;
  auto it = params.find(name);
  return it == params.end() ? kNone : it->second;
}

namespace {

// Nesting depth of JSON text (brackets outside strings), to refuse deep
// nesting before the parser sees it.
int JsonDepth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escape = false;
  for (char c : text) {
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

}  // namespace

Result<Json> ParseBody(const HttpRequest& request, bool allow_empty) {
  if (request.body.empty() && allow_empty) return Json::object();
  const std::string& ct = request.content_type;
  // The media type before any parameters (charset=...), in any case (RFC
  // 9110 8.3.1): application/json, nothing longer.
  std::string media = ct.substr(0, ct.find(';'));
  while (!media.empty() && (media.back() == ' ' || media.back() == '\t')) media.pop_back();
  std::transform(media.begin(), media.end(), media.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!ct.empty() && media != "application/json") {
    return Status::Error("the body must be JSON: send Content-Type: application/json (got \"" +
                             ct.substr(0, 100) + "\")",
                         ErrorCode::kUnsupportedMediaType);
  }
  if (request.body.empty()) return Invalid("the request needs a JSON object body");
  if (JsonDepth(request.body) > 32) return Invalid("the JSON body is nested deeper than 32 levels");
  std::string duplicate;
  Result<Json> parsed = common::ParseJson(request.body, &duplicate);
  if (!parsed.ok()) {
    if (duplicate.empty()) return Invalid("the body is not valid JSON: " + parsed.message());
    return Invalid("the body names " + duplicate +
                       " twice; give each field once (readers disagree on "
                       "which one wins)",
                   duplicate);
  }
  if (!parsed.value().is_object()) {
    return Invalid(std::string("the body must be a JSON object, not ") +
                   parsed.value().type_name());
  }
  return parsed;
}

Status UnknownField(const Json& body, std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, unused] : body.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string known;
      for (std::string_view a : allowed) known += (known.empty() ? "" : ", ") + std::string(a);
      return Invalid("unknown field \"" + key.substr(0, 64) + "\"; known fields: " + known,
                     key.substr(0, 64));
    }
  }
  return Status::Ok();
}

Status IntField(const Json& body, std::string_view field, int64_t lo, int64_t hi, int64_t& out) {
  auto it = body.find(std::string(field));
  if (it == body.end()) return Status::Ok();
  const std::string name(field);
  if (!it->is_number_integer()) {
    return Invalid(name + " must be a whole number in " + std::to_string(lo) + ".." +
                       std::to_string(hi) + ", not " + it->dump().substr(0, 40),
                   name);
  }
  const bool negative = !it->is_number_unsigned() && it->get<int64_t>() < 0;
  if ((!negative && it->get<uint64_t>() > static_cast<uint64_t>(std::max<int64_t>(hi, 0))) ||
      it->get<int64_t>() < lo) {
    return Invalid(name + " " + it->dump() + " is out of range; use " + std::to_string(lo) + ".." +
                       std::to_string(hi),
                   name);
  }
  out = it->get<int64_t>();
  return Status::Ok();
}

Status ReasonField(const Json& body, std::string& out) {
  auto it = body.find("reason");
  if (it == body.end()) return Status::Ok();
  if (!it->is_string() || it->get_ref<const std::string&>().size() > 1000) {
    return Invalid("reason must be a string of at most 1000 bytes", "reason");
  }
  out = it->get<std::string>();
  return Status::Ok();
}

Result<int64_t> QueryInt(const Route& route, std::string_view key, int64_t lo, int64_t hi,
                         int64_t fallback) {
  auto it = route.query.find(key);
  if (it == route.query.end()) return fallback;
  int64_t v = 0;
  const std::string& t = it->second;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || p != t.data() + t.size() || v < lo || v > hi) {
    return Invalid(std::string(key) + " must be a whole number in " + std::to_string(lo) + ".." +
                       std::to_string(hi),
                   std::string(key));
  }
  return v;
}

Status UnknownParameter(const Route& route, std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : route.query) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string list;
    for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    return Invalid("unknown parameter \"" + key.substr(0, 40) + "\"; use " + list,
                   key.substr(0, 40));
  }
  return Status::Ok();
}

// One rule for every reader (common/user_api.hpp).
bool ValidTenantName(std::string_view name) { return api::ValidTenantName(name); }
bool ValidUserName(std::string_view name) { return api::ValidUserName(name); }

}  // namespace topo::daemon
