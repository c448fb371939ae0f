// The step-time model (perf_model.hpp). docs/perf-model.md gives the same
// formulas with the source of every constant and the calibration table.
//
// Overview. One optimizer step of a job with layout tp x cp x pp x dp (ep
// inside dp) trains on T = m x dp x b x s tokens, m = max(1, B / (dp x b))
// microbatches per pipeline (B global batch in sequences, b micro-batch,
// s sequence length, h hidden size, L layers, e bytes per element, v
// interleaved pipeline chunks per rank, N / N_a total / active parameters).
// Every part below is seconds per step on one GPU; the step waits for the
// slowest group of each kind.
//
//   compute = F x r / (gpus x R),  F = (6 N_a + 6 L h s) x T   (model FLOPs:
//             6 per parameter and token, plus causal attention, 6 L h s per
//             token), r = 4/3 with full activation recomputation (one more
//             forward) else 1, R = SustainedFlops(GPU model).
//   tp      = 4 (L / pp) m x AR(b s h e / cp, tp)          (Megatron with
//             sequence parallelism: 2 all-gather + 2 reduce-scatter, i.e. 2
//             all-reduce equivalents, forward and backward, per layer)
//   cp      = 4 (L / pp) m x AG(b s h e (kv / heads) / tp, cp)   (K and V
//             all-gathered forward, their gradients reduce-scattered back)
//   ep      = 4 (L / pp) m x A2A(b s / (cp tp) x k h e, tp cp ep)  (dispatch
//             and combine, forward and backward, every layer an MoE layer)
//   pp      = 2 m v x P2P(b s h e / (cp tp))        (activations forward,
//             gradients backward, across each stage boundary)
//   bubble  = (pp - 1) / (m v) x (compute + tp + cp + ep)
//   dp_raw  = RS + AG of the gradients held per GPU:
//             2 (dp - 1) / dp x e (D / (tp pp) + E / (tp pp ep)) / bw + latency
//             (D dense and E routed-expert parameters)
//   dp      = max(0, dp_raw - (compute / m + bubble))   (the reduction
//             overlaps the last microbatch's backward and the pipeline's
//             drain; what is left is exposed)
//   total   = compute + tp + cp + ep + pp + bubble + dp
//
// Collectives over n ranks with bus bandwidth bw (bytes/s per GPU) and step
// latency a: AR(M) = 2 (n-1)/n M / bw + 2 (n-1) a; AG(M) = RS(M) = (n-1)/n
// M / bw + (n-1) a; P2P(M) = M / bw + a. A group whose widest span is tier t,
// with g of its members in each child domain (of tier t-1), gets
// bw = min(B(t-1), g x B(t)) (EffectiveBandwidth): rings cross the tier-t
// fabric once per child, g NICs share the crossing, the rest runs on the
// child's own fabric. B(t) is the running minimum of the tiers' per-GPU
// bandwidths up to t and a(t) the running maximum of their latencies, so a
// wider span is never faster. All-to-all cannot aggregate: each member sends
// (n - g)/n of its data across tier t and (g - 1)/n inside its child:
// A2A(V) = V max((n-g)/n / B(t), (g-1)/n / B(t-1)) + (n-1) a.

#include "topo/core/perf_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

namespace topo::core {

namespace {

ModelSpec Preset(const char* name, double params, double active, int layers, int hidden, int heads,
                 int kv, int seq, int global_batch, int experts, int top_k, int virtual_stages) {
  ModelSpec m;
  m.preset = name;
  m.parameters = params;
  m.active_parameters = active;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv;
  m.sequence = seq;
  m.micro_batch = 1;
  m.global_batch = global_batch;
  m.experts = experts;
  m.top_k = top_k;
  m.bytes_per_element = 2;
  m.virtual_stages = virtual_stages;
  m.recompute = 0;
  return m;
}

// Shapes from the model cards and papers cited in docs/perf-model.md. Global
// batches: Llama 3 405B 16M tokens (2,048 x 8,192, Llama 3 paper Table 4),
// used for 8B and 70B too (assumption); Mixtral 1,024 x 4,096 (assumption);
// DeepSeek-V3 15,360 x 4,096 (its report, §4.2). The 405B's 4 interleaved
// chunks per rank are an assumption (the paper says the schedule is
// interleaved, not the count).
const std::vector<ModelSpec>& Presets() {
  static const std::vector<ModelSpec> kPresets = {
      Preset("llama3-8b", 8.03e9, 8.03e9, 32, 4096, 32, 8, 8192, 2048, 1, 1, 1),
      Preset("llama3-70b", 70.6e9, 70.6e9, 80, 8192, 64, 8, 8192, 2048, 1, 1, 1),
      Preset("llama3-405b", 405.8e9, 405.8e9, 126, 16384, 128, 8, 8192, 2048, 1, 1, 4),
      Preset("mixtral-8x7b", 46.7e9, 12.9e9, 32, 4096, 32, 8, 4096, 1024, 8, 2, 1),
      Preset("deepseek-v3", 671e9, 37e9, 61, 7168, 128, 128, 4096, 15360, 256, 8, 1),
  };
  return kPresets;
}

template <typename T>
void Fill(T& field, T preset) {
  if (field <= 0) field = preset;
}

// Largest 0-based index of tier entries present, -1 if none.
int WidestTier(const KindSpan& span) {
  for (int t = static_cast<int>(span.min_members_per_child.size()) - 1; t >= 0; --t) {
    if (span.min_members_per_child[t] > 0) return t;
  }
  return -1;
}

// The least effective bandwidth (bytes/s) over the tiers the kind's groups
// span, and the latency (s) of its widest tier.
struct KindLink {
  double bw = 0;
  double latency = 0;
  bool any = false;
};
KindLink Link(const LinkView& links, const KindSpan& span) {
  KindLink out;
  for (size_t t = 0; t < span.min_members_per_child.size(); ++t) {
    const double g = span.min_members_per_child[t];
    if (g <= 0) continue;
    const double bw = EffectiveBandwidth(links, static_cast<int>(t), g) * 1e9;
    out.bw = out.any ? std::min(out.bw, bw) : bw;
    out.any = true;
  }
  const int widest = WidestTier(span);
  if (widest >= 0) out.latency = links.latency(widest) * 1e-6;
  return out;
}

double AllReduce(double bytes, int n, const KindLink& l) {
  if (n <= 1 || !l.any) return 0;
  return 2.0 * (n - 1) / n * bytes / l.bw + 2.0 * (n - 1) * l.latency;
}

double AllGather(double bytes, int n, const KindLink& l) {
  if (n <= 1 || !l.any) return 0;
  return static_cast<double>(n - 1) / n * bytes / l.bw + (n - 1) * l.latency;
}

double AllToAll(double bytes, const KindSpan& span, const LinkView& links) {
  const int n = span.size;
  const int widest = WidestTier(span);
  if (n <= 1 || widest < 0) return 0;
  double worst = 0;
  for (size_t t = 0; t < span.min_members_per_child.size(); ++t) {
    const double g = span.min_members_per_child[t];
    if (g <= 0) continue;
    const int tier = static_cast<int>(t);
    double per_byte = 0;
    if (tier == 0) {
      per_byte = (n - 1.0) / n / (links.bandwidth(0) * 1e9);
    } else {
      per_byte = std::max((n - g) / n / (links.bandwidth(tier) * 1e9),
                          (g - 1.0) / n / (links.bandwidth(tier - 1) * 1e9));
    }
    worst = std::max(worst, per_byte);
  }
  return bytes * worst + (n - 1) * links.latency(widest) * 1e-6;
}

}  // namespace

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> names;
  for (const ModelSpec& m : Presets()) names.push_back(m.preset);
  return names;
}

std::optional<ModelSpec> ModelPreset(std::string_view name) {
  for (const ModelSpec& m : Presets()) {
    if (m.preset == name) return m;
  }
  return std::nullopt;
}

Result<ResolvedModel> ResolveModel(const JobSpec& job) {
  const Parallelism& p = job.parallelism;
  ModelSpec spec = job.model.value_or(ModelSpec{});
  bool layout_batch = false;
  std::string preset_name = spec.preset;
  if (preset_name.empty() && spec.parameters <= 0) {
    // The default model, sized from the layout.
    const int model_parallel = p.tp * p.pp;
    if (p.ep > 1) {
      preset_name = p.ep <= 8 ? "mixtral-8x7b" : "deepseek-v3";
    } else if (model_parallel <= 8) {
      preset_name = "llama3-8b";
    } else if (model_parallel <= 32) {
      preset_name = "llama3-70b";
    } else {
      preset_name = "llama3-405b";
    }
    layout_batch = spec.global_batch <= 0;
  }
  if (!preset_name.empty()) {
    std::optional<ModelSpec> preset = ModelPreset(preset_name);
    if (!preset) {
      std::string known;
      for (const std::string& n : ModelPresetNames()) known += (known.empty() ? "" : ", ") + n;
      return Status::Error("model.preset '" + preset_name + "' is unknown; known: " + known);
    }
    Fill(spec.parameters, preset->parameters);
    Fill(spec.active_parameters, preset->active_parameters);
    Fill(spec.layers, preset->layers);
    Fill(spec.hidden, preset->hidden);
    Fill(spec.heads, preset->heads);
    Fill(spec.kv_heads, preset->kv_heads);
    Fill(spec.sequence, preset->sequence);
    Fill(spec.micro_batch, preset->micro_batch);
    Fill(spec.global_batch, preset->global_batch);
    Fill(spec.experts, preset->experts);
    Fill(spec.top_k, preset->top_k);
    Fill(spec.bytes_per_element, preset->bytes_per_element);
    Fill(spec.virtual_stages, preset->virtual_stages);
    if (spec.recompute < 0) spec.recompute = preset->recompute;
    spec.preset = preset_name;
  }
  // Fields a custom model may leave out.
  if (spec.parameters <= 0) return Status::Error("model.parameters must be given (> 0)");
  for (auto [name, value] : {std::pair<const char*, int>{"layers", spec.layers},
                             {"hidden", spec.hidden},
                             {"sequence", spec.sequence}}) {
    if (value <= 0) {
      return Status::Error(std::string("model.") + name +
                           " must be given for a model without a preset");
    }
  }
  Fill(spec.active_parameters, spec.parameters);
  Fill(spec.heads, std::max(1, spec.hidden / 128));
  Fill(spec.kv_heads, spec.heads);
  Fill(spec.micro_batch, 1);
  Fill(spec.experts, 1);
  Fill(spec.top_k, 1);
  Fill(spec.bytes_per_element, 2);
  Fill(spec.virtual_stages, 1);
  if (spec.recompute < 0) spec.recompute = 0;
  if (layout_batch || spec.global_batch <= 0) {
    spec.global_batch = p.dp * spec.micro_batch * std::max(8, 4 * p.pp);
  }
  if (spec.active_parameters > spec.parameters) {
    return Status::Error("model.active_parameters exceeds model.parameters");
  }
  if (spec.top_k > spec.experts) {
    return Status::Error("model.top_k " + std::to_string(spec.top_k) + " exceeds model.experts " +
                         std::to_string(spec.experts));
  }
  if (spec.kv_heads > spec.heads) {
    return Status::Error("model.kv_heads exceeds model.heads");
  }

  ResolvedModel r;
  r.spec = spec;
  r.moe = spec.experts > 1;
  r.microbatches = std::max(1, spec.global_batch / (p.dp * spec.micro_batch));
  if (r.moe) {
    // N_a = D + (N - D) k / E  =>  D = (N_a - N k / E) / (1 - k / E).
    const double share = static_cast<double>(spec.top_k) / spec.experts;
    double dense = share < 1 ? (spec.active_parameters - spec.parameters * share) / (1 - share)
                             : spec.parameters;
    dense = std::clamp(dense, 0.0, spec.parameters);
    r.dense_parameters = dense;
    r.expert_parameters = spec.parameters - dense;
  } else {
    r.dense_parameters = spec.parameters;
  }
  return r;
}

double SustainedFlops(std::string_view gpu_model) {
  auto has = [&](std::string_view token) {
    return gpu_model.find(token) != std::string_view::npos;
  };
  double peak = 989e12;  // H100 SXM dense BF16 (datasheet); the default
  if (has("A100") || has("A800")) peak = 312e12;
  if (has("GB200") || has("B200")) peak = 2.5e15;
  if (has("910C")) peak = 752e12;
  return peak * kSustainedFraction;
}

double LinkView::bandwidth(int tier) const {
  double bw = 1e300;
  for (int t = 0; t <= tier; ++t) {
    const double s = t < static_cast<int>(scale.size()) ? scale[t] : 1.0;
    bw = std::min(bw, topology->tier(t).link.bandwidth_gbs * s);
  }
  return bw;
}

double LinkView::latency(int tier) const {
  double lat = 0;
  for (int t = 0; t <= tier; ++t) lat = std::max(lat, topology->tier(t).link.latency_us);
  return lat;
}

double EffectiveBandwidth(const LinkView& links, int tier, double members_per_child) {
  if (tier <= 0) return links.bandwidth(0);
  return std::min(links.bandwidth(tier - 1),
                  std::max(1.0, members_per_child) * links.bandwidth(tier));
}

CommSpans AnalyzePlacement(const JobSpec& job, const Topology& topology,
                           std::span<const GpuSlot> ranks) {
  const Parallelism& p = job.parallelism;
  const RankLayout layout(p);
  const int root = topology.root_tier();
  CommSpans out;
  std::vector<NodeId> first;
  std::vector<int> tier;
  std::vector<int> group_of;
  std::vector<int> member_start;
  std::vector<int> members_by_group;
  std::vector<int> seen_in;  // per domain: the last group that counted it
  for (GroupKind k : kAllGroupKinds) {
    KindSpan& span = out.kind[static_cast<int>(k)];
    span.min_members_per_child.assign(root + 1, 0.0);
    if (!RankLayout::KindActive(k, p)) continue;
    if (k == GroupKind::kPp) {
      // Links between consecutive stages: rank r and r + stride.
      span.size = 2;
      const int stride = layout.dim_stride(Dim::kPp);
      for (int r = 0; r < layout.world_size(); ++r) {
        if (layout.Coord(r, Dim::kPp) + 1 >= p.pp) continue;
        const NodeId a = ranks[r].node, b = ranks[r + stride].node;
        int t = 0;
        while (t < root && topology.Ancestor(a, t) != topology.Ancestor(b, t)) ++t;
        span.min_members_per_child[t] = 1;
      }
      continue;
    }
    const int count = layout.GroupCount(k);
    span.size = layout.GroupSize(k);
    first.assign(count, -1);
    tier.assign(count, 0);
    // Each rank's group, once, as RankLayout::GroupOf numbers them (the
    // dimensions outside the group, in dimension order, mixed-radix),
    // counted like an odometer over the dimensions from the fastest-varying
    // rank stride up: no division per rank.
    struct Digit {
      int size, mult, at;
    };
    std::vector<Digit> digits;  // by ascending stride
    {
      std::array<int, kDimCount> mult{};
      for (int d = 0, m = 1; d < kDimCount; ++d) {
        const Dim dim = static_cast<Dim>(d);
        mult[d] = RankLayout::InGroup(k, dim) ? 0 : m;
        if (!RankLayout::InGroup(k, dim)) m *= layout.dim_size(dim);
      }
      std::array<int, kDimCount> by_stride{};
      for (int d = 0; d < kDimCount; ++d) by_stride[d] = d;
      std::sort(by_stride.begin(), by_stride.end(), [&](int a, int b) {
        return layout.dim_stride(static_cast<Dim>(a)) < layout.dim_stride(static_cast<Dim>(b));
      });
      for (int d : by_stride) {
        if (layout.dim_size(static_cast<Dim>(d)) > 1) {
          digits.push_back({layout.dim_size(static_cast<Dim>(d)), mult[d], 0});
        }
      }
    }
    group_of.resize(layout.world_size());
    for (int r = 0, id = 0; r < layout.world_size(); ++r) {
      group_of[r] = id;
      for (Digit& digit : digits) {
        id += digit.mult;
        if (++digit.at < digit.size) break;
        digit.at = 0;
        id -= digit.size * digit.mult;
      }
    }
    for (int r = 0; r < layout.world_size(); ++r) {
      const int g = group_of[r];
      const NodeId n = ranks[r].node;
      if (first[g] < 0) {
        first[g] = n;
        continue;
      }
      int& t = tier[g];
      while (t < root && topology.Ancestor(n, t) != topology.Ancestor(first[g], t)) ++t;
    }
    // Each group's ranks side by side (a counting sort by group), then its
    // distinct children below its tier, marked per group: no sort, no
    // allocation per group.
    member_start.assign(count + 1, 0);
    for (int r = 0; r < layout.world_size(); ++r) ++member_start[group_of[r] + 1];
    for (int g = 0; g < count; ++g) member_start[g + 1] += member_start[g];
    members_by_group.resize(layout.world_size());
    {
      std::vector<int> at(member_start.begin(), member_start.end() - 1);
      for (int r = 0; r < layout.world_size(); ++r) members_by_group[at[group_of[r]]++] = r;
    }
    seen_in.assign(topology.domain_count(), -1);
    for (int g = 0; g < count; ++g) {
      double members = 1;
      if (tier[g] > 0) {
        int distinct = 0;
        for (int i = member_start[g]; i < member_start[g + 1]; ++i) {
          const DomainId c = topology.Ancestor(ranks[members_by_group[i]].node, tier[g] - 1);
          if (seen_in[c] != g) {
            seen_in[c] = g;
            ++distinct;
          }
        }
        members = static_cast<double>(span.size) / static_cast<double>(distinct);
      }
      double& slot = span.min_members_per_child[tier[g]];
      slot = slot > 0 ? std::min(slot, members) : members;
    }
  }
  return out;
}

CommSpans IdealSpans(const JobSpec& job, const Topology& topology) {
  const Parallelism& p = job.parallelism;
  const RankLayout layout(p);
  const int root = topology.root_tier();
  CommSpans out;
  for (GroupKind k : kAllGroupKinds) {
    KindSpan& span = out.kind[static_cast<int>(k)];
    span.min_members_per_child.assign(root + 1, 0.0);
    if (!RankLayout::KindActive(k, p)) continue;
    // PP: two consecutive stages' blocks side by side.
    const int need = k == GroupKind::kPp
                         ? std::min(layout.world_size(), 2 * layout.dim_stride(Dim::kPp))
                         : layout.GroupSize(k);
    span.size = k == GroupKind::kPp ? 2 : layout.GroupSize(k);
    int t = 0;
    while (t < root && topology.max_domain_gpus(t) < need) ++t;
    double members = 1;
    if (k != GroupKind::kPp && t > 0) {
      members = std::min<double>(span.size, topology.max_domain_gpus(t - 1));
    }
    span.min_members_per_child[t] = members;
  }
  return out;
}

StepBreakdown PredictStep(const JobSpec& job, const ResolvedModel& model, const LinkView& links,
                          const CommSpans& spans, double sustained_flops) {
  const Parallelism& p = job.parallelism;
  const ModelSpec& s = model.spec;
  const double m = model.microbatches;
  const double v = s.virtual_stages;
  const double b = s.micro_batch;
  const double seq = s.sequence;
  const double h = s.hidden;
  const double e = s.bytes_per_element;
  const double layers_per_stage = static_cast<double>(s.layers) / p.pp;
  const double tokens = m * p.dp * b * seq;
  StepBreakdown out;
  out.flops = (6.0 * s.active_parameters + 6.0 * s.layers * h * seq) * tokens;
  const double recompute = s.recompute > 0 ? 4.0 / 3.0 : 1.0;
  out.compute_s = out.flops * recompute / (static_cast<double>(job.gpus) * sustained_flops);

  auto kind = [&](GroupKind k) -> const KindSpan& { return spans.kind[static_cast<int>(k)]; };
  const double per_layer = 4.0 * layers_per_stage * m;
  if (p.tp > 1) {
    const KindLink l = Link(links, kind(GroupKind::kTp));
    out.tp_s = per_layer * AllReduce(b * seq / p.cp * h * e, p.tp, l);
  }
  if (p.cp > 1) {
    const KindLink l = Link(links, kind(GroupKind::kCp));
    const double kv = static_cast<double>(s.kv_heads) / s.heads;
    out.cp_s = per_layer * AllGather(b * seq * h * kv * e / p.tp, p.cp, l);
  }
  if (model.moe && p.ep > 1) {
    const double bytes = b * seq / (p.cp * p.tp) * s.top_k * h * e;
    out.ep_s = per_layer * AllToAll(bytes, kind(GroupKind::kEp), links);
  }
  if (p.pp > 1) {
    const KindLink l = Link(links, kind(GroupKind::kPp));
    if (l.any) out.pp_s = 2.0 * m * v * (b * seq * h * e / (p.cp * p.tp) / l.bw + l.latency);
    out.bubble_s = (p.pp - 1.0) / (m * v) * (out.compute_s + out.tp_s + out.cp_s + out.ep_s);
  }
  if (p.dp > 1) {
    const KindLink l = Link(links, kind(GroupKind::kDp));
    const double params = model.dense_parameters / (p.tp * p.pp) +
                          model.expert_parameters / (static_cast<double>(p.tp) * p.pp * p.ep);
    out.dp_raw_s = AllReduce(params * e, p.dp, l);
    out.dp_s = std::max(0.0, out.dp_raw_s - (out.compute_s / m + out.bubble_s));
  }
  out.total_s = out.compute_s + out.tp_s + out.cp_s + out.ep_s + out.pp_s + out.bubble_s + out.dp_s;
  return out;
}

std::string DominantGpuModel(const Topology& topology) {
  // A part's nodes share one model (a view, or a topology of one part).
  if (topology.part_count() == 1) return topology.part(0).gpu_model;
  std::map<std::string, int> counts;
  std::string best;
  int best_count = 0;
  for (NodeId n = 0; n < topology.node_count(); ++n) {
    const int c = ++counts[topology.node(n).gpu_model];
    if (c > best_count) {
      best = topology.node(n).gpu_model;
      best_count = c;
    }
  }
  return best;
}

double SlowestRankRate(const Topology& topology, std::span<const GpuSlot> ranks) {
  if (ranks.empty()) return SustainedFlops(DominantGpuModel(topology));
  const std::string* model = &topology.node(ranks[0].node).gpu_model;
  double rate = SustainedFlops(*model);
  for (const GpuSlot& s : ranks) {
    const std::string& m = topology.node(s.node).gpu_model;
    if (m == *model) continue;  // the common case: one model throughout
    model = &m;
    rate = std::min(rate, SustainedFlops(m));
  }
  return rate;
}

Result<StepPrediction> PredictPlacement(const JobSpec& job, const Topology& whole,
                                        std::span<const GpuSlot> ranks) {
  // On a mixed cluster, the links are those of the part of the first rank
  // (every group but DP lies in one part, also for a job split by DP
  // replica over parts: placement.hpp), and the compute rate is the
  // slowest model's among the ranks: a synchronous step waits for it.
  const Topology& topology = ranks.empty() ? whole : whole.ViewOf(ranks[0].node);
  Result<ResolvedModel> model = ResolveModel(job);
  if (!model.ok()) return model.status();
  const double rate = SlowestRankRate(whole, ranks);
  const LinkView links{&topology, {}};
  StepPrediction out;
  out.step = PredictStep(job, model.value(), links, AnalyzePlacement(job, topology, ranks), rate);
  out.ideal = PredictStep(job, model.value(), links, IdealSpans(job, topology), rate);
  out.slowdown = out.ideal.total_s > 0 ? std::max(1.0, out.step.total_s / out.ideal.total_s) : 1.0;
  return out;
}

}  // namespace topo::core
