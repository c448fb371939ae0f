// Partitions and reservations for people (format.hpp): the API's typed
// views, as `topo partition` and `topo reservation` show them.

#include <sstream>

#include "client/format.hpp"
#include "client/format_internal.hpp"

namespace topo::cli {

using format_internal::KeyValue;

namespace {

// "-" for a bound of 0 (none), else the seconds as 4h, 1d12h.
std::string Bound(int64_t seconds) { return seconds > 0 ? FormatSeconds(seconds) : "-"; }

std::string Names(const std::vector<std::string>& names, const std::string& none) {
  if (names.empty()) return none;
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + TerminalSafe(n);
  return out;
}

}  // namespace

std::string FormatPartitionTable(const std::vector<api::PartitionView>& partitions) {
  Table t({"NAME", "NODES", "GPUS", "UP", "FREE", "DEFAULT-TIME", "MAX-TIME", "MAX-GPUS", "TIER",
           "PREEMPT", "TENANTS"});
  for (size_t c : {2, 3, 4, 7, 8}) t.AlignRight(c);
  for (const api::PartitionView& p : partitions) {
    t.AddRow({p.name + (p.is_default ? "*" : ""), p.nodes, std::to_string(p.gpus),
              std::to_string(p.up_nodes) + "/" + std::to_string(p.node_count),
              std::to_string(p.free_gpus), Bound(p.default_time_s), Bound(p.max_time_s),
              p.max_gpus > 0 ? std::to_string(p.max_gpus) : "-", std::to_string(p.priority_tier),
              p.preemptible ? "yes" : "no", Names(p.tenants, "all")});
  }
  return t.Render();
}

std::string FormatPartitionDetails(const api::PartitionView& p) {
  std::ostringstream os;
  os << "Partition " << TerminalSafe(p.name) << (p.is_default ? " (the default)" : "") << "\n";
  KeyValue(os, "Nodes",
           TerminalSafe(p.nodes) + " (" + std::to_string(p.node_count) + ", " +
               std::to_string(p.up_nodes) + " up)");
  KeyValue(os, "GPUs", std::to_string(p.gpus) + " (" + std::to_string(p.free_gpus) + " free)");
  KeyValue(os, "Default time",
           p.default_time_s > 0 ? FormatSeconds(p.default_time_s) : "the scheduler's");
  KeyValue(os, "Max time", p.max_time_s > 0 ? FormatSeconds(p.max_time_s) : "no bound");
  KeyValue(os, "Max GPUs", p.max_gpus > 0 ? std::to_string(p.max_gpus) + " per job" : "no bound");
  KeyValue(os, "Tenants", Names(p.tenants, "every tenant"));
  KeyValue(os, "Tier", std::to_string(p.priority_tier));
  KeyValue(os, "Preemptible", p.preemptible ? "yes" : "no");
  return os.str();
}

std::string FormatReservationTable(const std::vector<api::ReservationView>& reservations) {
  Table t({"NAME", "STATE", "START", "END", "NODES", "GPUS", "TENANTS", "MAINTENANCE"});
  t.AlignRight(5);
  for (const api::ReservationView& r : reservations) {
    t.AddRow({r.name, std::string(api::ReservationStateName(r.state)), FormatTime(r.start_ms),
              FormatTime(r.end_ms), r.nodes, std::to_string(r.gpus), Names(r.tenants, "any"),
              r.maintenance ? "yes" : "no"});
  }
  return t.Render();
}

std::string FormatReservationDetails(const api::ReservationView& r) {
  std::ostringstream os;
  os << "Reservation " << TerminalSafe(r.name) << " (" << api::ReservationStateName(r.state)
     << (r.maintenance ? ", maintenance" : "") << ")\n";
  KeyValue(os, "Nodes", TerminalSafe(r.nodes) + " (" + std::to_string(r.node_count) + ")");
  KeyValue(os, "GPUs", std::to_string(r.gpus));
  KeyValue(os, "Start", FormatTime(r.start_ms));
  KeyValue(os, "End",
           FormatTime(r.end_ms) + " (" + FormatSeconds((r.end_ms - r.start_ms) / 1000) + ")");
  KeyValue(os, "Tenants", Names(r.tenants, "any job that names it"));
  return os.str();
}

}  // namespace topo::cli
