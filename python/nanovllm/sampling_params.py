"""vLLM's module path for the sampling parameters: `from vllm.sampling_params import StructuredOutputsParams`
works here as `from nanovllm.sampling_params import StructuredOutputsParams`."""

from ._core import SamplingParams, StructuredOutputsParams

__all__ = ["SamplingParams", "StructuredOutputsParams"]
