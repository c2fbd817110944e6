#!/usr/bin/env python3
"""nano-vLLM (CUDA, bf16) against HF transformers (bf16) on a make-test-model checkpoint (GPU machine).

HF greedily continues N random prompts for S steps. nano-vLLM is then teacher-forced along HF's sequence:
for every step k it gets prompt + HF's first k tokens (one request each, prefix caching shares the work)
and picks one greedy token. Reported: top-1 agreement over all N*S steps, and the largest difference
between nano-vLLM's and HF's logprob of HF's token.

  python3 scripts/hf_bf16_agreement.py --nanovllm .carry/nanovllm --model /tmp/q06 [--prompts 32 --steps 64]

--hf-model DIR gives HF another checkpoint of the same model: an FP8 checkpoint's f32 copy
(scripts/dequantize_fp8_checkpoint.py) while nano-vLLM runs the FP8 one (issue 51's accuracy target, with
--fp32-reference: nano-vLLM's agreement with HF fp32 on the dequantized weights).
"""
import argparse
import json
import subprocess
import tempfile

import torch
from transformers import AutoModelForCausalLM


def fp32_reference(args, hf, ours, hf_full):
    """HF fp32, teacher-forced along HF bf16's sequences (one forward per sequence): the agreement of HF bf16
    and of nano-vLLM with it, and at each step where nano-vLLM's token differs from HF bf16's, HF bf16's margin
    (its logprob of its own token minus that of nano-vLLM's): bf16 noise flips only near-ties."""
    model = AutoModelForCausalLM.from_pretrained(args.hf_model, dtype=torch.float32, attn_implementation="sdpa").cuda()
    model.eval()
    torch.backends.cuda.matmul.allow_tf32 = False
    hf_vs_fp32 = nano_vs_fp32 = 0
    margins = []
    with torch.no_grad():
        for i, (p, t, _) in enumerate(hf):
            seq = torch.tensor([p + t[:-1]]).cuda()
            logits = model(input_ids=seq).logits[0, len(p) - 1:]  # [steps, V]: the next token after each prefix
            ref = logits.argmax(-1).tolist()
            for k in range(args.steps):
                mine = ours[i * args.steps + k]["token_ids"][0]
                hf_vs_fp32 += t[k] == ref[k]
                nano_vs_fp32 += mine == ref[k]
                if mine != t[k]:
                    f = hf_full[i * args.steps + k]
                    margins.append(float(f[t[k]] - f[mine]))
    del model
    torch.cuda.empty_cache()
    total = args.prompts * args.steps
    margins.sort()
    print(f"fp32 reference (teacher-forced on the same sequences): HF bf16 agrees {hf_vs_fp32}/{total} = "
          f"{100 * hf_vs_fp32 / total:.2f}%, nano-vLLM bf16 {nano_vs_fp32}/{total} = {100 * nano_vs_fp32 / total:.2f}%")
    if margins:
        print(f"HF bf16's margin over nano-vLLM's token where they differ ({len(margins)} steps): "
              f"max {margins[-1]:.4f}, median {margins[len(margins) // 2]:.4f}", flush=True)
    return {"hf_bf16_vs_fp32": hf_vs_fp32, "nano_bf16_vs_fp32": nano_vs_fp32, "disagreement_margins": margins}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanovllm", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--hf-model", default="", help="the checkpoint HF runs (default: --model)")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json-out", default="")
    ap.add_argument("--max-model-len", type=int, default=0, help="nano-vLLM's --max-model-len (0: the model's)")
    ap.add_argument("--fp32-reference", action="store_true",
                    help="also teacher-force HF in fp32 along the same sequences: how often HF bf16 and nano-vLLM "
                         "each agree with fp32, and HF bf16's own margin at every step where nano-vLLM differs")
    args = ap.parse_args()
    args.hf_model = args.hf_model or args.model

    model = AutoModelForCausalLM.from_pretrained(args.hf_model, dtype=torch.bfloat16, attn_implementation="sdpa").cuda()
    model.eval()
    if model.config.model_type == "glm":  # partial RoPE: the factor must have reached transformers' table
        pairs = model.model.rotary_emb.inv_freq.numel()
        print(f"glm: {pairs} RoPE frequencies for head_dim {model.config.head_dim}", flush=True)
        assert pairs == model.config.head_dim // 4, "GLM RoPE must cover half the head"
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(args.seed)
    hf = []  # (prompt, tokens, logprobs of the tokens)
    hf_full = []  # per step: HF bf16's whole log-softmax (CPU), for the margins of disagreeing steps
    with torch.no_grad():
        for _ in range(args.prompts):
            n = int(torch.randint(16, 257, (1,), generator=gen))
            prompt = torch.randint(0, min(vocab, 150000), (n,), generator=gen).tolist()
            out = model.generate(torch.tensor([prompt]).cuda(), max_new_tokens=args.steps, min_new_tokens=args.steps,
                                 do_sample=False, output_logits=True, return_dict_in_generate=True,
                                 pad_token_id=0, eos_token_id=None)
            tokens = out.sequences[0, n:].tolist()
            full = [torch.log_softmax(l[0].float(), -1) for l in out.logits]
            lps = [float(f[t]) for f, t in zip(full, tokens)]
            hf.append((prompt, tokens, lps))
            if args.fp32_reference:
                hf_full.extend(f.cpu() for f in full)

    del model  # the GPU memory goes to nano-vLLM (a 9B model twice does not leave room for its KV cache)
    torch.cuda.empty_cache()
    forced = [p + t[:k] for p, t, _ in hf for k in range(args.steps)]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(forced, f)
    res = subprocess.run([args.nanovllm, "generate", "--backend", "cuda", "--model", args.model,
                          "--prompt-ids-file", f.name, "--max-tokens", "1", "--temperature", "0",
                          "--ignore-eos", "--logprobs", "20", "--json"] +
                         (["--max-model-len", str(args.max_model_len)] if args.max_model_len else []),
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"nanovllm generate failed ({res.returncode}):\n{res.stderr[-4000:]}")
    ours = [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    assert len(ours) == len(forced), (len(ours), len(forced))

    agree, max_diff, missing = 0, 0.0, 0
    for i, (p, t, lps) in enumerate(hf):
        for k in range(args.steps):
            o = ours[i * args.steps + k]
            agree += o["token_ids"][0] == t[k]
            ours_lp = {e["id"]: e["logprob"] for e in o["logprobs"][0]}
            if t[k] in ours_lp:
                max_diff = max(max_diff, abs(ours_lp[t[k]] - lps[k]))
            else:
                missing += 1
    total = args.prompts * args.steps
    report = {}
    if args.fp32_reference:
        report = fp32_reference(args, hf, ours, hf_full)
    print(f"{args.model}: top-1 agreement {agree}/{total} = {100 * agree / total:.2f}% (teacher-forced on HF bf16 "
          f"greedy continuations), max |logprob diff| of HF's token {max_diff:.4f} ({missing} steps where it is "
          f"outside nano-vLLM's top-20)")
    if args.json_out:
        json.dump({"model": args.model, "agree": agree, "total": total, "max_logprob_diff": max_diff,
                   "missing": missing, **report}, open(args.json_out, "w"))


if __name__ == "__main__":
    main()
