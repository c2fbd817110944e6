#!/usr/bin/env python3
"""HF transformers on the `nanovllm bench throughput` workload, for the side-by-side ratio (GPU machine).

  nanovllm bench throughput --model M --dump-workload wl.json ...
  python3 scripts/hf_bench_throughput.py --model M --workload wl.json [--batch 256]

transformers (bf16, sdpa attention) generates each batch with left padding up to the batch's longest
output (sampling at the workload's temperature, EOS ignored); only each sequence's own requested output
tokens count, as in vLLM's comparison against HF.
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--json-out", default="")
    args = ap.parse_args()
    wl = json.load(open(args.workload))
    prompts, out_lens, temperature = wl["prompts"], wl["output_lens"], wl["temperature"]
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, attn_implementation="sdpa").cuda()
    model.eval()
    pad = 0
    # warm-up
    model.generate(torch.tensor([prompts[0][:16]]).cuda(), max_new_tokens=4, do_sample=False)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    useful = 0
    for b in range(0, len(prompts), args.batch):
        batch = prompts[b:b + args.batch]
        lens = out_lens[b:b + args.batch]
        width = max(len(p) for p in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, p in enumerate(batch):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        with torch.no_grad():
            model.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=max(lens),
                           min_new_tokens=max(lens), do_sample=temperature > 0, temperature=temperature or None,
                           top_p=None, top_k=None, pad_token_id=pad)
        useful += sum(lens)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    total_in = sum(len(p) for p in prompts)
    print(f"HF transformers: {len(prompts)} seqs, {useful} output tokens in {seconds:.2f} s: "
          f"{useful / seconds:.0f} output tok/s, {(useful + total_in) / seconds:.0f} total tok/s")
    if args.json_out:
        json.dump({"seconds": seconds, "output_tokens": useful, "output_tok_s": useful / seconds,
                   "transformers_batch": args.batch}, open(args.json_out, "w"))


if __name__ == "__main__":
    main()
