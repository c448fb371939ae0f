// The step-time model: every formula against hand-computed values, the
// monotonicity property, and the calibration points (docs/perf-model.md).

#include "topo/core/perf_model.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "topo/core/generators.hpp"
#include "topo/core/rng.hpp"

namespace topo::core {
namespace {

// node (8 GPUs) < leaf (2 nodes) < spine (2 leaves), 2 spines; round links.
Topology RoundTopology(int gpus_per_node = 8) {
  TopologyBuilder b("round", {"node", "leaf", "spine"}, 0);
  b.SetTierLink(0, {100, 1});
  b.SetTierLink(1, {10, 10});
  b.SetTierLink(2, {5, 20});
  b.SetTierLink(3, {2, 40});
  int n = 0;
  for (int s = 0; s < 2; ++s) {
    int sp = b.AddDomain("s" + std::to_string(s), 2, TopologyBuilder::kTop);
    for (int l = 0; l < 2; ++l) {
      int lf = b.AddDomain("l" + std::to_string(s) + std::to_string(l), 1, sp);
      for (int k = 0; k < 2; ++k) b.AddNode("n" + std::to_string(n++), lf, gpus_per_node, "H100");
    }
  }
  return std::move(b).Build().value();
}

// Rank r on GPU r of the nodes in order.
std::vector<GpuSlot> Contiguous(const Topology& topo, int gpus) {
  std::vector<GpuSlot> ranks;
  for (NodeId n = 0; n < topo.node_count() && static_cast<int>(ranks.size()) < gpus; ++n) {
    for (int g = 0; g < topo.node(n).gpus && static_cast<int>(ranks.size()) < gpus; ++g) {
      ranks.push_back({n, g});
    }
  }
  return ranks;
}

JobSpec Job(int tp, int cp, int ep, int pp, int dp, ModelSpec model) {
  JobSpec j;
  j.parallelism.tp = tp;
  j.parallelism.cp = cp;
  j.parallelism.ep = ep;
  j.parallelism.pp = pp;
  j.parallelism.dp = dp;
  j.gpus = tp * cp * pp * dp;
  j.model = model;
  REQUIRE(ValidateJobSpec(j).ok());
  return j;
}

// A small custom model with round numbers.
ModelSpec RoundModel() {
  ModelSpec m;
  m.parameters = 1e9;
  m.layers = 8;
  m.hidden = 1000;
  m.heads = 10;
  m.sequence = 1000;
  m.micro_batch = 1;
  m.global_batch = 32;
  m.bytes_per_element = 2;
  return m;
}

StepBreakdown Predict(const JobSpec& job, const Topology& topo, const std::vector<GpuSlot>& ranks,
                      std::span<const double> scale = {}) {
  const ResolvedModel m = ResolveModel(job).value();
  return PredictStep(job, m, LinkView{&topo, scale}, AnalyzePlacement(job, topo, ranks),
                     SustainedFlops(topo.node(ranks[0].node).gpu_model));
}

constexpr double kH100 = 989e12 * kSustainedFraction;

TEST_CASE("compute: 6 N + 6 L h s FLOPs per token over the sustained rate") {
  Topology topo = RoundTopology();
  JobSpec job = Job(1, 1, 1, 1, 1, RoundModel());
  StepBreakdown s = Predict(job, topo, Contiguous(topo, 1));
  // m = 32 microbatches of 1 x 1000 tokens.
  const double flops = (6 * 1e9 + 6.0 * 8 * 1000 * 1000) * 32 * 1000;
  CHECK(s.flops == doctest::Approx(flops));
  CHECK(s.compute_s == doctest::Approx(flops / kH100));
  CHECK(s.total_s == doctest::Approx(s.compute_s));
  ModelSpec rc = RoundModel();
  rc.recompute = 1;
  StepBreakdown r = Predict(Job(1, 1, 1, 1, 1, rc), topo, Contiguous(topo, 1));
  CHECK(r.compute_s == doctest::Approx(flops / kH100 * 4 / 3));
  CHECK(SustainedFlops("A100-SXM4-80GB") == doctest::Approx(312e12 * kSustainedFraction));
  CHECK(SustainedFlops("GB200") == doctest::Approx(2.5e15 * kSustainedFraction));
  CHECK(SustainedFlops("Ascend 910C") == doctest::Approx(752e12 * kSustainedFraction));
  CHECK(SustainedFlops("") == doctest::Approx(kH100));
}

TEST_CASE("tp: 4 all-reduces per layer and microbatch, ring formula, inside the node") {
  Topology topo = RoundTopology();
  JobSpec job = Job(8, 1, 1, 1, 1, RoundModel());
  StepBreakdown s = Predict(job, topo, Contiguous(topo, 8));
  const double bytes = 1 * 1000 * 1000 * 2.0;
  const double ar = 2.0 * 7 / 8 * bytes / 100e9 + 2.0 * 7 * 1e-6;
  CHECK(s.tp_s == doctest::Approx(4 * 8 * 32 * ar));
}

TEST_CASE("tp across two nodes: min(node fabric, g x leaf fabric)") {
  Topology topo = RoundTopology(4);  // 4-GPU nodes: an 8-way TP group spans the leaf
  JobSpec job = Job(8, 1, 1, 1, 1, RoundModel());
  StepBreakdown s = Predict(job, topo, Contiguous(topo, 8));
  const double bytes = 2e6;
  const double bw = std::min(100e9, 4 * 10e9);  // 4 members per node
  const double ar = 2.0 * 7 / 8 * bytes / bw + 2.0 * 7 * 10e-6;
  CHECK(s.tp_s == doctest::Approx(4 * 8 * 32 * ar));
}

TEST_CASE("cp: K and V gathered forward and scattered back, scaled by kv heads / tp") {
  Topology topo = RoundTopology();
  ModelSpec m = RoundModel();
  m.kv_heads = 5;
  JobSpec job = Job(2, 4, 1, 1, 1, m);
  StepBreakdown s = Predict(job, topo, Contiguous(topo, 8));
  const double kv_bytes = 1 * 1000 * 1000 * 0.5 * 2 / 2.0;
  const double ag = 3.0 / 4 * kv_bytes / 100e9 + 3 * 1e-6;
  CHECK(s.cp_s == doctest::Approx(4 * 8 * 32 * ag));
  // TP's message is the sequence share of one CP rank.
  const double ar = 2.0 * 1 / 2 * (1000 / 4.0 * 1000 * 2) / 100e9 + 2.0 * 1e-6;
  CHECK(s.tp_s == doctest::Approx(4 * 8 * 32 * ar));
}

TEST_CASE("ep: all-to-all of top-k token copies, cross-leaf share over the leaf link") {
  Topology topo = RoundTopology(4);
  ModelSpec m = RoundModel();
  m.parameters = 4e9;
  m.active_parameters = 1.75e9;
  m.experts = 8;
  m.top_k = 2;
  JobSpec job = Job(1, 1, 8, 1, 8, m);  // EP block of 8 over 2 nodes of 4
  const ResolvedModel r = ResolveModel(job).value();
  // 1.75 = D + (4 - D) / 4  =>  D = 1.
  CHECK(r.dense_parameters == doctest::Approx(1e9));
  CHECK(r.expert_parameters == doctest::Approx(3e9));
  CHECK(r.microbatches == 4);
  StepBreakdown s = Predict(job, topo, Contiguous(topo, 8));
  const double v = 1000.0 * 2 * 1000 * 2;  // tokens x top_k x h x e
  const double a2a = v * std::max(4.0 / 8 / 10e9, 3.0 / 8 / 100e9) + 7 * 10e-6;
  CHECK(s.ep_s == doctest::Approx(4 * 8 * 4 * a2a));
}

TEST_CASE("pp: point-to-point per microbatch and chunk, and the bubble") {
  Topology topo = RoundTopology();
  ModelSpec m = RoundModel();
  m.virtual_stages = 2;
  JobSpec job = Job(8, 1, 1, 2, 1, m);  // stages on n0 and n1, the same leaf
  StepBreakdown s = Predict(job, topo, Contiguous(topo, 16));
  const double p2p = (1000 * 1000 * 2.0 / 8) / 10e9 + 10e-6;
  CHECK(s.pp_s == doctest::Approx(2 * 32 * 2 * p2p));
  CHECK(s.bubble_s == doctest::Approx(1.0 / (32 * 2) * (s.compute_s + s.tp_s)));
}

TEST_CASE("dp: reduce-scatter + all-gather of the gradients, hidden up to one microbatch") {
  Topology topo = RoundTopology();
  JobSpec job = Job(1, 1, 1, 1, 16, RoundModel());  // 2 nodes of one leaf
  StepBreakdown s = Predict(job, topo, Contiguous(topo, 16));
  const double bw = std::min(100e9, 8 * 10e9);
  const double raw = 2.0 * 15 / 16 * 1e9 * 2 / bw + 2.0 * 15 * 10e-6;
  CHECK(s.dp_raw_s == doctest::Approx(raw));
  CHECK(ResolveModel(job).value().microbatches == 2);
  CHECK(s.dp_s == doctest::Approx(std::max(0.0, raw - s.compute_s / 2)));
  CHECK(s.total_s == doctest::Approx(s.compute_s + s.dp_s));
}

TEST_CASE("links: running minimum of bandwidth and maximum of latency, scales") {
  Topology topo = RoundTopology();
  LinkView links{&topo, {}};
  CHECK(links.bandwidth(0) == 100);
  CHECK(links.bandwidth(3) == 2);
  CHECK(links.latency(2) == 20);
  const std::vector<double> half = {1, 1, 0.1, 1};
  LinkView scaled{&topo, half};
  CHECK(scaled.bandwidth(2) == doctest::Approx(0.5));
  CHECK(scaled.bandwidth(3) == doctest::Approx(0.5));
  CHECK(EffectiveBandwidth(links, 0, 8) == 100);
  CHECK(EffectiveBandwidth(links, 1, 8) == 80);
  CHECK(EffectiveBandwidth(links, 1, 16) == 100);
  CHECK(EffectiveBandwidth(links, 2, 1) == 5);
}

TEST_CASE("models: presets, layout defaults and errors naming the field") {
  for (const std::string& name : ModelPresetNames()) {
    JobSpec job = Job(8, 1, 1, 1, 1, ModelSpec{});
    job.model->preset = name;
    CHECK_MESSAGE(ResolveModel(job).ok(), name);
  }
  CHECK(ModelPresetNames().size() >= 5);
  JobSpec dense = Job(8, 1, 1, 4, 2, ModelSpec{});
  dense.model.reset();
  ResolvedModel r = ResolveModel(dense).value();
  CHECK(r.spec.preset == "llama3-70b");
  CHECK(r.spec.global_batch == 2 * 16);
  JobSpec moe = Job(8, 1, 8, 1, 8, ModelSpec{});
  moe.model.reset();
  CHECK(ResolveModel(moe).value().spec.preset == "mixtral-8x7b");
  JobSpec bad = Job(1, 1, 1, 1, 1, ModelSpec{});
  bad.model->preset = "gpt-5";
  CHECK(ResolveModel(bad).message().find("model.preset") != std::string::npos);
  ModelSpec k = RoundModel();
  k.experts = 2;
  k.top_k = 4;
  CHECK(ResolveModel(Job(1, 1, 1, 1, 1, k)).message().find("model.top_k") != std::string::npos);
  ModelSpec nolayers = RoundModel();
  nolayers.layers = 0;
  CHECK(ResolveModel(Job(1, 1, 1, 1, 1, nolayers)).message().find("model.layers") !=
        std::string::npos);
}

TEST_CASE("ideal spans: each group in the innermost tier that holds it, children full") {
  Topology topo = RoundTopology(4);
  JobSpec job = Job(8, 1, 1, 2, 2, RoundModel());
  CommSpans ideal = IdealSpans(job, topo);
  CHECK(ideal.kind[static_cast<int>(GroupKind::kTp)].min_members_per_child[1] == 4);
  CHECK(ideal.kind[static_cast<int>(GroupKind::kDp)].min_members_per_child[0] == 1);
  // A stage is 16 GPUs (tp x dp); two of them need the whole 32-GPU cluster.
  CHECK(ideal.kind[static_cast<int>(GroupKind::kPp)].min_members_per_child[3] == 1);
}

// The predicted step never improves when a group is moved to a higher tier:
// random layouts on small topologies, every entry moved up one tier at a
// time with any member count.
TEST_CASE("property: a wider span never predicts a faster step") {
  Rng rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    Topology topo = RoundTopology(1 << rng.Below(4));
    const int tp = 1 << rng.Below(3), cp = 1 << rng.Below(2), pp = 1 << rng.Below(3);
    const int dp = 1 << rng.Below(3);
    const int ep = dp >= 2 && rng.Below(2) ? 2 : 1;
    if (tp * cp * pp * dp > topo.total_gpus()) continue;
    ModelSpec m = RoundModel();
    if (ep > 1) {
      m.experts = 4;
      m.top_k = 2;
      m.active_parameters = 0.6e9;
    }
    JobSpec job = Job(tp, cp, ep, pp, dp, m);
    std::vector<GpuSlot> all = Contiguous(topo, topo.total_gpus());
    for (size_t i = all.size(); i > 1; --i) std::swap(all[i - 1], all[rng.Below(i)]);
    all.resize(job.gpus);
    const ResolvedModel model = ResolveModel(job).value();
    const LinkView links{&topo, {}};
    const CommSpans spans = AnalyzePlacement(job, topo, all);
    const double base = PredictStep(job, model, links, spans, kH100).total_s;
    const double ideal = PredictStep(job, model, links, IdealSpans(job, topo), kH100).total_s;
    CHECK(base >= ideal * (1 - 1e-12));
    for (int k = 0; k < kGroupKindCount; ++k) {
      const std::vector<double>& entries = spans.kind[k].min_members_per_child;
      for (size_t t = 0; t + 1 < entries.size(); ++t) {
        if (entries[t] <= 0) continue;
        CommSpans moved = spans;
        std::vector<double>& e = moved.kind[k].min_members_per_child;
        const double g = e[t];
        e[t] = 0;
        for (double g2 : {1.0, g, static_cast<double>(spans.kind[k].size)}) {
          e[t + 1] = e[t + 1] > 0 ? std::min(e[t + 1], g2) : g2;
          const double after = PredictStep(job, model, links, moved, kH100).total_s;
          CHECK(after >= base * (1 - 1e-12));
        }
      }
    }
  }
}

// ---------------------------------------------------------------- calibration
//
// Each point: a published measurement, the layout as published, the model's
// prediction within 20 %. Published throughput is turned into a step time
// with the publication's own FLOP count.

// A Selene-like DGX A100 cluster (Narayanan et al. 2021, §5: 8 x A100 per
// node over NVLink 3 / NVSwitch, 8 x 200 Gb/s HDR InfiniBand per node,
// three-level fat tree): 300 GB/s one way in the node, 25 GB/s per GPU above.
Topology Selene(int nodes) {
  TopologyBuilder b("selene", {"node", "leaf", "spine"}, 0);
  b.SetTierLink(0, {300, 3});
  b.SetTierLink(1, {25, 6});
  b.SetTierLink(2, {25, 8});
  b.SetTierLink(3, {25, 12});
  const int per_leaf = 20, per_spine = 10;  // DGX SuperPOD scalable units of 20 nodes
  int n = 0;
  for (int s = 0; n < nodes; ++s) {
    int sp = b.AddDomain("s" + std::to_string(s), 2, TopologyBuilder::kTop);
    for (int l = 0; l < per_spine && n < nodes; ++l) {
      int lf = b.AddDomain("l" + std::to_string(s) + "-" + std::to_string(l), 1, sp);
      for (int k = 0; k < per_leaf && n < nodes; ++k) {
        b.AddNode("n" + std::to_string(n++), lf, 8, "A100");
      }
    }
  }
  return std::move(b).Build().value();
}

// Megatron's Eq. 3: 96 B s l h^2 (1 + s / 6h + V / 16lh), V = 51,200 (with
// activation recomputation, so 4 passes of 24 B s l h^2).
double MegatronFlops(double batch, double seq, double layers, double hidden) {
  return 96.0 * batch * seq * layers * hidden * hidden *
         (1 + seq / (6 * hidden) + 51200 / (16 * layers * hidden));
}

ModelSpec Gpt(double params, int layers, int hidden, int heads, int batch, int stages) {
  ModelSpec m;
  m.parameters = params;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.sequence = 2048;
  m.micro_batch = 1;
  m.global_batch = batch;
  m.bytes_per_element = 2;
  m.virtual_stages = stages;
  m.recompute = 1;
  return m;
}

// Predicted TFLOP/s per GPU in the publication's FLOP count.
double MegatronTflops(const ModelSpec& m, int tp, int pp, int gpus) {
  Topology topo = Selene(gpus / 8);
  JobSpec job = Job(tp, 1, 1, pp, gpus / (tp * pp), m);
  const StepBreakdown s = Predict(job, topo, Contiguous(topo, gpus));
  const double flops = MegatronFlops(m.global_batch, m.sequence, m.layers, m.hidden);
  return flops / s.total_s / gpus / 1e12;
}

double Within(double model, double published) { return std::abs(model / published - 1); }

// Llama 3 405B on the Llama 3 cluster (meta-24k: H100, RoCE 400 Gb/s, pods
// of 3,072 GPUs, 1:7 above), ranks ordered [TP, CP, PP, DP] as the paper
// does (§3.3.2), 16M tokens per batch of 8,192-token sequences.
double Llama405bTflops(int gpus) {
  Topology topo = GenerateTopology("meta-24k").value();
  ModelSpec m = *ModelPreset("llama3-405b");
  JobSpec job = Job(8, 1, 1, 16, gpus / 128, m);
  job.parallelism.order = ParseRankOrder("tp-cp-pp-dp").value();
  const StepBreakdown s = Predict(job, topo, Contiguous(topo, gpus));
  return s.flops / s.total_s / gpus / 1e12;
}

TEST_CASE("calibration 1: Llama 3 405B on 8,192 H100 (TP 8, PP 16, DP 64) at 430 TFLOPs/GPU") {
  // The Llama 3 Herd of Models (Dubey et al. 2024), §3.3.2, Table 4.
  const double model = Llama405bTflops(8192);
  MESSAGE("model " << model << " TFLOP/s vs published 430");
  CHECK(Within(model, 430) <= 0.20);
}

TEST_CASE("calibration 2: Llama 3 405B on 16,384 H100 (DP 128) at 400 TFLOPs/GPU") {
  // The Llama 3 Herd of Models, §3.3.2, Table 4 (same batch, half the
  // microbatches per pipeline: the bubble grows).
  const double model = Llama405bTflops(16384);
  MESSAGE("model " << model << " TFLOP/s vs published 400");
  CHECK(Within(model, 400) <= 0.20);
  CHECK(model < Llama405bTflops(8192));
}

TEST_CASE("calibration 3: Megatron-LM 1T on 3,072 A100 (t 8, p 64) at 163 TFLOP/s") {
  // Efficient Large-Scale Language Model Training on GPU Clusters Using
  // Megatron-LM (Narayanan et al. SC'21), Table 1: 1,008B, 128 layers,
  // hidden 25,600, batch 3,072, interleaved schedule (2 chunks assumed).
  const double model = MegatronTflops(Gpt(1008e9, 128, 25600, 160, 3072, 2), 8, 64, 3072);
  MESSAGE("model " << model << " TFLOP/s vs published 163");
  CHECK(Within(model, 163) <= 0.20);
}

TEST_CASE("calibration 4 and 5: Megatron-LM GPT-3 175B, PTD-P, 384 and 1,536 A100") {
  // Narayanan et al. SC'21, Table 2: 153 TFLOP/s on 384 GPUs, 141 on 1,536,
  // global batch 1,536 (t 8, p 12 assumed: 8 layers per stage).
  const ModelSpec m = Gpt(175e9, 96, 12288, 96, 1536, 1);
  const double small = MegatronTflops(m, 8, 12, 384);
  const double large = MegatronTflops(m, 8, 12, 1536);
  MESSAGE("model " << small << " / " << large << " TFLOP/s vs published 153 / 141");
  CHECK(Within(small, 153) <= 0.20);
  CHECK(Within(large, 141) <= 0.20);
}

TEST_CASE("calibration 6 and 7: Megatron-LM 530B, PTD-P, 560 and 2,240 A100") {
  // Narayanan et al. SC'21, Table 2: 171 TFLOP/s on 560 GPUs, 159 on 2,240,
  // global batch 2,240, t 8, p 35 (105 layers, hidden 20,480).
  const ModelSpec m = Gpt(530e9, 105, 20480, 128, 2240, 1);
  const double small = MegatronTflops(m, 8, 35, 560);
  const double large = MegatronTflops(m, 8, 35, 2240);
  MESSAGE("model " << small << " / " << large << " TFLOP/s vs published 171 / 159");
  CHECK(Within(small, 171) <= 0.20);
  CHECK(Within(large, 159) <= 0.20);
}

// AnalyzePlacement counts each rank's group without RankLayout::GroupOf
// (an odometer over the rank strides): the same spans as a direct count with
// GroupOf, for random layouts, rank orders and placements.
TEST_CASE("AnalyzePlacement agrees with a direct count over RankLayout::GroupOf") {
  Rng rng(11);
  for (int iter = 0; iter < 200; ++iter) {
    Topology topo = RoundTopology(1 << rng.Below(4));
    const int tp = 1 << rng.Below(3), cp = 1 << rng.Below(2), pp = 1 << rng.Below(3);
    const int dp = 1 << rng.Below(3);
    const int ep = dp >= 2 && rng.Below(2) ? 2 : 1;
    if (tp * cp * pp * dp > topo.total_gpus()) continue;
    JobSpec job = Job(tp, cp, ep, pp, dp, RoundModel());
    std::vector<Dim>& order = job.parallelism.order;
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
    std::vector<GpuSlot> all = Contiguous(topo, topo.total_gpus());
    for (size_t i = all.size(); i > 1; --i) std::swap(all[i - 1], all[rng.Below(i)]);
    all.resize(job.gpus);
    const CommSpans got = AnalyzePlacement(job, topo, all);
    const RankLayout layout(job.parallelism);
    for (GroupKind k : kAllGroupKinds) {
      if (k == GroupKind::kPp || !RankLayout::KindActive(k, job.parallelism)) continue;
      std::vector<double> want(topo.root_tier() + 1, 0.0);
      for (int g = 0; g < layout.GroupCount(k); ++g) {
        std::vector<int> members;
        for (int r = 0; r < layout.world_size(); ++r) {
          if (layout.GroupOf(k, r) == g) members.push_back(r);
        }
        int t = 0;
        auto spans_tier = [&](int tier) {
          for (int r : members) {
            if (topo.Ancestor(all[r].node, tier) != topo.Ancestor(all[members[0]].node, tier)) {
              return false;
            }
          }
          return true;
        };
        while (t < topo.root_tier() && !spans_tier(t)) ++t;
        double per_child = 1;
        if (t > 0) {
          std::set<DomainId> kids;
          for (int r : members) kids.insert(topo.Ancestor(all[r].node, t - 1));
          per_child = static_cast<double>(members.size()) / static_cast<double>(kids.size());
        }
        want[t] = want[t] > 0 ? std::min(want[t], per_child) : per_child;
      }
      CAPTURE(FormatRankOrder(order));
      CHECK(got.kind[static_cast<int>(k)].min_members_per_child == want);
    }
  }
}

}  // namespace
}  // namespace topo::core
