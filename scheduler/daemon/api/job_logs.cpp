// GET /v1/jobs/{id}/logs: a piece of one rank's log, from the node's agent.

#include <charconv>
#include <climits>

#include "daemon/api/handlers.hpp"
#include "daemon/api/job_view.hpp"
#include "topo/common/agent_protocol.hpp"

namespace topo::daemon {

using core::JobId;
using core::Result;

namespace {

// Where the rank of a job that holds no GPUs now (it ended, or waits after
// a requeue) last ran: the newest start or restart in its log ("" if none).
std::string LastRankNode(const ServiceState& s, JobId id, int64_t rank) {
  std::string node;
  for (const store::RawEvent& e : JobEvents(s, id)) {
    Json body = Json::parse(e.body, nullptr, false);
    if (!body.is_object() || !body.contains("commands")) continue;
    for (const Json& c : body["commands"]) {
      const std::string type = c.value("type", "");
      if ((type != "start_job" && type != "restart_job") || c.value("id", JobId{0}) != id) continue;
      const Json& ranks = c.contains("ranks") ? c["ranks"] : Json();
      if (ranks.is_array() && rank < static_cast<int64_t>(ranks.size()) && ranks[rank].is_array() &&
          !ranks[rank].empty() && ranks[rank][0].is_string()) {
        node = ranks[rank][0];
      }
    }
  }
  return node;
}

// GET /v1/jobs/ID/logs?rank=N&offset=O&max=M: a piece of one rank's log,
// read by the agent of the node that runs (or last ran) the rank. Deferred:
// the agent's `logs` reply answers it (Service::TakeDeferredAnswers).
}  // namespace

Answer JobLogs(ServiceState& s, const Caller& caller, const Route& route) {
  const std::string& text = route.param("id");
  std::optional<JobId> id = ParseId(text);
  if (!id) return NoSuchJob(text);
  // What this needs of the job, without the full view (its metrics and
  // history): `topo logs --follow` asks every second.
  int64_t gpus = 0;
  std::string state;
  const core::JobRecord* live = s.driver.core() != nullptr ? s.driver.core()->job(*id) : nullptr;
  if (live != nullptr) {
    if (!caller.InScope(live->request.tenant)) return NoSuchJob(text);
    gpus = live->request.spec.gpus;
    state = std::string(core::JobStateName(live->state));
  } else {
    Result<std::optional<store::JobRow>> row = s.driver.store().GetJob(*id);
    if (!row.ok()) return StoreFailed(row.status());
    if (!row.value() || !caller.InScope(row.value()->tenant)) return NoSuchJob(text);
    const Json spec = Json::parse(row.value()->spec_json, nullptr, false);
    gpus = spec.is_object() ? spec.value("gpus", int64_t{0}) : 0;
    state = std::string(core::JobStateName(row.value()->state));
  }
  const auto& q = route.query;
  int64_t rank = 0;
  int64_t offset = 0;
  int64_t max = 64 << 10;
  auto number = [&](const char* key, int64_t lo, int64_t hi, int64_t& out) -> bool {
    auto it = q.find(key);
    if (it == q.end()) return true;
    const std::string& v = it->second;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    return ec == std::errc() && end == v.data() + v.size() && out >= lo && out <= hi;
  };
  if (!number("rank", 0, std::max<int64_t>(gpus - 1, 0), rank)) {
    return Invalid("rank must be a rank of the job: 0.." + std::to_string(gpus - 1), "rank");
  }
  if (!number("offset", INT64_MIN / 2, INT64_MAX / 2, offset)) {
    return Invalid("offset must be a byte offset (negative: that many bytes from the end)",
                   "offset");
  }
  if (!number("max", 1, proto::kMaxLogChunkBytes, max)) {
    return Invalid("max must be 1.." + std::to_string(proto::kMaxLogChunkBytes) + " bytes", "max");
  }
  std::string node;
  if (live != nullptr && rank < static_cast<int64_t>(live->ranks.size())) {
    node = s.driver.topology()->node(live->ranks[rank].node).name;
  }
  if (node.empty()) node = LastRankNode(s, *id, rank);
  if (node.empty()) {
    return Conflict("job " + std::to_string(*id) + " is " + state + " and rank " +
                    std::to_string(rank) + " has not run anywhere yet; no log to read");
  }
  Result<int64_t> req = s.agents->AskLogs(node, *id, static_cast<int>(rank), offset, max);
  if (!req.ok()) return Unavailable(req.message());
  HttpResponse r;
  r.deferred = req.value();
  return r;
}

}  // namespace topo::daemon
