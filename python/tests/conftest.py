"""Fixtures: the `nanovllm` CLI (the C++ API's front end, the reference the binding is compared with) and a
tiny random-weight Qwen3 model with the real Qwen3 tokenizer, written by the CLI's make-test-model.

NANOVLLM_CLI names the CLI (scripts/run_tests.sh sets it); otherwise build/cpu or build/cuda's is used."""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _find_cli() -> Path:
    if os.environ.get("NANOVLLM_CLI"):
        return Path(os.environ["NANOVLLM_CLI"])
    for preset in ("cpu", "cuda"):
        p = REPO / "build" / preset / "tools" / "nanovllm"
        if p.exists():
            return p
    raise RuntimeError("no nanovllm CLI: build it (scripts/run_tests.sh) or set NANOVLLM_CLI")


@pytest.fixture(scope="session")
def cli() -> Path:
    return _find_cli()


@pytest.fixture(scope="session")
def tiny_model(cli, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models") / "tiny-qwen3"
    subprocess.run(
        [str(cli), "make-test-model", "--out", str(out), "--preset", "tiny", "--seed", "0",
         "--tokenizer", str(REPO / "tests" / "data" / "qwen3-tokenizer"),
         "--config-override", json.dumps({"vocab_size": 151936, "tie_word_embeddings": False})],
        check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def llm(tiny_model):
    from nanovllm import LLM

    return LLM(str(tiny_model), backend="cpu")


def cli_generate(cli: Path, model: Path, args: list) -> list:
    """`nanovllm generate --json` on the CPU backend: one dict per prompt (token_ids, text, finish_reason, ...)."""
    r = subprocess.run([str(cli), "generate", "--model", str(model), "--backend", "cpu", "--json", *args],
                       check=True, capture_output=True, text=True)
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
