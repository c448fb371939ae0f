#include "client/requests.hpp"

#include <cmath>
#include <cstdlib>
#include <optional>

#include "client/api_client.hpp"
#include "client/submit.hpp"
#include "topo/common/hostlist.hpp"

namespace topo::cli {

using core::Result;
using core::Status;
using nlohmann::json;

namespace {

// A count >= 0, or "none" -> none_value where allowed.
Result<int64_t> ParseCount(const std::string& flag, const std::string& text,
                           std::optional<int64_t> none_value) {
  if (text == "none" && none_value) return *none_value;
  bool digits = !text.empty() && text.size() <= 12;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (!digits) {
    return Status::Error(flag + ": '" + text + "' is not a whole number >= 0" +
                         (none_value ? " or none" : ""));
  }
  return std::stoll(text);
}

}  // namespace

Result<json> NodeActionBody(const std::string& hostlist, const std::string& reason) {
  Result<std::vector<std::string>> names = common::ExpandHostlist(hostlist);
  if (!names.ok()) return names.status();  // names the hostlist and the fault
  if (names.value().empty()) return Status::Error("hostlist '" + hostlist + "' names no nodes");
  json body = {{"nodes", hostlist}};
  if (!reason.empty()) body["reason"] = reason;
  return body;
}

Result<json> QuotaSetBody(const QuotaFlags& flags) {
  json body = json::object();
  struct Count {
    const char* flag;
    const char* field;
    const std::string& text;
    std::optional<int64_t> none;
  };
  const Count counts[] = {
      {"--guaranteed", "guaranteed_gpus", flags.guaranteed, std::nullopt},
      {"--borrow-limit", "borrow_limit_gpus", flags.borrow_limit, -1},
      {"--max-job-gpus", "max_job_gpus", flags.max_job_gpus, 0},
      {"--max-running-jobs", "max_running_jobs", flags.max_running_jobs, 0},
      {"--max-queued-jobs", "max_queued_jobs", flags.max_queued_jobs, 0},
  };
  for (const Count& c : counts) {
    if (c.text.empty()) continue;
    Result<int64_t> v = ParseCount(c.flag, c.text, c.none);
    if (!v.ok()) return v.status();
    body[c.field] = v.value();
  }
  if (!flags.shares.empty()) {
    char* end = nullptr;
    const double v = std::strtod(flags.shares.c_str(), &end);
    if (end != flags.shares.c_str() + flags.shares.size() || !std::isfinite(v) || v <= 0) {
      return Status::Error("--shares: '" + flags.shares + "' is not a number > 0");
    }
    body["shares"] = v;
  }
  if (!flags.placement_wait.empty()) {
    if (flags.placement_wait == "never") {
      body["placement_wait_s"] = -1;
    } else if (flags.placement_wait == "default") {
      body["placement_wait_s"] = 0;
    } else {
      Result<int64_t> d = ParseDuration(flags.placement_wait);
      if (!d.ok() || d.value() <= 0) {
        return Status::Error("--placement-wait: '" + flags.placement_wait +
                             "' is not a duration (30m, 2h), never or default");
      }
      body["placement_wait_s"] = d.value();
    }
  }
  if (!flags.unix_accounts.empty()) {
    json accounts = json::array();
    if (flags.unix_accounts != "none") {
      size_t at = 0;
      while (at <= flags.unix_accounts.size()) {
        size_t end = flags.unix_accounts.find(',', at);
        if (end == std::string::npos) end = flags.unix_accounts.size();
        const std::string name = flags.unix_accounts.substr(at, end - at);
        if (name.empty()) {
          return Status::Error("--unix-accounts: '" + flags.unix_accounts +
                               "' has an empty name; give ACCOUNT,ACCOUNT,... or none");
        }
        accounts.push_back(name);
        at = end + 1;
      }
    }
    body["unix_accounts"] = std::move(accounts);
  }
  if (!flags.unix_group.empty()) {
    body["unix_group"] = flags.unix_group == "none" ? std::string() : flags.unix_group;
  }
  return body;
}

Result<NodeGpu> ParseNodeGpu(const std::string& text) {
  const size_t colon = text.rfind(':');
  const auto fail = [&] {
    return Status::Error("'" + text +
                         "' is not NODE:GPU; give the node and the GPU's index, as in " +
                         "gpu0007:3 (topo nodes NODE lists its GPUs)");
  };
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return fail();
  const std::string index = text.substr(colon + 1);
  if (index.size() > 2 || index.find_first_not_of("0123456789") != std::string::npos) {
    return fail();
  }
  return NodeGpu{text.substr(0, colon), std::stoi(index)};
}

std::string GpuClearTarget(const NodeGpu& target) {
  return "/v1/nodes/" + PercentEncode(target.node) + "/gpus/" + std::to_string(target.gpu) +
         "/clear";
}

std::string TenantTarget(const std::string& tenant) {
  return "/v1/tenants/" + PercentEncode(tenant, /*keep_slash=*/true);
}

std::string JobsTarget(const JobFilter& filter, const std::string& after, int limit) {
  std::string q;
  auto add = [&](const std::string& k, const std::string& v) {
    if (v.empty()) return;
    q += (q.empty() ? "?" : "&") + k + "=" + QueryEscape(v);
  };
  add("all", filter.all ? "1" : "");
  add("tenant", filter.tenant);
  add("user", filter.user);
  add("state", filter.states);
  add("after", after);
  add("limit", std::to_string(limit));
  return "/v1/jobs" + q;
}

std::string DescribeJobFilter(const JobFilter& filter) {
  std::string out;
  auto add = [&](const std::string& what, const std::string& v) {
    if (!v.empty()) out += (out.empty() ? "" : ", ") + what + " " + v;
  };
  add("tenant", filter.tenant);
  add("user", filter.user);
  add("state", filter.states);
  return out;
}

}  // namespace topo::cli
