#!/usr/bin/env python3
"""Builds a large mixed UTF-8 corpus for tokenizer throughput from files already on a Debian machine.

  python3 scripts/tokenizer_bench_corpus.py /tmp/tok_bench_corpus.txt [MB]

Mix (by bytes): ~40% English prose (vim help), ~25% code (C++ headers, Python stdlib), ~10% JSON,
~25% translated UI strings in many scripts (gettext catalogs under /usr/share/locale: CJK, Korean, Thai,
Arabic, Hebrew, Devanagari, Cyrillic, ...). Deterministic: sorted file lists, fixed caps.
"""
import gettext
import glob
import json
import os
import sys

out_path = sys.argv[1]
total = int(float(sys.argv[2]) * 1e6) if len(sys.argv) > 2 else 16_000_000


def take(paths, budget):
    parts, n = [], 0
    for p in paths:
        if n >= budget:
            break
        try:
            with open(p, 'rb') as f:
                b = f.read()
            t = b.decode('utf-8')
        except (OSError, UnicodeDecodeError):
            continue
        parts.append(t)
        n += len(b)
    return parts, n


prose, _ = take(sorted(glob.glob('/usr/share/vim/vim9*/doc/*.txt')), total * 0.40)
code_paths = sorted(glob.glob('/usr/include/c++/*/bits/*.h')) + sorted(glob.glob('/usr/lib/python3*/*.py'))
code, _ = take(code_paths, total * 0.25)
json_paths = sorted(p for p in glob.glob('/usr/share/**/*.json', recursive=True) if os.path.getsize(p) < 2_000_000)
jsons, _ = take(json_paths, total * 0.10)

langs = ['zh_CN', 'zh_TW', 'ja', 'ko', 'th', 'ar', 'he', 'hi', 'ru', 'uk', 'el', 'vi', 'fa', 'bn', 'ta', 'de', 'fr', 'es', 'pl', 'tr']
multi, n = [], 0
budget = total * 0.25
for lang in langs:
    per_lang = budget / len(langs)
    got = 0
    for mo in sorted(glob.glob(f'/usr/share/locale/{lang}/LC_MESSAGES/*.mo')):
        if got >= per_lang:
            break
        try:
            with open(mo, 'rb') as f:
                cat = gettext.GNUTranslations(f)._catalog
        except Exception:
            continue
        text = '\n'.join(v for v in cat.values() if isinstance(v, str) and v)
        multi.append(text)
        got += len(text.encode('utf-8'))
    n += got

# Interleave the four kinds in blocks so the stream keeps switching script and style.
streams = [prose, code, jsons, multi]
out = []
while any(streams):
    for s in streams:
        if s:
            out.append(s.pop(0))
text = '\n'.join(out)
with open(out_path, 'w', encoding='utf-8') as f:
    f.write(text)
nonascii = sum(1 for c in text if ord(c) > 127)
print(json.dumps({'path': out_path, 'bytes': len(text.encode('utf-8')), 'chars': len(text),
                  'non_ascii_chars': nonascii}))
