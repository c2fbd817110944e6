#!/usr/bin/env python3
"""fp8 (e4m3) KV cache: which scale granularity (issue 47: per tensor, per KV head, per token and head, per page).

Reads the layer taps of one prompt (`nanovllm generate --dump-taps DIR`: per layer q, k, v after RoPE as the
attention reads them) and, per layer and granularity, quantizes K and V to e4m3 with an amax scale, then recomputes
causal GQA attention in float64 for a sample of query rows with the exact and with the quantized K / V. Prints per
layer and granularity the relative L2 error of K, of V and of the attention output (mean over rows and the worst
row), averaged over layers at the end.

    python3 dev/kv_fp8_granularity/granularity.py --taps DIR [--rows 256] [--page 16]

Scales (amax / 448, e4m3's largest finite value), each over:
  tensor  the layer's whole K (or V) of the prompt: an oracle, a static scale would need calibration and
          re-quantizing when a larger value arrives;
  head    all tokens of one KV head (the same caveat);
  row     one token's D values of one KV head (what `--kv-cache-dtype fp8` stores, kernels/kv_cache.h);
  page    `--page` tokens x D of one KV head (one scale per cache block and head).
And one variant of the row scale: "row-smooth" stores each key minus the prompt's mean key of its head (per channel)
before quantizing (SageAttention's smoothing of K): q . (k - m) differs from q . k by q . m, the same for every key
of a query, so the softmax is unchanged and only the quantization error moves. V is quantized per row. And
"row-K" / "row-V": only K / only V quantized per row (the other exact), to tell which one the attention error is;
"K-channel": K with a scale per (KV head, channel) over the prompt's tokens (KIVI's key grouping), V per row.
Needs python3 and numpy only.
"""
import argparse
import json
import math
import struct
import sys

import numpy as np

E4M3_MAX = 448.0


def read_taps(path):
    """{name: float32 ndarray} of DIR/taps.safetensors (F32 tensors)."""
    with open(path + "/taps.safetensors", "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{name}: dtype {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=np.float32).reshape(info["shape"])
    return out


def e4m3_round(x):
    """x (float64) rounded to the nearest e4m3 value (ties to even), saturated at +-448."""
    a = np.minimum(np.abs(x), E4M3_MAX)
    # Normal numbers (>= 2^-6) carry 3 mantissa bits: a step of 2^(e - 3); subnormals a step of 2^-9.
    e = np.floor(np.log2(np.maximum(a, 2.0 ** -6)))
    step = 2.0 ** (e - 3)
    return np.sign(x) * np.minimum(np.round(a / step) * step, E4M3_MAX)


def quantize(x, granularity, page):
    """x [N, Hk, D] float64 -> its e4m3 reconstruction (codes x scale) under one scale per `granularity` group."""
    n, hk, d = x.shape
    if granularity == "tensor":
        amax = np.abs(x).max() * np.ones((1, 1, 1))
    elif granularity == "head":
        amax = np.abs(x).max(axis=(0, 2), keepdims=True)
    elif granularity == "row":
        amax = np.abs(x).max(axis=2, keepdims=True)
    elif granularity == "channel":
        amax = np.abs(x).max(axis=0, keepdims=True)
    elif granularity == "page":
        pages = -(-n // page)
        padded = np.zeros((pages * page, hk, d))
        padded[:n] = x
        amax = np.abs(padded.reshape(pages, page, hk, d)).max(axis=(1, 3), keepdims=True)
        amax = np.repeat(amax, page, axis=1).reshape(pages * page, hk, 1)[:n]
    else:
        raise ValueError(granularity)
    scale = np.where(amax > 0, amax / E4M3_MAX, 1.0)
    return e4m3_round(x / scale) * scale


def quantize_smoothed(k):
    """Per-row e4m3 of k minus its per-(head, channel) mean over the tokens, the mean added back."""
    m = k.mean(axis=0, keepdims=True)
    return quantize(k - m, "row", 1) + m


def attention(q, k, v, rows):
    """Causal GQA attention of the query rows `rows` (q [N, Hq, D], k / v [N, Hk, D]) -> [len(rows), Hq, D]."""
    hq, d = q.shape[1], q.shape[2]
    g = hq // k.shape[1]
    out = np.zeros((len(rows), hq, d))
    for i, r in enumerate(rows):
        for h in range(hq):
            s = k[: r + 1, h // g, :] @ q[r, h, :] / math.sqrt(d)
            p = np.exp(s - s.max())
            out[i, h] = (p / p.sum()) @ v[: r + 1, h // g, :]
    return out


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--taps", required=True)
    ap.add_argument("--rows", type=int, default=256, help="query rows sampled per layer (half of them the last)")
    ap.add_argument("--page", type=int, default=16, help="tokens of a page for the per-page scale")
    args = ap.parse_args()
    taps = read_taps(args.taps)
    layers = sorted({int(n.split(".")[1]) for n in taps if n.endswith(".k")})
    n = taps[f"layers.{layers[0]}.k"].shape[0]
    rng = np.random.default_rng(0)
    half = args.rows // 2
    rows = sorted(set(range(n - half, n)) | set(rng.choice(n - half, size=args.rows - half, replace=False).tolist()))
    grans = ["tensor", "head", "row", "page", "row-smooth", "row-K", "row-V", "K-channel"]
    print(f"{n} tokens, layers {layers}, {len(rows)} query rows (the last {half} and {len(rows) - half} random), "
          f"pages of {args.page}")
    print(f"{'layer':>5} {'scale per':>9} {'K rel err':>10} {'V rel err':>10} {'attn mean':>10} {'attn worst':>10}")
    total = {g: np.zeros(4) for g in grans}
    for l in layers:
        q, k, v = (taps[f"layers.{l}.{t}"].astype(np.float64) for t in ("q", "k", "v"))
        exact = attention(q, k, v, rows)
        # The engine's own attention output (fp32 CPU) against this float64 one: the harness's floor.
        floor = rel(taps[f"layers.{l}.attn"][rows].astype(np.float64), exact)
        print(f"{l:>5} {'(engine)':>9} {'':>10} {'':>10} {floor:10.2e}")
        for g in grans:
            if g == "row-smooth":
                kq, vq = quantize_smoothed(k), quantize(v, "row", args.page)
            elif g == "K-channel":
                kq, vq = quantize(k, "channel", args.page), quantize(v, "row", args.page)
            elif g in ("row-K", "row-V"):
                kq = quantize(k, "row", args.page) if g == "row-K" else k
                vq = quantize(v, "row", args.page) if g == "row-V" else v
            else:
                kq, vq = quantize(k, g, args.page), quantize(v, g, args.page)
            got = attention(q, kq, vq, rows)
            per_row = [rel(got[i], exact[i]) for i in range(len(rows))]
            m = np.array([rel(kq, k), rel(vq, v), float(np.mean(per_row)), float(np.max(per_row))])
            total[g] += m / len(layers)
            print(f"{l:>5} {g:>9} {m[0]:10.2e} {m[1]:10.2e} {m[2]:10.2e} {m[3]:10.2e}")
    print("mean over layers:")
    for g in grans:
        m = total[g]
        print(f"{'':>5} {g:>9} {m[0]:10.2e} {m[1]:10.2e} {m[2]:10.2e} {m[3]:10.2e}")


if __name__ == "__main__":
    sys.exit(main())
