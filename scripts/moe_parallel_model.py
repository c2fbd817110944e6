#!/usr/bin/env python3
"""How many expert weights the busiest rank reads in a decode step, tensor parallel inside every expert vs expert
parallel (docs/moe.md). Pure Python, no GPU: a decode step of a MoE layer is a stream over the chosen experts'
weights, so its time on N ranks is set by the rank that reads the most.

  TP inside experts: every rank reads 1/N of every chosen expert: distinct experts / N, the same on every rank.
  Expert parallel:   rank r owns experts [r E/N, (r+1) E/N) whole: the busiest rank's count of chosen experts.

Routing: each token picks k distinct experts, uniformly (--zipf 0) or with Zipf-skewed popularity (popular
experts spread over the ranks at random), as real routers are.

  python3 scripts/moe_parallel_model.py [--experts 128 --k 8]
"""
import argparse
import random


def step(rng, weights, perm, k, bs):
    used = set()
    for _ in range(bs):
        chosen = set()
        while len(chosen) < k:
            r, acc = rng.random(), 0.0
            for i, w in enumerate(weights):
                acc += w
                if r < acc:
                    chosen.add(perm[i])
                    break
            else:
                chosen.add(perm[-1])
        used |= chosen
    return used


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    E, k = args.experts, args.k
    print("routing   ranks  batch  experts read by the busiest rank: expert parallel / TP inside experts = ratio")
    for zipf in (0.0, 1.0):
        rng = random.Random(args.seed)
        w = [1.0 / (i + 1) ** zipf for i in range(E)]
        total = sum(w)
        w = [x / total for x in w]
        perm = list(range(E))
        rng.shuffle(perm)
        for n in (2, 4):
            for bs in (1, 8, 64):
                trials = 2000 if bs < 64 else 300
                ep = tp = 0.0
                for _ in range(trials):
                    used = step(rng, w, perm, k, bs)
                    per_rank = [0] * n
                    for e in used:
                        per_rank[e * n // E] += 1
                    ep += max(per_rank)
                    tp += len(used) / n
                print(f"zipf {zipf:.0f}    {n}      {bs:3d}    {ep / trials:6.2f} / {tp / trials:6.2f} = {ep / tp:.2f}")


if __name__ == "__main__":
    main()
