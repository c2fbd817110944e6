#!/usr/bin/env python3
"""Golden files for block-scaled FP8 checkpoints (Qwen3-*-FP8 layout) from HF transformers (run where torch +
transformers are installed, e.g. the GPU machine; it runs on its CPU in seconds).

For each model below: build a Qwen3ForCausalLM with transformers (float32, eager attention) from a hub-format
config, fill it with seeded random weights rounded to bf16, quantize every projection weight with torch — not
with the engine's code — per 128 x 128 block the way Qwen's and DeepSeek's FP8 checkpoints are made (scale =
max |w| / 448 in the scale's dtype, codes = (w / scale) clamped to +-448 cast to torch.float8_e4m3fn), put the
dequantized weights (codes x scale in float32) back into the model, and record greedy tokens with the top-k
log-softmax entries at every step (scripts/hf_golden.py's greedy_with_logprobs). The FP8 checkpoint itself
(F8_E4M3 projections + `weight_scale_inv`, quantization_config in config.json) is saved next to the golden, so
the CPU test (tests/e2e/hf_fp8_golden_test.cpp) runs the engine on exactly the codes torch made.

  python3 scripts/hf_fp8_golden.py --out tests/data/golden

Writes OUT/<name>/{config.json, generation_config.json, model.safetensors} and OUT/<name>.json (about 0.7 MB
together).
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_golden import greedy_with_logprobs  # noqa: E402

GREEDY_STEPS = 16
TOP_LOGPROBS = 5
BLOCK = 128
E4M3_MAX = 448.0
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# Whole 128 x 128 blocks with BF16 scales (as Qwen3-*-FP8 ship them); partial blocks everywhere with F32 scales
# (DeepSeek-V3's), a tied LM head and one layer's MLP kept unquantized through modules_to_not_convert.
MODELS = [
    {"name": "qwen3_fp8_bf16_scales", "seed": 41, "scale_dtype": torch.bfloat16, "prompt_lens": [1, 7, 33, 100],
     "config": {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 2, "num_key_value_heads": 1,
                "head_dim": 128, "num_hidden_layers": 2, "tie_word_embeddings": False},
     "modules_to_not_convert": None},
    {"name": "qwen3_fp8_partial_blocks", "seed": 42, "scale_dtype": torch.float32, "prompt_lens": [1, 9, 64],
     "config": {"hidden_size": 96, "intermediate_size": 144, "num_attention_heads": 2, "num_key_value_heads": 1,
                "head_dim": 48, "num_hidden_layers": 3, "tie_word_embeddings": True},
     "modules_to_not_convert": ["model.layers.1.mlp"]},
]


def hub_config(spec):
    c = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
         "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "initializer_range": 0.02,
         "max_position_embeddings": 512, "model_type": "qwen3", "rms_norm_eps": 1e-06, "rope_scaling": None,
         "rope_theta": 1000000.0, "sliding_window": None, "torch_dtype": "bfloat16",
         "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 256}
    c.update(spec["config"])
    c["max_window_layers"] = c["num_hidden_layers"]
    return c


def quantization_config(spec):
    q = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [BLOCK, BLOCK]}
    if spec["modules_to_not_convert"]:
        q["modules_to_not_convert"] = spec["modules_to_not_convert"]
    return q


def init_weights(model, seed):
    """Embeddings ~ N(0, 1), linear weights ~ N(0, 1) / sqrt(fan_in), RMSNorm weights ~ U(0.8, 1.2); every value
    rounded to bf16 (the checkpoint's unquantized tensors hold them exactly)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                v = 0.8 + 0.4 * torch.rand(p.shape, generator=gen)
            elif "embed_tokens" in name:
                v = torch.randn(p.shape, generator=gen)
            else:
                v = torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


def quantize_blocks(w, scale_dtype):
    """w [R, C] float32 -> (codes [R, C] float8_e4m3fn, scale [ceil(R/128), ceil(C/128)] of scale_dtype)."""
    rows, cols = w.shape
    br, bc = -(-rows // BLOCK), -(-cols // BLOCK)
    padded = torch.zeros(br * BLOCK, bc * BLOCK, dtype=torch.float32)
    padded[:rows, :cols] = w
    blocks = padded.view(br, BLOCK, bc, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax)).to(scale_dtype)
    s = scale.float()[:, None, :, None]
    codes = (blocks / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return codes.view(br * BLOCK, bc * BLOCK)[:rows, :cols].contiguous(), scale.contiguous()


def dequantize_blocks(codes, scale):
    rows, cols = codes.shape
    s = scale.float().repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)[:rows, :cols]
    return codes.float() * s


def is_quantized(name, spec):
    module = name[: -len(".weight")] if name.endswith(".weight") else name
    if not any(module.endswith("." + p) for p in PROJECTIONS):
        return False
    return not any(m in module for m in (spec["modules_to_not_convert"] or []))


def build(d, spec):
    cfg = hub_config(spec)
    with open(os.path.join(d, "config.json"), "w") as f:  # transformers builds the plain fp32 model
        json.dump(cfg, f, indent=2)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "transformers_version": "4.51.0"}, f, indent=2)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(d), attn_implementation="eager")
    model = model.float().eval()
    init_weights(model, spec["seed"])
    state, quantized = {}, 0
    with torch.no_grad():
        for name, p in model.state_dict().items():
            if cfg["tie_word_embeddings"] and name == "lm_head.weight":
                continue
            if is_quantized(name, spec):
                codes, scale = quantize_blocks(p, spec["scale_dtype"])
                state[name] = codes
                state[name + "_scale_inv"] = scale
                p.copy_(dequantize_blocks(codes, scale))  # the model now holds what the checkpoint says
                quantized += 1
            else:
                state[name] = p.to(torch.bfloat16).contiguous()
    assert quantized > 0
    save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg["quantization_config"] = quantization_config(spec)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"{spec['name']}: {quantized} fp8 projections", flush=True)
    return model, cfg


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
                  "weights": "fp8 e4m3 codes x block scales (torch), dequantized to float32", "prompts": prompts}
        with open(os.path.join(args.out, spec["name"] + ".json"), "w") as f:
            json.dump(golden, f, separators=(",", ":"))
    print("wrote", args.out)


if __name__ == "__main__":
    sys.exit(main())
