#!/usr/bin/env python3
"""Golden outputs for the C++ chat-template renderer (tests/chat/).

Renders each template in tests/data/chat/ with jinja2 set up exactly like Hugging Face transformers'
apply_chat_template (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
loopcontrols extension, raise_exception / strftime_now globals and a json.dumps-based tojson filter),
over a set of conversations and option combinations, plus small feature templates that exercise the
Jinja subset one construct at a time. Writes tests/data/chat/golden.json.

Usage: python3 scripts/chat_template_golden.py   (needs jinja2 >= 3.1; transformers is not needed)
"""
import json
import pathlib
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "chat"


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()


def render(source, messages, tools=None, add_generation_prompt=True, enable_thinking=None, extra=None,
           bos_token="", eos_token=""):
    """Same variables as transformers' render_jinja_template."""
    kwargs = {}
    if bos_token:
        kwargs["bos_token"] = bos_token
    if eos_token:
        kwargs["eos_token"] = eos_token
    if enable_thinking is not None:
        kwargs["enable_thinking"] = enable_thinking
    kwargs.update(extra or {})
    try:
        template = ENV.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"error": f"TemplateSyntaxError: {e}", "error_phase": "parse"}
    except Exception as e:  # noqa: BLE001 - any compile failure is an expected-error case
        return {"error": f"{type(e).__name__}: {e}", "error_phase": "parse"}
    try:
        out = template.render(messages=messages, tools=tools, documents=None,
                              add_generation_prompt=add_generation_prompt, **kwargs)
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}", "error_phase": "render"}
    return {"expected": out}


# ---- conversations ----------------------------------------------------------------------------------
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Quotes \"like this\" and unicode: Zürich, 東京.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "threshold": {"type": "number", "default": 0.5},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.\nReturns a list of results.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}

CONVERSATIONS = {
    "single_user": [{"role": "user", "content": "Hello!"}],
    "system_user": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "multi_turn": [
        {"role": "system", "content": "  Be helpful.  \n"},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke.\n\nA short one."},
    ],
    "thinking_history": [
        {"role": "user", "content": "What is 7*6?"},
        {"role": "assistant", "content": "<think>\n7 times 6 is 42.\n</think>\n\nIt is 42."},
        {"role": "user", "content": "And 8*6?"},
        {"role": "assistant", "content": "<think>\nAdd 6 to 42.\n</think>\n\n48."},
    ],
    "thinking_last_user": [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>\nr1\n</think>\n\nA1"},
        {"role": "user", "content": "Q2"},
    ],
    "reasoning_content_field": [
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "content": "Rayleigh scattering.", "reasoning_content": "\nShort wavelengths scatter more.\n"},
    ],
    "tool_calls": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Tokyo\"}"}},
        ]},
        {"role": "tool", "content": "{\"temp\": 18}"},
        {"role": "tool", "content": "{\"temp\": 25}"},
        {"role": "assistant", "content": "Paris is 18°C, Tokyo 25°C."},
        {"role": "user", "content": "Thanks"},
    ],
    "tool_call_with_think": [
        {"role": "user", "content": "Search for cats"},
        {"role": "assistant", "content": "<think>\nI should search.\n</think>\n\nLet me search.", "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": {"query": "cats \"cute\""}}},
        ]},
        {"role": "tool", "content": "<results>many cats</results>"},
    ],
    "tool_response_user_turn": [
        {"role": "user", "content": "Start"},
        {"role": "assistant", "content": "<think>\nplan\n</think>\n\nCalling.", "tool_calls": [
            {"function": {"name": "search", "arguments": {"query": "x"}}}]},
        {"role": "user", "content": "<tool_response>\nresult\n</tool_response>"},
        {"role": "assistant", "content": "<think>\ndone\n</think>\n\nFinished."},
    ],
    # The OpenAI tool-calling round trip as the SDKs send it: ids, `arguments` a JSON string, tool_call_id;
    # the assistant's null content arrives as "" (the server renders null as vLLM does).
    "tool_round_trip_openai": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_abc123", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"unit\":\"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_abc123", "content": "{\"temperature\":18,\"sky\":\"clear\"}"},
    ],
    "unicode": [
        {"role": "system", "content": "Réponds en français. 你好！"},
        {"role": "user", "content": "Emoji 🎉🚀, tabs\tand \"quotes\" and 'single' and back\\slash. Ελληνικά. \u00a0nbsp"},
        {"role": "assistant", "content": "D'accord ✅"},
        {"role": "user", "content": "日本語でお願いします。"},
    ],
    "whitespace_content": [
        {"role": "user", "content": "\n\n  padded  \n\n"},
        {"role": "assistant", "content": "\n<think>\n\n  spaced thoughts \n\n</think>\n\n\n  answer"},
        {"role": "user", "content": ""},
    ],
}

# Llama-3.1 specific conversations.
LLAMA_CONVERSATIONS = {
    "llama_tool_call": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "{\"temp\": 18}"},
        {"role": "ipython", "content": {"temp": 18, "sky": "clear"}},
    ],
    "llama_builtin_call": [
        {"role": "system", "content": "System."},
        {"role": "user", "content": "Search the news"},
        {"role": "assistant", "tool_calls": [
            {"type": "function", "function": {"name": "brave_search", "arguments": {"query": "news", "count": "3"}}}]},
        {"role": "tool", "content": "results"},
    ],
}

ERROR_CONVERSATIONS = {
    "llama_two_tool_calls": ("llama3.1_instruct", [
        {"role": "user", "content": "Two calls"},
        {"role": "assistant", "tool_calls": [
            {"type": "function", "function": {"name": "a", "arguments": {}}},
            {"type": "function", "function": {"name": "b", "arguments": {}}}]},
    ], {}),
    "llama_tools_without_user": ("llama3.1_instruct", [{"role": "system", "content": "only system"}],
                                 {"tools": [WEATHER_TOOL]}),
    "qwen3_empty_messages": ("qwen3", [], {}),
    "qwen3_null_content": ("qwen3", [{"role": "user", "content": "hi"},
                                     {"role": "assistant", "content": None, "tool_calls": []}], {}),
    "qwen3_tool_round_trip_null_content": ("qwen3", [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_abc123", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_abc123", "content": "18"},
    ], {"tools": [WEATHER_TOOL]}),
}

TEMPLATES = {
    "qwen3": ("qwen3.jinja", "", "<|im_end|>"),
    "qwen2.5_instruct": ("qwen2.5_instruct.jinja", "", "<|im_end|>"),
    "llama3.1_instruct": ("llama3.1_instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
}

# GLM-4-9B-Chat's template (THUDM's tokenization_chatglm.py default_chat_template, as its tokenizer_config.json
# carries it): tools come as a message's `tools` list, `metadata` is printed after the role. Kept out of the
# random rotation over TEMPLATES so the other templates' cases stay as they were.
GLM4 = "glm4_chat"
GLM4_TEMPLATE = ("glm4_chat.jinja", "", "<|endoftext|>")
GLM4_CONVERSATIONS = {
    "glm4_tools_in_system": [
        {"role": "system", "content": "Answer briefly.", "tools": [
            {"type": "function", "function": WEATHER_TOOL["function"]}, {"type": "python"},
            {"type": "simple_browser"}, {"type": "cogview"}]},
        {"role": "user", "content": "天气怎么样？"},
    ],
    "glm4_observation": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "metadata": "get_weather", "content": "{\"city\": \"Paris\"}"},
        {"role": "observation", "content": "{\"temp\": 18}"},
    ],
}

# ---- feature templates (name, template, extra context) ------------------------------------------------
FEATURES = [
    ("ws_trim_lstrip", "a\n  {% if true %}\n    b\n  {% endif %}\nc\n", {}),
    ("ws_minus", "a  {{- 'x' -}}  b\n  {%- if true -%}  c  {%- endif -%}\n  d", {}),
    ("ws_plus", "a\n    {%+ if true %}b{% endif %}\n", {}),
    ("ws_comment", "x\n  {# a comment #}\ny {#- trimmed -#}  z\n{# multi\nline #}\nw", {}),
    ("ws_var_no_lstrip", "  {{ 'v' }}\n  {% set q = 1 %}\n{{ q }}", {}),
    ("ws_trailing_newline", "line\n", {}),
    ("ws_unicode_space", "a {{- 'x' -}}\u3000\u00a0 b\u3000{%- if true %}c{% endif %}", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", {}),
    ("ws_block_end_midline", "{% for i in [1,2] %}{{ i }} {% endfor %}\n{% if true %}  x{% endif %}", {}),
    ("loop_vars", "{% for x in items %}{{ loop.index0 }}/{{ loop.index }}/{{ loop.revindex }}/{{ loop.revindex0 }}"
                  "/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }};{% endfor %}",
     {"items": ["a", "b", "c"]}),
    ("loop_else_filter", "{% for x in items if x > 2 %}{{ x }}{% else %}none{% endfor %}|"
                         "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}|"
                         "{% for x in items if x is odd %}{{ x }}:{{ loop.length }} {% endfor %}", {"items": [1, 2, 3, 4, 5]}),
    ("loop_break_continue", "{% for x in range(10) %}{% if x is even %}{% continue %}{% endif %}"
                            "{% if x > 6 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("loop_nested_unpack", "{% for k, v in d.items() %}{% for c in v %}{{ k }}{{ c }}{{ loop.index }}"
                           "{% endfor %};{% endfor %}{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"
                           "{% for k in d %}{{ k }}{% endfor %}{% for ch in 'héy' %}[{{ ch }}]{% endfor %}",
     {"d": {"z": "ab", "a": "c"}}),
    ("loop_scoping", "{% set x = 0 %}{% for i in [1,2,3] %}{{ x }}{% set x = i %}{{ x }},{% endfor %}{{ x }}|"
                     "{% for i in [1,2] %}{% if loop.first %}{% set y = 5 %}{% endif %}{{ y }},{% endfor %}", {}),
    ("loop_cycle_reversed", "{% for x in items|reverse %}{{ loop.cycle('odd', 'even') }}{{ x }} {% endfor %}"
                            "{% for x in items[::-1] %}{{ x }}{% endfor %}", {"items": [1, 2, 3]}),
    ("namespace", "{% set ns = namespace(count=0, found=false, last=none) %}{% for m in msgs %}"
                  "{% if m.role == 'user' %}{% set ns.count = ns.count + 1 %}{% set ns.last = loop.index0 %}{% endif %}"
                  "{% endfor %}{{ ns.count }} {{ ns.found }} {{ ns.last }} {% set ns.new = 'n' %}{{ ns.new }}",
     {"msgs": [{"role": "user"}, {"role": "assistant"}, {"role": "user"}]}),
    ("set_forms", "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = (1, 2) %}{{ t | length }} "
                  "{% set blk %}inside {{ a }}{% endset %}[{{ blk }}]", {}),
    ("macros", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
               "{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}"
               "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}body{% endcall %}", {}),
    ("filters_str", "{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'Hello' | lower }}{{ 'Hello' | upper }}|"
                    "{{ 'a-b-c' | replace('-', '+') }}|{{ 'abc' | replace('b', 'B', 1) }}|{{ 'hello world' | capitalize }}|"
                    "{{ 'hello big-world(x' | title }}|{{ 42 | string }}{{ none | string }}|{{ 'héllo' | length }}|"
                    "{{ 'abc' | reverse }}|{{ 'abc' | first }}{{ 'abc' | last }}|{{ '<a&b>' | e }}", {}),
    ("filters_seq", "{{ [1, 2, 3] | join(', ') }}|{{ items | join }}|{{ items | first }}|{{ items | last }}|"
                    "{{ items | length }}|{{ items | count }}|{{ [3, 1, 3, 2] | unique | list }}|"
                    "{{ users | map(attribute='name') | join(',') }}|{{ ['a', 'B'] | map('upper') | join }}|"
                    "{{ users | selectattr('admin') | map(attribute='name') | join }}|"
                    "{{ users | rejectattr('admin') | map(attribute='name') | join }}|"
                    "{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('equalto', 2) | list }}|"
                    "{{ [1, 2, 3] | sum }}|{{ users | join(';', attribute='name') }}",
     {"items": ["x", "y", "z"], "users": [{"name": "ann", "admin": True}, {"name": "bob", "admin": False}]}),
    ("filters_misc", "{{ undefined_var | default('dflt') }}|{{ '' | default('e', true) }}|{{ 0 | d('z') }}|"
                     "{% for k, v in {'b': 1, 'a': 2} | items %}{{ k }}={{ v }} {% endfor %}|"
                     "{{ -3 | abs }}|{{ '42' | int + 1 }}|{{ '3.5' | float }}|{{ 'x' | int(7) }}|{{ 3.9 | int }}|"
                     "{{ {'a': 1} | items | map('join', '=') | list }}|{{ missing | items | list }}", {}),
    ("tojson", "{{ obj | tojson }}\n{{ obj | tojson(indent=2) }}\n{{ obj | tojson(sort_keys=true) }}\n"
               "{{ obj | tojson(separators=(',', ':')) }}\n{{ 'é\"\\n' | tojson }}\n{{ obj | tojson(ensure_ascii=true) }}\n"
               "{{ [] | tojson(indent=2) }}{{ {} | tojson }}{{ [[]] | tojson(indent=0) }}",
     {"obj": {"z": 1, "a": [1.5, 2e-07, 1e16, 100.0, True, None, "ü😀\t\u0001"], "m": {"k": "v"}, "neg": -3}}),
    ("tests", "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ none is none }}{{ 's' is string }}"
              "{{ {} is mapping }}{{ [] is sequence }}{{ 's' is iterable }}{{ y is iterable }}{{ 1 is number }}"
              "{{ true is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is integer }}{{ true is boolean }}"
              "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ x is not none }}"
              "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 2 is in [1, 2] }}{{ 'a' is eq 'a' }}"
              "{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ range is callable }}{{ x is sameas none }}"
              "{{ 'tojson' is filter }}{{ 'odd' is test }}{{ 3 is gt 2 }}{{ 1 is lt(2) }}", {"x": 1}),
    ("string_methods", "{{ ' a b '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|"
                       "{{ 'a,b,,c'.split(',') }}|{{ ' a  b  c '.split() }}|{{ 'a b c'.split(' ', 1) }}|"
                       "{{ 'a b c'.rsplit(' ', 1) }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|"
                       "{{ 'AbC'.upper() }}{{ 'AbC'.lower() }}|{{ 'hello world'.title() }}|{{ 'a-b'.replace('-', '') }}|"
                       "{{ 'héllo'.find('l') }}|{{ 'banana'.count('a') }}|{{ ', '.join(['x', 'y']) }}|"
                       "{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}|"
                       "{{ d.get('k') }}{{ d.get('missing', 'dflt') }}{{ d.get('missing') }}|{{ d.keys() | list }}{{ d.values() | list }}|"
                       "{{ [1, 2, 2].count(2) }}{{ [1, 2].index(2) }}|{{ 'a\u3000b'.split() }}",
     {"d": {"k": "v", "n": 2}}),
    ("slicing", "{{ s[1:3] }}|{{ s[::-1] }}|{{ s[-2:] }}|{{ s[:2] }}|{{ s[::2] }}|{{ l[1:] }}|{{ l[:-1] }}|"
                "{{ l[::-1] }}|{{ l[-1] }}|{{ l[10] }}|{{ l[5:1:-2] }}|{{ s[0] }}{{ s[-1] }}|{{ l.0 }}",
     {"s": "héllo wörld", "l": [0, 1, 2, 3, 4, 5, 6]}),
    ("operators", "{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 7 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|"
                  "{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 1.5 + 1 }}|{{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' * 3 }}|{{ [1] + [2] }}|"
                  "{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}|{{ 'a' in 'cat' }}{{ 'z' not in 'cat' }}{{ 1 in [1, 2] }}"
                  "{{ 'k' in {'k': 1} }}|{{ not true }}{{ true and 'x' }}{{ false or 'y' }}{{ '' or 0 }}|"
                  "{{ 'yes' if 1 else 'no' }}{{ 'yes' if 0 else 'no' }}[{{ 'only' if false }}]|{{ 1 == 1.0 }}"
                  "{{ [1, 2] == [1, 2] }}{{ {'a': 1} == {'a': 1} }}{{ 'a' != 'b' }}|{{ -(3) }}{{ +4 }}|"
                  "{{ 10 - 2 - 3 }}{{ 2 ** 3 ** 2 }}|{{ 1 - 2 | abs }}|{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}", {}),
    ("literals_print", "{{ [1, 'a', none, true, 2.5, {'k': [\"it's\"]}] }}|{{ {'a': 'b'} }}|{{ 1e-5 }} {{ 1e16 }} "
                       "{{ 100.0 }} {{ 1/3 }} {{ 0.1 + 0.2 }} {{ 123456789012345678 }}|{{ 'a' 'b' }}|"
                       "{{ '\\u00e9\\x41\\t|' }}|{{ \"dq 'x'\" }}|{{ none }}{{ True }}{{ false }}|{{ 1_000 }}|"
                       "{{ ['\\n', 'q\"'] }}", {}),
    ("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}|{% filter trim | replace('a', 'o') %}  banana  {% endfilter %}", {}),
    ("dict_and_range", "{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(5, 0, -2) | list }}|"
                       "{{ dict(a=1, b='x') }}|{{ {'k': 'v'}.k }}{{ {'k': 'v'}['k'] }}|{{ messages | length }}"
                       "{{ add_generation_prompt }}{{ tools }}", {}),
    ("undefined_ops", "[{{ missing }}][{{ missing | length }}][{{ missing is iterable }}]"
                      "{% for x in missing %}no{% endfor %}[{{ 'a' in missing }}][{{ d.nokey }}][{{ none.attr }}]"
                      "[{{ d.nokey is defined }}][{{ d['nokey'] | default('dd') }}][{{ missing ~ 'x' }}]"
                      "[{{ missing == missing }}][{{ l[99] is defined }}]", {"d": {"a": 1}, "l": [1]}),
    # Errors (parse and render).
    ("err_unclosed_if", "{% if true %}never closed", {}),
    ("err_unknown_filter", "{{ 'x' | no_such_filter }}", {}),
    ("err_unknown_test", "{{ 'x' is no_such_test }}", {}),
    ("err_include", "{% include 'other.jinja' %}", {}),
    ("err_bad_expr", "{{ 1 + }}", {}),
    ("err_unterminated_string", "{{ 'abc }}", {}),
    ("err_unclosed_var", "text {{ x ", {}),
    ("err_break_outside_loop", "{% break %}", {}),
    ("err_undefined_attr", "{{ missing.attr }}", {}),
    ("err_str_plus_int", "{{ 'a' + 1 }}", {}),
    ("err_none_plus_str", "{{ none + 'a' }}", {}),
    ("err_raise", "{{ raise_exception('custom failure: ' ~ 42) }}", {}),
    ("err_ns_assign", "{% set x = 1 %}{% set x.attr = 2 %}", {}),
    ("err_in_int", "{{ 1 in 5 }}", {}),
    ("err_bad_unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("err_call_non_callable", "{{ 'abc'() }}", {}),
    ("err_missing_endfor", "{% for x in [1] %}{{ x }}", {}),
    ("err_endif_stray", "{% endif %}", {}),
]


FRAGMENTS = ["Hello", " world", "\n", "\n\n", "  ", "<think>", "</think>", "\nreasoning\n", "<tool_response>",
             "</tool_response>", "é", "東京", "🎉", "\"q\"", "'s'", "\\", "\t", "{\"k\": 1}", "a.b", "42"]


def random_conversations(seed, count):
    """Seeded random conversations: odd whitespace, think tags, tool calls and tool turns in any order."""
    import random
    rng = random.Random(seed)

    def text():
        return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 6)))

    convs = []
    for _ in range(count):
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": text()})
        for _ in range(rng.randint(1, 6)):
            role = rng.choice(["user", "user", "assistant", "assistant", "tool"])
            m = {"role": role, "content": text()}
            if role == "assistant" and rng.random() < 0.3:
                m["tool_calls"] = [{"type": "function", "function": {
                    "name": rng.choice(["get_weather", "search"]),
                    "arguments": rng.choice([{"city": text()}, {}, "{\"raw\": true}", {"n": rng.randint(-5, 5), "x": 0.25}])}}]
            if role == "assistant" and rng.random() < 0.2:
                m["reasoning_content"] = text()
            msgs.append(m)
        convs.append(msgs)
    return convs


def main():
    cases = []
    templates = {name: ((DATA / f).read_text(), bos, eos)
                 for name, (f, bos, eos) in {**TEMPLATES, GLM4: GLM4_TEMPLATE}.items()}

    def add(name, tname, messages, **opts):
        src, bos, eos = templates[tname]
        result = render(src, messages, bos_token=bos, eos_token=eos, **opts)
        case = {"name": name, "template": tname, "messages": messages,
                "add_generation_prompt": opts.get("add_generation_prompt", True)}
        if opts.get("tools") is not None:
            case["tools"] = opts["tools"]
        if opts.get("enable_thinking") is not None:
            case["enable_thinking"] = opts["enable_thinking"]
        if opts.get("extra"):
            case["extra_context"] = opts["extra"]
        case.update(result)
        cases.append(case)

    for tname in TEMPLATES:
        for cname, messages in CONVERSATIONS.items():
            for agp in (True, False):
                thinking_opts = (None, True, False) if tname == "qwen3" else (None,)
                for think in thinking_opts:
                    suffix = f"agp{int(agp)}" + ("" if think is None else f"_think{int(think)}")
                    add(f"{tname}/{cname}/{suffix}", tname, messages, add_generation_prompt=agp, enable_thinking=think)
            add(f"{tname}/{cname}/tools", tname, messages, tools=[WEATHER_TOOL, SEARCH_TOOL])

    llama = "llama3.1_instruct"
    for cname, messages in LLAMA_CONVERSATIONS.items():
        add(f"{llama}/{cname}/tools", llama, messages, tools=[WEATHER_TOOL])
        add(f"{llama}/{cname}/tools_in_system", llama, messages, tools=[WEATHER_TOOL],
            extra={"tools_in_user_message": False, "date_string": "01 Jan 2025"})
        add(f"{llama}/{cname}/builtin", llama, messages,
            extra={"builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"]})
    add(f"{llama}/custom_tools", llama, CONVERSATIONS["system_user"], extra={"custom_tools": [SEARCH_TOOL]})

    for i, messages in enumerate(random_conversations(seed=20240601, count=60)):
        tname = list(TEMPLATES)[i % len(TEMPLATES)]
        opts = {"add_generation_prompt": i % 2 == 0}
        if tname == "qwen3":
            opts["enable_thinking"] = [None, True, False][i % 3]
        if i % 5 == 0:
            opts["tools"] = [SEARCH_TOOL]
        add(f"random/{i}/{tname}", tname, messages, **opts)

    for cname, messages in {**CONVERSATIONS, **GLM4_CONVERSATIONS}.items():
        for agp in (True, False):
            add(f"{GLM4}/{cname}/agp{int(agp)}", GLM4, messages, add_generation_prompt=agp)

    for cname, (tname, messages, opts) in ERROR_CONVERSATIONS.items():
        add(f"error/{cname}", tname, messages, **opts)

    features = []
    for name, source, extra in FEATURES:
        result = render(source, [], extra=extra)
        case = {"name": name, "template_source": source, "extra_context": extra}
        case.update(result)
        features.append(case)

    out = {"generated_by": "scripts/chat_template_golden.py", "jinja2_version": jinja2.__version__,
           "template_cases": cases, "feature_cases": features}
    (DATA / "golden.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    n_err = sum("error" in c for c in cases + features)
    print(f"wrote {len(cases)} template cases and {len(features)} feature cases ({n_err} expected errors)")


if __name__ == "__main__":
    main()
