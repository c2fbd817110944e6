#!/usr/bin/env python3
"""HF transformers on the harness's own prompts: greedy answers, RULER scoring, the same table as `nanovllm eval`.

The prompts come from `nanovllm eval ruler|needle --dump-prompts FILE` (JSON lines with the prompt token ids),
so both sides see identical token ids; nothing here re-implements a task. Scoring is RULER's (the same rules as
tools/eval/scoring.cpp): RULER's postprocess, then string_match_all (fraction of references found, ASCII
case-insensitive) or string_match_part.

    nanovllm eval ruler --model M --context 4096,16384 --samples 32 --dump-prompts prompts.jsonl
    python3 scripts/hf_eval_ruler.py --model M --prompts prompts.jsonl --json-out hf.json
    nanovllm eval ruler --model M --context 4096,16384 --samples 32 --json-out ours.json
    python3 scripts/hf_eval_ruler.py --compare-only hf.json ours.json      # sample-by-sample agreement

Runs on the GPU machine (torch, transformers, tokenizers); --device cpu works for small models.
"""
import argparse
import json
import math
import os
import re
import sys
import time
from collections import OrderedDict, defaultdict

_CONTROL = re.compile(r"[\x00-\x1f]")


def postprocess(pred):
    """RULER's postprocess_pred."""
    return _CONTROL.sub("\n", pred.strip()).strip()


def _lower(s):  # ASCII only, as the C++ scorer (every reference is ASCII)
    return s.translate(str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz"))


def score(metric, pred, refs):
    p = _lower(postprocess(pred))
    found = [1.0 if _lower(r) in p else 0.0 for r in refs]
    if metric == "string_match_all":
        return sum(found) / len(refs)
    if metric == "string_match_part":
        return max(found)
    raise ValueError(f"unknown metric {metric}")


def read_prompts(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def row_of(sample, rows):
    if rows == "depth":
        return f"{sample['depth'] * 100:g}%"
    return sample["task"]


def round2(x):
    """Two decimals, halves away from zero: tools/eval/report.cpp's std::round(x * 100) / 100, so identical
    per-sample scores give identical tables (Python's round(28.125, 2) is 28.12, C++ gives 28.13)."""
    return math.copysign(math.floor(abs(x) * 100.0 + 0.5), x) / 100.0


def score_table(samples, rows):
    """RULER's per-cell score (mean metric x 100, 2 decimals), the per-context mean and the overall mean."""
    cells = OrderedDict()
    contexts = []
    for s in samples:
        key = (row_of(s, rows), s["context"])
        cells.setdefault(key, []).append(s)
        if s["context"] not in contexts:
            contexts.append(s["context"])
    row_names = list(OrderedDict.fromkeys(k[0] for k in cells))
    scores = OrderedDict((r, OrderedDict((str(c), None) for c in contexts)) for r in row_names)
    cell_list = []
    for (r, c), ss in cells.items():
        v = round2(100.0 * sum(x["score"] for x in ss) / len(ss))
        scores[r][str(c)] = v
        cell_list.append({"task" if rows == "task" else "depth": r, "context": c, "score": v, "samples": len(ss),
                          "passed": sum(1 for x in ss if x["score"] >= 0.5),
                          "mean_prompt_tokens": round2(sum(x["prompt_tokens"] for x in ss) / len(ss))})
    mean = OrderedDict()
    for c in contexts:
        vals = [scores[r][str(c)] for r in row_names if scores[r][str(c)] is not None]
        mean[str(c)] = round2(sum(vals) / len(vals)) if vals else None
    every = [v for r in row_names for v in scores[r].values() if v is not None]
    overall = round2(sum(every) / len(every)) if every else None
    return {"rows": row_names, "contexts": contexts, "scores": scores, "mean": mean, "overall": overall,
            "cells": cell_list}


def context_label(c):
    return f"{c // 1024}K" if c >= 1024 and c % 1024 == 0 else str(c)


def format_table(table, header):
    w0 = max([len(header), 4] + [len(r) for r in table["rows"]])
    fmt = lambda v: "-" if v is None else f"{v:.1f}"
    out = header.ljust(w0) + "".join(f" {context_label(c):>7}" for c in table["contexts"]) + "\n"
    for r in table["rows"]:
        out += r.ljust(w0) + "".join(f" {fmt(table['scores'][r][str(c)]):>7}" for c in table["contexts"]) + "\n"
    out += "mean".ljust(w0) + "".join(f" {fmt(table['mean'][str(c)]):>7}" for c in table["contexts"]) + "\n"
    return out


def eos_ids(model_dir, tokenizer):
    """What nanovllm stops at: generation_config.json's eos ids and tokenizer_config.json's eos_token."""
    ids = set()
    path = os.path.join(model_dir, "generation_config.json")
    if os.path.exists(path):
        e = json.load(open(path)).get("eos_token_id")
        ids.update(e if isinstance(e, list) else [e] if e is not None else [])
    path = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.exists(path):
        e = json.load(open(path)).get("eos_token")
        e = e.get("content") if isinstance(e, dict) else e
        if e and tokenizer.token_to_id(e) is not None:
            ids.add(tokenizer.token_to_id(e))
    return sorted(ids)


def load_model(model_dir, dtype, device):
    import torch
    from transformers import AutoModelForCausalLM
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype, attn_implementation="sdpa")
    except TypeError:  # transformers 4.x names it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch_dtype, attn_implementation="sdpa")
    return model.to(device).eval()


def generate(model, prompts, eos, device, batch_size=1, max_batch_tokens=65536, pad_id=0, progress=True):
    """Greedy continuations of every prompt (token ids), each up to its max_new_tokens, stopping at `eos`.
    batch_size 1 runs each prompt unpadded (the reference); larger batches left-pad prompts of one
    (task, context) together, at most max_batch_tokens tokens a batch (the padding mask is batch x len^2
    bytes); faster, numerically a little different in bf16."""
    import torch
    groups = defaultdict(list)
    for i, p in enumerate(prompts):
        groups[(p["task"], p["context"], p["max_new_tokens"])].append(i)
    outputs = [None] * len(prompts)
    done, t0 = 0, time.time()
    for (_, context, max_new), idx in groups.items():
        bs = max(1, min(batch_size, max_batch_tokens // context))
        for b in range(0, len(idx), bs):
            chunk = idx[b:b + bs]
            width = max(len(prompts[i]["prompt_ids"]) for i in chunk)
            ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, i in enumerate(chunk):
                p = prompts[i]["prompt_ids"]
                ids[row, width - len(p):] = torch.tensor(p)
                mask[row, width - len(p):] = 1
            with torch.inference_mode():
                out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=False,
                                     max_new_tokens=max_new, eos_token_id=eos, pad_token_id=pad_id,
                                     temperature=None, top_p=None, top_k=None)
            for row, i in enumerate(chunk):
                gen = out[row, width:].tolist()
                for k, t in enumerate(gen):  # up to and including the first EOS, like the engine
                    if t in eos:
                        gen = gen[:k + 1]
                        break
                outputs[i] = gen
            done += len(chunk)
            if progress and sys.stderr.isatty():
                print(f"\rhf generate {done}/{len(prompts)}  {time.time() - t0:.0f}s", end="", file=sys.stderr)
    if progress and sys.stderr.isatty():
        print(file=sys.stderr)
    return outputs


def evaluate(model_dir, prompts, dtype="bf16", device="cuda", batch_size=1, model=None):
    """Runs HF on `prompts` (dicts from a dump) and returns the per-sample results, RULER-scored."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    model = model if model is not None else load_model(model_dir, dtype, device)
    eos = eos_ids(model_dir, tok)
    outs = generate(model, prompts, eos, device, batch_size=batch_size)
    samples = []
    for p, ids in zip(prompts, outs):
        pred = tok.decode(ids, skip_special_tokens=True)
        samples.append({"task": p["task"], "context": p["context"], "index": p["index"], "depth": p["depth"],
                        "prompt_tokens": len(p["prompt_ids"]), "answers": p["answers"], "prediction": pred,
                        "output_ids": ids, "score": score(p["metric"], pred, p["answers"]),
                        "finish_reason": "stop" if ids and ids[-1] in eos else "length"})
    return samples


def compare(a, b, name_a="hf", name_b="nanovllm"):
    """Sample-by-sample agreement of two result files (this script's or `nanovllm eval --json-out`)."""
    key = lambda s: (s["task"], s["context"], s["index"], round(s.get("depth", -1), 6))
    sb = {key(s): s for s in b["samples"]}
    same_ids = same_score = n = 0
    diffs = []
    for s in a["samples"]:
        t = sb.get(key(s))
        if t is None:
            continue
        n += 1
        same_ids += s["output_ids"] == t["output_ids"]
        same_score += s["score"] == t["score"]
        if s["output_ids"] != t["output_ids"]:
            diffs.append((key(s), s["prediction"], t["prediction"]))
    print(f"{n} common samples: identical output ids {same_ids}/{n}, identical scores {same_score}/{n}; overall "
          f"{name_a} {a.get('overall')} vs {name_b} {b.get('overall')}")
    for k, pa, pb in diffs[:20]:
        print(f"  {k}: {name_a} {pa!r} | {name_b} {pb!r}")
    return {"common": n, "identical_output_ids": same_ids, "identical_scores": same_score}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="HF model directory")
    ap.add_argument("--prompts", help="JSON lines from nanovllm eval ... --dump-prompts")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch-size", type=int, default=1, help="1: each prompt unpadded (default)")
    ap.add_argument("--rows", default="task", choices=["task", "depth"], help="depth: a needle sweep's dump")
    ap.add_argument("--json-out")
    ap.add_argument("--compare", help="a nanovllm eval --json-out file to compare with, sample by sample")
    ap.add_argument("--compare-only", nargs=2, metavar=("A.json", "B.json"), help="compare two result files")
    args = ap.parse_args()

    if args.compare_only:
        a, b = (json.load(open(p)) for p in args.compare_only)
        r = compare(a, b, os.path.basename(args.compare_only[0]), os.path.basename(args.compare_only[1]))
        sys.exit(0 if r["common"] and r["identical_scores"] == r["common"] else 1)
    if not args.model or not args.prompts:
        ap.error("--model and --prompts are required (or --compare-only A B)")

    prompts = read_prompts(args.prompts)
    t0 = time.time()
    samples = evaluate(args.model, prompts, args.dtype, args.device, args.batch_size)
    elapsed = time.time() - t0
    table = score_table(samples, args.rows)
    import torch
    import transformers
    print(f"hf {args.rows}: {args.model}, transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{args.dtype}, {args.device}, {len(samples)} samples")
    print(format_table(table, args.rows), end="")
    print(f"overall {table['overall']:.2f} | run {elapsed:.1f} s")
    result = {"command": "hf", "model": args.model, "dtype": args.dtype, "prompts": args.prompts,
              "transformers": transformers.__version__, "torch": torch.__version__, **table,
              "time_s": {"run": elapsed}, "samples": samples}
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=1)
    if args.compare:
        compare(result, json.load(open(args.compare)))


if __name__ == "__main__":
    main()
