#!/usr/bin/env python3
"""Golden files from HF transformers for the CPU model tests (run on the GPU machine, which has torch +
transformers; this machine has neither).

For every model in tests/data/golden/models.json: write the checkpoint with `nanovllm make-test-model`
(the same bytes the tests make), load it in transformers (float32, eager attention, TF32 off), and for
each prompt record `greedy_steps` greedy tokens (no EOS stop) with the top-`top_logprobs` log-softmax
entries and the chosen token's logprob at every step.

  python3 scripts/hf_golden.py --nanovllm build/cpu/tools/nanovllm --out tests/data/golden [--only glm4]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM


def greedy_with_logprobs(model, prompt, steps, top):
    ids = torch.tensor([prompt], dtype=torch.long)
    tokens, chosen, tops = [], [], []
    past = None
    with torch.no_grad():
        for _ in range(steps):
            out = model(input_ids=ids if past is None else ids[:, -1:], past_key_values=past, use_cache=True)
            past = out.past_key_values
            logprobs = torch.log_softmax(out.logits[0, -1].double(), dim=-1)
            nxt = int(torch.argmax(out.logits[0, -1]))  # first maximal index, like the engine
            values, indices = torch.topk(logprobs, top)
            tokens.append(nxt)
            chosen.append(float(logprobs[nxt]))
            tops.append([{"id": int(i), "logprob": float(v)} for v, i in zip(values, indices)])
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return tokens, chosen, tops


def glm_rope_pairs(model):
    """GLM: the RoPE frequencies transformers built, to check that partial_rotary_factor reached the table
    (transformers moved it from the top level into rope_parameters between versions). None for others."""
    if model.config.model_type != "glm":
        return None
    pairs = model.model.rotary_emb.inv_freq.numel()
    print(f"glm: head_dim {model.config.head_dim}, {pairs} RoPE frequencies", flush=True)
    return pairs


def load(d):
    model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    pairs = glm_rope_pairs(model)
    if pairs is not None and pairs != model.config.head_dim // 4:
        # Our test models write partial_rotary_factor 0.5 at the top level like the hub's -hf configs; if this
        # transformers ignores it there, give it the same values in its rope_parameters form.
        path = os.path.join(d, "config.json")
        cfg = json.load(open(path))
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg.pop("rope_theta"),
                                  "partial_rotary_factor": cfg.pop("partial_rotary_factor")}
        json.dump(cfg, open(path, "w"))
        model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
        assert glm_rope_pairs(model) == model.config.head_dim // 4, "GLM RoPE must cover half the head"
    model.eval()
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanovllm", required=True, help="path to the nanovllm binary")
    ap.add_argument("--out", default="tests/data/golden")
    ap.add_argument("--models", default="tests/data/golden/models.json")
    ap.add_argument("--only", default="", help="comma-separated name prefixes: write only these entries' files")
    args = ap.parse_args()
    only = [p for p in args.only.split(",") if p]

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(os.cpu_count() or 1)
    spec = json.load(open(args.models))
    import transformers
    for m in spec["models"]:
        if "golden" in m:  # checked against another entry's file (a layout transformers cannot load)
            continue
        if only and not any(m["name"].startswith(p) for p in only):
            continue
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([args.nanovllm, "make-test-model", "--out", d, "--preset", m["preset"],
                            "--seed", str(m["seed"]), "--config-override", json.dumps(m["override"]),
                            "--layout", m.get("layout", "hf")], check=True)
            model = load(d)
            vocab = model.config.vocab_size
            gen = torch.Generator().manual_seed(m["seed"])
            prompts = []
            for n in m["prompt_lens"]:
                prompt = torch.randint(0, vocab, (n,), generator=gen).tolist()
                tokens, chosen, tops = greedy_with_logprobs(model, prompt, spec["greedy_steps"], spec["top_logprobs"])
                prompts.append({"prompt_ids": prompt, "greedy_ids": tokens, "chosen_logprobs": chosen,
                                "top_logprobs": tops})
                print(f"{m['name']}: prompt {n} -> {tokens[:8]}...", flush=True)
        golden = {"name": m["name"], "transformers": transformers.__version__, "torch": torch.__version__,
                  "dtype": "float32", "attn_implementation": "eager", "prompts": prompts}
        with open(os.path.join(args.out, m["name"] + ".json"), "w") as f:
            json.dump(golden, f, separators=(",", ":"))


if __name__ == "__main__":
    sys.exit(main())
