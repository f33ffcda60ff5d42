#!/usr/bin/env python3
"""Reference renderings for the rlhf.c chat-template tests (tests/test_chat_template.c).

Run from the repository root:

    tools/reference/.venv/bin/python tools/reference/make_chat_template_fixtures.py

Every template below is rendered by Python jinja2 inside transformers' own environment:
transformers.utils.chat_template_utils._cached_compile_jinja_template builds the exact
ImmutableSandboxedEnvironment apply_chat_template uses (trim_blocks, lstrip_blocks,
loopcontrols, the AssistantTracker {% generation %} tag, transformers' tojson,
raise_exception, strftime_now, namespace, dict). Nothing is downloaded.

Two rendering modes per case:
  "render"  compiled.render(**vars)                        -- the bare Template.render
  "apply"   what tokenizer.apply_chat_template(tokenize=False) does: null-valued message
            keys dropped, then render_jinja_template(...) with special tokens + kwargs
            (reasoning aliasing, tools/documents None when absent, continue_final_message).

strftime_now is pinned to NOW so that outputs are reproducible; the C test pins the same
clock.

Also: tests/fixtures/chat_templates/tokenizers/<name>/ -- tiny tokenizer directories (a
WordLevel tokenizer.json plus hand-written tokenizer_config.json, chat_template.jinja,
special_tokens_map.json, ...) loaded with AutoTokenizer.from_pretrained, and their
expected.json: what tokenizer.apply_chat_template(messages, tools=..., tokenize=False,
add_generation_prompt=..., **kwargs) returns (or the error it raises) -- the loader test.

Output: tests/fixtures/chat_templates/<name>.json, one file per template:
  {"name", "description", "template", "now",
   "cases": [{"name", "mode", "vars"            (render mode), or
                              "args"            (apply mode: messages, tools, documents,
                                                 add_generation_prompt, continue_final_message,
                                                 special_tokens, kwargs),
              then "expected": str  or  "error": str, "error_type": str, "error_line": int|null}]}

The family templates (chatml, Llama 2/3/3.1, Mistral, Qwen2.5, Qwen3, Zephyr/TinyLlama,
SmolLM2) are reconstructions written for these tests from the descriptions in
shared/spec/hf-formats.md section 5.3: they use the same Jinja constructs, in the same way,
as the published templates; the prose inside them is ours. The script checks them against
the reference renderings listed in that section.
"""

import datetime
import json
import os
import sys
import traceback

import jinja2
import transformers
from transformers.utils import chat_template_utils as ctu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "chat_templates")
NOW = datetime.datetime(2024, 7, 26, 9, 5, 3)


def fixed_strftime_now(fmt):
    return NOW.strftime(fmt)


def compile_template(src):
    tpl = ctu._compile_jinja_template(src)
    tpl.environment.globals["strftime_now"] = fixed_strftime_now
    return tpl


def error_line(exc):
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return exc.lineno
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == "<template>":
            line = frame.lineno
    return line


def run_case(src, case):
    try:
        if case["mode"] == "render":
            out = compile_template(src).render(**case["vars"])
        else:
            a = case["args"]
            compile_template(src)  # pins the clock on the cached environment
            # The checks and the null-key drop apply_chat_template does before rendering.
            if not a["messages"]:
                raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
            if a.get("continue_final_message") and a.get("add_generation_prompt"):
                raise ValueError("continue_final_message and add_generation_prompt are not compatible.")
            msgs = [{k: v for k, v in m.items() if v is not None} for m in a["messages"]]
            kwargs = {**a.get("special_tokens", {}), **a.get("kwargs", {})}
            rendered, _ = ctu.render_jinja_template(
                conversations=[msgs],
                tools=a.get("tools"),
                documents=a.get("documents"),
                chat_template=src,
                add_generation_prompt=a.get("add_generation_prompt", False),
                continue_final_message=a.get("continue_final_message", False),
                **kwargs,
            )
            out = rendered[0]
        return {"expected": out}
    except Exception as exc:  # noqa: BLE001 -- every failure is a fixture outcome
        return {"error": str(exc), "error_type": type(exc).__name__, "error_line": error_line(exc)}


# ----------------------------------------------------------------------------------------
# Message lists

SYS = {"role": "system", "content": "You are a careful assistant."}
U1 = {"role": "user", "content": "Hi"}
A1 = {"role": "assistant", "content": "Hello! How can I help?"}
U2 = {"role": "user", "content": "What is 2+2?\nAnswer briefly."}
A2 = {"role": "assistant", "content": "  4  "}
UNI = {"role": "user", "content": "Grüße, 世界! \"quotes\" and 'single' \\ back\tslash <tag> & 😀"}

MSGS = {
    "single": [U1],
    "system": [SYS, U1],
    "multi": [SYS, U1, A1, U2, A2],
    "multi_nosys": [U1, A1, U2],
    "unicode": [SYS, UNI],
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city — in °C.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "days": {"type": "integer", "enum": [1, 2, 3]},
                "precise": {"type": "number", "default": 0.5},
            },
            "required": ["city"],
        },
        "return": {"type": "string"},
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {"name": "now", "description": "Time now", "parameters": {"type": "object", "properties": {}}},
}
TOOLS = [WEATHER_TOOL, TIME_TOOL]

TOOL_CALL_MSGS = [
    {"role": "user", "content": "Weather in Paris and the time?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call00001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}},
            {"id": "call00002", "type": "function", "function": {"name": "now", "arguments": {}}},
        ],
    },
    {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "{\"temp\": 21.5}"},
    {"role": "tool", "tool_call_id": "call00002", "name": "now", "content": "09:05"},
    {"role": "assistant", "content": "It is 21.5 °C in Paris and 09:05."},
]

REASONING_MSGS = [
    {"role": "system", "content": "Think first."},
    {"role": "user", "content": "Is 7 prime?"},
    {"role": "assistant", "content": "<think>\nIt has no divisors but 1 and 7.\n</think>\n\nYes."},
    {"role": "user", "content": "And 9?"},
    {"role": "assistant", "content": "No, 9 = 3 x 3.", "reasoning_content": "3 divides 9."},
]


def agp_cases(messages_names, extra=None, special=None):
    """render-mode cases for each message list, generation prompt on and off."""
    cases = []
    for mname in messages_names:
        for agp in (True, False):
            v = {"messages": MSGS[mname], "add_generation_prompt": agp}
            v.update(special or {})
            v.update(extra or {})
            cases.append({"name": f"{mname}_{'gen' if agp else 'nogen'}", "mode": "render", "vars": v})
    return cases


LLAMA_SPECIAL = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
SP_SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
QWEN_SPECIAL = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}

# ----------------------------------------------------------------------------------------
# Family templates (reconstructions, see the module docstring)

CHATML = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

ALPACA = (
    "{{ bos_token }}{% for message in messages %}{% if not loop.first %}{{ '\n\n' }}{% endif %}"
    "{% if message['role'] == 'system' and loop.first %}{{ message['content'] }}"
    "{% elif message['role'] == 'user' %}{{ '### Instruction:\n' + message['content'] }}"
    "{% elif message['role'] == 'assistant' %}{{ '### Response:\n' + message['content'] + eos_token }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '\n\n### Response:\n' }}{% endif %}"
)

LLAMA2 = """{% if messages[0]['role'] == 'system' %}
    {% set loop_messages = messages[1:] %}
    {% set system_message = '<<SYS>>\\n' + messages[0]['content'] | trim + '\\n<</SYS>>\\n\\n' %}
{% else %}
    {% set loop_messages = messages %}
    {% set system_message = '' %}
{% endif %}
{% for message in loop_messages %}
    {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {% endif %}
    {% if loop.index0 == 0 %}
        {% set content = system_message + message['content'] %}
    {% else %}
        {% set content = message['content'] %}
    {% endif %}
    {% if message['role'] == 'user' %}
        {{ bos_token + '[INST] ' + content | trim + ' [/INST]' }}
    {% elif message['role'] == 'assistant' %}
        {{ ' ' + content | trim + ' ' + eos_token }}
    {% endif %}
{% endfor %}
"""

MISTRAL_V02 = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

MISTRAL_V3_TOOLS = """{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- Alternation check; tool turns are free. #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\\n\\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

ZEPHYR = """{% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>\\n' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>\\n' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>\\n'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}"""

SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

QWEN25 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nFunction signatures, one per line, inside <tools></tools>:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nAnswer a call as <tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

QWEN3 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nSignatures inside <tools></tools>:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nCall a tool as <tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

LLAMA31 = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- The system message, if any, comes first. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System header: always there. #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "Answer with a function call as JSON {\\"name\\": name, \\"parameters\\": {arguments}}.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Tools can also go into the first user message. #}
{%- if tools_in_user_message and not tools is none %}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
    {%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Functions you may call:\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
            {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# Built-in templates (src/chat/templates/*.jinja, compiled into rlhf), checked against the
# renderings axolotl-config.md sections 4.3 / 4.7 give for Axolotl's templates.
BUILTIN_DIR = os.path.join(ROOT, "src", "chat", "templates")
HELLO = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "goodbye"}]
SPEC_BUILTIN_RENDERINGS = [
    ("chatml", {"messages": HELLO, "add_generation_prompt": True},
     "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n<|im_start|>user\ngoodbye<|im_end|>\n<|im_start|>assistant\n"),
    ("llama3", {"messages": HELLO, "add_generation_prompt": True, **LLAMA_SPECIAL},
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nhello<|eot_id|><|start_header_id|>user<|end_header_id|>\n\ngoodbye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("gemma", {"messages": HELLO, "add_generation_prompt": True, "bos_token": "<bos>", "eos_token": "<eos>"},
     "<bos><start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\nhello<end_of_turn>\n<start_of_turn>user\ngoodbye<end_of_turn>\n<start_of_turn>model\n"),
    ("chatml", {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], "add_generation_prompt": True},
     "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"),
    ("qwen_25", {"messages": [U1], "add_generation_prompt": True},
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    ("qwen3", {"messages": [U1], "add_generation_prompt": True, "enable_thinking": False},
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"),
]


def builtin_fixtures():
    out = []
    for fname in sorted(os.listdir(BUILTIN_DIR)):
        if not fname.endswith(".jinja"):
            continue
        name = fname[:-len(".jinja")]
        with open(os.path.join(BUILTIN_DIR, fname), encoding="utf-8") as f:
            src = f.read()
        special = LLAMA_SPECIAL if name == "llama3" else {"bos_token": "<bos>", "eos_token": "<eos>"} if name == "gemma" else SP_SPECIAL
        mlists = ["single", "multi_nosys"] if name == "gemma" else ["single", "system", "multi", "unicode"]
        cases = agp_cases(mlists, special=special)
        if name in ("qwen3",):
            cases.append(apply_case("reasoning", REASONING_MSGS, True, QWEN_SPECIAL))
            cases.append(apply_case("no_thinking", [U1], True, QWEN_SPECIAL, kwargs={"enable_thinking": False}))
        if name in ("qwen3", "qwen_25"):
            cases.append(apply_case("tools_refused", [U1], True, QWEN_SPECIAL, tools=TOOLS))
        if name == "gemma":
            cases.append({"name": "system_refused", "mode": "render", "vars": {"messages": MSGS["system"], **special}})
        out.append({"name": "builtin_" + name, "description": f"built-in template '{name}' (src/chat/templates/{fname})",
                    "template": src, "cases": cases})
    return out


# Reference renderings from hf-formats.md 5.3 (messages [user "Hi"], generation prompt on).
SPEC_RENDERINGS = {
    "qwen25": (QWEN25, {}, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    "qwen3": (QWEN3, {}, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    "qwen3_nothink": (QWEN3, {"enable_thinking": False}, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"),
    "llama3": (LLAMA3, LLAMA_SPECIAL, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    "llama31": (LLAMA31, {**LLAMA_SPECIAL, "date_string": "26 Jul 2024"}, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    "mistral_v02": (MISTRAL_V02, SP_SPECIAL, "<s>[INST] Hi [/INST]"),
    "zephyr": (ZEPHYR, SP_SPECIAL, "<|user|>\nHi</s>\n<|assistant|>\n"),
    "smollm2": (SMOLLM2, {}, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
}

# ----------------------------------------------------------------------------------------
# Construct-coverage templates: (name, description, template, [(case name, vars)])

C = []


def construct(name, description, template, *var_sets):
    cases = []
    for i, vs in enumerate(var_sets or [{}]):
        if isinstance(vs, tuple):
            cname, vs = vs
        else:
            cname = f"v{i}"
        cases.append({"name": cname, "mode": "render", "vars": vs})
    C.append({"name": name, "description": description, "template": template, "cases": cases})


construct("ws_trim_lstrip", "trim_blocks/lstrip_blocks: newline after %} and #} removed, indentation before {% removed, {{ }} untouched",
          "Start\n  {% if true %}\n    yes\n  {% endif %}\n  {# comment #}\n  {{ 'x' }}\n\tindented {{ 'y' }}\n{% for i in [1,2] %}\n  item {{ i }}\n{% endfor %}\nEnd\n")
construct("ws_minus", "explicit - markers strip all whitespace incl. newlines on that side",
          "a  \n  {%- if true -%}  \n  b  \n  {%- endif %}\n  c {{- ' d ' -}}  \n  e\n{#- note -#}\n  f  {{ 'g' -}}\n\n h",
          {})
construct("ws_plus", "{%+ keeps the indentation, +%} keeps the newline",
          "x\n    {%+ if true +%}\n  y\n    {% endif +%}\nz\n")
construct("ws_crlf_trailing", "\\r\\n and \\r normalised; one trailing newline dropped",
          "line1\r\n{% if true %}\r\nline2\rline3\r{% endif %}\n\n")
construct("ws_tag_midline", "lstrip only applies when the tag starts the line",
          "a {% if true %}b{% endif %} c\n   {% if true %}d{% endif %}   \n{{ 'e' }}   {% if true %}\nf\n{% endif %}")
construct("raw_block", "{% raw %} content is data",
          "{% raw %}{{ not evaluated }} {% if %}{% endraw %}|{%- raw -%}   x   {%- endraw -%}  |")
construct("comments", "comments with - markers and multi-line bodies",
          "a{# one #}b\n{# two\nlines #}\nc {#- strip -#} d\n  {# indented #}\ne")
construct("literals", "literals and Python-style str()",
          "{{ 1 }}|{{ -2 }}|{{ 1.5 }}|{{ 1e3 }}|{{ 0.1 + 0.2 }}|{{ 1_000 }}|{{ 0x1F }}|{{ 0o17 }}|{{ 0b101 }}|{{ true }}|{{ False }}|{{ none }}|{{ None }}|"
          "{{ 'a' 'b' }}|{{ \"q\\\"uote\" }}|{{ 'esc\\t\\x41\\u00e9\\n' }}|{{ [1, 'two', none, true, 2.50] }}|{{ {'k': 'v', 'n': [1, {'x': none}]} }}|{{ (1,) }}|{{ (1, 'a') }}|{{ () }}|{{ 1e16 }}|{{ 1e-5 }}|{{ 123456789.125 }}|{{ -0.0 }}|{{ 3.0 }}")
construct("repr_strings", "repr of strings inside containers picks quotes like Python",
          "{{ [\"it's\", 'say \"hi\"', 'both \\' and \"', 'tab\\tnl\\n', 'uni é', 'ctl \\x01'] }}")
construct("arith", "arithmetic with Python semantics",
          "{{ 7 / 2 }} {{ 8 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} "
          "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ -3 + +2 }} {{ true + 1 }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] * 2 }} "
          "{{ [1, 2] + [3] }} {{ 'a' + 'b' }} {{ 10 - 2.5 }} {{ 1 / 3 }}")
construct("concat_tilde", "~ stringifies every operand",
          "{{ 'a' ~ 1 ~ none ~ true ~ [1, 'x'] ~ 2.0 ~ undefined_var ~ 'z' }}")
construct("compare", "comparisons, chains, in / not in",
          "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} "
          "{{ 'ell' in 'hello' }} {{ 'x' not in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'v' in {'k': 'v'} }} {{ 'a' in undefined_var }} "
          "{{ none == none }} {{ [1, [2]] == [1, [2]] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ (1, 2) == [1, 2] }} {{ '' == none }} {{ undefined_var == undefined_other }}")
construct("logic", "and/or return operands; not; inline if",
          "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ '' and 'b' }}|{{ none or [] }}|{{ not 0 }}|{{ not 'x' }}|{{ not not [] }}|"
          "{{ 'yes' if 1 else 'no' }}|{{ 'yes' if 0 else 'no' }}|{{ 'only' if 0 }}|{{ 'a' if 0 else 'b' if 0 else 'c' }}|{{ not 1 == 2 }}|{{ 1 if true and not false or false }}")
construct("precedence_filter", "filters bind tighter than + and ~",
          "{{ '<' + '  x  ' | trim + '>' }}|{{ 'a' ~ ' b ' | upper ~ 'c' }}|{{ -1 | abs }}|{{ -(' ab ' | trim | length) }}|{{ [3, 1, 2] | sort | first }}|{{ 'x' | upper is string }}")
construct("subscript", "indexing, negative indexes, slices, attribute/item fallback",
          "{{ seq[0] }} {{ seq[-1] }} {{ seq[1:] }} {{ seq[:-1] }} {{ seq[::-1] }} {{ seq[::2] }} {{ seq[1:3] }} {{ seq[-2:] }} {{ seq[5:] }} {{ seq[:100] }} "
          "{{ s[0] }} {{ s[-1] }} {{ s[1:4] }} {{ s[::-1] }} {{ d.k }} {{ d['k'] }} {{ d.missing }} {{ d['missing'] is defined }} {{ seq[10] is defined }} {{ seq.0 }} "
          "{{ d.items is defined }} {{ d['items'] }} {{ d.get('k') }} {{ d.get('nope') }} {{ d.get('nope', 'dflt') }} {{ nested.a.b[1].c }}",
          {"seq": [1, 2, 3, 4], "s": "héllo wörld", "d": {"k": "v", "items": "item-key"}, "nested": {"a": {"b": [0, {"c": "deep"}]}}})
construct("if_elif_else", "if / elif / else chains and truthiness",
          "{% for v in values %}{% if v is none %}N{% elif v is string and v %}S{% elif v is string %}E{% elif v is mapping %}M{% elif v is iterable %}I{% elif v %}T{% else %}F{% endif %}{% endfor %}",
          {"values": [None, "x", "", {}, [1], [], 0, 1, 0.0, 2.5, True, False]})
construct("for_loop_vars", "loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem/cycle/depth",
          "{% for x in items %}[{{ loop.index }} {{ loop.index0 }} {{ loop.revindex }} {{ loop.revindex0 }} {{ loop.first }} {{ loop.last }} {{ loop.length }} "
          "{{ loop.previtem if loop.previtem is defined else '-' }} {{ loop.nextitem | default('-') }} {{ loop.cycle('odd', 'even') }} {{ loop.depth }}"
          "{% for y in [1] %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}]{% endfor %}",
          {"items": ["a", "b", "c"]})
construct("for_else_filter", "for ... if filter (loop counters count kept items), else branch, break/continue",
          "{% for i in nums if i % 2 == 0 %}{{ i }}:{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% else %}none{% endfor %}|"
          "{% for i in [] %}x{% else %}empty{% endfor %}|{% for i in undefined_var %}x{% else %}undef-empty{% endfor %}|"
          "{% for i in nums %}{% if i == 3 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}|"
          "{% for i in nums if i > 100 %}{{ i }}{% else %}{% for j in [1, 2] %}{{ j }}{% endfor %}{% endfor %}",
          {"nums": [1, 2, 3, 4, 5, 6]})
construct("for_unpack", "tuple unpacking in for and set; iterating dicts, strings, items()",
          "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|"
          "{% for a, b in pairs %}{{ a }}-{{ b }} {% endfor %}|{% for ch in 'hé!' %}[{{ ch }}]{% endfor %}|{% set x, y = [1, 2] %}{{ x }}{{ y }}|{% set p = 1, 2 %}{{ p }}|"
          "{% for (a, b) in pairs %}{{ a }}{% endfor %}|{% for k, v in d | dictsort %}{{ k }}{% endfor %}",
          {"d": {"b": 1, "a": 2, "c": 3}, "pairs": [[1, 2], ["x", "y"]]})
construct("scoping", "set in loops does not leak; namespace does; top-level set shadows variables; if opens no scope",
          "{% set x = 'outer' %}{% for i in [1, 2] %}{{ x }}{% set x = 'inner' ~ i %}{{ x }},{% endfor %}{{ x }}|"
          "{% set ns = namespace(total=0, names=[]) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% set ns.names = ns.names + [i] %}{% endfor %}{{ ns.total }} {{ ns.names }}|"
          "{% if true %}{% set y = 'from-if' %}{% endif %}{{ y }}|{% set messages = messages[1:] %}{{ messages | length }}|"
          "{% for i in [1] %}{% for j in [2] %}{% set x = 'deep' %}{% endfor %}{{ x }}{% endfor %}|{{ ns }}",
          {"messages": [1, 2, 3]})
construct("set_block", "block set with and without filters",
          "{% set body %}\n  Hello {{ name }}!\n{% endset %}[{{ body }}]{% set shout | trim | upper %}  quiet {{ name }}  {% endset %}[{{ shout }}]",
          {"name": "Ann"})
construct("macros", "macros: defaults, keyword args, varargs/kwargs, top-level scope at call time, recursion",
          "{% macro greet(who, punct='!') %}Hi {{ who }}{{ punct }}{{ suffix }}{% endmacro %}{% set suffix = '.' %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct=';', who='C') }}|"
          "{% macro va(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ va(1, 2, 3, z=4) }}|"
          "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}{% endmacro %}{{ fact(5) }}|"
          "{% macro missing(a, b) %}{{ a }}[{{ b }}]{{ b is defined }}{% endmacro %}{{ missing(1) }}|"
          "{% for i in [1] %}{% set suffix = 'loop' %}{{ greet('D') }}{% endfor %}|{{ greet is defined }}")
construct("tests_all", "is-tests",
          "{% for v in values %}{{ v is defined }}{{ v is none }}{{ v is string }}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is boolean }}"
          "{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}{{ v is true }}{{ v is false }}{{ v is callable }};{% endfor %}|"
          "{{ u is defined }}{{ u is undefined }}{{ u is iterable }}{{ u is sequence }}{{ u is none }}|{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}|"
          "{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 'aB' is lower }}|{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 2 is gt 1 }}{{ 2 is lt 1 }}{{ 2 is ge 2 }}{{ 2 is le 1 }}{{ 2 is ne 1 }}{{ 'a' is in 'abc' }}|"
          "{{ none is sameas none }}{{ true is sameas true }}{{ false is sameas 0 }}|{{ 'upper' is filter }}{{ 'odd' is test }}{{ 'nofilter' is filter }}|{{ x is not none }}{{ x is not defined }}",
          {"values": [None, "s", 1, 2.5, True, False, [1], {"a": 1}, ""], "x": 0})
construct("filters_strings", "string filters",
          "{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'MiXeD' | lower }}|{{ 'MiXeD' | upper }}|{{ 'hello wORLD-foo(bar) x_y <a' | title }}|"
          "{{ 'hELLO World' | capitalize }}|{{ 'a-b-c' | replace('-', '+') }}|{{ 'aaaa' | replace('a', 'b', 2) }}|{{ 'ab' | replace('', '.') }}|{{ 5 | string ~ '!' }}|"
          "{{ 'hé' | length }}|{{ 'hé' | count }}|{{ 'abc' | reverse }}|{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent('> ', blank=true) }}|"
          "{{ '<a href=\"x\">&\\'</a>' | e }}|{{ '<b>' | escape }}|{{ none | safe }}|{{ 'one two  three' | wordcount }}|{{ 'abc' | center(9) }}|"
          "{{ 'Grüße STRASSE' | lower }}|{{ 'straße' | upper }}|{{ 'ÉCOLE' | lower }}|{{ 'foo bar baz qux' | truncate(9) }}|{{ 'foo bar baz qux' | truncate(9, true) }}|{{ 'short' | truncate(9) }}")
construct("filters_numbers", "int, float, abs, round, sum, min, max",
          "{{ '42' | int + 1 }}|{{ '4.7' | int }}|{{ 4.7 | int }}|{{ 'x' | int }}|{{ 'x' | int(7) }}|{{ '0x1A' | int(0, 16) }}|{{ '0b11' | int(base=0) }}|{{ ' 12 ' | int }}|{{ '1_000' | int }}|{{ true | int }}|{{ none | int }}|"
          "{{ '2.5' | float }}|{{ 3 | float }}|{{ 'bad' | float }}|{{ 'bad' | float(1.5) }}|{{ -3 | abs }}|{{ -2.5 | abs }}|"
          "{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 2.675 | round(2) }}|{{ 2.1 | round(0, 'ceil') }}|{{ 2.9 | round(method='floor') }}|{{ 3 | round }}|"
          "{{ [1, 2, 3] | sum }}|{{ [1.5, 2] | sum }}|{{ [{'v': 1}, {'v': 5}] | sum(attribute='v') }}|{{ [3, 1, 2] | min }}|{{ [3, 1, 2] | max }}|{{ ['b', 'A', 'c'] | max }}|{{ ['b', 'A', 'c'] | min(case_sensitive=true) }}|{{ [] | max }}")
construct("filters_sequences", "sequence filters",
          "{{ [1, 2, 3] | join('-') }}|{{ ['a', 1, none] | join }}|{{ users | join(', ', attribute='name') }}|{{ users | map(attribute='name') | list }}|"
          "{{ users | map(attribute='age', default=0) | list }}|{{ [1, 2] | map('string') | join('+') }}|{{ ['a', 'b'] | map('upper') | list }}|"
          "{{ users | selectattr('admin') | map(attribute='name') | list }}|{{ users | rejectattr('admin') | list | length }}|"
          "{{ users | selectattr('name', 'equalto', 'bo') | first }}|{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('odd') | list }}|"
          "{{ [0, 1, '', 'x'] | select | list }}|{{ ['a', 'b', 'code_interpreter'] | reject('equalto', 'code_interpreter') | join(', ') }}|"
          "{{ [1, 5, 3] | select('>', 2) | list }}|{{ [1, 2, 3] | first }}|{{ [1, 2, 3] | last }}|{{ [] | first is defined }}|{{ 'abc' | first }}|{{ 'abc' | list }}|"
          "{{ {'b': 1, 'a': 2} | list }}|{{ ['b', 'A', 'a', 'B'] | unique | list }}|{{ ['b', 'A', 'a', 'B'] | unique(case_sensitive=true) | list }}|"
          "{{ ['b', 'C', 'a'] | sort }}|{{ ['b', 'C', 'a'] | sort(case_sensitive=true) }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ users | sort(attribute='name') | map(attribute='name') | join }}|"
          "{{ [1, 2, 3] | reverse | list }}|{{ {'B': 1, 'a': 2, 'c': 0} | dictsort }}|{{ {'B': 1, 'a': 2, 'c': 0} | dictsort(by='value') }}|{{ {'B': 1, 'a': 2} | dictsort(true, reverse=true) }}|"
          "{{ [1, 2, 3, 4, 5] | batch(2) | list }}|{{ [1, 2, 3] | batch(2, 0) | list }}|{{ {'a': 1} | items | list }}|{{ undefined_var | items | list }}|{{ undefined_var | list }}|"
          "{{ [1, 2] | length }}|{{ {'a': 1} | count }}|{{ undefined_var | length }}|{{ users[0] | attr('name') }}|{{ (users | first).age | default('n/a') }}",
          {"users": [{"name": "bo", "admin": True}, {"name": "al", "age": 30, "admin": False}, {"name": "cy"}]})
construct("filters_default", "default / d with and without boolean",
          "{{ missing | default('d1') }}|{{ '' | default('d2') }}|{{ '' | default('d3', true) }}|{{ none | default('d4') }}|{{ none | d('d5', boolean=true) }}|"
          "{{ 0 | d('d6', true) }}|{{ present | default('no') }}|{{ missing | default }}|{{ obj.missing | default('d7') }}",
          {"present": "yes", "obj": {}})
construct("tojson", "transformers' tojson: ensure_ascii off, indent, separators, sort_keys, key order kept",
          "{{ data | tojson }}\n{{ data | tojson(indent=2) }}\n{{ data | tojson(indent='\\t') }}\n{{ data | tojson(separators=(',', ':')) }}\n"
          "{{ data | tojson(sort_keys=true) }}\n{{ data | tojson(ensure_ascii=true) }}\n{{ data | tojson(indent=0) }}\n{{ 'plain' | tojson }}\n{{ [] | tojson(indent=4) }}\n"
          "{{ 1.0 | tojson }} {{ 1e20 | tojson }} {{ none | tojson }} {{ (1, 'a') | tojson }} {{ {'x': {}} | tojson(indent=1) }}",
          {"data": {"z": 1, "a": [1, 2.5, None, True, False], "s": "é \"q\" \\ \n\t\u0001 <>&' 😀 \u2028", "o": {}, "n": -0.5, "big": 12345678901234}})
construct("string_methods", "Python str methods",
          "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\nab\\n'.lstrip('\\n') }}|{{ 'ab\\n\\n'.rstrip('\\n') }}|{{ '  ab  '.lstrip() }}.|{{ '  ab  '.rstrip() }}.|"
          "{{ 'a,b,,c'.split(',') }}|{{ '  a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.split(none, 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ '<think>x</think>y'.split('</think>')[-1] }}|"
          "{{ 'hello'.startswith('he') }}{{ 'hello'.endswith('lo') }}{{ 'hello'.startswith(('x', 'h')) }}|{{ 'hi there'.upper() }}|{{ 'HI'.lower() }}|{{ \"they're bill's friends\".title() }}|"
          "{{ 'hELLO'.capitalize() }}|{{ 'aXa'.replace('a', 'b') }}|{{ 'hello'.find('l') }}{{ 'hello'.rfind('l') }}{{ 'hello'.find('z') }}|{{ 'hello'.count('l') }}|"
          "{{ '-'.join(['a', 'b']) }}|{{ '123'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}{{ 'a1'.isalnum() }}{{ 'ab'.islower() }}{{ 'AB'.isupper() }}|"
          "{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ 'prefix-x'.removeprefix('prefix-') }}|{{ 'x.txt'.removesuffix('.txt') }}|{{ 'Hello World'.istitle() }}|{{ 'aB'.swapcase() }}")
construct("dict_methods", "dict methods and membership",
          "{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.get('a') }}{{ d.get('z', 0) }}|"
          "{{ 'a' in d }}{{ 'z' in d }}|{{ d | length }}|{{ d.a }}{{ d['b'] }}",
          {"d": {"a": 1, "b": [2]}})
construct("globals", "range, namespace, dict, strftime_now (pinned clock)",
          "{{ range(3) | list }}|{{ range(1, 7, 2) | list }}|{{ range(5, 0, -2) | list }}|{% for i in range(2) %}{{ i }}{% endfor %}|"
          "{% set ns = namespace(a=1) %}{% set ns.b = ns.a + 1 %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }}|{% set d = dict(x=1, y='z') %}{{ d }}|"
          "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M:%S %A %j') }}|{{ namespace(k='v').k }}")
construct("generation_tag", "{% generation %} renders its body normally",
          "{% for m in messages %}{{ m.role }}: {% if m.role == 'assistant' %}{% generation %}{{ m.content }}<end>{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}",
          {"messages": MSGS["multi"]})
construct("print_tag", "{% print %} statement", "{% print 'a' ~ 1 %}|{% print 1, 2 %}")
construct("iterators", "generator filters are one-pass and always truthy; dict views and range print like Python; errors of lazy filters wait for consumption",
          "{% set g = [1, 2, 3] | select('odd') %}{{ 'truthy' if ([] | select) else 'falsy' }}|{{ g | list }}|{{ g | list }}|{{ {'a': 1}.items() }}|{{ {'a': 1}.keys() }}|"
          "{{ {'a': 1}.values() }}|{{ range(2, 10, 3) }}|{{ range(3) }}|{{ [1, 2] | reverse | list }}|{% set r = [1, 2, 3] | map('string') %}{{ r | first }}{{ r | list }}|"
          "{{ {'a': 1}.items() | list }}|{{ {}.items() | length }}|{{ 'x' | items is defined }}|{{ 5 | select is defined }}|{{ [3, 1] | unique | sort }}|"
          "{% for x in [1, 2] | map('string') %}{{ loop.length }}{{ x }}{% endfor %}|{{ 2 in ([1, 2, 3] | select) }}|{{ {'a': 1}.items() | length }}")
construct("printf_format", "printf-style % and the format filter",
          "{{ '%s|%r|%d|%i|%5d|%-5d|%05d|%+d|% d|%x|%X|%#x|%o|%#o|%.3d|%c|%c|%%' % ('a', 'b', 42, -7, 3, 3, -3, 3, 3, 255, 255, 255, 8, 8, 5, 65, 'z') }}|"
          "{{ '%f|%.2f|%8.3f|%-8.1f|%08.2f|%e|%.3E|%g|%G|%+.1f' % (3.14159, 2.675, -1.5, 2.25, -2.5, 12345.678, 0.00012, 1e20, 1e-10, 2) }}|"
          "{{ '%s and %s' % (none, [1, 'x']) }}|{{ '%(a)s-%(b)05.1f' % {'a': 'A', 'b': 2.25} }}|{{ '%s' % 'single' }}|{{ '%d%%' % 50 }}|"
          "{{ '%.2s|%5s|%-5s|' % ('hello', 'ab', 'ab') }}|{{ 'no args' % [] }}|{{ '%s' % (1, 2) if false else 'x' }}|{{ '%d' % 3.99 }}|{{ '%d' % true }}|"
          "{{ '%s, %s!' | format('Hello', 'World') }}|{{ '%(x)s' | format(x='kw') }}|{{ '%x' % -255 }}|{{ '%5.1s|' % 'abc' }}|{{ '%s' % undefined_var }}|{{ '%*d|%-*d|' % (4, 7, 3, 1) }}")
construct("undefined_behaviour", "undefined values: printing, length, iteration, default, comparisons",
          "[{{ nope }}]{{ nope | length }}{{ nope | string }}{{ nope | trim }}{{ nope | upper }}{{ nope | join }}{{ nope | list }}{{ nope | first }}{{ nope == nope2 }}{{ nope != 1 }}"
          "{% for x in nope %}x{% endfor %}{{ nope is defined }}{{ d.missing }}{{ d.missing is defined }}{{ (nope or 'fallback') }}{{ nope ~ '!' }}{{ 'a' if nope else 'b' }}",
          {"d": {}})

# Error cases: the C renderer must fail (and say what jinja2 says where the test checks it).
E = []


def error_case(name, description, template, variables=None):
    E.append({"name": name, "description": description, "template": template,
              "cases": [{"name": "error", "mode": "render", "vars": variables or {}}]})


error_case("err_raise", "raise_exception carries the template's message",
           "line one\n{% if x %}\n{{ raise_exception('Custom failure: ' ~ x) }}\n{% endif %}", {"x": "boom"})
error_case("err_syntax_unclosed_if", "unclosed block", "{% if x %}\nabc\n")
error_case("err_syntax_expr", "bad expression", "ok\n{{ 1 + }}")
error_case("err_unknown_filter", "unknown filter at compile time", "a\nb\n{{ x | nosuchfilter }}")
error_case("err_unknown_test", "unknown test", "{% if x is nosuchtest %}{% endif %}")
error_case("err_unknown_tag", "unknown tag", "x\n{% frobnicate %}")
error_case("err_stray_end", "end tag without its start", "{% endif %}")
error_case("err_undefined_attr", "attribute of an undefined value", "x\n{{ missing.attr }}")
error_case("err_undefined_arith", "arithmetic with undefined", "{{ missing + 1 }}")
error_case("err_type_concat", "str + int", "{{ 'a' + 1 }}")
error_case("err_unterminated_string", "string literal never closed", "{{ 'abc }}")
error_case("err_unclosed_var", "{{ without }}", "abc {{ x ")
error_case("err_comment", "comment never closed", "abc {# x ")
error_case("err_division", "division by zero", "{{ 1 / 0 }}")
error_case("err_unsafe", "mutating methods are blocked by the sandbox", "{% set l = [] %}{{ l.append(1) }}")
error_case("err_not_iterable", "iterating an int", "{% for x in 5 %}{% endfor %}")
error_case("err_tojson_undefined", "tojson of an undefined value", "{{ missing | tojson }}")
error_case("err_neg_binds_before_filter", "unary minus applies before filters: -'ab'|length negates a string",
           "{{ - 'ab' | length }}")
error_case("err_printf_args", "too many arguments for a format string", "{{ '%s' % (1, 2) }}")
error_case("err_printf_type", "%d of a string", "{{ '%d' % 'x' }}")
error_case("err_namespace_underscore", "namespace attributes must not start with _", "{% set ns = namespace() %}{% set ns._x = 1 %}")

# ----------------------------------------------------------------------------------------
# Family fixtures

F = []


def family(name, description, template, cases):
    F.append({"name": name, "description": description, "template": template, "cases": cases})


def apply_case(name, messages, agp, special, **extra):
    args = {"messages": messages, "add_generation_prompt": agp, "special_tokens": special}
    args.update(extra)
    return {"name": name, "mode": "apply", "args": args}


family("chatml", "ChatML (Axolotl's chatml; SmolLM v1 style)", CHATML,
       agp_cases(["single", "system", "multi", "unicode"])
       + [{"name": "agp_undefined", "mode": "render", "vars": {"messages": MSGS["single"]}}])
family("llama3", "Llama 3 (original): bos on the first message, content | trim", LLAMA3,
       agp_cases(["single", "system", "multi"], special=LLAMA_SPECIAL))
family("alpaca", "Axolotl alpaca", ALPACA, agp_cases(["single", "system", "multi"], special=SP_SPECIAL))
family("apply_extras", "apply_chat_template inputs: documents, continue_final_message on a template that trims, null keys dropped, reasoning aliases",
       "{% if documents %}DOCS:{% for d in documents %}[{{ d.title }}|{{ d.text }}]{% endfor %}\n{% endif %}"
       "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% if m.thinking is defined %}(thinking={{ m.thinking }}){% endif %}"
       "{% if m.reasoning_content is defined %}(rc={{ m.reasoning_content }}){% endif %}{{ '(no name)' if m.name is not defined }}</{{ m.role }}>\n{% endfor %}"
       "{{ 'tools=' ~ (tools | length) if tools is not none else 'tools=None' }} {{ 'docs=None' if documents is none }}",
       [apply_case("documents", [U1], False, {}, documents=[{"title": "T1", "text": "one"}, {"title": "T2", "text": "two"}]),
        apply_case("continue_trimmed", [U1, {"role": "assistant", "content": "Partial answer  "}], False, {}, continue_final_message=True),
        apply_case("continue_exact", [U1, {"role": "assistant", "content": "Partial"}], False, {}, continue_final_message=True),
        apply_case("null_keys", [{"role": "user", "content": "x", "name": None}], True, {}, tools=TOOLS),
        apply_case("reasoning_key", [U1, {"role": "assistant", "content": "A", "reasoning": "R"}], False, {}),
        apply_case("continue_with_agp", [U1, A1], True, {}, continue_final_message=True)])
family("llama2", "Llama 2 chat: <<SYS>> folded into the first user turn, alternation check", LLAMA2,
       agp_cases(["single", "system", "multi", "multi_nosys"], special=SP_SPECIAL)
       + [{"name": "bad_alternation", "mode": "render",
           "vars": {"messages": [U1, U1], **SP_SPECIAL}}])
family("mistral_v02", "Mistral v0.1/v0.2: alternation check raising, no system role", MISTRAL_V02,
       agp_cases(["single", "multi_nosys"], special=SP_SPECIAL)
       + [{"name": "bad_alternation", "mode": "render", "vars": {"messages": [U1, A1, A1], **SP_SPECIAL}},
          {"name": "system_rejected", "mode": "render", "vars": {"messages": MSGS["system"], **SP_SPECIAL}}])
family("mistral_v3_tools", "Mistral v0.3: selectattr, namespace counter, tool schemas via items() with a loop filter, out[:-1]",
       MISTRAL_V3_TOOLS,
       agp_cases(["single", "system", "multi"], special=SP_SPECIAL)
       + [apply_case("tools_available", [SYS, U1, A1, U2], True, SP_SPECIAL, tools=TOOLS),
          apply_case("tool_calls", TOOL_CALL_MSGS, False, SP_SPECIAL, tools=TOOLS),
          apply_case("bad_alternation", [U1, U2], True, SP_SPECIAL),
          apply_case("bad_tool_id", [U1, {"role": "assistant", "tool_calls": [{"id": "short", "function": {"name": "now", "arguments": {}}}]}],
                     False, SP_SPECIAL)])
family("zephyr", "Zephyr / TinyLlama-Chat: newlines after tags handled by trim_blocks", ZEPHYR,
       agp_cases(["single", "system", "multi"], special=SP_SPECIAL))
family("smollm2", "SmolLM2-Instruct: ChatML plus a default system prompt", SMOLLM2,
       agp_cases(["single", "system", "multi"]))
family("qwen25", "Qwen2.5-Instruct: default system prompt, tools via tojson, tool responses folded into user turns",
       QWEN25,
       agp_cases(["single", "system", "multi", "unicode"], special=QWEN_SPECIAL)
       + [apply_case("tools_no_system", [U1], True, QWEN_SPECIAL, tools=TOOLS),
          apply_case("tools_with_system", [SYS, U1], True, QWEN_SPECIAL, tools=TOOLS),
          apply_case("tool_calls", TOOL_CALL_MSGS, True, QWEN_SPECIAL, tools=TOOLS),
          apply_case("tool_calls_no_tools", TOOL_CALL_MSGS, False, QWEN_SPECIAL),
          apply_case("null_content", [U1, {"role": "assistant", "content": None, "tool_calls": TOOL_CALL_MSGS[1]["tool_calls"]}], False, QWEN_SPECIAL, tools=TOOLS),
          apply_case("continue_final", [U1, {"role": "assistant", "content": "Partial answer"}], False, QWEN_SPECIAL, continue_final_message=True)])
family("qwen3", "Qwen3: reversed scan with namespace, reasoning_content, <think> splitting, enable_thinking",
       QWEN3,
       agp_cases(["single", "system", "multi"], special=QWEN_SPECIAL)
       + [apply_case("reasoning", REASONING_MSGS, True, QWEN_SPECIAL),
          apply_case("reasoning_last", REASONING_MSGS[:3], False, QWEN_SPECIAL),
          apply_case("no_thinking", [U1], True, QWEN_SPECIAL, kwargs={"enable_thinking": False}),
          apply_case("thinking_on", [U1], True, QWEN_SPECIAL, kwargs={"enable_thinking": True}),
          apply_case("tools", [SYS] + TOOL_CALL_MSGS, True, QWEN_SPECIAL, tools=TOOLS),
          apply_case("tool_response_last", TOOL_CALL_MSGS[:4], True, QWEN_SPECIAL, tools=TOOLS),
          apply_case("reasoning_alias_thinking", [U1, {"role": "assistant", "content": "Done.", "thinking": "via thinking key"}], False, QWEN_SPECIAL)])
family("llama31", "Llama 3.1: date from strftime_now, tools in the first user message, single tool call, builtin tools",
       LLAMA31,
       agp_cases(["single", "system", "multi"], special=LLAMA_SPECIAL)
       + [apply_case("date_string_given", [U1], True, LLAMA_SPECIAL, kwargs={"date_string": "01 Jan 2025"}),
          apply_case("tools_in_user", [SYS, U1], True, LLAMA_SPECIAL, tools=[WEATHER_TOOL]),
          apply_case("tools_in_system", [SYS, U1], True, LLAMA_SPECIAL, tools=[WEATHER_TOOL], kwargs={"tools_in_user_message": False}),
          apply_case("tool_call", [U1, {"role": "assistant", "tool_calls": [TOOL_CALL_MSGS[1]["tool_calls"][0]]},
                                    {"role": "tool", "content": {"temp": 21.5}}], True, LLAMA_SPECIAL, tools=[WEATHER_TOOL]),
          apply_case("builtin_tool_call", [U1, {"role": "assistant", "tool_calls": [{"function": {"name": "brave_search", "arguments": {"query": "paris weather"}}}]}],
                     False, LLAMA_SPECIAL, kwargs={"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]}),
          apply_case("two_tool_calls_raise", TOOL_CALL_MSGS[:2], False, LLAMA_SPECIAL, tools=TOOLS),
          apply_case("tools_without_user_raise", [SYS], False, LLAMA_SPECIAL, tools=TOOLS)])


# ----------------------------------------------------------------------------------------
# Tokenizer directories: how transformers finds the template and the special tokens.

TOK_T = ("{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token }}|{{ image_token }}|"
         "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ '[gen]' if add_generation_prompt }}")
ADDED_BOS = {"__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
ONE_TOOL = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}]

TOKENIZER_DIRS = [
    ("added_token_dict", "bos_token as an AddedToken dict, a model-specific *_token key, pad_token null",
     {"bos_token": ADDED_BOS, "eos_token": "</s>", "pad_token": None, "image_token": "<img>", "chat_template": TOK_T}, {}),
    ("special_tokens_map_overrides", "no added_tokens_decoder: special_tokens_map.json is read and overrides the config",
     {"bos_token": "<s>", "chat_template": TOK_T},
     {"special_tokens_map.json": {"eos_token": {"content": "</s>", "lstrip": False}, "bos_token": "<map-bos>", "unk_token": "<unk>"}}),
    ("added_tokens_decoder_ignores_map", "with added_tokens_decoder, special_tokens_map.json is not read",
     {"bos_token": "<s>", "chat_template": TOK_T,
      "added_tokens_decoder": {"1": {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}}},
     {"special_tokens_map.json": {"eos_token": "</s>"}}),
    ("named_templates", "chat_template as a list: 'default', and 'tool_use' when tools are given",
     {"eos_token": "</s>", "chat_template": [{"name": "default", "template": "DEFAULT " + TOK_T}, {"name": "tool_use", "template": "TOOL_USE {{ tools | length }} " + TOK_T}]}, {}),
    ("jinja_file_wins", "chat_template.jinja beats tokenizer_config.json; additional_chat_templates/tool_use.jinja; the file's trailing newline is dropped",
     {"eos_token": "</s>", "chat_template": "FROM CONFIG"},
     {"chat_template.jinja": "FROM FILE {{ messages[0].content }}\n", "additional_chat_templates/tool_use.jinja": "TOOL FILE {{ tools[0].function.name }}\n\n"}),
    ("no_default_template", "several templates and none named default",
     {"chat_template": [{"name": "other", "template": "X"}]}, {}),
    ("qwen25", "a Qwen2.5-style directory: template in tokenizer_config.json, bos null, eos <|im_end|>",
     {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": QWEN25, "add_bos_token": False}, {}),
    ("llama31", "a Llama-3.1-style directory: template in chat_template.jinja, AddedToken bos",
     {"bos_token": dict(ADDED_BOS, content="<|begin_of_text|>"), "eos_token": "<|eot_id|>"}, {"chat_template.jinja": LLAMA31}),
]

TOKENIZER_CASES = [
    {"name": "single_gen", "messages": [U1], "add_generation_prompt": True},
    {"name": "multi", "messages": MSGS["multi"], "add_generation_prompt": False},
    {"name": "tools", "messages": [SYS, U1], "add_generation_prompt": True, "tools": ONE_TOOL},
    {"name": "kwargs", "messages": [U1], "add_generation_prompt": True, "kwargs": {"date_string": "02 Feb 2025", "eos_token": "<override>"}},
]


def make_tokenizer_fixtures():
    import shutil
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer

    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", "hi"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    root = os.path.join(OUT_DIR, "tokenizers")
    shutil.rmtree(root, ignore_errors=True)
    count = 0
    for name, description, config, files in TOKENIZER_DIRS:
        d = os.path.join(root, name)
        os.makedirs(d)
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast", **config}, f, ensure_ascii=False, indent=1)
        for rel, content in files.items():
            path = os.path.join(d, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(content if isinstance(content, str) else json.dumps(content))
        cases = []
        for case in TOKENIZER_CASES:
            out = dict(case)
            try:
                tokenizer = AutoTokenizer.from_pretrained(d)
                compile_template(tokenizer.get_chat_template(None, case.get("tools")))  # pins the clock
                out["expected"] = tokenizer.apply_chat_template(
                    case["messages"], tools=case.get("tools"), tokenize=False,
                    add_generation_prompt=case["add_generation_prompt"], **case.get("kwargs", {}))
            except Exception as exc:  # noqa: BLE001
                out["error"] = f"{type(exc).__name__}: {exc}"
            cases.append(out)
            count += 1
        with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
            json.dump({"description": description, "now": NOW.isoformat(), "cases": cases}, f, ensure_ascii=False, indent=1)
            f.write("\n")
    return count


def main():
    failures = 0
    for name, variables, want in SPEC_BUILTIN_RENDERINGS:
        with open(os.path.join(BUILTIN_DIR, name + ".jinja"), encoding="utf-8") as f:
            got = compile_template(f.read()).render(**variables)
        if got != want:
            failures += 1
            print(f"built-in {name} differs from the spec rendering:\n  want {want!r}\n  got  {got!r}", file=sys.stderr)
    F.extend(builtin_fixtures())
    for name, (tpl, extra, want) in SPEC_RENDERINGS.items():
        got = compile_template(tpl).render(messages=[U1], add_generation_prompt=True, **extra)
        if got != want:
            failures += 1
            print(f"spec rendering mismatch for {name}:\n  want {want!r}\n  got  {got!r}", file=sys.stderr)
    os.makedirs(OUT_DIR, exist_ok=True)
    for old in os.listdir(OUT_DIR):
        if old.endswith(".json"):
            os.remove(os.path.join(OUT_DIR, old))
    total = 0
    for group in (C, E, F):
        for fx in group:
            for case in fx["cases"]:
                case.update(run_case(fx["template"], case))
                total += 1
                if group is E and "error" not in case:
                    failures += 1
                    print(f"{fx['name']}: expected an error, got {case['expected']!r}", file=sys.stderr)
            doc = {"name": fx["name"], "description": fx["description"], "template": fx["template"],
                   "now": NOW.isoformat(), "jinja2_version": jinja2.__version__,
                   "transformers_version": transformers.__version__, "cases": fx["cases"]}
            with open(os.path.join(OUT_DIR, fx["name"] + ".json"), "w", encoding="utf-8") as f:
                json.dump(doc, f, ensure_ascii=False, indent=1)
                f.write("\n")
    ntok = make_tokenizer_fixtures()
    print(f"wrote {len(C) + len(E) + len(F)} fixture files, {total} cases, and {len(TOKENIZER_DIRS)} tokenizer "
          f"directories ({ntok} cases) to {OUT_DIR}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
