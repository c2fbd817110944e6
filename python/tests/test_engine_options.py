"""Every EngineConfig field is a keyword of LLM(), and each reaches the engine."""

from nanovllm import LLM, SamplingParams

def stub_keywords():
    """LLM.__init__'s keyword-only parameters in llm.pyi, with their defaults."""
    import ast
    from pathlib import Path

    import nanovllm

    tree = ast.parse((Path(nanovllm.__file__).parent / "llm.pyi").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LLM"]
    (init,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    return {a.arg: ast.literal_eval(d) for a, d in zip(init.args.kwonlyargs, init.args.kw_defaults)}


def test_option_names_are_the_stubs():
    # The engine's option table makes the keywords; the stub spells them out for editors.
    assert set(LLM.engine_options()) == set(stub_keywords())


def test_stub_defaults_are_the_engines():
    from nanovllm import _core

    defaults = _core.Engine.option_defaults()
    stub = stub_keywords()
    for name, default in defaults.items():
        assert stub[name] is None or stub[name] == default or default is None, (name, stub[name], default)


def test_options_take_effect(tiny_model, llm):
    p = SamplingParams(temperature=0, max_tokens=6)
    reference = llm.generate(["The capital of France is"], p, use_tqdm=False)[0].token_ids
    small = LLM(str(tiny_model), backend="cpu", max_model_len=256, block_size=32, num_kv_blocks=64,
                kv_cache_bytes=1 << 26, max_num_seqs=4, max_num_batched_tokens=64, enable_chunked_prefill=True,
                enable_prefix_caching=False, async_scheduling=False, enforce_eager=True, seed=3,
                gpu_memory_utilization=0.5, tensor_parallel_size=1)
    assert small.max_model_len == 256 and small.backend == "cpu"
    assert small.generate(["The capital of France is"], p, use_tqdm=False)[0].token_ids == reference
    # nano-vLLM's names
    alias = LLM(str(tiny_model), backend="cpu", kvcache_block_size=16, num_kvcache_blocks=-1, max_model_len=128)
    assert alias.generate(["The capital of France is"], p, use_tqdm=False)[0].token_ids == reference


def test_sparse_decode_options(tiny_model):
    llm = LLM(str(tiny_model), backend="cpu", sparse_policy="quest", sparse_budget=64, block_size=16)
    (out,) = llm.generate([[7] * 200], SamplingParams(temperature=0, max_tokens=5), use_tqdm=False)
    assert len(out.token_ids) == 5


def test_sparse_decode_over_offload_options(tiny_model):
    p = SamplingParams(temperature=0, max_tokens=5)
    kw = dict(backend="cpu", sparse_policy="quest", sparse_budget=64, block_size=16)
    resident = LLM(str(tiny_model), **kw).generate([[7] * 200], p, use_tqdm=False)[0].token_ids
    offloaded = LLM(str(tiny_model), enable_cpu_offload=True, offload_min_tokens=1, sparse_gpu_cache_tokens=128,
                    **kw).generate([[7] * 200], p, use_tqdm=False)[0].token_ids
    assert offloaded == resident


def test_sparse_prefill_options(tiny_model):
    import pytest

    p = SamplingParams(temperature=0, max_tokens=5)
    prompt = [[(i * 7919) % 5000 + 10 for i in range(300)]]
    dense = LLM(str(tiny_model), backend="cpu").generate(prompt, p, use_tqdm=False)[0].token_ids
    # A full threshold keeps every causal block: the dense tokens.
    full = LLM(str(tiny_model), backend="cpu", sparse_prefill_policy="avgpool", sparse_prefill_threshold=1.0,
               sparse_prefill_min_tokens=64, sparse_prefill_block_size=32).generate(prompt, p, use_tqdm=False)
    assert full[0].token_ids == dense
    with pytest.raises(ValueError, match="sparse_prefill_policy: unknown value 'magic'"):
        LLM(str(tiny_model), backend="cpu", sparse_prefill_policy="magic")
    with pytest.raises(ValueError, match="sparse_prefill_min_tokens"):
        LLM(str(tiny_model), backend="cpu", sparse_prefill_policy="xattention", sparse_prefill_min_tokens=0)


def test_tensor_parallel_on_the_cpu_backend(tiny_model, llm):
    p = SamplingParams(temperature=0, max_tokens=6)
    reference = llm.generate(["The capital of France is"], p, use_tqdm=False)[0].token_ids
    tp2 = LLM(str(tiny_model), backend="cpu", tensor_parallel_size=2)
    assert tp2.generate(["The capital of France is"], p, use_tqdm=False)[0].token_ids == reference


def test_multi_node_options_reach_the_engine(tiny_model):
    import pytest

    with pytest.raises(ValueError, match="nnodes 2 needs dist_init_addr HOST:PORT"):
        LLM(str(tiny_model), backend="cpu", tensor_parallel_size=2, nnodes=2)
    with pytest.raises(ValueError, match="node_rank 1 runs `nanovllm worker`"):
        LLM(str(tiny_model), backend="cpu", tensor_parallel_size=2, nnodes=2, node_rank=1,
            dist_init_addr="127.0.0.1:1")


def test_cpu_offload_options_are_checked(tiny_model):
    import pytest

    with pytest.raises(ValueError, match="num_kv_buffers"):
        LLM(str(tiny_model), backend="cpu", enable_cpu_offload=True, num_kv_buffers=99)
    with pytest.raises(ValueError, match="offload_max_num_seqs"):
        LLM(str(tiny_model), backend="cpu", enable_cpu_offload=True, offload_max_num_seqs=0)


def test_concurrent_offloaded_requests(tiny_model):
    p = SamplingParams(temperature=0, max_tokens=5)
    prompts = [[7] * 200, [9] * 150, [(i * 31) % 500 + 3 for i in range(120)]]
    paged = [o.token_ids for o in LLM(str(tiny_model), backend="cpu").generate(prompts, p, use_tqdm=False)]
    llm = LLM(str(tiny_model), backend="cpu", enable_cpu_offload=True, offload_min_tokens=1, offload_max_num_seqs=2)
    assert [o.token_ids for o in llm.generate(prompts, p, use_tqdm=False)] == paged
