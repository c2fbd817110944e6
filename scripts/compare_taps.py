#!/usr/bin/env python3
"""Compare layer taps (`nanovllm generate --dump-taps DIR`) with a reference, layer by layer.

    # against HF transformers (GPU machine: torch + transformers), forward hooks at the same points
    scripts/compare_taps.py --taps DIR --model MODEL_DIR [--dtype bf16|fp32] [--prompt-ids 1,2,3]
    # against another taps directory (e.g. the CPU backend's; needs nothing but python3)
    scripts/compare_taps.py --taps DIR --reference REF_DIR

Prints, per layer and tap (input, q, k, v, attn, output), the max abs error, the largest reference
magnitude and their ratio (rel), then the first tap, in layer order and the order a layer computes them,
whose max abs error exceeds atol + rtol * max|ref|: where a broken kernel or path first shows.
--prompt-ids (optional) must be a prefix of the tapped tokens and limits the comparison to those rows
(the prompt's prefill); by default every tapped token (prompt and decode steps) is compared.

Exit status: 0 every tap within tolerance, 1 a tap departs, 2 bad input.

HF hook points (transformers' Qwen3 / Qwen2 / Llama decoder):
  input  forward pre-hook of model.layers[l]           (hidden_states)
  q/k/v  the attention function (after RoPE; k/v before GQA repeat), wrapped in ALL_ATTENTION_FUNCTIONS
  attn   forward pre-hook of model.layers[l].self_attn.o_proj
  output forward hook of model.layers[l]
"""
import argparse
import array
import json
import os
import struct
import sys

TAP_ORDER = ["input", "q", "k", "v", "attn", "output"]


class InputError(Exception):
    pass


def read_taps(directory):
    """{name: (shape, array('f'))} and the metadata of DIR/taps.safetensors (F32 tensors only)."""
    path = os.path.join(directory, "taps.safetensors")
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}")
    if len(blob) < 8:
        raise InputError(f"{path}: not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", blob[:8])
    try:
        header = json.loads(blob[8 : 8 + n])
    except ValueError as e:
        raise InputError(f"{path}: bad safetensors header: {e}")
    meta = header.pop("__metadata__", {})
    if meta.get("format") != "nanovllm-taps-v1":
        raise InputError(f"{path}: not a nanovllm taps file (format {meta.get('format')!r})")
    base = 8 + n
    taps = {}
    for name, entry in header.items():
        if entry["dtype"] != "F32":
            raise InputError(f"{path}: tensor {name} is {entry['dtype']}, expected F32")
        begin, end = entry["data_offsets"]
        values = array.array("f")
        values.frombytes(blob[base + begin : base + end])
        if sys.byteorder != "little":
            values.byteswap()
        taps[name] = (list(entry["shape"]), values)
    return taps, meta


def parse_ids(text):
    try:
        ids = [int(t) for t in text.split(",") if t.strip() != ""]
    except ValueError:
        raise InputError(f"--prompt-ids {text!r}: not comma-separated integers")
    if not ids:
        raise InputError("--prompt-ids is empty")
    return ids


def row_size(shape):
    size = 1
    for d in shape[1:]:
        size *= d
    return size


def error_stats(got, ref, rows, width):
    """(max abs error, max |ref|, row of the max error) over the first `rows` rows."""
    n = rows * width
    try:
        import torch  # fast path on the GPU machine

        g = torch.frombuffer(got, dtype=torch.float32)[:n].double()
        r = torch.frombuffer(ref, dtype=torch.float32)[:n].double()
        diff = (g - r).abs()
        if not torch.isfinite(g).all():
            diff = torch.where(torch.isfinite(g), diff, torch.full_like(diff, float("inf")))
        i = int(diff.argmax()) if n else 0
        return (float(diff.max()) if n else 0.0), (float(r.abs().max()) if n else 0.0), i // max(width, 1)
    except ImportError:
        pass
    worst, worst_i, ref_max = 0.0, 0, 0.0
    for i in range(n):
        a, b = got[i], ref[i]
        d = abs(a - b)
        if d != d:  # NaN in ours: infinitely wrong
            d = float("inf")
        if d > worst:
            worst, worst_i = d, i
        if abs(b) > ref_max:
            ref_max = abs(b)
    return worst, ref_max, worst_i // max(width, 1)


def hf_taps(model_dir, token_ids, layers, dtype, device):
    """Runs HF transformers on token_ids with hooks at the tap points: {name: (shape, array('f'))}."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    try:  # transformers >= 4.56 names it dtype (torch_dtype is deprecated)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype, attn_implementation="sdpa")
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch_dtype, attn_implementation="sdpa")
    model = model.to(device).eval()
    store = {}

    def put(layer, name, t):  # t: [T, ...] of this layer
        t = t.detach().to(torch.float32).contiguous().cpu()
        values = array.array("f")
        values.frombytes(t.numpy().tobytes())
        store[f"layers.{layer}.{name}"] = (list(t.shape), values)

    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def tapped_attention(module, query, key, value, attention_mask, **kwargs):  # [B, H, T, D], after RoPE
        if module.layer_idx in layers:
            put(module.layer_idx, "q", query[0].transpose(0, 1))
            put(module.layer_idx, "k", key[0].transpose(0, 1))
            put(module.layer_idx, "v", value[0].transpose(0, 1))
        return sdpa(module, query, key, value, attention_mask, **kwargs)

    ALL_ATTENTION_FUNCTIONS["sdpa"] = tapped_attention
    hooks = []
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    try:
        for l in layers:
            layer = model.model.layers[l]

            def pre(module, args, kwargs, l=l):
                put(l, "input", (args[0] if args else kwargs["hidden_states"])[0])

            def post(module, args, output, l=l):
                put(l, "output", (output[0] if isinstance(output, tuple) else output)[0])

            def o_proj_pre(module, args, l=l):
                x = args[0][0]  # [T, Hq * D]
                put(l, "attn", x.reshape(x.shape[0], -1, head_dim))

            hooks.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
            hooks.append(layer.register_forward_hook(post))
            hooks.append(layer.self_attn.o_proj.register_forward_pre_hook(o_proj_pre))
        with torch.no_grad():
            model(input_ids=torch.tensor([token_ids], device=device), use_cache=False)
    finally:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = sdpa
        for h in hooks:
            h.remove()
    return store


def compare(ours, ref, rows, atol, rtol):
    """Rows of the table in layer order and tap order; the first departing one (or None)."""
    layers = sorted({int(name.split(".")[1]) for name in ours})
    table, first = [], None
    for layer in layers:
        for tap in TAP_ORDER:
            name = f"layers.{layer}.{tap}"
            if name not in ours:
                continue
            if name not in ref:
                raise InputError(f"the reference has no tap {name}")
            (shape, got), (rshape, want) = ours[name], ref[name]
            if shape[1:] != rshape[1:] or shape[0] < rows or rshape[0] < rows:
                raise InputError(f"tap {name}: shape {shape} vs reference {rshape} ({rows} rows compared)")
            max_abs, ref_max, row = error_stats(got, want, rows, row_size(shape))
            departs = not (max_abs <= atol + rtol * ref_max)
            entry = {"layer": layer, "tap": tap, "max_abs": max_abs, "ref_max": ref_max,
                     "rel": max_abs / ref_max if ref_max > 0 else (0.0 if max_abs == 0 else float("inf")),
                     "worst_row": row, "departs": departs}
            table.append(entry)
            if departs and first is None:
                first = entry
    return table, first


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--taps", required=True, help="directory written by nanovllm generate --dump-taps")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="HF model directory: run transformers with hooks (needs torch)")
    src.add_argument("--reference", help="another --dump-taps directory to compare with")
    p.add_argument("--prompt-ids", help="comma-separated ids: must prefix the tapped tokens; compare only these rows")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="fp32", help="HF model dtype (--model)")
    p.add_argument("--device", default="cuda", help="HF device (--model)")
    p.add_argument("--atol", type=float, default=1e-5)
    p.add_argument("--rtol", type=float, default=0.05, help="tolerance relative to the tap's max |ref|")
    p.add_argument("--json-out", help="also write the table as JSON")
    args = p.parse_args(argv)
    try:
        ours, meta = read_taps(args.taps)
        if not ours:
            raise InputError(f"{args.taps}: no taps recorded")
        token_ids = parse_ids(meta.get("token_ids", ""))
        rows = len(token_ids)
        if args.prompt_ids:
            prompt = parse_ids(args.prompt_ids)
            if token_ids[: len(prompt)] != prompt:
                raise InputError(f"--prompt-ids is not a prefix of the tapped tokens {meta['token_ids']}")
            rows = len(prompt)
        if args.reference:
            ref, ref_meta = read_taps(args.reference)
            ref_ids = parse_ids(ref_meta.get("token_ids", ""))
            if ref_ids[:rows] != token_ids[:rows]:
                raise InputError("the reference taps were computed for other tokens")
            source = f"taps {args.reference} ({ref_meta.get('backend')}, {ref_meta.get('path')})"
        else:
            layers = sorted({int(name.split(".")[1]) for name in ours})
            ref = hf_taps(args.model, token_ids[:rows], layers, args.dtype, args.device)
            source = f"HF transformers {args.dtype} on {args.device}"
        table, first = compare(ours, ref, rows, args.atol, args.rtol)
    except InputError as e:
        print(f"compare_taps: error: {e}", file=sys.stderr)
        return 2
    print(f"ours: {args.taps} ({meta.get('backend')}, {meta.get('path')}); reference: {source}; "
          f"{rows} token rows; tolerance atol {args.atol:g} + rtol {args.rtol:g} * max|ref|")
    print(f"{'layer':>5} {'tap':<6} {'max_abs':>11} {'max|ref|':>11} {'rel':>11} {'row':>5}")
    for e in table:
        mark = "  <-- departs" if e["departs"] else ""
        print(f"{e['layer']:>5} {e['tap']:<6} {e['max_abs']:>11.4e} {e['ref_max']:>11.4e} {e['rel']:>11.4e} "
              f"{e['worst_row']:>5}{mark}")
    if first is None:
        print("every tap within tolerance")
    else:
        print(f"first departure: layer {first['layer']} tap {first['tap']} (max abs {first['max_abs']:.4e}, "
              f"rel {first['rel']:.4e}, token row {first['worst_row']})")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"rows": rows, "atol": args.atol, "rtol": args.rtol, "source": source, "table": table,
                       "first_departure": first}, f, indent=1)
    return 0 if first is None else 1


if __name__ == "__main__":
    sys.exit(main())
