# Type stub of nanovllm.llm: LLM's engine options spelled out so editors complete them (llm.py takes them
# as **engine_options and hands them to the engine, which rejects unknown ones with TypeError). The names and
# defaults are the engine's option table's (engine/engine_options.h); python/tests/test_engine_options.py checks.
from typing import Any, Iterator, Literal, Mapping, Optional, Sequence, Union

from ._core import RequestOutput, SamplingParams, StreamOutput, Tokenizer

Prompt = Union[str, Sequence[int], Mapping[str, Any]]
Message = Mapping[str, Any]

class LLM:
    def __init__(
        self,
        model: str,
        *,
        backend: Optional[Literal["cpu", "cuda"]] = None,  # None: cuda when a GPU is present
        max_model_len: Optional[int] = None,  # None or 0: the model's limit
        seed: int = 0,  # engine RNG, for requests without a seed
        enforce_eager: bool = False,  # CUDA: no decode CUDA graphs
        quantization: Literal["auto", "fp8", "none"] = "auto",  # projection weights; fp8: quantize at load
        block_size: int = 16,
        kvcache_block_size: int = 16,  # nano-vLLM's name for block_size
        num_kv_blocks: int = 0,  # 0: from the memory budget
        num_kvcache_blocks: int = -1,  # nano-vLLM's name (-1: from the memory budget)
        kv_cache_bytes: int = 2147483648,  # CPU backend KV budget (2 GiB)
        gpu_memory_utilization: float = 0.9,
        # KV cache elements (docs/kv_cache.md): auto = the model's dtype; fp8 (= fp8_e4m3): e4m3 + a scale per row
        kv_cache_dtype: Literal["auto", "bf16", "fp8", "fp8_e4m3"] = "auto",
        enable_prefix_caching: bool = True,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192,
        enable_chunked_prefill: bool = True,
        async_scheduling: bool = True,
        enable_cpu_offload: bool = False,  # layer-wise CPU KV offload for requests that do not fit the GPU cache
        num_kv_buffers: int = 4,
        offload_max_num_seqs: int = 1,
        offload_block_size: int = 1024,
        cpu_memory_limit: int = 0,  # bytes of host KV pool; 0: the available memory
        offload_min_tokens: int = 0,
        sparse_policy: Literal["full", "quest"] = "full",
        sparse_budget: int = 2048,
        sparse_gpu_cache_tokens: int = -1,  # offload: hot-page cache per layer and KV head; -1: 16 x sparse_budget
        tensor_parallel_size: int = 1,  # GPUs one model is split over (threads on backend="cpu"), all nodes
        nnodes: int = 1,  # hosts the group spans; this process is node 0, the others run `nanovllm worker`
        node_rank: int = 0,
        dist_init_addr: str = "",  # HOST:PORT of node 0 when nnodes > 1
        sparse_prefill_policy: Literal["dense", "xattention", "minference", "flexprefill", "avgpool"] = "dense",
        sparse_prefill_threshold: float = 0.0,  # 0: the policy's default
        sparse_prefill_dense_layers: int = 0,
        sparse_prefill_min_tokens: int = 8192,
        sparse_prefill_block_size: int = 128,
        sparse_prefill_stride: int = 8,
        sparse_prefill_last_q: int = 64,
        sparse_prefill_vertical: int = 0,  # 0: adaptive
        sparse_prefill_slash: int = 0,  # 0: adaptive
        sparse_prefill_tau: float = 0.1,
        sparse_prefill_min_budget: int = 1024,
        sparse_prefill_budget: int = 0,  # 0: no limit
    ) -> None: ...
    @staticmethod
    def engine_options() -> list[str]: ...
    def generate(
        self,
        prompts: Union[Prompt, Sequence[Prompt]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]: ...
    def chat(
        self,
        messages: Union[Sequence[Message], Sequence[Sequence[Message]]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        use_tqdm: bool = True,
        chat_template_kwargs: Optional[Mapping[str, Any]] = None,
        add_generation_prompt: bool = True,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
    ) -> list[RequestOutput]: ...
    def stream(
        self,
        prompts: Union[Prompt, Sequence[Prompt]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
    ) -> Iterator[StreamOutput]: ...
    def get_tokenizer(self) -> Tokenizer: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def backend(self) -> str: ...
