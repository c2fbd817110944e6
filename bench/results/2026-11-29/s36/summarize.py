import json, os, sys
d = sys.argv[1]
dense = json.load(open(os.path.join(d, "dense.json")))
ctxs = [str(c) for c in dense["contexts"]]
print("| configuration | " + " | ".join(f"{int(c)//1024}K score (% dense)" for c in ctxs) +
      " | first-token top-1 / KL mean | prefill density | run s |")
print("|---|" + "---|" * (len(ctxs) + 3))
for name in sorted(os.listdir(d)):
    j = json.load(open(os.path.join(d, name)))
    cells = []
    for c in ctxs:
        s, ref = j["mean"].get(c), dense["mean"].get(c)
        cells.append(f"{s:.1f} ({100 * s / ref:.1f}%)" if s is not None and ref else "-")
    kl = j.get("first_token_kl", {}).get("overall", {})
    klc = f"{kl.get('top1_agreement', 0):.3f} / {kl.get('mean', 0):.2e}" if kl else "-"
    dens = j.get("sparse_prefill_density")
    dens = round(dens, 3) if isinstance(dens, (int, float)) else json.dumps(dens)[:60]
    print(f"| {name[:-5]} | " + " | ".join(cells) + f" | {klc} | {dens} | "
          f"{j['time_s']['run']:.1f} |")
