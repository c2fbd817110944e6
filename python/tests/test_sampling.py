"""Seeds: a seeded request gives the same tokens every time, alone or in a batch; unseeded ones follow the
engine's seed (LLM(seed=...))."""

from nanovllm import LLM, SamplingParams


def test_seeded_requests_repeat(llm):
    p = SamplingParams(temperature=1.0, seed=1234, max_tokens=16)
    a = llm.generate("Once upon a time", p, use_tqdm=False)[0].token_ids
    b = llm.generate(["Once upon a time", "other", "requests"], p, use_tqdm=False)[0].token_ids
    assert a == b
    c = llm.generate("Once upon a time", SamplingParams(temperature=1.0, seed=4321, max_tokens=16),
                     use_tqdm=False)[0].token_ids
    assert a != c  # 16 tokens at temperature 1 over 151936 ids of random logits


def test_engine_seed(tiny_model):
    p = SamplingParams(temperature=1.0, max_tokens=16)
    runs = [LLM(str(tiny_model), backend="cpu", seed=s).generate("x", p, use_tqdm=False)[0].token_ids
            for s in (5, 5, 6)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_logit_bias_and_stop_token_ids(llm):
    (out,) = llm.generate("Hello", SamplingParams(temperature=0, max_tokens=5, logit_bias={42: 100.0}), use_tqdm=False)
    assert out.token_ids == [42] * 5
    (out,) = llm.generate("Hello", SamplingParams(temperature=0, max_tokens=5, logit_bias={42: 100.0},
                                                  stop_token_ids=[42]), use_tqdm=False)
    assert out.token_ids == [42] and out.finish_reason == "stop"
    (out,) = llm.generate("Hello", SamplingParams(temperature=0, max_tokens=5, min_tokens=3, logit_bias={42: 100.0},
                                                  stop_token_ids=[42]), use_tqdm=False)
    assert len(out.token_ids) == 4 and out.token_ids[-1] == 42


def test_params_fields_round_trip():
    p = SamplingParams(temperature=0.5, top_k=3, top_p=0.9, min_p=0.1, repetition_penalty=1.1, presence_penalty=0.2,
                       frequency_penalty=-0.3, seed=9, max_tokens=7, min_tokens=2, ignore_eos=True,
                       stop_token_ids=[1, 2], logprobs=4, logit_bias={5: -100.0})
    assert (p.temperature, p.top_k, p.max_tokens, p.min_tokens, p.seed, p.ignore_eos) == (0.5, 3, 7, 2, 9, True)
    assert p.stop_token_ids == [1, 2] and p.logprobs == 4 and p.logit_bias == {5: -100.0}
    assert "max_tokens=7" in repr(p)
    d = SamplingParams()
    assert (d.temperature, d.max_tokens, d.seed, d.logprobs, d.top_k) == (1.0, 16, None, 0, -1)
