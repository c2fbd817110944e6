"""nano-vLLM C++ from Python: the API of nano-vLLM and vLLM's offline LLM.

    from nanovllm import LLM, SamplingParams
    llm = LLM("/path/to/Qwen3-0.6B", enforce_eager=True)
    outputs = llm.generate(["Hello, my name is"], SamplingParams(temperature=0.6, max_tokens=64))
    print(outputs[0].text)          # or outputs[0]["text"], as nano-vLLM's dicts
"""

from ._core import Error, RequestOutput, SamplingParams, StreamOutput, StructuredOutputsParams, Tokenizer
from .llm import LLM

# transformers.AutoTokenizer.from_pretrained(dir) for the model directories the engine reads.
AutoTokenizer = Tokenizer

__all__ = [
    "LLM", "SamplingParams", "StructuredOutputsParams", "RequestOutput", "StreamOutput", "Tokenizer", "AutoTokenizer",
    "Error",
]
