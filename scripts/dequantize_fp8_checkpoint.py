#!/usr/bin/env python3
"""An f32 copy of a block-scaled FP8 checkpoint (Qwen3-*-FP8, `nanovllm make-test-model --fp8`), for HF transformers
as the reference of issue 51's accuracy target (GPU machine: torch + safetensors).

Every F8_E4M3 tensor W [N, K] becomes W * weight_scale_inv[n // 128, k // 128] in f32, exactly (an e4m3 value times an
f32 scale); the `*.weight_scale_inv` tensors are dropped, every other tensor is copied as it is, and config.json loses
its quantization_config. Shards keep their names (model.safetensors.index.json is rewritten); the other files
(tokenizer, generation_config.json) are copied.

  python3 scripts/dequantize_fp8_checkpoint.py --model FP8_DIR --out DIR
"""
import argparse
import json
import os
import shutil

import torch
from safetensors.torch import load_file, save_file

BLOCK = 128


def dequantize(w, scale):
    n, k = w.shape
    s = scale.float().repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)[:, :k]
    return w.float() * s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="the FP8 checkpoint directory")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    shards = sorted(f for f in os.listdir(args.model) if f.endswith(".safetensors"))
    if not shards:
        raise SystemExit(f"{args.model}: no .safetensors files")
    converted = 0
    for shard in shards:
        tensors = load_file(os.path.join(args.model, shard))
        out = {}
        for name, t in tensors.items():
            if name.endswith(".weight_scale_inv"):
                continue
            if t.dtype == torch.float8_e4m3fn:
                scale_name = name + "_scale_inv"
                if scale_name not in tensors:
                    raise SystemExit(f"{shard}: {name} is F8_E4M3 but {scale_name} is not in the same shard")
                out[name] = dequantize(t, tensors[scale_name])
                converted += 1
            else:
                out[name] = t
        save_file(out, os.path.join(args.out, shard), metadata={"format": "pt"})
    index = os.path.join(args.model, "model.safetensors.index.json")
    if os.path.exists(index):
        data = json.load(open(index))
        data["weight_map"] = {k: v for k, v in data["weight_map"].items() if not k.endswith(".weight_scale_inv")}
        data.pop("metadata", None)
        json.dump(data, open(os.path.join(args.out, "model.safetensors.index.json"), "w"), indent=2)
    config = json.load(open(os.path.join(args.model, "config.json")))
    config.pop("quantization_config", None)
    config["torch_dtype"] = "float32"
    json.dump(config, open(os.path.join(args.out, "config.json"), "w"), indent=2)
    for f in os.listdir(args.model):
        if f.endswith(".safetensors") or f in ("config.json", "model.safetensors.index.json"):
            continue
        src = os.path.join(args.model, f)
        if os.path.isfile(src):
            shutil.copy(src, os.path.join(args.out, f))
    print(f"{args.out}: {converted} FP8 tensors dequantized to f32 from {len(shards)} shard(s)")


if __name__ == "__main__":
    main()
