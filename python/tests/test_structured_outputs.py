"""Structured outputs from Python, as vLLM spells them: SamplingParams(structured_outputs=StructuredOutputsParams(...)).
The tiny model's free text is noise: what is checked comes from the constraint."""

import json
import re

import pytest

from nanovllm import Error, SamplingParams
from nanovllm.sampling_params import StructuredOutputsParams

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["name", "n"], "additionalProperties": False}


def test_json_schema_regex_choice_grammar(llm):
    cases = [
        (StructuredOutputsParams(json=SCHEMA), lambda t: set(json.loads(t)) == {"name", "n"} and 0 <= json.loads(t)["n"] <= 9),
        (StructuredOutputsParams(json=json.dumps(SCHEMA)), lambda t: isinstance(json.loads(t)["name"], str)),
        (StructuredOutputsParams(regex=r"[a-c]{2}\d"), lambda t: re.fullmatch(r"[a-c]{2}\d", t) is not None),
        (StructuredOutputsParams(choice=["left", "right"]), lambda t: t in ("left", "right")),
        (StructuredOutputsParams(grammar='root ::= "<" [0-9]{3} ">"'), lambda t: re.fullmatch(r"<\d{3}>", t) is not None),
    ]
    for so, ok in cases:
        finished = 0
        for seed in range(4):
            p = SamplingParams(temperature=1.0, seed=seed, max_tokens=120, structured_outputs=so)
            (out,) = llm.generate("Answer:", p, use_tqdm=False)
            if out.finish_reason == "length":
                continue
            finished += 1
            assert out.finish_reason == "stop", out.finish_reason
            assert ok(out.text), (repr(so), out.text)
        assert finished >= 2, repr(so)


def test_params_and_errors(llm):
    so = StructuredOutputsParams(choice=["a", "b"])
    p = SamplingParams(structured_outputs=so)
    assert p.structured_outputs.choice == ["a", "b"]
    assert "choice=['a', 'b']" in repr(p)
    with pytest.raises(Error, match="exactly one of"):
        StructuredOutputsParams(regex="a", choice=["a"])
    with pytest.raises(Error, match="whitespace_pattern"):
        StructuredOutputsParams(json={}, whitespace_pattern=r"\s*")
    bad = SamplingParams(max_tokens=4, structured_outputs=StructuredOutputsParams(json={"type": "object", "not": {}}))
    with pytest.raises(Error, match="keyword 'not'"):
        llm.generate("x", bad, use_tqdm=False)
