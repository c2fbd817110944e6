"""Chat: the tokenizer's chat template renders what HF's Jinja renders (tests/data/chat/golden.json, made
by scripts/chat_template_golden.py with jinja2), and LLM.chat generates from exactly that prompt."""

import json

from conftest import REPO
from nanovllm import SamplingParams, Tokenizer

GOLDEN = json.loads((REPO / "tests" / "data" / "chat" / "golden.json").read_text())


def test_apply_chat_template_matches_jinja2(tiny_model):
    tok = Tokenizer.from_pretrained(str(tiny_model))
    cases = [c for c in GOLDEN["template_cases"] if c["template"] == "qwen3" and "error" not in c]
    assert len(cases) >= 50
    for c in cases:
        kwargs = {}
        if "enable_thinking" in c:
            kwargs["enable_thinking"] = c["enable_thinking"]
        text = tok.apply_chat_template(c["messages"], tools=c.get("tools"), tokenize=False,
                                       add_generation_prompt=c.get("add_generation_prompt", False), **kwargs)
        assert text == c["expected"], c["name"]


def test_chat_generates_from_the_rendered_prompt(llm):
    tok = llm.get_tokenizer()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"}]
    params = SamplingParams(temperature=0, max_tokens=8)
    (out,) = llm.chat(messages, params, use_tqdm=False, chat_template_kwargs={"enable_thinking": False})
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert out.prompt_token_ids == tok.encode(text, add_special_tokens=False)
    assert out.token_ids == llm.generate([out.prompt_token_ids], params, use_tqdm=False)[0].token_ids


def test_chat_batch_of_conversations(llm):
    convs = [[{"role": "user", "content": "Hi"}], [{"role": "user", "content": "Bye"}]]
    outs = llm.chat(convs, SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert len(outs) == 2 and outs[0].prompt_token_ids != outs[1].prompt_token_ids


def test_tokenizer_encode_decode(llm, tiny_model):
    tok = llm.get_tokenizer()
    # Ids from HF tokenizers for Qwen3 (tests/tokenizer goldens): "Hello, world" -> [9707, 11, 1879]
    assert tok.encode("Hello, world") == [9707, 11, 1879]
    assert tok.decode([9707, 11, 1879]) == "Hello, world"
    assert tok("Hello, world")["input_ids"] == [9707, 11, 1879]
    assert tok.decode([151645, 9707], skip_special_tokens=True) == "Hello"
    assert tok.decode([151645, 9707]) == "<|im_end|>Hello"
    assert tok.eos_token_id == 151645
    assert Tokenizer.from_pretrained(str(tiny_model)).encode("中文 🙂") == tok.encode("中文 🙂")
