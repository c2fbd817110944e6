#!/usr/bin/env python3
"""Helpers of scripts/bench/device_bench.sh (run on the GPU machine).

  bench_util.py summary FILE.jsonl                  one line per report of a device_bench.sh mode
  bench_util.py ncu-step NCU.csv                    ncu's per-kernel times summed by kernel name
  bench_util.py ncu-kernels NCU.csv                 ncu's metrics averaged per kernel and grid size
  bench_util.py hf-tokenizer TOKENIZER.json CORPUS OUT.json   HF tokenizers (Python) on the corpus
"""
import collections
import csv
import json
import statistics
import sys
import time


def latency_line(r):
    d = r["decode"]
    s = f"{d['median_ms']:.3f} ms/token"
    if d.get("floor_ms"):
        s += f" ({d['median_ms'] / d['floor_ms']:.2f}x the {d['floor_ms']:.3f} ms floor)"
    gemm = r.get("device", {}).get("gemm_tflops")
    for p in r.get("prefill", []):
        s += f" | prefill {p['tokens']} {p['tflops']:.0f} TFLOP/s"
        if gemm:
            s += f" = {100 * p['tflops'] / gemm:.1f}%"
    return d["median_ms"], s


def throughput_line(r):
    tok = r["result"]["output_tok_s"]
    s = f"{tok:.0f} output tok/s"
    roof = r.get("roofline")
    if roof:
        s += f" = {100 * roof['achieved_fraction']:.1f}% of the {roof['floor_output_tok_s']:.0f} floor"
    return tok, s


def summary(path):
    recs = [json.loads(line) for line in open(path) if line.strip()]
    values = collections.defaultdict(list)  # (model, variant) -> values, for the A/B medians
    nano_tp = {}
    for rec in recs:
        kind, label, r = rec["kind"], rec["label"], rec["report"]
        value = None
        if kind == "latency":
            value, s = latency_line(r)
        elif kind == "throughput":
            value, s = throughput_line(r)
            nano_tp[label] = value
        elif kind == "hf_throughput":
            s = f"HF transformers {r['output_tok_s']:.0f} output tok/s (batch {r.get('transformers_batch')})"
            if label in nano_tp:
                s += f"; nano-vLLM {nano_tp[label]:.0f} = {nano_tp[label] / r['output_tok_s']:.1f}x"
        elif kind == "agreement":
            s = (f"top-1 agreement {r['agree']}/{r['total']} = {100 * r['agree'] / r['total']:.2f}%, "
                 f"max |logprob diff| {r['max_logprob_diff']:.4f}")
        elif kind == "offload":
            rows = [f"context {o['context']}: decode {o['decode_ms_median']:.2f} ms/token"
                    + (f" = {o['floor_ratio']:.2f}x PCIe floor" if "floor_ratio" in o else "")
                    + f", prefill {o['prefill_s']:.2f} s" for o in r.get("offload", [])]
            gpu = {g["context"]: g for g in r.get("gpu_only", []) if g.get("fits")}
            for i, o in enumerate(r.get("offload", [])):
                if o["context"] in gpu:
                    rows[i] += f" ({gpu[o['context']]['prefill_s'] / o['prefill_s']:.2f}x GPU-only)"
            s = "; ".join(rows)
        elif kind == "serve":
            s = (f"{r['output_tokens_per_s']:.0f} output tok/s, {r['succeeded']} ok / {r['failed']} failed, "
                 f"TTFT p50 {r['ttft_ms']['p50']:.1f} ms, TPOT p50 {r['tpot_ms']['p50']:.2f} ms")
            if "offline" in nano_tp:
                s += f"; {100 * r['output_tokens_per_s'] / nano_tp['offline']:.1f}% of offline"
        elif kind in ("tokenizer", "hf_tokenizer"):
            value = r["mb_per_s"]
            s = f"{r['mb_per_s']:.2f} MB/s, {r['tokens']} tokens"
            if kind == "hf_tokenizer" and "nano-vLLM" in nano_tp:
                s += f"; nano-vLLM {nano_tp['nano-vLLM'] / r['mb_per_s']:.1f}x"
            if kind == "tokenizer":
                nano_tp["nano-vLLM"] = value
        else:
            s = json.dumps(r)[:200]
        print(f"{label:<16} {s}")
        parts = label.split()
        if value is not None and len(parts) == 3:
            values[(parts[0], parts[1])].append(value)
    models = sorted({m for m, _ in values})
    for m in models:
        old, new = values.get((m, "old")), values.get((m, "new"))
        if old and new:
            mo, mn = statistics.median(old), statistics.median(new)
            print(f"{m:<16} median old {mo:.5g}, new {mn:.5g}: new/old = {mn / mo:.4f}")


def ncu_rows(path):
    rows = [r for r in csv.reader(open(path)) if len(r) > 10]
    return rows[0], rows[1:]


def ncu_step(path):
    hdr, rows = ncu_rows(path)
    ki, vi, ui = hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Metric Unit")
    tot, cnt = collections.defaultdict(float), collections.Counter()
    for r in rows:
        v = float(r[vi].replace(",", ""))
        v = v / 1e3 if r[ui] in ("ns", "nsecond") else (v * 1e3 if r[ui] in ("ms", "msecond") else v)
        name = r[ki].split("(")[0][:90]
        tot[name] += v
        cnt[name] += 1
    s = sum(tot.values())
    print(f"{len(rows)} kernels, {s:.1f} us of GPU time")
    for k, v in sorted(tot.items(), key=lambda x: -x[1]):
        print(f"{v:10.1f} us {100 * v / s:5.1f}%  x{cnt[k]:4d}  {k}")


def ncu_kernels(path):
    hdr, rows = ncu_rows(path)
    ki, gi, mi, vi, ii = (hdr.index(x) for x in ("Kernel Name", "Grid Size", "Metric Name", "Metric Value", "ID"))
    per = {}
    for r in rows:
        name = r[mi].replace("smsp__average_warp_latency_issue_stalled_", "stall_").split(".")[0]
        d = per.setdefault(int(r[ii]), {"k": r[ki].split("(")[0].split("::")[-1], "g": r[gi]})
        d[name] = float(r[vi].replace(",", ""))
    groups = collections.OrderedDict()
    for _, d in sorted(per.items()):
        groups.setdefault((d["k"], d["g"]), []).append(d)
    for (k, g), lst in groups.items():
        keys = [x for x in lst[0] if x not in ("k", "g")]
        print(k, g, f"x{len(lst)}", " ".join(f"{x}={sum(d[x] for d in lst) / len(lst):.1f}" for x in keys))


def hf_tokenizer(tok_path, corpus, out):
    """The same ~4 KB chunks cut at line ends as `nanovllm bench tokenizer`; best of 2 passes; then one long text."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_path)
    text = open(corpus, encoding="utf-8").read()
    chunks, cur, n = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        n += len(line.encode())
        if n >= 4096:
            chunks.append("".join(cur))
            cur, n = [], 0
    if cur:
        chunks.append("".join(cur))
    nbytes = len(text.encode())
    best, ntok = 1e9, 0
    for _ in range(2):
        t0 = time.perf_counter()
        ntok = sum(len(tok.encode(c).ids) for c in chunks)
        best = min(best, time.perf_counter() - t0)
    long_text = text[:2_000_000]
    t0 = time.perf_counter()
    tok.encode(long_text)
    long_mb_s = len(long_text.encode()) / 1e6 / (time.perf_counter() - t0)
    print(f"HF tokenizers (python, 1 thread, 4 KB chunks): {nbytes / 1e6:.1f} MB, {ntok} tokens, "
          f"{nbytes / 1e6 / best:.2f} MB/s")
    print(f"HF tokenizers (python, one long 2 MB text): {long_mb_s:.2f} MB/s")
    json.dump({"bytes": nbytes, "tokens": ntok, "seconds": best, "mb_per_s": nbytes / 1e6 / best,
               "long_text_mb_per_s": long_mb_s}, open(out, "w"))


if __name__ == "__main__":
    cmds = {"summary": summary, "ncu-step": ncu_step, "ncu-kernels": ncu_kernels, "hf-tokenizer": hf_tokenizer}
    if len(sys.argv) < 3 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    cmds[sys.argv[1]](*sys.argv[2:])
