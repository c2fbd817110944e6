"""A Qwen3MoeForCausalLM (make-test-model's qwen3-moe-tiny preset with the real Qwen3 tokenizer) through the
binding: the same tokens, text and logprobs as `nanovllm generate` on the C++ API."""

import json
import subprocess

import pytest

from conftest import REPO, cli_generate
from nanovllm import LLM, SamplingParams


@pytest.fixture(scope="module")
def moe_model(cli, tmp_path_factory):
    out = tmp_path_factory.mktemp("models") / "tiny-qwen3-moe"
    subprocess.run(
        [str(cli), "make-test-model", "--out", str(out), "--preset", "qwen3-moe-tiny", "--seed", "0",
         "--tokenizer", str(REPO / "tests" / "data" / "qwen3-tokenizer"),
         "--config-override", json.dumps({"vocab_size": 151936})],
        check=True, capture_output=True)
    return out


def test_moe_model_matches_cli(cli, moe_model):
    prompts = ["Experts route tokens", "1 2 3 4"]
    expected = cli_generate(cli, moe_model, [a for p in prompts for a in ("--prompt", p)] +
                            ["--temperature", "0", "--max-tokens", "8", "--logprobs", "2", "--ignore-eos"])
    llm = LLM(str(moe_model), backend="cpu")
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=8, logprobs=2, ignore_eos=True),
                           use_tqdm=False)
    assert len(outputs) == len(expected) == 2
    for out, ref in zip(outputs, expected):
        assert out.token_ids == ref["token_ids"]
        assert out.text == ref["text"]
        assert len(out.token_ids) == 8
