#!/usr/bin/env python3
"""Greedy agreement of tensor parallel (TP N) with one GPU (TP 1) on a checkpoint (GPU machine, no torch).

TP 1 greedily continues P random prompts for S steps. TP N is then teacher-forced along those sequences: for
every step k it gets prompt + TP 1's first k tokens (one request each, prefix caching shares the work) and
picks one greedy token. Reported: top-1 agreement over all P*S steps, the largest |logprob| difference of
TP 1's token, and the free-running TP N streams' first divergences from TP 1's (for information: after a
near-tie flip a greedy stream need not agree any more).

  python3 scripts/tp_agreement.py --nanovllm build/cuda/tools/nanovllm --model /tmp/q8 --tp 2 [--prompts 16]
"""
import argparse
import json
import os
import random
import subprocess
import tempfile


def generate(args, tp, prompts, max_tokens, logprobs):
    """Greedy `nanovllm generate --json` of `prompts` on `tp` GPUs: one dict per prompt."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(prompts, f)
    cmd = [args.nanovllm, "generate", "--backend", args.backend, "--model", args.model, "--prompt-ids-file", f.name,
           "--max-tokens", str(max_tokens), "--temperature", "0", "--ignore-eos", "--logprobs", str(logprobs),
           "--json", "--tensor-parallel-size", str(tp), "--max-model-len", str(args.max_model_len)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    os.unlink(f.name)
    if res.returncode != 0:
        raise SystemExit(f"nanovllm generate (tp {tp}) failed ({res.returncode}):\n{res.stderr[-4000:]}")
    out = [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    assert len(out) == len(prompts), (len(out), len(prompts))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanovllm", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--backend", default="cuda", help="cuda, or cpu (ranks as threads) to try the script here")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per nanovllm run")
    ap.add_argument("--json-out", default="")
    args = ap.parse_args()

    vocab = json.load(open(os.path.join(args.model, "config.json")))["vocab_size"]
    rng = random.Random(args.seed)
    prompts = [[rng.randrange(min(vocab, 150000)) for _ in range(rng.randint(16, 256))] for _ in range(args.prompts)]
    one = generate(args, 1, prompts, args.steps, 1)
    free = generate(args, args.tp, prompts, args.steps, 1)
    forced = [p + o["token_ids"][:k] for p, o in zip(prompts, one) for k in range(args.steps)]
    ours = generate(args, args.tp, forced, 1, 20)

    agree, max_diff, missing = 0, 0.0, 0
    for i, o in enumerate(one):
        for k in range(args.steps):
            mine = ours[i * args.steps + k]
            agree += mine["token_ids"][0] == o["token_ids"][k]
            lps = {e["id"]: e["logprob"] for e in mine["logprobs"][0]}
            ref_lp = next(e["logprob"] for e in o["logprobs"][k] if e["id"] == o["token_ids"][k])
            if o["token_ids"][k] in lps:
                max_diff = max(max_diff, abs(lps[o["token_ids"][k]] - ref_lp))
            else:
                missing += 1
    first_divergence = []
    for o, f in zip(one, free):
        k = 0
        while k < args.steps and o["token_ids"][k] == f["token_ids"][k]:
            k += 1
        first_divergence.append(k)
    total = args.prompts * args.steps
    print(f"{args.model}: TP {args.tp} vs TP 1 top-1 agreement {agree}/{total} = {100 * agree / total:.2f}% "
          f"(teacher-forced on TP 1's greedy continuations), max |logprob diff| of TP 1's token {max_diff:.4f} "
          f"({missing} steps outside TP {args.tp}'s top-20); free-running streams identical for "
          f"{sum(k == args.steps for k in first_divergence)}/{args.prompts} prompts, first divergences "
          f"{sorted(k for k in first_divergence if k < args.steps)}")
    if args.json_out:
        json.dump({"model": args.model, "tp": args.tp, "agree": agree, "total": total, "max_logprob_diff": max_diff,
                   "missing": missing, "first_divergence": first_divergence}, open(args.json_out, "w"))


if __name__ == "__main__":
    main()
