#!/usr/bin/env python3
"""Reference renderings for JSON edge cases and RAG documents with real Hub chat templates.

Run from the repository root (transformers and jinja2 in the venv):

    tools/reference/.venv/bin/python tools/reference/make_json_edge_fixtures.py

Writes tests/fixtures/chat_templates/json_edges.json in the format of
make_chat_template_fixtures.py (whose run_case renders each case with transformers'
render_jinja_template, i.e. what apply_chat_template(tokenize=False) returns). The test
(tests/test_chat_template.c) loads the fixture with rlhf.c's own JSON loader, so the
numbers below reach the C side exactly as a dataset row or a --messages file would give them:

  - integers beyond 64 bits next to small ones (Python keeps both exact, jansson holds
    neither without help), a real beyond double (1e400: Python's json reads inf);
  - U+0000 inside message content and tool arguments;
  - RAG documents, given as the documents argument and as a "documents" kwarg;
  - |int of floats >= 2**63 and of long digit strings;
  - {% call %} blocks (MiniCPM3-4B's template, on tool schemas with nested objects, which is
    where it runs them), *args / **kwargs splats, and constructs this renderer lacks in a
    branch never taken.

The templates are the published ones, copied into tests/fixtures/chat_templates/real/ from
../shared/real-tokenizers (see its PROVENANCE.md): Qwen2.5-Instruct's tokenizer_config.json,
and CohereLabs/c4ai-command-a-03-2025 and openbmb/MiniCPM3-4B (with its test conversation,
minicpm3_messages.json) from huggingface.js' e2e tests.
"""

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_chat_template_fixtures as base  # noqa: E402

ROOT = base.ROOT
REAL = os.path.join(ROOT, "tests", "fixtures", "chat_templates", "real")


def real(name):
    with open(os.path.join(REAL, name), encoding="utf-8") as f:
        return f.read()


BIG_TOOL = {
    "type": "function",
    "function": {
        "name": "set_counter",
        "description": "Sets a 64-bit counter",
        "parameters": {
            "type": "object",
            "properties": {
                "value": {"type": "integer", "minimum": 1, "maximum": 18446744073709551615},
                "scale": {"type": "number", "default": 0.5},
            },
            "required": ["value"],
        },
    },
}
BIG_CALL = [
    {"role": "system", "content": "You count."},
    {"role": "user", "content": "Set it to the largest value, then -2^70."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "set_counter",
                                              "arguments": {"value": 18446744073709551615, "step": 1}}},
            {"type": "function", "function": {"name": "set_counter",
                                              "arguments": {"value": -1180591620717411303424, "n": 3}}},
        ],
    },
    {"role": "tool", "content": "ok"},
]
NUL_MSGS = [
    {"role": "user", "content": "before\u0000after"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "set_counter", "arguments": {"value": 1, "tag": "a\u0000b"}}}]},
]
DOCS = [
    {"title": "Tall penguins", "text": "Emperor penguins are the tallest growing up to 122 cm in height."},
    {"title": "Penguin habitats", "text": "Emperor penguins only live in Antarctica.\u0000"},
]
DOC_MSGS = [{"role": "user", "content": "What are the tallest living penguins?"}]
COHERE_SPECIAL = {"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>"}
QWEN_SPECIAL = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}

ORDER_TOOL = {
    "type": "function",
    "function": {
        "name": "place_order",
        "description": "Places an order",
        "parameters": {
            "type": "object",
            "properties": {
                "customer": {"type": "object", "description": "Who orders",
                             "properties": {"name": {"type": "string"}, "vip": {"type": "boolean", "default": False}},
                             "required": ["name"]},
                "items": {"type": "array", "items": {"type": "object", "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]+$"}, "count": {"type": "integer", "default": 1}}}},
                "speed": {"type": "string", "enum": ["slow", "fast"]},
            },
            "required": ["customer", "items"],
        },
    },
}

# Call blocks and splats: a caller with parameters that sees the loop variable where the block
# is, *list / **dict into macros and globals, and constructs this renderer lacks in a branch
# that is never taken (Python renders the template, so must we).
CONSTRUCTS_TEMPLATE = (
    "{% macro box(title, n=1) %}<{{ title }}:{{ n }}|{{ caller(n * 2) }}|{{ varargs }}{{ kwargs }}>{% endmacro %}"
    "{% macro plain(a, b, c=3) %}{{ a }}{{ b }}{{ c }}{% endmacro %}"
    "{% for m in messages %}{% call(k) box(m.role, loop.index) %}{{ m.content }}*{{ k }}{% endcall %}\n{% endfor %}"
    "{{ plain(*['x', 'y']) }} {{ plain('p', **{'b': 'q', 'c': 'r'}) }} {{ plain(*xs, **kw) }}"
    " {{ range(*[1, 7, 2]) | list }} {{ dict(**kw) }} {{ box('t', *[5], z=1, **{'w': 2}) if false else '' }}"
    "{% if false %}{% include 'other.jinja' %}{{ messages | groupby('role') }}"
    "{% filter upper %}never{% endfilter %}{% with a = 1 %}{{ a }}{% endwith %}{% endif %}done"
)

INT_TEMPLATE = (
    "{% for x in xs %}{{ x }}|{{ x|int }}|{{ x|string }}|{{ x is integer }}|{{ x|tojson }}\n{% endfor %}"
    "{{ big > small }} {{ big == big2 }} {{ small < big }} {{ huge }} {{ huge|tojson }}"
)


MSGS_SMALL = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


def apply(name, messages, agp, special, **extra):
    args = {"messages": messages, "add_generation_prompt": agp, "special_tokens": special}
    args.update(extra)
    return {"name": name, "mode": "apply", "args": args}


def main():
    qwen, cohere = real("qwen2.5.jinja"), real("command_a.jinja")
    cases = []
    cases.append(("qwen2.5 tool schema and calls with integers beyond 64 bits", qwen, [
        apply("big_ints_gen", BIG_CALL, True, QWEN_SPECIAL, tools=[BIG_TOOL]),
        apply("big_ints_nogen", BIG_CALL, False, QWEN_SPECIAL, tools=[BIG_TOOL]),
        apply("nul_chars", NUL_MSGS, True, QWEN_SPECIAL, tools=[BIG_TOOL]),
    ]))
    cases.append(("command-a RAG documents", cohere, [
        apply("documents_arg", DOC_MSGS, True, COHERE_SPECIAL, documents=DOCS),
        apply("documents_kwarg", DOC_MSGS, False, COHERE_SPECIAL, kwargs={"documents": DOCS}),
        apply("no_documents", DOC_MSGS, True, COHERE_SPECIAL),
    ]))
    minicpm = real("minicpm3.jinja")
    with open(os.path.join(REAL, "minicpm3_messages.json"), encoding="utf-8") as f:
        minicpm_msgs = json.load(f)
    cases.append(("MiniCPM3-4B: call blocks (object_to_fields) on nested tool schemas", minicpm, [
        apply("hfjs_conversation", minicpm_msgs, True, {}),
        apply("nested_tools_gen", minicpm_msgs[:2], True, {}, tools=[ORDER_TOOL, BIG_TOOL]),
        apply("nested_tools_nogen", minicpm_msgs, False, {}, tools=[ORDER_TOOL]),
    ]))
    cases.append(("call blocks, splats, unsupported constructs never reached", CONSTRUCTS_TEMPLATE, [
        {"name": "constructs", "mode": "render",
         "vars": {"messages": MSGS_SMALL, "xs": ["1", "2"], "kw": {"c": "!"}}},
        {"name": "star_not_iterable", "mode": "render",
         "vars": {"messages": [], "xs": 5, "kw": {}}},
        {"name": "dstar_not_mapping", "mode": "render",
         "vars": {"messages": [], "xs": [1, 2], "kw": [1]}},
    ]))
    big = 2.0**70
    cases.append(("int of floats and strings beyond int64", INT_TEMPLATE, [
        {"name": "int_filter", "mode": "render",
         "vars": {"xs": [9.3e18, -1e19, 2.0**63, 1.5e300, "123456789012345678901234567890",
                         18446744073709551615, -18446744073709551616, 7],
                  "big": 18446744073709551615, "big2": 18446744073709551615, "small": 3,
                  "huge": float("inf")}},
        {"name": "int_of_inf", "mode": "render",
         "vars": {"xs": [float("inf")], "big": big, "big2": big, "small": 1, "huge": 1.0}},
    ]))
    fixtures = []
    for desc, tpl, cs in cases:
        out = []
        for c in cs:
            ref = c
            kw = c.get("args", {}).get("kwargs", {})
            if "documents" in kw:
                # apply_chat_template(documents=...) is a named parameter, so a "documents"
                # among its **kwargs binds there; render_jinja_template is called with it.
                ref = json.loads(json.dumps(c))
                ref["args"]["documents"] = ref["args"]["kwargs"].pop("documents")
            c.update(base.run_case(tpl, ref))
            out.append(c)
        fixtures.append((desc, tpl, out))
    # One fixture file per template, as the test reads them.
    for i, (desc, tpl, cs) in enumerate(fixtures):
        name = ["json_edges_qwen25", "json_edges_command_a", "calls_minicpm3", "calls_constructs",
                "json_edges_int"][i]
        fx = {"name": name, "description": desc, "template": tpl, "now": base.NOW.isoformat(),
              "cases": cs}
        text = json.dumps(fx, indent=1, ensure_ascii=False, allow_nan=True)
        # A JSON inf is written 1e400 (read as inf by Python's json and, the point, by rlhf.c);
        # only bare tokens, not "Infinity" inside strings (those end in a quote).
        text = re.sub(r"(-?)Infinity(?=[,\]}\n])", r"\g<1>1e400", text)
        with open(os.path.join(base.OUT_DIR, name + ".json"), "w", encoding="utf-8") as f:
            f.write(text + "\n")
        for c in cs:
            print(name, c["name"], "expected" if "expected" in c else "error: " + c["error"])


if __name__ == "__main__":
    main()
