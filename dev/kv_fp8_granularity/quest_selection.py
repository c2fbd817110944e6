#!/usr/bin/env python3
"""Quest's page selection over an fp8 (e4m3) KV cache against a bf16 one (issue 47: "Quest's page summaries stay
exact enough to select the same pages — measure selection agreement against bf16").

Reads the layer taps of one prompt (`nanovllm generate --dump-taps DIR`: per layer q, k after RoPE) and, for the last
`--rows` query positions of every layer as decode queries over the keys before them, selects pages the way the engine
does (sparse/quest_attention.h, kernels/cuda/sparse_decode.cu):
  page bound  sum_d max(q_d min_d, q_d max_d) over the page's key min / max, max over the GQA group's query heads;
  selection   the first page (sink) and the last two (the query's and the one before) always, then the best bounds
              of the pages between up to the budget, ties to the earlier page.
with the page summaries of two caches:
  bf16  keys rounded to bf16 (the CUDA cache); min / max exact;
  fp8   keys quantized per (token, KV head) row as `--kv-cache-dtype fp8` stores them (scale = amax / 448, e4m3 codes,
        value = code x scale in f32), min / max rounded outward to bf16 as quest_update_pages does on CUDA.
q is rounded to bf16 (the CUDA activations). Prints per layer: the share of bf16's selected pages that fp8 selects
too, and the attention mass (softmax of q . k / sqrt(D) over all keys in float64, the bf16 keys, averaged over the
query heads) inside each selection — whether fp8's other picks matter; and, for scale, how many of bf16's pages
the exact f32 keys (the CPU backend's cache) select.

    python3 dev/kv_fp8_granularity/quest_selection.py --taps DIR [--rows 64] [--budget 2048] [--page 16]

Needs python3 and numpy only.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from granularity import E4M3_MAX, e4m3_round, read_taps  # noqa: E402

SINK_PAGES, RECENT_PAGES = 1, 2  # SparseConfig::kSinkPages, kRecentPages


def bf16_round(x, mode="nearest"):
    """float32 values rounded to bf16 (nearest even, or outward: "down" / "up"), as float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    if mode == "nearest":
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32)
    truncated = (bits & 0xFFFF0000).astype(np.uint32).view(np.float32)
    exact = truncated == x
    # Truncation moves towards zero; a step of one bf16 ulp away from zero then gives the outward value.
    away = ((bits & 0xFFFF0000) + 0x10000).astype(np.uint32).view(np.float32)
    if mode == "down":
        return np.where(exact | (x > 0), truncated, away)
    return np.where(exact | (x < 0), truncated, away)


def fp8_rows(k):
    """k [N, Hk, D] float32 -> code x scale per (token, KV head) row, float32 (kernels/kv_cache.h)."""
    amax = np.abs(k).max(axis=2, keepdims=True).astype(np.float32)
    scale = np.where(amax > 0, amax / np.float32(E4M3_MAX), np.float32(1)).astype(np.float32)
    codes = e4m3_round((k / scale).astype(np.float64))
    return (codes.astype(np.float32) * scale).astype(np.float32)


def page_summaries(k, page, outward):
    """Per page and KV head the key min / max [P, Hk, D]; outward: rounded to bf16 away from the keys."""
    n, hk, d = k.shape
    pages = -(-n // page)
    lo = np.full((pages * page, hk, d), np.inf, dtype=np.float32)
    hi = np.full((pages * page, hk, d), -np.inf, dtype=np.float32)
    lo[:n], hi[:n] = k, k
    lo = lo.reshape(pages, page, hk, d).min(axis=1)
    hi = hi.reshape(pages, page, hk, d).max(axis=1)
    if outward:
        lo, hi = bf16_round(lo, "down"), bf16_round(hi, "up")
    return lo, hi


def select(bounds, budget_pages):
    """bounds [pages] of one (query, KV head) -> the selected page ids (a set)."""
    pages = bounds.shape[0]
    if pages <= budget_pages:
        return set(range(pages))
    chosen = set(range(SINK_PAGES)) | set(range(pages - RECENT_PAGES, pages))
    middle = np.arange(SINK_PAGES, pages - RECENT_PAGES)
    order = middle[np.lexsort((middle, -bounds[middle]))]  # best bound first, then the earlier page
    chosen |= set(order[: budget_pages - len(chosen)].tolist())
    return chosen


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--taps", required=True)
    ap.add_argument("--rows", type=int, default=64, help="query positions per layer (the prompt's last)")
    ap.add_argument("--budget", type=int, default=2048, help="tokens Quest keeps")
    ap.add_argument("--page", type=int, default=16, help="tokens per page")
    args = ap.parse_args()
    taps = read_taps(args.taps)
    layers = sorted({int(name.split(".")[1]) for name in taps if name.endswith(".k")})
    budget_pages = args.budget // args.page
    print(f"{args.taps}: {len(layers)} layers, {args.rows} query rows each, budget {args.budget} tokens "
          f"({budget_pages} pages of {args.page})")
    totals = []
    for layer in layers:
        q = bf16_round(taps[f"layers.{layer}.q"])
        k32 = taps[f"layers.{layer}.k"]
        n, hq, d = q.shape
        hk = k32.shape[1]
        group = hq // hk
        k_bf16 = bf16_round(k32)
        summaries = {"bf16": page_summaries(k_bf16, args.page, False),
                     "fp8": page_summaries(fp8_rows(k32), args.page, True),
                     "f32": page_summaries(k32, args.page, False)}
        kd = k_bf16.astype(np.float64)
        agree, agree_f32, mass = [], [], {"bf16": [], "fp8": [], "f32": []}
        for t in range(n - args.rows, n):
            pages = t // args.page + 1  # the query at position t sees keys [0, t]
            qt = q[t].astype(np.float64)  # [Hq, D]
            # Exact attention probabilities of every query head over keys [0, t], summed per page.
            logits = np.einsum("hd,nhd->hn", qt, np.repeat(kd[: t + 1], group, axis=1)) / np.sqrt(d)
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            padded = np.zeros((hq, pages * args.page))
            padded[:, : t + 1] = p
            page_mass = padded.reshape(hq, pages, args.page).sum(axis=2)  # [Hq, pages]
            chosen = {}
            for name, (lo, hi) in summaries.items():
                lo64, hi64 = lo[:pages].astype(np.float64), hi[:pages].astype(np.float64)
                chosen[name] = []
                for h in range(hk):
                    heads = range(h * group, (h + 1) * group)
                    # A query head's bound per page, then the max over the KV head's group.
                    bound = np.max([np.sum(np.maximum(qt[j] * lo64[:, h, :], qt[j] * hi64[:, h, :]), axis=1)
                                    for j in heads], axis=0)
                    sel = select(bound, budget_pages)
                    chosen[name].append(sel)
                    idx = np.fromiter(sel, dtype=np.int64)
                    mass[name].append(page_mass[h * group:(h + 1) * group][:, idx].sum(axis=1).mean())
            for h in range(hk):
                a, b, c = chosen["bf16"][h], chosen["fp8"][h], chosen["f32"][h]
                agree.append(len(a & b) / len(a))
                agree_f32.append(len(a & c) / len(a))
        row = (np.mean(agree), np.min(agree), np.mean(mass["bf16"]), np.mean(mass["fp8"]), np.mean(agree_f32))
        totals.append(row)
        print(f"layer {layer}: fp8 selects {row[0]:.4f} of bf16's pages (worst query/head {row[1]:.4f}; f32 keys "
              f"{row[4]:.4f}); attention mass in the selection bf16 {row[2]:.4f}, fp8 {row[3]:.4f}")
    t = np.array(totals)
    print(f"mean: agreement {t[:, 0].mean():.4f} (worst {t[:, 1].min():.4f}; f32 keys {t[:, 4].mean():.4f}); "
          f"mass bf16 {t[:, 2].mean():.4f}, fp8 {t[:, 3].mean():.4f}")


if __name__ == "__main__":
    main()
