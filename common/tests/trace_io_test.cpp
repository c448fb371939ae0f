#include <doctest/doctest.h>

#include <sstream>

#include "topo/common/topology_source.hpp"
#include "topo/common/trace_io.hpp"

using namespace topo;
using core::JobState;

TEST_CASE("trace CSV: required columns, defaults and a derived dp") {
  auto jobs = common::ParseTraceCsv(
      "# a comment\n"
      "submit_s,duration_s,gpus\n"
      "0,60,8\n"
      "\n"
      "1.5,0.25,16\n");
  REQUIRE(jobs.ok());
  REQUIRE(jobs.value().size() == 2);
  const core::SimJob& a = jobs.value()[0];
  CHECK(a.index == 0);
  CHECK(a.submit == 0);
  CHECK(a.duration == 60000);
  CHECK(a.request.spec.gpus == 8);
  CHECK(a.request.spec.parallelism.tp == 1);
  CHECK(a.request.spec.parallelism.dp == 8);
  CHECK(a.request.tenant == "default");
  CHECK(a.request.time_limit == core::DefaultTimeLimit(60000));
  CHECK(a.request.checkpoint_interval == 0);
  const core::SimJob& b = jobs.value()[1];
  CHECK(b.index == 1);
  CHECK(b.submit == 1500);
  CHECK(b.duration == 250);
}

TEST_CASE("trace CSV: every optional column, in any order") {
  auto jobs = common::ParseTraceCsv(
      "tenant,gpus,submit_s,duration_s,tp,cp,ep,pp,dp,gpus_per_node,priority,time_limit_s,"
      "checkpoint_interval_s\n"
      "org/a,64,10,3600,8,1,8,1,8,8,5,7200,600\n"
      "b,16,20,60,8,1,1,2,,,,,-1\n");
  REQUIRE(jobs.ok());
  const core::SimJob& a = jobs.value()[0];
  CHECK(a.request.tenant == "org/a");
  CHECK(a.request.spec.parallelism.ep == 8);
  CHECK(a.request.spec.parallelism.dp == 8);
  CHECK(a.request.spec.gpus_per_node == 8);
  CHECK(a.request.priority == 5);
  CHECK(a.request.time_limit == 7200 * 1000);
  CHECK(a.request.checkpoint_interval == 600 * 1000);
  const core::SimJob& b = jobs.value()[1];
  CHECK(b.request.spec.parallelism.pp == 2);
  CHECK(b.request.spec.parallelism.dp == 1);
  CHECK(b.request.checkpoint_interval == -1);
}

TEST_CASE("trace CSV: errors name the line and the column") {
  struct Case {
    const char* text;
    const char* want;
  };
  const Case cases[] = {
      {"", "empty"},
      {"submit_s,gpus\n", "line 1: the header has no \"duration_s\" column"},
      {"submit_s,duration_s,gpus,colour\n", "line 1, column colour: unknown column"},
      {"submit_s,duration_s,gpus,gpus\n", "line 1, column gpus: named twice"},
      {"submit_s,duration_s,gpus\n0,60\n", "line 2: 2 fields, the header has 3"},
      {"submit_s,duration_s,gpus\n0,60,8\nx,60,8\n",
       "line 3, column submit_s: \"x\" is not a number"},
      {"submit_s,duration_s,gpus\n0,0,8\n", "line 2, column duration_s"},
      {"submit_s,duration_s,gpus\n0,-5,8\n", "line 2, column duration_s"},
      {"submit_s,duration_s,gpus\n0,5,8.0\n", "line 2, column gpus: \"8.0\" is not an integer"},
      {"submit_s,duration_s,gpus\n0,5,\n", "line 2, column gpus: empty (required)"},
      {"submit_s,duration_s,gpus,tp\n0,5,12,8\n", "line 2, column dp: gpus 12 is not a multiple"},
      {"submit_s,duration_s,gpus,tp,dp\n0,5,16,8,4\n", "line 2: tp x cp x pp x dp"},
      {"submit_s,duration_s,gpus,ep\n0,5,8,3\n", "line 2: ep 3 does not divide dp 8"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    auto jobs = common::ParseTraceCsv(c.text);
    REQUIRE_FALSE(jobs.ok());
    CHECK(jobs.message().find(c.want) != std::string::npos);
  }
}

TEST_CASE("Kalos CSV: the shared trace parses, columns by name") {
  auto rows = common::ParseKalosCsv(
      "job_idx,submit_offset_s,duration_s,node_num,gpus_per_node,gpu_num,job_class,cpu_per_gpu,"
      "mem_per_pod_GB,state\n"
      "0,0,104.0,8,8.0,64,SFT_or_Other,15.0,1000.0,COMPLETED\n"
      "3,58324,68.5,16,8.0,128,Pretrain,15.0,1000.0,COMPLETED\n");
  REQUIRE(rows.ok());
  REQUIRE(rows.value().size() == 2);
  CHECK(rows.value()[1].index == 3);
  CHECK(rows.value()[1].submit_s == 58324);
  CHECK(rows.value()[1].duration_s == 68.5);
  CHECK(rows.value()[1].gpus == 128);
  CHECK(rows.value()[1].gpus_per_node == 8);
  CHECK(rows.value()[1].pretrain);
  CHECK_FALSE(rows.value()[0].pretrain);

  auto bad = common::ParseKalosCsv("job_idx,submit_offset_s\n0,0\n");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("no \"duration_s\" column") != std::string::npos);
  auto bad_row = common::ParseKalosCsv(
      "job_idx,submit_offset_s,duration_s,gpus_per_node,gpu_num,job_class\n0,0,1,8,many,SFT\n");
  REQUIRE_FALSE(bad_row.ok());
  CHECK(bad_row.message().find("line 2, column gpu_num") != std::string::npos);

  auto text = common::ReadFile(common::SharedDataDir() + "/data/traces/kalos-llm/jobs.csv");
  if (text.ok()) {
    auto all = common::ParseKalosCsv(text.value());
    REQUIRE(all.ok());
    CHECK(all.value().size() == 319);
    int large = 0;
    for (const core::KalosRow& r : all.value()) large += r.gpus >= 1024;
    CHECK(large == 38);
  }
}

namespace {

core::SimReport SmallReport() {
  core::SimReport r;
  r.stack = "toposched";
  r.tenants = {"default", "t1"};
  r.utilization = 0.5;
  r.mean_jct_s = 12.3456789;
  r.required_met = 1.0;
  r.lost_gpu_hours = 2.5;
  r.placements = 1;
  core::SimJobResult done;
  done.index = 7;
  done.id = 1;
  done.tenant = 1;
  done.gpus = 8;
  done.submit = 1500;
  done.first_start = 2000;
  done.end = 62000;
  done.state = JobState::kCompleted;
  done.placements = 1;
  done.productive_ms = 60000;
  done.run_ms = 66000;  // ran slowly: 60 s of work in 66 s
  done.work_ms = 60000;
  done.leaf_span_ratio = 1.0;
  done.comm_cost_ratio = 1.5;
  core::SimJobResult waiting;
  waiting.index = 8;
  waiting.id = 2;
  waiting.gpus = 64;
  waiting.submit = 3000;
  r.job_results = {done, waiting};
  return r;
}

}  // namespace

TEST_CASE("per-job CSV: a header, times in seconds, empty where nothing applies") {
  std::vector<core::SimReport> reports = {SmallReport()};
  std::ostringstream out;
  common::WritePerJobCsv(out, reports);
  std::istringstream in(out.str());
  std::string header, first, second, extra;
  std::getline(in, header);
  std::getline(in, first);
  std::getline(in, second);
  CHECK_FALSE(std::getline(in, extra));
  CHECK(header.rfind("policy,index,id,tenant,gpus,submit_s,first_start_s,end_s,state,", 0) == 0);
  CHECK(first ==
        "toposched,7,1,t1,8,1.5,2,62,completed,0.5,60.5,1,0,0,60,0.000,0.000,1.0000,1.5000,1,"
        "66.000,60.000");
  CHECK(second == "toposched,8,2,default,64,3,,,unfinished,,,0,0,0,0,0.000,0.000,,,,,");
}

TEST_CASE("sim JSON: the documented keys in order, null where nothing was measured") {
  std::vector<core::SimReport> reports = {SmallReport()};
  reports.push_back(SmallReport());
  reports.back().stack = "slurm-tree";
  reports.back().cpu_s = 1.25;
  nlohmann::ordered_json j = common::SimReportsToJson(reports);
  REQUIRE(j.contains("policies"));
  REQUIRE(j["policies"].size() == 2);
  CHECK(j["policies"].begin().key() == "toposched");
  const auto& m = j["policies"]["toposched"];
  std::vector<std::string> keys;
  for (auto it = m.begin(); it != m.end(); ++it) keys.push_back(it.key());
  const std::vector<std::string> want = {"utilization",
                                         "mean_jct_s",
                                         "p95_jct_s",
                                         "mean_queue_delay_s",
                                         "mean_queue_delay_large_s",
                                         "ettr_large",
                                         "work_ratio_large",
                                         "required_met",
                                         "lost_gpu_hours",
                                         "restarts",
                                         "preemption",
                                         "failures",
                                         "leaf_span_ratio_mean",
                                         "comm_cost_ratio_mean",
                                         "cpu_s",
                                         "wall_s",
                                         "peak_rss_mb"};
  CHECK(keys == want);
  CHECK(m["utilization"] == 0.5);
  CHECK(m["mean_jct_s"] == 12.345679);
  CHECK(m["p95_jct_s"].is_null());
  CHECK(m["ettr_large"].is_null());
  CHECK(m["work_ratio_large"].is_null());
  CHECK(m["lost_gpu_hours"] == 2.5);
  CHECK(m["cpu_s"].is_null());
  CHECK(j["policies"]["slurm-tree"]["cpu_s"] == 1.25);
  // Counts, not measurements: what preemption and failures did.
  core::SimReport counted = SmallReport();
  counted.restarts = 5;
  counted.preemptions = 3;
  counted.preempted_borrowed = 2;
  counted.preempted_gpus = 24;
  counted.preemption_restarts = 3;
  counted.preempted_wait_gpu_ms = 7.2e6;  // 2 GPU-hours
  counted.failures_injected = 4;
  counted.failures_hit_jobs = 2;
  const nlohmann::ordered_json c = common::SimMetricsToJson(counted);
  CHECK(c["restarts"] == 5);
  CHECK(c["preemption"].dump() ==
        R"({"victims":3,"borrowed_victims":2,"victim_gpus":24,"restarts":3,)"
        R"("victims_wait_gpu_hours":2.0})");
  CHECK(c["failures"].dump() == R"({"injected":4,"hit_jobs":2})");
  // The size classes carry the bound a policy's mean JCT cannot go below.
  core::SimReport sized = SmallReport();
  sized.speed_model = true;
  sized.jct_by_size[2] = {3, 900.0, 1500.0, 600.0};
  const nlohmann::ordered_json s = common::SimMetricsToJson(sized)["jct_by_size"];
  CHECK(s["large"].dump() ==
        R"({"jobs":3,"mean_jct_s":900.0,"p95_jct_s":1500.0,"bound_jct_s":600.0})");
  CHECK(s["small"]["bound_jct_s"].is_null());
  core::SimReport nothing;  // no job ran: nothing to measure, nothing counted
  nothing.stack = "toposched";
  nlohmann::ordered_json none = common::SimMetricsToJson(nothing);
  for (auto it = none.begin(); it != none.end(); ++it) {
    CAPTURE(it.key());
    if (it.key() == "restarts") {
      CHECK(*it == 0);
    } else if (it.key() == "preemption" || it.key() == "failures") {
      for (const auto& v : *it) CHECK(v == 0);
    } else {
      CHECK(it->is_null());
    }
  }
}
