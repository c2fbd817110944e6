"""LLM: prompts in, outputs out. Reshapes Python arguments for the engine (nanovllm._core.Engine), which
runs everything in C++ with the GIL released."""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence, Union

from . import _core
from ._core import RequestOutput, SamplingParams, StreamOutput, Tokenizer
from ._progress import progress_bar

Prompt = Union[str, Sequence[int], Mapping[str, Any]]
Message = Mapping[str, Any]


def _prompt_list(prompts: Prompt | Sequence[Prompt]) -> list:
    """A str, a token-id list, or a vLLM-style dict ({"prompt": ...} / {"prompt_token_ids": ...}), or a list of them."""
    if isinstance(prompts, (str, Mapping)):
        prompts = [prompts]
    elif len(prompts) > 0 and isinstance(prompts[0], int):
        prompts = [prompts]
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, Mapping):
            if "prompt_token_ids" in p:
                p = p["prompt_token_ids"]
            elif "prompt" in p:
                p = p["prompt"]
            else:
                raise ValueError(f"prompt {i}: a dict prompt needs 'prompt' or 'prompt_token_ids'")
        out.append(p)  # token ids: any sequence of ints; the engine names the index of a bad one
    return out


def _params_list(sampling_params: SamplingParams | Sequence[SamplingParams] | None, n: int) -> list:
    if sampling_params is None:
        return [SamplingParams()] * n
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * n
    params = list(sampling_params)
    if len(params) != n:
        raise ValueError(f"{n} prompts but {len(params)} sampling params (give one, or one per prompt)")
    for i, p in enumerate(params):
        if not isinstance(p, SamplingParams):
            raise TypeError(f"sampling_params[{i}] is a {type(p).__name__}, not a SamplingParams")
    return params


def _conversations(messages: Sequence[Message] | Sequence[Sequence[Message]]) -> list:
    if len(messages) > 0 and isinstance(messages[0], Mapping):
        return [messages]
    return list(messages)


class LLM:
    """An engine on one model directory. Keywords are the engine's options (see LLM.engine_options())."""

    def __init__(self, model: str, **engine_options: Any):
        self._engine = _core.Engine(str(model), **engine_options)

    @staticmethod
    def engine_options() -> list:
        """The keywords LLM() accepts."""
        return _core.Engine.option_names()

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Runs every prompt to completion; outputs in prompt order. A bad prompt or params rejects the whole
        call before anything runs. Ctrl-C aborts the call's requests and raises KeyboardInterrupt."""
        prompt_list = _prompt_list(prompts)
        params = _params_list(sampling_params, len(prompt_list))
        if not use_tqdm:
            return self._engine.generate(prompt_list, params)
        bar = progress_bar(len(prompt_list))
        try:
            return self._engine.generate(prompt_list, params, bar.update)
        finally:
            bar.close()

    def chat(
        self,
        messages: Sequence[Message] | Sequence[Sequence[Message]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[RequestOutput]:
        """One conversation (a list of {"role", "content"} messages) or a list of them, rendered with the
        model's chat template; one output per conversation."""
        tokenizer = self.get_tokenizer()
        prompts = [
            tokenizer.apply_chat_template(
                conversation, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True,
                **dict(chat_template_kwargs or {}))
            for conversation in _conversations(messages)
        ]
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm)

    def stream(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> Iterator[StreamOutput]:
        """Deltas as the engine makes them: StreamOutput(index, text, token_ids, finished, ...), index being the
        prompt's position. Requests are validated and queued now; leaving the loop early (break, an exception,
        Ctrl-C) aborts the ones still running."""
        prompt_list = _prompt_list(prompts)
        stream = self._engine.stream(prompt_list, _params_list(sampling_params, len(prompt_list)))
        return _close_when_done(stream)

    def get_tokenizer(self) -> Tokenizer:
        return self._engine.get_tokenizer()

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len

    @property
    def backend(self) -> str:
        return self._engine.backend


def _close_when_done(stream: _core.Stream) -> Iterator[StreamOutput]:
    try:
        yield from stream
    finally:
        stream.close()
