#!/usr/bin/env python3
"""Cross-checks the committed tokenizer golden file (made with the `tokenizers` Node binding here) against
HF `tokenizers` in Python on the GPU machine: same ids for every case, same decode strings.

  python3 scripts/tokenizer_golden_check_python.py [tests/data/tokenizer/qwen3_golden.json]
"""
import json
import sys

from tokenizers import Tokenizer


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/tokenizer/qwen3_golden.json"
    golden = json.load(open(path))
    tok = Tokenizer.from_file("tests/data/qwen3-tokenizer/tokenizer.json")
    bad = 0
    for case in golden["cases"]:
        ids = tok.encode(case["text"], add_special_tokens=True).ids
        if ids != case["ids"]:
            bad += 1
            print("MISMATCH encode", case["name"])
        if tok.decode(case["ids"], skip_special_tokens=False) != case["decoded"]:
            bad += 1
            print("MISMATCH decode", case["name"])
    for case in golden["decode_cases"]:
        if tok.decode(case["ids"], skip_special_tokens=True) != case["decoded_skip"]:
            bad += 1
            print("MISMATCH decode_skip", case["ids"][:8])
    import tokenizers
    print(f"python tokenizers {tokenizers.__version__}: {len(golden['cases'])} encode cases, "
          f"{len(golden['decode_cases'])} decode cases, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
