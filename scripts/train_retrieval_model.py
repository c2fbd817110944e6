#!/usr/bin/env python3
"""Trains the retrieval fixture: a small Qwen3 that retrieves needles, for `nanovllm eval` tests.

A 4-layer, hidden-256 Qwen3ForCausalLM (4 query heads x 64, 2 KV heads: GQA) over the byte-level tokenizer of
tests/data/retrieval-model (scripts/make_byte_tokenizer.py), trained on the harness's own RULER tasks: the
`nanovllm` binary dumps them (`eval ruler --dump-prompts -`, streamed through a pipe) with training seeds, never
the evaluation seed (42). The loss is on the answer (the task's reference completion + EOS), plus a small
language-model term on the prompt. A length curriculum goes from 512 to 16K tokens (--stages); training stops at
the deadline (--train-minutes). --init-from continues a trained checkpoint on another curriculum (tried for the
128K fixture, which lost to YaRN: tests/data/retrieval-model-128k/README.md). Then HF transformers answers
held-out prompts (seed 42) greedily at 2K-32K, and README.md records the command, seeds and that accuracy table
next to the checkpoint.

    # on the GPU machine (python3 + torch + transformers + safetensors; no internet needed)
    python3 scripts/train_retrieval_model.py --nanovllm build/cpu/tools/nanovllm --out tests/data/retrieval-model

Writes OUT/model.safetensors (bf16, ~8 MB), config.json, generation_config.json, README.md, hf_eval.json, and
copies tokenizer.json / tokenizer_config.json when OUT is another directory. 7 min of training + ~2 min of
evaluation on one H100/H200.
"""
import argparse
import array
import json
import math
import multiprocessing as mp
import os
import queue
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EVAL_SEED = 42  # nanovllm eval's default: never a training seed

# (fraction of the training time at which the stage ends, context lengths it trains on). Later stages keep
# shorter lengths in the mix so the model does not forget them. --stages replaces it.
DEFAULT_STAGES = [
    (0.10, [512, 1024]),
    (0.25, [1024, 2048]),
    (0.45, [2048, 4096]),
    (0.70, [2048, 4096, 8192]),
    (1.00, [4096, 8192, 16384]),
]
NIAH = ["niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2", "niah_multikey_3",
        "niah_multivalue", "niah_multiquery"]


def dump_command(binary, tokenizer_dir, contexts, samples, seed, threads, tasks="all"):
    return [binary, "eval", "ruler", "--model", tokenizer_dir, "--tasks", tasks,
            "--context", ",".join(str(c) for c in contexts), "--samples", str(samples), "--seed", str(seed),
            "--skip-too-short", "--threads", str(threads), "--dump-prompts", "-"]


def producer(args, eos_id, stage_value, out_queue):
    """Child process: streams the current stage's samples from the dumper into `out_queue` as
    (stage, context, int32 ids bytes [prompt + target + EOS], index of the first answer token)."""
    rng = random.Random(args.seed)
    stage, proc, restarts = -1, None, 0
    try:
        while True:
            want = stage_value.value
            if want >= len(args.stages):
                return
            if want != stage or proc is None:
                if proc is not None:
                    proc.kill()
                    proc.wait()
                if want != stage:
                    restarts = 0
                stage = want
                # Training seeds: disjoint from the evaluation seed by construction.
                seed = args.seed + 1000 * restarts + stage
                assert seed != EVAL_SEED
                cmd = dump_command(args.nanovllm, args.dump_dir, args.stages[stage][1], args.samples_per_dump, seed,
                                   args.dump_threads)
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=1 << 22)
            line = proc.stdout.readline()
            if not line:  # this dump is used up: the next seed
                if proc.wait() != 0:
                    raise RuntimeError(f"dumper failed: {' '.join(cmd)}")
                proc, restarts = None, restarts + 1
                continue
            d = json.loads(line)
            if d["task"] not in NIAH and rng.random() >= args.aux_task_fraction:
                continue
            ids = d["prompt_ids"] + d["target_ids"] + [eos_id]
            item = (stage, d["context"], array.array("i", ids).tobytes(), len(d["prompt_ids"]))
            while stage_value.value == stage:
                try:
                    out_queue.put(item, timeout=0.5)
                    break
                except queue.Full:
                    pass
    finally:
        if proc is not None:
            proc.kill()


def stage_at(stages, fraction):
    for i, (end, _) in enumerate(stages):
        if fraction < end:
            return i
    return len(stages) - 1


def parse_stages(text):
    """'0.3:16384,32768;1:65536,131072' -> [(0.3, [16384, 32768]), (1.0, [65536, 131072])]."""
    stages = []
    for part in text.split(";"):
        end, contexts = part.split(":")
        stages.append((float(end), [int(c) for c in contexts.split(",")]))
    ends = [e for e, _ in stages]
    if ends != sorted(ends) or ends[-1] != 1.0:
        raise SystemExit(f"--stages: stage ends must increase and the last must be 1, got {ends}")
    return stages


def make_model(args, torch):
    import transformers
    from transformers import Qwen3Config, Qwen3ForCausalLM
    if args.init_from:
        model = Qwen3ForCausalLM.from_pretrained(args.init_from, dtype=torch.float32, attn_implementation="sdpa")
        model.config.max_position_embeddings = args.max_position_embeddings
        check_rope_base(model, args.rope_theta)
        return model
    common = dict(vocab_size=args.vocab_size, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                  max_position_embeddings=args.max_position_embeddings,
                  rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
                  bos_token_id=None, eos_token_id=args.eos_id, pad_token_id=args.eos_id)
    if int(transformers.__version__.split(".")[0]) >= 5:
        cfg = Qwen3Config(**common, rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta})
    else:
        cfg = Qwen3Config(**common, rope_theta=args.rope_theta)
    torch.manual_seed(args.seed)
    cfg._attn_implementation = "sdpa"
    model = Qwen3ForCausalLM(cfg)
    check_rope_base(model, args.rope_theta)
    return model


def check_rope_base(model, rope_theta):
    """The RoPE base really is rope_theta (the config keyword moved between transformers versions)."""
    rotary = getattr(model.model, "rotary_emb", None)
    if rotary is not None and hasattr(rotary, "inv_freq"):
        got, expect = rotary.inv_freq.float()[1].item(), rope_theta ** (-2.0 / 64)
        assert abs(got - expect) <= 1e-6 * expect, f"RoPE inv_freq[1] {got} != {expect}: rope_theta not applied"
    else:
        print("warning: cannot check the model's RoPE base", file=sys.stderr)


def make_batch(items, torch, device):
    """Right-padded [B, L] ids; per-position weights split into answer / prompt terms."""
    seqs = [torch.frombuffer(bytearray(b), dtype=torch.int32).long() for _, _, b, _ in items]
    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    answer = torch.zeros((len(seqs), width - 1), dtype=torch.bool)
    prompt = torch.zeros((len(seqs), width - 1), dtype=torch.bool)
    for row, (s, (_, _, _, start)) in enumerate(zip(seqs, items)):
        ids[row, :len(s)] = s
        answer[row, start - 1:len(s) - 1] = True  # predicting the target tokens and EOS
        prompt[row, :start - 1] = True
    return ids.to(device, non_blocking=True), answer.to(device), prompt.to(device)


def train(args):
    import torch
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = True
    device = torch.device(args.device)

    stage_value = mp.Value("i", 0)
    q = mp.Queue(maxsize=4096)
    prod = mp.get_context("fork").Process(target=producer, args=(args, args.eos_id, stage_value, q), daemon=True)
    prod.start()

    model = make_model(args, torch).to(device)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=device.type == "cuda")
    budget = args.train_minutes * 60.0
    t0 = time.time()
    step, tokens, samples, stage = 0, 0, 0, 0
    buckets = {}
    log = []
    ema = None
    print(f"model: {params / 1e6:.2f} M parameters; training for {args.train_minutes} min on {device}", flush=True)
    while True:
        frac = (time.time() - t0) / budget
        if frac >= 1.0:
            break
        if stage_at(args.stages, frac) != stage:
            stage = stage_at(args.stages, frac)
            stage_value.value = stage
            buckets.clear()
            print(f"[{time.time() - t0:6.0f}s] stage {stage}: contexts {args.stages[stage][1]}", flush=True)
        # Batches of one context length (little padding), about --tokens-per-step tokens each.
        batch = None
        while batch is None:
            try:
                item = q.get(timeout=120)
            except queue.Empty:
                raise RuntimeError("no training data for 120 s: is the dumper working? (run its command by hand)")
            if item[0] != stage:
                continue
            ctx = item[1]
            bucket = buckets.setdefault(ctx, [])
            bucket.append(item)
            if len(bucket) >= max(1, args.tokens_per_step // ctx):
                batch = buckets.pop(ctx)
        ids, answer, prompt = make_batch(batch, torch, device)
        lr = args.lr * min(1.0, (step + 1) / args.warmup_steps) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(input_ids=ids[:, :-1], use_cache=False).logits
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                             reduction="none").view_as(answer)
        answer_loss = (ce * answer).sum() / answer.sum()
        prompt_loss = (ce * prompt).sum() / prompt.sum().clamp(min=1)
        loss = answer_loss + args.prompt_loss_weight * prompt_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        samples += len(batch)
        tokens += int(ids.numel())
        if step % 25 == 0:
            a = answer_loss.item()
            ema = a if ema is None else 0.9 * ema + 0.1 * a
            if step % 100 == 0:
                elapsed = time.time() - t0
                print(f"[{elapsed:6.0f}s] step {step} stage {stage} answer loss {a:.4f} (ema {ema:.4f}) prompt loss "
                      f"{prompt_loss.item():.3f} lr {lr:.2e} {tokens / elapsed / 1e6:.2f} M tok/s", flush=True)
                log.append({"time_s": round(elapsed, 1), "step": step, "stage": stage, "answer_loss": round(a, 4),
                            "prompt_loss": round(prompt_loss.item(), 4), "tokens": tokens})
    stage_value.value = len(args.stages)
    prod.terminate()
    return model, {"steps": step, "tokens": tokens, "samples": samples, "train_s": time.time() - t0, "log": log,
                   "params": params, "final_answer_loss_ema": ema}


def save(model, args, torch):
    os.makedirs(args.out, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(args.out)  # safetensors, tied lm_head left out
    for name in ("tokenizer.json", "tokenizer_config.json"):
        src, dst = os.path.join(args.tokenizer_dir, name), os.path.join(args.out, name)
        if os.path.abspath(src) != os.path.abspath(dst):
            shutil.copyfile(src, dst)


def evaluate(args):
    """HF on held-out prompts, with the checkpoint as saved and loaded: not the in-memory model, whose
    `.to(bfloat16)` also rounded the RoPE inv_freq buffer to bf16 (wrong angles at long positions)."""
    sys.path.insert(0, HERE)
    import hf_eval_ruler as hf
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "eval.jsonl")
        # Prompts depend on the tokenizer alone.
        cmd = dump_command(args.nanovllm, args.dump_dir, args.eval_contexts, args.eval_samples, EVAL_SEED,
                           args.dump_threads)
        cmd[cmd.index("-")] = path
        subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
        prompts = hf.read_prompts(path)
    t0 = time.time()
    samples = hf.evaluate(args.out, prompts, device=args.device, batch_size=args.eval_batch_size)
    table = hf.score_table(samples, "task")
    return table, samples, time.time() - t0


def write_report(args, stats, table, samples, eval_s, torch):
    import transformers
    sys.path.insert(0, HERE)
    import hf_eval_ruler as hf
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    command = "python3 scripts/train_retrieval_model.py " + " ".join(sys.argv[1:])
    out = os.path.relpath(args.out, ROOT) if os.path.abspath(args.out).startswith(ROOT + os.sep) else args.out
    result = {"command": "hf", "model": args.out, "dtype": "bf16", "seed": EVAL_SEED,
              "batch_size": args.eval_batch_size, **table, "time_s": {"run": eval_s}, "samples": samples}
    with open(os.path.join(args.out, "hf_eval.json"), "w") as f:
        json.dump(result, f, indent=1)
    losses = "\n".join(f"| {e['time_s']:.0f} | {e['step']} | {e['stage']} | {e['answer_loss']:.4f} | "
                       f"{e['prompt_loss']:.3f} |" for e in stats["log"][::max(1, len(stats["log"]) // 12)])
    start = (f"Starts from the checkpoint in `{os.path.relpath(args.init_from, ROOT)}` (same architecture); "
             if args.init_from else "")
    md = f"""# Retrieval fixture: how it was trained

A {stats['params'] / 1e6:.2f} M-parameter Qwen3ForCausalLM (4 layers, hidden 256, 4 query heads x 64, 2 KV heads,
intermediate 1024, tied embeddings, rope_theta {args.rope_theta:g}, max_position_embeddings
{args.max_position_embeddings}) over the byte-level tokenizer (`scripts/make_byte_tokenizer.py`: id = byte, 256 `<|endoftext|>` = EOS). Trained by
`scripts/train_retrieval_model.py` on prompts of `nanovllm eval ruler --dump-prompts` (all RULER tasks the
harness has; vt/cwe/fwe kept at {args.aux_task_fraction:g} of their rate) with training seeds {args.seed} + stage
(+ 1000 per refill), never the evaluation seed {EVAL_SEED}; loss on the answer (+ {args.prompt_loss_weight:g} x the
prompt's LM loss), bf16 autocast, AdamW lr {args.lr:g}, ~{args.tokens_per_step} tokens per step, length curriculum
{' -> '.join('/'.join(str(x) for x in c) for _, c in args.stages)} (stages end at {', '.join(f'{e:.0%}' for e, _ in args.stages)} of the time).
{start}
- Command: `{command}`
- Device: {device}; torch {torch.__version__}, transformers {transformers.__version__}
- Training: {stats['steps']} steps, {stats['samples']} samples, {stats['tokens'] / 1e6:.0f} M tokens in
  {stats['train_s']:.0f} s; final answer loss (EMA) {stats['final_answer_loss_ema']:.4f}

## Accuracy (HF transformers, bf16, greedy; eval seed {EVAL_SEED}, {args.eval_samples} samples per cell, batch {args.eval_batch_size})

RULER score (mean string_match_all x 100) per task and context length, on the harness's own prompts:

```
{hf.format_table(table, "task")}overall {table['overall']}
```

Evaluation took {eval_s:.0f} s. Per-sample outputs: `hf_eval.json` (written next to the checkpoint). Reproduce with nanovllm:
`nanovllm eval ruler --model {out} --context {','.join(str(c) for c in args.eval_contexts)} --samples {args.eval_samples} --skip-too-short`.

## Answer loss during training

| time (s) | step | stage | answer loss | prompt loss |
|---|---|---|---|---|
{losses}
"""
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(md)
    print(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nanovllm", required=True, help="the nanovllm binary (CPU or CUDA build) that dumps the prompts")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "retrieval-model"))
    ap.add_argument("--tokenizer-dir", default=os.path.join(ROOT, "tests", "data", "retrieval-model"),
                    help="where tokenizer.json / tokenizer_config.json come from")
    ap.add_argument("--init-from", default="", help="a checkpoint to continue training (its architecture is kept)")
    ap.add_argument("--stages", default="", help="length curriculum 'END:CTX,CTX;...' (END: fraction of the time; "
                    "default " + ";".join(f"{e:g}:" + ",".join(map(str, c)) for e, c in DEFAULT_STAGES) + ")")
    ap.add_argument("--max-position-embeddings", type=int, default=65536)
    ap.add_argument("--seed", type=int, default=1000, help="training seed base (dumps use seed + stage)")
    ap.add_argument("--train-minutes", type=float, default=7.0, help="training deadline (evaluation comes after)")
    ap.add_argument("--tokens-per-step", type=int, default=131072)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--prompt-loss-weight", type=float, default=0.1)
    ap.add_argument("--aux-task-fraction", type=float, default=0.5, help="share of vt/cwe/fwe samples kept")
    ap.add_argument("--rope-theta", type=float, default=1e6)
    ap.add_argument("--vocab-size", type=int, default=384, help="embedding rows (>= the tokenizer's 259 ids)")
    ap.add_argument("--samples-per-dump", type=int, default=20000, help="--samples of one dumper run")
    ap.add_argument("--dump-threads", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--eval-contexts", default="2048,4096,8192,16384,32768")
    ap.add_argument("--eval-samples", type=int, default=16)
    ap.add_argument("--eval-batch-size", type=int, default=16)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    args.eval_contexts = [int(c) for c in args.eval_contexts.split(",")]
    args.stages = parse_stages(args.stages) if args.stages else DEFAULT_STAGES
    if args.init_from:
        args.init_from = os.path.abspath(args.init_from)
    assert args.seed != EVAL_SEED
    args.nanovllm = os.path.abspath(args.nanovllm)
    tok_cfg = json.load(open(os.path.join(args.tokenizer_dir, "tokenizer_config.json")))
    tok = json.load(open(os.path.join(args.tokenizer_dir, "tokenizer.json")))
    args.eos_id = next(t["id"] for t in tok["added_tokens"] if t["content"] == tok_cfg["eos_token"])

    with tempfile.TemporaryDirectory() as dump_dir:
        args.dump_dir = make_dump_dir(args, dump_dir)
        # Fail early, before any GPU time, when the dumper does not work.
        longest = max(max(c) for _, c in args.stages)
        probe = subprocess.run(dump_command(args.nanovllm, args.dump_dir, [longest], 1, args.seed, 1,
                                            "niah_single_2"), capture_output=True, text=True)
        if probe.returncode != 0 or not probe.stdout.startswith("{"):
            sys.exit(f"error: the dumper failed:\n{probe.stderr}")

        import torch
        model, stats = train(args)
        save(model, args, torch)
        del model
        table, samples, eval_s = evaluate(args)
        write_report(args, stats, table, samples, eval_s, torch)


def make_dump_dir(args, tmp):
    """The dumper refuses contexts past the config's max_position_embeddings: it reads the tokenizer from a folder
    whose config.json says the trained limit."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        os.symlink(os.path.join(os.path.abspath(args.tokenizer_dir), name), os.path.join(tmp, name))
    with open(os.path.join(args.tokenizer_dir, "config.json")) as f:
        cfg = json.load(f)
    cfg["max_position_embeddings"] = args.max_position_embeddings
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return tmp


if __name__ == "__main__":
    main()
