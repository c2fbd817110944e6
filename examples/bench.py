# nano-vLLM's bench.py on nano-vLLM C++. Changed: the model path and the workload's sizes are options (the
# defaults are nano-vLLM's: 256 sequences, prompts and outputs of 100-1024 tokens, max_model_len 4096), and
# --workload FILE runs the exact workload `nanovllm bench throughput --dump-workload FILE` ran, to compare the
# two on the same requests.
import argparse
import json
import os
import time
from random import randint, seed

from nanovllm import LLM, SamplingParams


def main():
    ap = argparse.ArgumentParser(description="offline throughput, nano-vLLM's bench.py")
    ap.add_argument("--model", default="~/huggingface/Qwen3-0.6B/")
    ap.add_argument("--num-seqs", type=int, default=256)
    ap.add_argument("--max-input-len", type=int, default=1024)
    ap.add_argument("--max-output-len", type=int, default=1024)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--workload", help="prompts and output lengths from nanovllm bench throughput --dump-workload")
    ap.add_argument("--backend", default=None, help="cpu | cuda (default: cuda when a GPU is present)")
    args = ap.parse_args()

    seed(0)
    num_seqs = args.num_seqs
    max_input_len = args.max_input_len
    max_ouput_len = args.max_output_len

    path = os.path.expanduser(args.model)
    llm = LLM(path, enforce_eager=False, max_model_len=args.max_model_len, backend=args.backend)

    if args.workload:
        with open(args.workload) as f:
            wl = json.load(f)
        prompt_token_ids = wl["prompts"]
        sampling_params = [SamplingParams(temperature=wl["temperature"], ignore_eos=True, max_tokens=n)
                           for n in wl["output_lens"]]
    else:
        prompt_token_ids = [[randint(0, 10000) for _ in range(randint(min(100, max_input_len), max_input_len))]
                            for _ in range(num_seqs)]
        sampling_params = [SamplingParams(temperature=0.6, ignore_eos=True,
                                          max_tokens=randint(min(100, max_ouput_len), max_ouput_len))
                           for _ in range(num_seqs)]
    # uncomment the following line for vllm
    # prompt_token_ids = [dict(prompt_token_ids=p) for p in prompt_token_ids]

    llm.generate(["Benchmark: "], SamplingParams())
    t = time.time()
    llm.generate(prompt_token_ids, sampling_params, use_tqdm=False)
    t = (time.time() - t)
    total_tokens = sum(sp.max_tokens for sp in sampling_params)
    throughput = total_tokens / t
    print(f"Total: {total_tokens}tok, Time: {t:.2f}s, Throughput: {throughput:.2f}tok/s")


if __name__ == "__main__":
    main()
