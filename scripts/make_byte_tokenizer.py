#!/usr/bin/env python3
"""Writes the byte-level tokenizer of the retrieval fixture (tests/data/retrieval-model/).

One token per byte, no merges: id b is byte b (0..255), then a few special tokens. A 384-entry embedding
instead of Qwen's 151936 keeps the trained checkpoint a few MB, small enough for the repo and for CPU CI.
The file is a standard HF `tokenizer.json` (BPE model with an empty merge list behind a ByteLevel
pre-tokenizer without the GPT-2 regex, ByteLevel decoder), so HF `tokenizers` / transformers and
src/nanovllm/tokenizer load it alike; scripts/check_byte_tokenizer.mjs compares the two.

    python3 scripts/make_byte_tokenizer.py [OUT_DIR]     # default tests/data/retrieval-model

Standard library only (runs anywhere, no PyPI).
"""
import json
import os
import sys

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 256, 257, 258
EOS = "<|endoftext|>"


def bytes_to_unicode():
    """GPT-2's byte -> printable character map, which HF's ByteLevel pre-tokenizer and decoder use."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tokenizer_json():
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    added = [{"id": 256 + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(SPECIALS)]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        # use_regex=false: the whole text is one "word"; with no merges it becomes its bytes either way.
        "pre_tokenizer": byte_level,
        "post_processor": byte_level,  # adds nothing: no BOS, like Qwen
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": []},
    }


def tokenizer_config():
    return {
        "added_tokens_decoder": {str(256 + i): {"content": s, "lstrip": False, "normalized": False,
                                                "rstrip": False, "single_word": False, "special": True}
                                 for i, s in enumerate(SPECIALS)},
        "bos_token": None,
        "eos_token": EOS,
        "pad_token": EOS,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "retrieval-model")
    os.makedirs(out, exist_ok=True)
    for name, obj in (("tokenizer.json", tokenizer_json()), ("tokenizer_config.json", tokenizer_config())):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=1)
            f.write("\n")
    print(f"wrote {out}/tokenizer.json and tokenizer_config.json (256 bytes + {len(SPECIALS)} specials)")


if __name__ == "__main__":
    main()
