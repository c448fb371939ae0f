#include "client/requests.hpp"

#include <cmath>
#include <cstdlib>
#include <optional>

#include "client/api_client.hpp"
#include "client/input.hpp"
#include "client/submit.hpp"
#include "topo/common/event_json.hpp"
#include "topo/common/hostlist.hpp"
#include "topo/core/node_sets.hpp"

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

// One --partition-limit: PART:max_gpus=N,... or PART:none, into
// body["partitions"][PART].
Status AddPartitionLimit(const std::string& text, json& partitions) {
  const std::string usage =
      "--partition-limit '" + text +
      "': give PART:max_gpus=N[,max_job_gpus=N][,max_running_jobs=N] (N or none), or PART:none";
  const size_t colon = text.find(':');
  if (colon == std::string::npos || colon + 1 == text.size()) return Status::Error(usage);
  const std::string part = text.substr(0, colon);
  if (Status s = core::ValidateNodeSetName(part, "--partition-limit"); !s.ok()) return s;
  if (partitions.contains(part)) {
    return Status::Error("--partition-limit: partition " + part +
                         " is given twice; give all its limits in one flag (" + part +
                         ":max_gpus=N,max_running_jobs=N)");
  }
  const std::string rest = text.substr(colon + 1);
  if (rest == "none") {
    partitions[part] = nullptr;
    return Status::Ok();
  }
  json limits = json::object();
  size_t at = 0;
  while (at <= rest.size()) {
    size_t end = rest.find(',', at);
    if (end == std::string::npos) end = rest.size();
    const std::string item = rest.substr(at, end - at);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    if (eq == std::string::npos ||
        (key != "max_gpus" && key != "max_job_gpus" && key != "max_running_jobs")) {
      return Status::Error(usage);
    }
    if (limits.contains(key)) {
      return Status::Error("--partition-limit '" + text + "': " + key + " is given twice");
    }
    Result<int64_t> v = ParseCount("--partition-limit " + part + ":" + key, item.substr(eq + 1), 0);
    if (!v.ok()) return v.status();
    limits[key] = v.value();
    at = end + 1;
  }
  partitions[part] = std::move(limits);
  return Status::Ok();
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
  if (!flags.partition_limits.empty()) {
    json partitions = json::object();
    for (const std::string& text : flags.partition_limits) {
      if (Status s = AddPartitionLimit(text, partitions); !s.ok()) return s;
    }
    body["partitions"] = std::move(partitions);
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

namespace {

// "a,b" -> {"a", "b"}; "" -> {}.
std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Result<std::vector<std::string>> FlagNodes(const std::string& hostlist) {
  Result<std::vector<std::string>> names = common::ExpandHostlist(hostlist, api::kMaxNodeSetNodes);
  if (!names.ok())
    return Status::Error("--nodes " + hostlist.substr(0, 80) + ": " + names.message());
  return names;
}

Result<int64_t> FlagSeconds(const char* flag, const std::string& text) {
  Result<int64_t> d = ParseDuration(text);
  if (!d.ok()) return Status::Error(std::string(flag) + ": " + d.message());
  return d;
}

// A request read back by the API's reader, as the daemon reads it: an error
// names the flag that set the field.
template <class T>
Result<T> Checked(const T& request, Result<T> (*read)(const nlohmann::json&, std::string*),
                  std::string (*write)(const T&)) {
  std::string field;
  Result<T> back = read(json::parse(write(request)), &field);
  if (back.ok()) return back;
  const std::string flag = NodeSetFieldFlag(field);
  return Status::Error((flag.empty() ? std::string() : flag + ": ") + back.message());
}

}  // namespace

std::string NodeSetFieldFlag(std::string_view field) {
  static constexpr std::pair<std::string_view, std::string_view> kFlags[] = {
      {"name", "NAME"},
      {"nodes", "--nodes"},
      {"default_time_s", "--default-time"},
      {"max_time_s", "--max-time"},
      {"max_gpus", "--max-gpus"},
      {"tenants", "--tenants"},
      {"priority_tier", "--priority-tier"},
      {"preemptible", "--preemptible"},
      {"default", "--default"},
      {"gpus", "--gpus"},
      {"start_ms", "--start"},
      {"duration_s", "--duration"},
      {"end_ms", "--end"},
      {"maintenance", "--maintenance"},
      {"partition", "--partition"}};
  const std::string_view top = field.substr(0, field.find_first_of(".["));
  for (const auto& [f, flag] : kFlags) {
    if (top == f) return std::string(flag);
  }
  return "";
}

Result<api::PartitionRequest> PartitionCreateRequest(const PartitionFlags& flags) {
  api::PartitionRequest r;
  r.name = flags.name;
  if (flags.nodes.empty()) {
    return Status::Error("--nodes is required: the partition's nodes, e.g. --nodes 'gpu[001-064]'");
  }
  Result<std::vector<std::string>> nodes = FlagNodes(flags.nodes);
  if (!nodes.ok()) return nodes.status();
  r.nodes = std::move(nodes).value();
  if (!flags.default_time.empty()) {
    Result<int64_t> d = FlagSeconds("--default-time", flags.default_time);
    if (!d.ok()) return d.status();
    r.default_time_s = d.value();
  }
  if (!flags.max_time.empty()) {
    Result<int64_t> d = FlagSeconds("--max-time", flags.max_time);
    if (!d.ok()) return d.status();
    r.max_time_s = d.value();
  }
  if (!flags.max_gpus.empty()) {
    Result<int64_t> n = ParseCount("--max-gpus", flags.max_gpus, std::nullopt);
    if (!n.ok()) return n.status();
    if (n.value() > api::kMaxReservationGpus) {
      return Status::Error("--max-gpus: at most " + std::to_string(api::kMaxReservationGpus));
    }
    r.max_gpus = static_cast<int>(n.value());
  }
  if (!flags.tenants.empty()) r.tenants = SplitCommas(flags.tenants);
  if (!flags.priority_tier.empty()) {
    const std::string& t = flags.priority_tier;
    const bool negative = t[0] == '-';
    Result<int64_t> n = ParseCount("--priority-tier", negative ? t.substr(1) : t, std::nullopt);
    if (!n.ok() || n.value() > 1000) {
      return Status::Error("--priority-tier: '" + t + "' is not a whole number -1000..1000");
    }
    r.priority_tier = static_cast<int>(negative ? -n.value() : n.value());
  }
  if (flags.preemptible) r.preemptible = true;
  if (flags.is_default) r.is_default = true;
  return Checked<api::PartitionRequest>(r, &api::ReadPartitionRequest, &api::WritePartitionRequest);
}

Result<api::ReservationRequest> ReservationCreateRequest(const ReservationFlags& flags,
                                                         int64_t now_ms) {
  api::ReservationRequest r;
  r.name = flags.name;
  if (flags.nodes.empty() == flags.gpus.empty()) {
    return Status::Error(flags.nodes.empty()
                             ? "give the nodes to hold (--nodes 'gpu[001-008]') or how many GPUs "
                               "the scheduler should choose whole nodes for (--gpus 64)"
                             : "--nodes and --gpus: give one of them, not both");
  }
  if (!flags.nodes.empty()) {
    Result<std::vector<std::string>> nodes = FlagNodes(flags.nodes);
    if (!nodes.ok()) return nodes.status();
    r.nodes = std::move(nodes).value();
  } else {
    Result<int64_t> n = ParseCount("--gpus", flags.gpus, std::nullopt);
    if (!n.ok()) return n.status();
    if (n.value() < 1 || n.value() > api::kMaxReservationGpus) {
      return Status::Error("--gpus: give 1.." + std::to_string(api::kMaxReservationGpus));
    }
    r.gpus = static_cast<int>(n.value());
  }
  Result<int64_t> start = ParseTimePoint(
      flags.start.empty() ? std::string_view("now") : flags.start, now_ms, "--start");
  if (!start.ok()) return start.status();
  r.start_ms = start.value();
  if (flags.duration.empty() == flags.end.empty()) {
    return Status::Error(flags.duration.empty()
                             ? "how long? give --duration D (4h, 90m, 1d) or --end T"
                             : "--duration and --end: give one of them, not both");
  }
  if (!flags.duration.empty()) {
    Result<int64_t> d = FlagSeconds("--duration", flags.duration);
    if (!d.ok()) return d.status();
    r.duration_s = d.value();
  } else {
    Result<int64_t> end = ParseTimePoint(flags.end, now_ms, "--end");
    if (!end.ok()) return end.status();
    if (end.value() <= r.start_ms) {
      return Status::Error("--end " + flags.end + " is not after --start " +
                           (flags.start.empty() ? std::string("now") : flags.start) +
                           ": the window must end after it starts");
    }
    r.end_ms = end.value();
  }
  if (!flags.tenants.empty()) r.tenants = SplitCommas(flags.tenants);
  if (flags.maintenance) r.maintenance = true;
  if (!flags.partition.empty()) r.partition = flags.partition;
  return Checked<api::ReservationRequest>(r, &api::ReadReservationRequest,
                                          &api::WriteReservationRequest);
}

std::string PartitionTarget(const std::string& name) {
  return "/v1/partitions/" + PercentEncode(name);
}
std::string ReservationTarget(const std::string& name) {
  return "/v1/reservations/" + PercentEncode(name);
}

}  // namespace topo::cli
