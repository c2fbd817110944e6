"""The binding returns what the C++ API returns: same tokens, text, finish reasons and logprobs as
`nanovllm generate` (the CLI on LLM::generate) for the same requests."""

import pytest

from conftest import cli_generate
from nanovllm import SamplingParams

PROMPTS = ["The capital of France is", "Hello, my name is", "1 2 3 4"]


@pytest.mark.parametrize(
    "params,flags",
    [
        (dict(temperature=0.0, max_tokens=12), ["--temperature", "0", "--max-tokens", "12"]),
        (dict(temperature=0.8, top_k=50, top_p=0.9, seed=7, max_tokens=10),
         ["--temperature", "0.8", "--top-k", "50", "--top-p", "0.9", "--seed", "7", "--max-tokens", "10"]),
        (dict(temperature=1.0, min_p=0.05, repetition_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.5,
              seed=3, max_tokens=9, min_tokens=4),
         ["--temperature", "1", "--min-p", "0.05", "--repetition-penalty", "1.3", "--presence-penalty", "0.5",
          "--frequency-penalty", "0.5", "--seed", "3", "--max-tokens", "9", "--min-tokens", "4"]),
    ],
)
def test_text_prompts_match_cli(llm, cli, tiny_model, params, flags):
    expected = cli_generate(cli, tiny_model, [a for p in PROMPTS for a in ("--prompt", p)] + flags)
    outputs = llm.generate(PROMPTS, SamplingParams(**params), use_tqdm=False)
    assert len(outputs) == len(expected) == len(PROMPTS)
    for out, ref in zip(outputs, expected):
        assert out.token_ids == ref["token_ids"]
        assert out.text == ref["text"]
        assert out.finish_reason == ref["finish_reason"]
        assert len(out.token_ids) == params["max_tokens"]  # random weights: EOS is unlikely in a few tokens


def test_token_id_prompts_and_logprobs_match_cli(llm, cli, tiny_model):
    prompts = [[9707, 11, 1879, 0, 5], [151643, 42]]
    expected = cli_generate(cli, tiny_model, ["--prompt-ids", "9707,11,1879,0,5", "--prompt-ids", "151643,42",
                                              "--temperature", "0", "--max-tokens", "6", "--logprobs", "3"])
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=6, logprobs=3), use_tqdm=False)
    for prompt, out, ref in zip(prompts, outputs, expected):
        assert out.prompt_token_ids == prompt
        assert out.token_ids == ref["token_ids"]
        assert len(out.logprobs) == len(out.token_ids)
        for step, ref_step in zip(out.logprobs, ref["logprobs"]):
            assert step == pytest.approx({e["id"]: e["logprob"] for e in ref_step})
        # Greedy: the chosen token is the most likely one.
        for tok, step in zip(out.token_ids, out.logprobs):
            assert max(step, key=step.get) == tok


def test_one_params_per_prompt(llm):
    a = SamplingParams(temperature=0, max_tokens=3)
    b = SamplingParams(temperature=0, max_tokens=7)
    outputs = llm.generate(["x y", "x y"], [a, b], use_tqdm=False)
    assert [len(o.token_ids) for o in outputs] == [3, 7]
    assert outputs[1].token_ids[:3] == outputs[0].token_ids


def test_output_shapes(llm):
    (out,) = llm.generate("The capital of France is", SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    assert out["text"] == out.text and out["token_ids"] == out.token_ids  # nano-vLLM's dict access
    assert out.outputs[0].text == out.text  # vLLM's shape
    assert set(out.keys()) >= {"text", "token_ids", "finish_reason", "logprobs", "prompt_token_ids"}
    assert out.logprobs is None
    assert out.finished and out.finish_reason == "length"
    with pytest.raises(KeyError):
        out["no_such_field"]
    # A bare token-id list is one prompt; a vLLM-style dict too.
    ids = llm.get_tokenizer().encode("The capital of France is")
    assert llm.generate(ids, SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)[0].token_ids == out.token_ids
    assert llm.generate({"prompt_token_ids": ids}, SamplingParams(temperature=0, max_tokens=4),
                        use_tqdm=False)[0].token_ids == out.token_ids
