"""Every EngineConfig field is a keyword of LLM(), and each reaches the engine."""

from nanovllm import LLM, SamplingParams

EXPECTED_OPTIONS = {
    "backend", "max_model_len", "seed", "enforce_eager",
    "block_size", "num_kv_blocks", "kv_cache_bytes", "gpu_memory_utilization", "enable_prefix_caching",
    "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "async_scheduling",
    "enable_cpu_offload", "num_kv_buffers", "offload_max_num_seqs", "offload_block_size", "cpu_memory_limit", "offload_min_tokens",
    "sparse_policy", "sparse_budget", "sparse_gpu_cache_tokens", "tensor_parallel_size", "kvcache_block_size",
    "num_kvcache_blocks", "sparse_prefill_policy", "sparse_prefill_threshold", "sparse_prefill_dense_layers",
    "sparse_prefill_min_tokens", "sparse_prefill_block_size", "sparse_prefill_stride", "sparse_prefill_last_q",
    "sparse_prefill_vertical", "sparse_prefill_slash", "sparse_prefill_tau", "sparse_prefill_min_budget",
    "sparse_prefill_budget", "nnodes", "node_rank", "dist_init_addr",
}


def test_option_names():
    assert set(LLM.engine_options()) == EXPECTED_OPTIONS


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
    with pytest.raises(ValueError, match="sparse prefill policy"):
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
