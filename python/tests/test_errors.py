"""Bad arguments raise Python exceptions with the engine's messages (ValueError for bad values, TypeError for
wrong names and types), and nothing is lost: the engine serves the next call."""

import pytest

import nanovllm
from nanovllm import LLM, SamplingParams


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(temperature=-1.0), "temperature must be >= 0"),
        (dict(top_p=0.0), "top_p must be in"),
        (dict(max_tokens=0), "max_tokens must be >= 1"),
        (dict(min_tokens=5, max_tokens=2), "min_tokens must be in"),
        (dict(presence_penalty=3.0), "presence_penalty"),
        (dict(logit_bias={1: 500.0}), "logit_bias"),
        (dict(logprobs=1000), "logprobs"),
    ],
)
def test_bad_sampling_params(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_sampling_params_type_errors():
    with pytest.raises(TypeError):
        SamplingParams(max_tokens="many")
    with pytest.raises(TypeError):
        SamplingParams(0.5)  # keyword-only, as vLLM's users write them
    with pytest.raises(TypeError):
        SamplingParams(n_best=3)


def test_bad_engine_options(tiny_model, tmp_path):
    with pytest.raises(TypeError, match="unexpected keyword argument 'enforce_eagerly'"):
        LLM(str(tiny_model), enforce_eagerly=True)
    with pytest.raises(ValueError, match="tpu"):
        LLM(str(tiny_model), backend="tpu")
    with pytest.raises(ValueError, match="tensor_parallel_size 3"):  # 4 query heads do not split in 3
        LLM(str(tiny_model), backend="cpu", tensor_parallel_size=3)
    with pytest.raises(ValueError, match="max_model_len"):
        LLM(str(tiny_model), backend="cpu", max_model_len=10**9)
    with pytest.raises(ValueError, match="block_size"):
        LLM(str(tiny_model), backend="cpu", block_size=0)
    with pytest.raises(ValueError, match="sparse"):
        LLM(str(tiny_model), backend="cpu", sparse_policy="magic")
    with pytest.raises(TypeError, match="max_num_seqs"):
        LLM(str(tiny_model), backend="cpu", max_num_seqs="lots")
    with pytest.raises(nanovllm.Error, match="missing does not exist"):
        LLM(str(tmp_path / "missing"), backend="cpu")
    with pytest.raises(nanovllm.Error, match="config.json"):
        LLM(str(tmp_path), backend="cpu")  # a directory, but no model in it


def test_bad_requests_reject_the_whole_call(llm):
    p = SamplingParams(temperature=0, max_tokens=4)
    with pytest.raises(ValueError, match="prompt 1"):
        llm.generate(["fine", [151936]], p, use_tqdm=False)  # id == vocab_size
    with pytest.raises(ValueError, match="prompt 0"):
        llm.generate([[-1]], p, use_tqdm=False)
    with pytest.raises(ValueError, match="empty"):
        llm.generate([[]], p, use_tqdm=False)
    with pytest.raises(ValueError, match="max_model_len|too long|longer"):
        llm.generate([[1] * (llm.max_model_len + 1)], p, use_tqdm=False)
    with pytest.raises(ValueError, match="stop_token_ids"):
        llm.generate(["x"], SamplingParams(stop_token_ids=[10**7]), use_tqdm=False)
    with pytest.raises(ValueError, match="2 prompts but 3 sampling params"):
        llm.generate(["a", "b"], [p, p, p], use_tqdm=False)
    with pytest.raises(TypeError, match="prompt 1"):
        llm.generate(["a", 3.5], p, use_tqdm=False)
    with pytest.raises(TypeError, match="SamplingParams"):
        llm.generate(["a"], [dict(max_tokens=3)], use_tqdm=False)
    # Nothing queued by the rejected calls: the next one runs just its own request.
    (out,) = llm.generate(["fine"], p, use_tqdm=False)
    assert len(out.token_ids) == 4


def test_bad_chat_messages(llm):
    with pytest.raises(TypeError, match="conversation"):
        llm.chat([{"role": "user", "content": object()}], use_tqdm=False)
