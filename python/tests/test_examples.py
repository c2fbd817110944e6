"""examples/example.py and examples/bench.py (nano-vLLM's, ported) run on the tiny test model."""

import re
import subprocess
import sys

from conftest import REPO


def run_example(name, *args):
    r = subprocess.run([sys.executable, str(REPO / "examples" / name), *args], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_example_py(tiny_model):
    out = run_example("example.py", str(tiny_model))
    prompts = re.findall(r"^Prompt: (.*)$", out, re.M)
    completions = re.findall(r"^Completion: (.*)$", out, re.M)
    assert prompts == ["'<|im_start|>user\\nintroduce yourself<|im_end|>\\n<|im_start|>assistant\\n'",
                       "'<|im_start|>user\\nlist all prime numbers within 100<|im_end|>\\n<|im_start|>assistant\\n'"]
    assert len(completions) == 2 and all(len(c) > 2 for c in completions)


def test_bench_py(tiny_model):
    out = run_example("bench.py", "--model", str(tiny_model), "--backend", "cpu", "--num-seqs", "6",
                      "--max-input-len", "40", "--max-output-len", "24", "--max-model-len", "512")
    m = re.search(r"Total: (\d+)tok, Time: ([\d.]+)s, Throughput: ([\d.]+)tok/s", out)
    assert m, out
    assert 6 <= int(m.group(1)) <= 6 * 24 and float(m.group(3)) > 0


def test_bench_py_workload_file(tiny_model, tmp_path):
    wl = tmp_path / "wl.json"
    wl.write_text('{"prompts": [[1, 2, 3], [4, 5]], "output_lens": [5, 7], "temperature": 0.6}')
    out = run_example("bench.py", "--model", str(tiny_model), "--backend", "cpu", "--workload", str(wl))
    assert "Total: 12tok" in out
