"""LLM.stream: deltas add up to what generate returns; leaving early aborts and frees the engine."""

import pytest

from nanovllm import SamplingParams


def collect(stream, n):
    tokens, texts, finish = [[] for _ in range(n)], [""] * n, [None] * n
    for d in stream:
        assert finish[d.index] is None, "a delta after the finished one"
        tokens[d.index] += d.token_ids
        texts[d.index] += d.text
        if d.finished:
            finish[d.index] = d.finish_reason
    return tokens, texts, finish


def test_stream_matches_generate(llm):
    prompts = ["The capital of France is", [9707, 11, 1879], "emoji: 🙂🙂 and 中文"]
    params = [SamplingParams(temperature=0, max_tokens=9), SamplingParams(temperature=0.7, seed=5, max_tokens=5),
              SamplingParams(temperature=1.0, seed=11, max_tokens=13)]
    expected = llm.generate(prompts, params, use_tqdm=False)
    tokens, texts, finish = collect(llm.stream(prompts, params), len(prompts))
    for i, out in enumerate(expected):
        assert tokens[i] == out.token_ids
        assert texts[i] == out.text  # incremental detokenization, split characters held back
        assert finish[i] == out.finish_reason == "length"


def test_stream_one_token_per_delta(llm):
    deltas = list(llm.stream("Hello", SamplingParams(temperature=0, max_tokens=4)))
    assert [len(d.token_ids) for d in deltas] == [1, 1, 1, 1]
    assert [d.finished for d in deltas] == [False, False, False, True]
    assert all(d.index == 0 for d in deltas)


def test_break_aborts_and_engine_recovers(llm):
    params = SamplingParams(temperature=0, max_tokens=50)
    expected = llm.generate(["a b c"], params, use_tqdm=False)[0].token_ids
    stream = llm.stream(["a b c", "d e f"], params)
    got = []
    for d in stream:
        got += d.token_ids if d.index == 0 else []
        if len(got) >= 3:
            break
    stream.close()  # what leaving a for loop over llm.stream(...) does when the generator is collected
    assert got == expected[: len(got)]
    # Nothing left behind: the engine runs the next call, and the results are the same.
    assert llm.generate(["a b c"], params, use_tqdm=False)[0].token_ids == expected


def test_open_stream_holds_the_engine(llm):
    stream = llm.stream("x", SamplingParams(max_tokens=3))
    with pytest.raises(RuntimeError, match="already running"):
        llm.generate("y", SamplingParams(max_tokens=2), use_tqdm=False)
    assert sum(len(d.token_ids) for d in stream) == 3
    assert len(llm.generate("y", SamplingParams(max_tokens=2), use_tqdm=False)[0].token_ids) == 2


def test_bad_stream_request_queues_nothing(llm):
    with pytest.raises(ValueError, match="prompt"):
        llm.stream(["fine", []], SamplingParams(max_tokens=2))
    assert len(llm.generate("ok", SamplingParams(max_tokens=2), use_tqdm=False)[0].token_ids) == 2
