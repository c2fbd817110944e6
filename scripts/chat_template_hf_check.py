#!/usr/bin/env python3
"""Checks tests/data/chat/golden.json (written with plain jinja2 by scripts/chat_template_golden.py) against
Hugging Face transformers' own apply_chat_template, where transformers is installed (the GPU machine).

Every template case is rendered by a tokenizer loaded from tests/data/qwen3-tokenizer with the case's
template (chat_template=...), bos/eos tokens, tools, enable_thinking and extra context; the text must equal
the golden's "expected", and a golden error must be an error in transformers too. Llama cases without a
fixed date_string are skipped (the template prints today's date).

Usage: python3 scripts/chat_template_hf_check.py [GOLDEN_JSON]   (exit 1 on any mismatch)
"""
import json
import pathlib
import sys

from transformers import AutoTokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
TEMPLATES = {
    "qwen3": ("qwen3.jinja", "", "<|im_end|>"),
    "qwen2.5_instruct": ("qwen2.5_instruct.jinja", "", "<|im_end|>"),
    "llama3.1_instruct": ("llama3.1_instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
}


def main():
    golden_path = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else DATA / "chat" / "golden.json"
    golden = json.loads(golden_path.read_text())
    tok = AutoTokenizer.from_pretrained(str(DATA / "qwen3-tokenizer"))
    sources = {name: (DATA / "chat" / f).read_text() for name, (f, _, _) in TEMPLATES.items()}
    checked = skipped = 0
    bad = []
    for case in golden["template_cases"]:
        tname = case["template"]
        extra = dict(case.get("extra_context", {}))
        if tname.startswith("llama") and "date_string" not in extra:
            skipped += 1
            continue
        _, bos, eos = TEMPLATES[tname]
        kwargs = dict(extra)
        kwargs["bos_token"] = bos
        kwargs["eos_token"] = eos
        if "enable_thinking" in case:
            kwargs["enable_thinking"] = case["enable_thinking"]
        try:
            got = tok.apply_chat_template(case["messages"], tools=case.get("tools"), chat_template=sources[tname],
                                          add_generation_prompt=case["add_generation_prompt"], tokenize=False,
                                          **kwargs)
            err = None
        except Exception as e:  # noqa: BLE001 - any failure is compared with the golden's error
            got, err = None, f"{type(e).__name__}: {e}"
        checked += 1
        if "error" in case:
            if err is None:
                bad.append((case["name"], "golden is an error, transformers rendered", got))
        elif err is not None:
            bad.append((case["name"], "transformers failed", err))
        elif got != case["expected"]:
            bad.append((case["name"], "text differs", got))
    import transformers
    print(f"transformers {transformers.__version__}: {checked} template cases checked, {skipped} skipped, "
          f"{len(bad)} mismatches")
    for name, what, detail in bad[:20]:
        print(f"MISMATCH {name}: {what}: {detail!r}"[:2000])
    round_trip = [c["name"] for c in golden["template_cases"] if "round_trip" in c["name"]]
    print(f"tool round-trip cases among them: {len(round_trip)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
