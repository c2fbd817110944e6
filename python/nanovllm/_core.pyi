# Type stub of the extension module nanovllm._core (python/src/*.cpp), for editors and type checkers.
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

class Error(ValueError):
    """What the engine rejects: bad arguments, prompts, configs, model directories (the engine's message)."""

class StructuredOutputsParams:
    """vLLM's structured outputs: exactly one of json (a JSON Schema, dict or text), regex, choice, grammar
    (EBNF), json_object. Unsupported schema keywords are errors when the request is added."""
    json: Optional[str]
    regex: Optional[str]
    choice: Optional[list[str]]
    grammar: Optional[str]
    json_object: bool
    def __init__(
        self,
        *,
        json: Union[str, Mapping[str, Any], None] = None,
        regex: Optional[str] = None,
        choice: Optional[Sequence[str]] = None,
        grammar: Optional[str] = None,
        json_object: bool = False,
        disable_fallback: Optional[bool] = None,
        disable_any_whitespace: Optional[bool] = None,
        disable_additional_properties: Optional[bool] = None,
        whitespace_pattern: Optional[str] = None,
        structural_tag: Optional[str] = None,
    ) -> None: ...

class SamplingParams:
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    repetition_penalty: float
    presence_penalty: float
    frequency_penalty: float
    seed: Optional[int]
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stop_token_ids: list[int]
    logprobs: int
    logit_bias: dict[int, float]
    structured_outputs: Optional[StructuredOutputsParams]
    def __init__(
        self,
        *,
        temperature: float = 1.0,
        top_k: int = -1,
        top_p: float = 1.0,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        seed: Optional[int] = None,
        max_tokens: int = 16,
        min_tokens: int = 0,
        ignore_eos: bool = False,
        stop_token_ids: Optional[Sequence[int]] = None,
        logprobs: Optional[int] = None,
        logit_bias: Optional[Mapping[int, float]] = None,
        structured_outputs: Optional[StructuredOutputsParams] = None,
    ) -> None: ...

class RequestOutput:
    request_id: int
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: Optional[str]  # "stop" | "length" | "abort"
    logprobs: Optional[list[dict[int, float]]]
    finished: bool
    num_cached_tokens: int
    num_preemptions: int
    time_to_first_token_s: float
    latency_s: float
    @property
    def outputs(self) -> tuple["RequestOutput"]: ...
    def __getitem__(self, key: str) -> Any: ...
    def keys(self) -> list[str]: ...

class StreamOutput:
    index: int
    request_id: int
    text: str
    token_ids: list[int]
    logprobs: Optional[list[dict[int, float]]]
    finished: bool
    finish_reason: Optional[str]

class Tokenizer:
    @staticmethod
    def from_pretrained(pretrained_model_name_or_path: str) -> "Tokenizer": ...
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...
    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str: ...
    def apply_chat_template(
        self,
        conversation: Sequence[Mapping[str, Any]],
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        **kwargs: Any,
    ) -> Union[str, list[int]]: ...
    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def eos_token_id(self) -> Optional[int]: ...
    @property
    def bos_token_id(self) -> Optional[int]: ...

class Stream(Iterator[StreamOutput]):
    def __iter__(self) -> "Stream": ...
    def __next__(self) -> StreamOutput: ...
    def close(self) -> None: ...

class Engine:
    def __init__(self, model: str, **engine_options: Any) -> None: ...
    def generate(
        self,
        prompts: list[Union[str, list[int]]],
        sampling_params: list[SamplingParams],
        on_finished: Optional[Callable[[int], Any]] = None,
    ) -> list[RequestOutput]: ...
    def stream(self, prompts: list[Union[str, list[int]]], sampling_params: list[SamplingParams]) -> Stream: ...
    def get_tokenizer(self) -> Tokenizer: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def backend(self) -> str: ...
    @property
    def num_generated_tokens(self) -> int: ...
    @staticmethod
    def option_names() -> list[str]: ...
