#pragma once
// Tables and summaries of the daemon's JSON for people (docs/api.md shapes).
// Every function tolerates missing fields and wrong types: a field the
// server did not send shows as "-". Times are shown in local time.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace topo::cli {

// Columns separated by two spaces, padded to the widest cell; the last
// column is not padded.
class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  void AddRow(std::vector<std::string> cells);
  void AlignRight(size_t column);
  size_t rows() const { return rows_.size(); }
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<bool> right_;
};

// A scalar as text: strings as they are, null/absent "-", true "yes".
std::string Cell(const nlohmann::json& value);
// Run time the way squeue shows it: "0:05", "1:02:03", "2-03:04:05".
std::string FormatElapsed(int64_t ms);
// "2026-01-27 14:03:05" in local time; "-" for null.
std::string FormatTime(const nlohmann::json& time_ms);
// 7200 -> "2h", 5400 -> "1h30m", 90 -> "1m30s".
std::string FormatSeconds(int64_t seconds);

// GET /v1/jobs: ID TENANT USER NAME STATE GPUS NODES TIME REASON. TIME is the
// run time (until now_ms while running), 0:00 for jobs that have not started.
std::string FormatJobTable(const nlohmann::json& jobs, int64_t now_ms);
// GET /v1/jobs/{id}: state, times, layout, placement per HBD/leaf/pod,
// metrics, ranks (the first 16 unless all_ranks), incidents (restarts and
// requeues: cause, detection, restart, step, lost work) and history.
std::string FormatJobDetails(const nlohmann::json& job, int64_t now_ms, bool all_ranks);

// GET /v1/nodes: NAME STATE GPUS FREE HBD LEAF POD REASON; FREE counts the
// healthy GPUs with no job on nodes that are up.
std::string FormatNodeTable(const nlohmann::json& nodes);
// GET /v1/nodes/{name}: the node, its GPUs and their history.
std::string FormatNodeDetails(const nlohmann::json& node);
// {"nodes": [...]} of drain/resume: "16 nodes draining: n[0-15]" per state.
std::string SummarizeNodesByState(const nlohmann::json& nodes);

std::string FormatTenantTable(const nlohmann::json& tenants);
std::string FormatQuota(const nlohmann::json& tenant);

// One line per event (fixed columns, so a --follow stream stays aligned),
// and one per command the event caused, indented under it.
std::string EventHeader();
std::string FormatEvent(const nlohmann::json& entry);

// A list of objects with their scalar fields as columns: `columns` first
// (those present), then the rest in the order met. "*_ms" fields are shown
// as times under a header without the suffix.
std::string FormatObjectTable(const nlohmann::json& items, const std::vector<std::string>& columns);

}  // namespace topo::cli
