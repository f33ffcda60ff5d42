#!/usr/bin/env python3
"""Differential fuzzing of rlhf's chat-template renderer against Python jinja2.

Run from the repository root after `make`:

    tools/reference/.venv/bin/python tools/reference/fuzz_chat_templates.py [SEED] [COUNT]

Random templates are built from every construct the renderer supports (expressions with
filters, tests, methods, operators and slices; if/else, for with filters and else, set,
namespace attributes, comments, and the whitespace markers - and +), rendered by jinja2 in
transformers' environment (see make_chat_template_fixtures.py) and by
`build/rlhf chat-template --template T --vars V --now ...`, and the outputs compared.

Known, accepted differences (not reported):
  - jinja2 prints generator objects with their address (`<generator object ... at 0x...>`);
    rlhf prints `<generator object>`.
  - jinja2's generator filters are lazy: `5 | map('string')` fails only when consumed, so a
    template that never consumes it renders; rlhf defers that error too, but errors raised
    while computing items (not while starting to iterate) come earlier in rlhf.
Not part of the test suite (needs Python); a reproducible seed is printed for each run.
"""

import copy
import json
import os
import random
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_chat_template_fixtures as M  # noqa: E402

ROOT = M.ROOT
RLHF = os.path.join(ROOT, "build", "rlhf")

VARS = {"s": "Hello World", "n": 7, "f": 2.5, "l": [3, 1, "x", None, True],
        "d": {"b": 1, "a": [1, 2], "c": {"k": "v"}}, "e": "", "z": 0, "msgs": M.TOOL_CALL_MSGS,
        "u": "  pad\n", "t": True, "no": None, "neg": -3, "ls": ["b", "A", "c"], "uni": "Grüße 世界"}
ATOMS = ["s", "n", "f", "l", "d", "e", "z", "u", "t", "no", "neg", "ls", "uni", "undef", "d.a", "d['c']", "l[0]",
         "l[-1]", "s[1:4]", "l[::-1]", "uni[2:]", "'lit'", "\"q'\"", "3", "-1", "0.5", "[1, 2]", "{'k': 1}", "none",
         "true", "(1, 'a')", "d.c.k", "msgs[0].role", "msgs[1].tool_calls[0].function.arguments", "range(3)", "loop_i"]
FILTERS = ["trim", "length", "upper", "lower", "title", "capitalize", "string", "list", "first", "last", "tojson",
           "tojson(indent=2)", "int", "float", "default('D')", "default('D', true)", "join(',')", "reverse", "sort",
           "unique", "items", "dictsort", "abs", "round", "count", "replace('l', 'L')", "string | indent(2)",
           "escape", "safe", "wordcount", "select('number')", "reject('none')", "map('string')", "sum", "min", "max",
           "selectattr('role')", "map(attribute='role')", "batch(2)", "center(12)", "trim('H')", "truncate(8)"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
         "true", "false", "odd", "even", "divisibleby(2)", "equalto 3", "in [1, 'x']", "boolean", "lower", "upper"]
BINOPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "and", "or", "in", "not in", "**"]
METHODS = ["strip()", "upper()", "split()", "split('l')", "startswith('H')", "endswith('d')", "replace('o', '0')",
           "lstrip('H')", "rstrip('d')", "title()", "find('o')", "count('l')", "items()", "keys()", "values()",
           "get('a')", "get('q', 1)", "splitlines()", "rsplit(' ', 1)"]
WS = ["", " ", "\n", "  \n", "\n  ", "\t", "x\n", " y "]


def expr(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.3:
        return rng.choice(ATOMS)
    if r < 0.5:
        return f"{expr(rng, depth + 1)} | {rng.choice(FILTERS)}"
    if r < 0.6:
        return f"({expr(rng, depth + 1)}) is {rng.choice(['', 'not '])}{rng.choice(TESTS)}"
    if r < 0.8:
        return f"({expr(rng, depth + 1)}) {rng.choice(BINOPS)} ({expr(rng, depth + 1)})"
    if r < 0.87:
        return f"({expr(rng, depth + 1)}).{rng.choice(METHODS)}"
    if r < 0.93:
        return f"not {expr(rng, depth + 1)}"
    return f"{expr(rng, depth + 1)} if {expr(rng, depth + 1)} else {expr(rng, depth + 1)}"


def mark(rng):
    return rng.choice(["", "", "-", "+"])


def stmt(rng, depth=0):
    r = rng.random()
    ws = rng.choice(WS)
    if depth > 2 or r < 0.35:
        return ws + "{{" + rng.choice(["", "-"]) + " " + expr(rng) + " " + rng.choice(["", "-"]) + "}}"
    if r < 0.5:
        return (ws + "{%" + mark(rng) + " if " + expr(rng) + " " + mark(rng) + "%}" + body(rng, depth + 1) + "{%"
                + mark(rng) + " else %}" + body(rng, depth + 1) + "{% endif " + mark(rng) + "%}")
    if r < 0.65:
        seq = rng.choice(["l", "ls", "range(3)", "d", "s", "msgs", "[]", "undef", "d.items()"])
        return (ws + "{% for loop_i in " + seq + (" if loop_i" if rng.random() < .3 else "") + " %}"
                + rng.choice(["{{ loop.index }}", "{{ loop.last }}", "{{ loop.revindex0 }}", "{{ loop.previtem }}", ""])
                + body(rng, depth + 1) + rng.choice(["", "{% else %}E"]) + "{% endfor %}")
    if r < 0.75:
        return ws + "{% set v" + str(rng.randint(0, 2)) + " = " + expr(rng) + " %}" + ws + "{{ v0 }}"
    if r < 0.8:
        return ws + "{# c #}" + rng.choice(WS)
    if r < 0.88:
        return ws + "{% set ns.a = " + expr(rng) + " %}{{ ns.a }}"
    return (ws + rng.choice(WS) + "{%- if true -%}" + rng.choice(WS) + "{{ 'k' }}" + rng.choice(WS) + "{%+ endif +%}"
            + rng.choice(WS))


def body(rng, depth):
    return "".join(stmt(rng, depth) for _ in range(rng.randint(1, 3)))


def main():
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else random.randrange(1 << 30)
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    rng = random.Random(seed)
    print(f"seed {seed}, {count} templates")
    bad = skipped = 0
    with tempfile.TemporaryDirectory() as tmp:
        vars_path = os.path.join(tmp, "vars.json")
        with open(vars_path, "w", encoding="utf-8") as f:
            json.dump(VARS, f, ensure_ascii=False)
        tpl_path = os.path.join(tmp, "t.jinja")
        for i in range(count):
            src = "{% set ns = namespace(a=0) %}" + body(rng, 0) + rng.choice(["", "\n", "\n\n"])
            py = M.run_case(src, {"mode": "render", "vars": copy.deepcopy(VARS)})
            with open(tpl_path, "w", encoding="utf-8") as f:
                f.write(src)
            run = subprocess.run([RLHF, "chat-template", "--template", tpl_path, "--vars", vars_path,
                                  "--now", M.NOW.isoformat()], capture_output=True)
            if run.returncode not in (0, 1):
                bad += 1
                print(f"CRASH (exit {run.returncode})\n  template: {src!r}\n  {run.stderr.decode()[-500:]}")
                continue
            c_out = run.stdout.decode("utf-8", "surrogateescape") if run.returncode == 0 else None
            if "expected" in py:
                want = re.sub(r"<(\w+) object( \w+)? at 0x[0-9a-f]+>", r"<\1 object>", py["expected"])
                if c_out is None and "object>" in want:
                    skipped += 1
                    continue
                if c_out != want:
                    bad += 1
                    print(f"MISMATCH\n  template: {src!r}\n  jinja2:   {want[:300]!r}\n"
                          f"  rlhf:     {(c_out if c_out is not None else run.stderr.decode())[:300]!r}")
            elif c_out is not None:
                bad += 1
                print(f"RENDERED WHERE JINJA2 FAILS ({py['error_type']}: {py['error'][:120]})\n  template: {src!r}\n"
                      f"  rlhf: {c_out[:300]!r}")
    print(f"{count - bad - skipped}/{count - skipped} agree, {skipped} skipped (accepted differences), seed {seed}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
