#!/usr/bin/env python3
"""Golden files for Qwen3MoeForCausalLM from HF transformers (run where torch + transformers are installed,
e.g. the GPU machine; it runs on its CPU in seconds).

For each model below: write a hub-format config.json, build the model with transformers (float32, eager
attention) from that config, fill it with seeded random weights rounded to bf16 (so the bf16 checkpoint holds
them exactly), save the checkpoint in the hub's layout (router `mlp.gate.weight`, per expert
`mlp.experts.E.{gate,up,down}_proj.weight`; transformers 5 keeps the experts fused in memory, so they are split
here), reload it with `from_pretrained` (transformers reads the hub layout back: the logits must not change),
then record greedy tokens with the top-k log-softmax entries at every step, as scripts/hf_golden.py does.
Also records torch.topk's order of equal softmax probabilities on the CPU (the routing's tie order).

  python3 scripts/hf_moe_golden.py --out tests/data/golden

Writes OUT/<name>/{config.json, generation_config.json, model.safetensors}, OUT/<name>.json and
OUT/qwen3_moe_topk_ties.json (all small: well under 1 MB together).
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_golden import greedy_with_logprobs  # noqa: E402

GREEDY_STEPS = 16
TOP_LOGPROBS = 5

# Small models in the hub's key layout (Qwen/Qwen3-30B-A3B/config.json's fields), covering: renormalised top-k
# with an mlp_only layer among sparse ones; decoder_sparse_step 2 without renormalisation, tied embeddings and
# a top-k of 3 over 6 experts.
MODELS = [
    {"name": "qwen3_moe_norm_topk", "seed": 31, "prompt_lens": [1, 7, 33, 100],
     "config": {"num_hidden_layers": 4, "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": True,
                "decoder_sparse_step": 1, "mlp_only_layers": [2], "tie_word_embeddings": False}},
    {"name": "qwen3_moe_sparse_step", "seed": 32, "prompt_lens": [1, 9, 64],
     "config": {"num_hidden_layers": 4, "num_experts": 6, "num_experts_per_tok": 3, "norm_topk_prob": False,
                "decoder_sparse_step": 2, "mlp_only_layers": [], "tie_word_embeddings": True}},
]


def hub_config(overrides):
    c = {"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
         "bos_token_id": 1, "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": 32,
         "initializer_range": 0.02, "intermediate_size": 48, "max_position_embeddings": 512,
         "max_window_layers": 4, "model_type": "qwen3_moe", "moe_intermediate_size": 16,
         "num_attention_heads": 4, "num_key_value_heads": 2, "output_router_logits": False, "rms_norm_eps": 1e-06,
         "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
         "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
         "use_sliding_window": False, "vocab_size": 256}
    c.update(overrides)
    return c


def init_weights(model, seed):
    """Embeddings ~ N(0, 1), linear weights (router and experts included) ~ N(0, 1) / sqrt(fan_in), RMSNorm
    weights ~ U(0.8, 1.2); every value rounded to bf16."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                v = 0.8 + 0.4 * torch.rand(p.shape, generator=gen)
            elif "embed_tokens" in name:
                v = torch.randn(p.shape, generator=gen)
            else:  # [out, in] or stacked experts [E, out, in]: fan_in is the last dimension
                v = torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


def hub_state_dict(model, cfg):
    """The checkpoint as the hub ships it: per-expert tensors, lm_head dropped when tied."""
    out = {}
    for name, t in model.state_dict().items():
        if cfg["tie_word_embeddings"] and name == "lm_head.weight":
            continue
        if name.endswith("mlp.experts.gate_up_proj"):  # transformers 5: [E, 2 I, H], gate rows then up rows
            prefix, inter = name[: -len("gate_up_proj")], t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{prefix}{e}.gate_proj.weight"] = t[e, :inter]
                out[f"{prefix}{e}.up_proj.weight"] = t[e, inter:]
        elif name.endswith("mlp.experts.down_proj"):  # transformers 5: [E, H, I]
            prefix = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{prefix}{e}.down_proj.weight"] = t[e]
        else:
            out[name] = t
    return {k: v.to(torch.bfloat16).contiguous() for k, v in out.items()}


def check_layout(state, cfg):
    """The saved names are the hub's: a router and E experts of three projections in every sparse layer."""
    for layer in range(cfg["num_hidden_layers"]):
        sparse = layer not in cfg["mlp_only_layers"] and (layer + 1) % cfg["decoder_sparse_step"] == 0
        p = f"model.layers.{layer}.mlp."
        if sparse:
            assert p + "gate.weight" in state, p + "gate.weight"
            for e in range(cfg["num_experts"]):
                for proj in ("gate_proj", "up_proj", "down_proj"):
                    assert f"{p}experts.{e}.{proj}.weight" in state, (layer, e, proj)
        else:
            assert p + "gate_proj.weight" in state and p + "gate.weight" not in state, layer


def build(d, spec):
    cfg = hub_config(spec["config"])
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "transformers_version": "4.51.0"}, f, indent=2)
    config = AutoConfig.from_pretrained(d)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float().eval()
    init_weights(model, spec["seed"])
    state = hub_state_dict(model, cfg)
    check_layout(state, cfg)
    save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    # transformers reads the hub layout back to the same model.
    loaded = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    probe = torch.randint(0, cfg["vocab_size"], (1, 19), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        a, b = model(input_ids=probe).logits, loaded(input_ids=probe).logits
    diff = float((a - b).abs().max())
    assert diff <= 1e-5, f"{spec['name']}: the saved checkpoint reloads to other logits (max diff {diff})"
    return loaded, cfg


def topk_ties():
    """torch.topk over softmax probabilities (fp32, CPU) for logits with many equal values, with (E, k) on
    both of its algorithms: std::partial_sort when 64 k <= E, std::nth_element + std::sort otherwise."""
    gen = torch.Generator().manual_seed(9)
    cases = []
    for experts, k in [(8, 2), (8, 8), (64, 1), (128, 2), (128, 8), (6, 3)]:
        rows = [torch.zeros(experts), torch.arange(experts).remainder(3).float(),
                torch.randint(0, 2, (experts,), generator=gen).float(),
                torch.randint(0, 4, (experts,), generator=gen).float() * 0.5]
        logits = torch.stack(rows)
        probs = F.softmax(logits, dim=-1, dtype=torch.float)
        values, ids = torch.topk(probs, k, dim=-1)
        cases.append({"experts": experts, "k": k, "logits": logits.tolist(), "ids": ids.tolist(),
                      "probs": values.tolist()})
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/golden")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    import transformers
    versions = {"transformers": transformers.__version__, "torch": torch.__version__}
    for spec in MODELS:
        d = os.path.join(args.out, spec["name"])
        os.makedirs(d, exist_ok=True)
        model, cfg = build(d, spec)
        gen = torch.Generator().manual_seed(spec["seed"])
        prompts = []
        for n in spec["prompt_lens"]:
            prompt = torch.randint(0, cfg["vocab_size"], (n,), generator=gen).tolist()
            tokens, chosen, tops = greedy_with_logprobs(model, prompt, GREEDY_STEPS, TOP_LOGPROBS)
            prompts.append({"prompt_ids": prompt, "greedy_ids": tokens, "chosen_logprobs": chosen,
                            "top_logprobs": tops})
            print(f"{spec['name']}: prompt {n} -> {tokens[:8]}...", flush=True)
        golden = {"name": spec["name"], **versions, "dtype": "float32", "attn_implementation": "eager",
                  "prompts": prompts}
        with open(os.path.join(args.out, spec["name"] + ".json"), "w") as f:
            json.dump(golden, f, separators=(",", ":"))
    with open(os.path.join(args.out, "qwen3_moe_topk_ties.json"), "w") as f:
        json.dump({**versions, "cases": topk_ties()}, f, separators=(",", ":"))
    print("wrote", args.out)


if __name__ == "__main__":
    sys.exit(main())
