#!/usr/bin/env python3
"""How fast one GPU runs the matrix products of a transformer layer, by shape.

The step-time model (docs/perf-model.md) turns FLOPs into time with one
sustained rate per accelerator, whatever the shapes. This measures what that
assumption leaves out: the bf16 rate of the per-GPU linear layers of a layer
(QKV, attention output, gate+up, down; forward and both backward products) as
tensor parallelism narrows them, for the Llama 3 shapes the presets use and a
small Megatron GPT. Needs PyTorch and a CUDA GPU.

    python3 bench/gemm/gemm_shapes.py                    # table on stdout
    python3 bench/gemm/gemm_shapes.py --json out.json    # and a JSON record
    python3 bench/gemm/gemm_shapes.py --check             # shapes vs parameter counts

The rate is the layer's FLOPs over the summed time of its products (CUDA
events, median of --reps after --warmup runs), on random data.
"""

import argparse
import json
import sys

# name: (hidden, heads, kv heads, ffn, gated MLP, tokens per micro-batch,
#        layers, vocabulary, published parameters, source)
MODELS = {
    # Llama 3 Herd of Models, Table 3 (layers, hidden, FFN, heads, KV heads,
    # vocabulary 128K = 128,256, untied embeddings); a micro-batch of one
    # 8,192-token sequence, as the presets in core/src/perf_model.cpp.
    "llama3-8b": (4096, 32, 8, 14336, True, 8192, 32, 128256, 8.03e9, "Llama 3 paper, Table 3"),
    "llama3-70b": (8192, 64, 8, 28672, True, 8192, 80, 128256, 70.6e9, "Llama 3 paper, Table 3"),
    "llama3-405b":
        (16384, 128, 8, 53248, True, 8192, 126, 128256, 405.8e9, "Llama 3 paper, Table 3"),
    # Narayanan et al. SC'21, Table 1, first row: 1.7B, hidden 2304, 24 heads,
    # 24 layers, FFN 4h, vocabulary 51,200 (tied); sequence 2,048,
    # micro-batch 4 assumed (the table gives the global batch only).
    "megatron-1.7b": (2304, 24, 24, 4 * 2304, False, 4 * 2048, 24, 51200, 1.7e9,
                      "Narayanan et al. 2021, Table 1"),
}
TPS = [1, 2, 4, 8, 16, 32, 64]
PEAK = 989e12  # H100 SXM dense BF16, the model's constant (docs/perf-model.md)


def layer_linears(hidden, heads, kv, ffn, gated, tp):
    """(K, N) of each per-rank linear layer: y[M, N] = x[M, K] @ w[K, N]."""
    d = hidden // heads
    q_heads = max(1, heads // tp)
    kv_heads = max(1, kv // tp)
    up = (2 if gated else 1) * ffn // tp
    return [
        ("qkv", hidden, (q_heads + 2 * kv_heads) * d),
        ("out", q_heads * d, hidden),
        ("up", hidden, up),
        ("down", ffn // tp, hidden),
    ]


def check_shapes():
    """The shapes, summed over layers with the embeddings, give each model's
    published parameter count (catches a mistyped hidden, FFN or head count)."""
    bad = []
    for name, (hidden, heads, kv, ffn, gated, _, layers, vocab, params, _) in MODELS.items():
        gpt = name.startswith("megatron")  # tied embeddings, learned positions
        counted = layers * sum(k * n for _, k, n in layer_linears(hidden, heads, kv, ffn, gated, 1))
        counted += (1 if gpt else 2) * vocab * hidden + (2048 * hidden if gpt else 0)
        # The published figure is rounded: 1.7 B is anything from 1.65 to 1.75.
        rounding = 0.05e9 if gpt else 0.005 * params
        print(f"{name:<14} {counted / 1e9:8.2f} B counted, {params / 1e9:8.2f} B published "
              f"({counted / params - 1:+.1%})")
        if abs(counted - params) > rounding:
            bad.append(name)
    if bad:
        sys.exit("gemm_shapes: shapes do not give the published parameter count: " + ", ".join(bad))


def time_products(torch, shapes, warmup, reps):
    """Median seconds of running every (a, b) product once, in order."""
    pairs = [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
              torch.randn(k, n, device="cuda", dtype=torch.bfloat16)) for m, k, n in shapes]
    for _ in range(warmup):
        for a, b in pairs:
            torch.matmul(a, b)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for a, b in pairs:
            torch.matmul(a, b)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--check", action="store_true",
                    help="check the shapes against the published parameter counts (no GPU)")
    args = ap.parse_args()
    if args.check:
        check_shapes()
        return
    try:
        import torch
    except ImportError:
        sys.exit("gemm_shapes: needs PyTorch")
    if not torch.cuda.is_available():
        sys.exit("gemm_shapes: needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.cuda.get_device_name(0)
    rows = []
    for name in args.models.split(","):
        if name not in MODELS:
            sys.exit(f"gemm_shapes: unknown model '{name}'; known: {', '.join(MODELS)}")
        hidden, heads, kv, ffn, gated, tokens, _, _, _, source = MODELS[name]
        for tp in TPS:
            if heads % tp:
                continue  # tensor parallelism splits whole heads
            shapes, flops = [], 0.0
            for _, k, n in layer_linears(hidden, heads, kv, ffn, gated, tp):
                m = tokens
                # forward x@w, input gradient dy@w^T, weight gradient x^T@dy
                shapes += [(m, k, n), (m, n, k), (k, m, n)]
                flops += 3 * 2.0 * m * k * n
            seconds = time_products(torch, shapes, args.warmup, args.reps)
            rate = flops / seconds
            rows.append({"model": name, "tp": tp, "tokens": tokens, "layer_flops": flops,
                         "seconds": seconds, "tflops": rate / 1e12, "of_peak": rate / PEAK,
                         "source": source})
    square = 8192
    sq = time_products(torch, [(square, square, square)], args.warmup, args.reps)
    square_rate = 2.0 * square**3 / sq
    # Relative to each model's TP 8 (the calibration points' setting).
    for r in rows:
        base = next((b for b in rows if b["model"] == r["model"] and b["tp"] == 8), None)
        r["vs_tp8"] = r["tflops"] / base["tflops"] if base else None
    print(f"bf16 linear layers of one transformer layer, forward + backward, on {device}")
    print(f"one {square}x{square}x{square} product: {square_rate / 1e12:.0f} TFLOP/s "
          f"({square_rate / PEAK:.2f} of 989)")
    print(f"{'model':<14} {'tp':>3} {'tokens':>6} {'TFLOP/s':>8} {'of 989':>7} {'vs tp 8':>8}")
    for r in rows:
        vs = f"{r['vs_tp8']:.2f}" if r["vs_tp8"] is not None else "-"
        print(f"{r['model']:<14} {r['tp']:>3} {r['tokens']:>6} {r['tflops']:>8.0f} "
              f"{r['of_peak']:>7.2f} {vs:>8}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "torch": torch.__version__, "peak_tflops": PEAK / 1e12,
                       "warmup": args.warmup, "reps": args.reps,
                       "square_8192_tflops": square_rate / 1e12, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
