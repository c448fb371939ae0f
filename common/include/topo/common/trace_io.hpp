#pragma once
// Replay traces and results: the generic job trace CSV, the Kalos trace
// (../shared/data/traces/kalos-llm/jobs.csv), the per-job result CSV and the
// `topo sim --json` document. Parsers take text, not files; errors name the
// line and the column.

#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "topo/core/sim.hpp"
#include "topo/core/sim_workload.hpp"
#include "topo/core/status.hpp"

namespace topo::common {

// The generic trace. A header line names the columns (any order); blank
// lines and lines starting with '#' are skipped; fields are separated by
// commas (no quoting). Columns:
//   submit_s               required; seconds (a decimal >= 0)
//   duration_s             required; seconds of work (a decimal > 0)
//   gpus                   required; integer >= 1
//   tenant                 default "default"
//   tp, cp, ep, pp         integers >= 1, default 1
//   dp                     integer >= 1; default gpus / (tp x cp x pp)
//   gpus_per_node          integer >= 0, default 0 (whole nodes)
//   priority               integer, default 0
//   time_limit_s           seconds > 0; default core::DefaultTimeLimit(duration)
//   checkpoint_interval_s  seconds; empty or 0: the scheduler's default;
//                          negative: never
// An empty cell takes the default. Every row must pass
// core::ValidateJobSpec. SimJob::index is the data row number, from 0.
// Errors: "line N, column NAME: problem" (unknown or duplicate columns, a
// missing required column, a bad number, a short or long row).
core::Result<std::vector<core::SimJob>> ParseTraceCsv(std::string_view text);

// The Kalos CSV: needs the columns job_idx, submit_offset_s, duration_s,
// gpu_num, gpus_per_node and job_class (others are ignored). Errors name the
// line and the column.
core::Result<std::vector<core::KalosRow>> ParseKalosCsv(std::string_view text);

// The per-job result CSV: a header, then one row per job and report:
//   policy,index,id,tenant,gpus,submit_s,first_start_s,end_s,state,
//   queue_delay_s,jct_s,placements,restarts,interruptions,productive_s,
//   lost_failure_gpu_h,lost_other_gpu_h,leaf_span_ratio,comm_cost_ratio,required_met,
//   run_s,work_s
// Times are seconds of simulated time; a value that does not apply is empty.
void WritePerJobCsv(std::ostream& out, std::span<const core::SimReport> reports);

// {"utilization", "mean_jct_s", "p95_jct_s", "mean_queue_delay_s",
//  "mean_queue_delay_large_s", "ettr_large", "work_ratio_large", "required_met",
//  "lost_gpu_hours",
//  "leaf_span_ratio_mean", "comm_cost_ratio_mean", "cpu_s", "wall_s",
//  "peak_rss_mb"} in this order; fractions 0..1; null where there was nothing
// to measure (or the caller did not time the run). Values are rounded to 6
// decimals.
nlohmann::ordered_json SimMetricsToJson(const core::SimReport& report);
// {"small": {"jobs", "mean_jct_s", "p95_jct_s", "bound_jct_s"}, "medium": ...,
// "large": ...}: completed jobs of < 64 GPUs, up to the large size, and
// larger; bound_jct_s is their mean duration at the ideal placement (no wait,
// no failure), below which no policy's mean goes.
nlohmann::ordered_json JctBySizeToJson(const core::SimReport& report);
// {"policies": {stack: SimMetricsToJson(report), ...}} in the reports' order.
nlohmann::ordered_json SimReportsToJson(std::span<const core::SimReport> reports);

}  // namespace topo::common
