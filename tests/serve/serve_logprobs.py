"""Top-N log-probabilities of `rlhf serve` through the official openai client (completions, chat,
streams) and TRL's /generate/, against tests/fixtures/serve/logprobs.json: transformers'
log-softmax on models/tiny-arith (tools/reference/make_serve_logprobs_fixture.py). The OpenAI
endpoints must report the raw logits' log-probs (vLLM's default logprobs_mode), whatever the
temperature or top-k; /generate/ the processed ones (TRL starts vLLM with processed_logprobs).

usage: serve_logprobs.py BASE_URL MODEL_NAME FIXTURE
Prints a FAILED line for each mismatch and exits 1 when there was any."""
import json
import sys

import openai

import serve_common
from serve_common import REQUEST_TIMEOUT_S, check

base_url, model_name, fixture = sys.argv[1:4]
ref = json.load(open(fixture))
client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0,
                       timeout=REQUEST_TIMEOUT_S)
TOL = 1e-4  # float32 forwards of two implementations


def close(a, b):
    return a is not None and abs(a - b) <= TOL


def check_ranking(got, tokens, values, what):
    """got: [(token, logprob)] as served; tokens/values: the reference ranking (the same length).
    Values must match rank by rank; a token may differ only from one of equal value (a tie)."""
    check(len(got) == len(values), f"{what}: {len(got)} alternatives, want {len(values)}")
    for k, (tok, lp) in enumerate(got[:len(values)]):
        ties = {tokens[i] for i in range(len(values)) if abs(values[i] - values[k]) <= TOL}
        check(close(lp, values[k]) and tok in ties,
              f"{what} rank {k}: {tok!r} {lp}, want {tokens[k]!r} {values[k]}")
    lps = [lp for _, lp in got]
    check(lps == sorted(lps, reverse=True), f"{what}: not sorted most likely first: {lps}")
    check(len({t for t, _ in got}) == len(got), f"{what}: repeated tokens {got}")


# completions, greedy, logprobs 20: tokens, their log-probs, the top 20 and text_offset
case = ref["completion"]
r = client.completions.create(model=model_name, prompt=case["prompt"], temperature=0, max_tokens=8,
                              logprobs=20)
lp = r.choices[0].logprobs
steps = case["steps"]
check(lp.tokens == [s["text"] for s in steps], f"completion tokens {lp.tokens}")
for t, s in enumerate(steps[:len(lp.tokens)]):
    check(close(lp.token_logprobs[t], s["logprob"]),
          f"completion token {t} logprob {lp.token_logprobs[t]}, want {s['logprob']}")
    check_ranking(list(lp.top_logprobs[t].items()), s["top_tokens"], s["top_logprobs"],
                  f"completion step {t}")
offsets = [sum(len(x) for x in lp.tokens[:t]) for t in range(len(lp.tokens))]
check(lp.text_offset == offsets, f"text_offset {lp.text_offset}, want {offsets}")

# raw, not processed: sampled at temperature 1.7 with top_k 5, each step of the same sequence
# reports the top 5 of the model's own distribution, and the sampled token its raw log-prob
for t, s in enumerate(steps):
    r = client.completions.create(model=model_name, prompt=case["prompt_ids"] + case["tokens"][:t],
                                  temperature=1.7, max_tokens=1, logprobs=5, seed=t,
                                  extra_body={"top_k": 5})
    lp = r.choices[0].logprobs
    check_ranking(list(lp.top_logprobs[0].items()), s["top_tokens"][:5], s["top_logprobs"][:5],
                  f"sampled step {t}")
    raw = dict(zip(s["top_tokens"], s["top_logprobs"]))
    check(lp.tokens[0] in raw and close(lp.token_logprobs[0], raw[lp.tokens[0]]),
          f"sampled step {t}: {lp.tokens[0]!r} {lp.token_logprobs[0]}, want the raw {raw}")

# chat: logprobs true, top_logprobs 5
case = ref["chat"]
kw = dict(model=model_name, messages=case["messages"], temperature=0, max_tokens=8, logprobs=True,
          top_logprobs=5)
r = client.chat.completions.create(**kw)
content = r.choices[0].logprobs.content
check(len(content) == len(case["steps"]), f"chat: {len(content)} tokens")
for t, (c, s) in enumerate(zip(content, case["steps"])):
    check(c.token == s["text"] and close(c.logprob, s["logprob"]),
          f"chat token {t}: {c.token!r} {c.logprob}, want {s['text']!r} {s['logprob']}")
    check(c.bytes == list(c.token.encode()), f"chat token {t} bytes {c.bytes}")
    check_ranking([(a.token, a.logprob) for a in c.top_logprobs], s["top_tokens"][:5],
                  s["top_logprobs"][:5], f"chat step {t}")
    check(all(a.bytes == list(a.token.encode()) for a in c.top_logprobs), f"chat {t} alt bytes")

# chat streamed: the chunks' logprobs add up to the whole response's
whole = [(c.token, c.logprob, [(a.token, a.logprob) for a in c.top_logprobs]) for c in content]
streamed, text = [], ""
for chunk in client.chat.completions.create(stream=True, **kw):
    for ch in chunk.choices:
        text += ch.delta.content or ""
        if ch.logprobs and ch.logprobs.content:
            streamed += [(c.token, c.logprob, [(a.token, a.logprob) for a in c.top_logprobs])
                         for c in ch.logprobs.content]
check(streamed == whole, f"streamed chat logprobs {streamed} != {whole}")
check(text == r.choices[0].message.content, f"streamed chat text {text!r}")

# completions streamed, sampled, n 2 with a stop string: each choice's chunks add up to the
# non-streamed answer of the same seed
kw = dict(model=model_name, prompt="Add 5", temperature=1.0, max_tokens=10, n=2, seed=5,
          logprobs=3, stop=["99"])
r = client.completions.create(**kw)
want = {c.index: (c.text, c.logprobs.tokens, c.logprobs.token_logprobs, c.logprobs.top_logprobs,
                  c.logprobs.text_offset) for c in r.choices}
got = {i: ("", [], [], [], []) for i in want}
for chunk in client.completions.create(stream=True, **kw):
    for c in chunk.choices:
        text, toks, lps, tops, offs = got[c.index]
        text += c.text
        if c.logprobs:
            toks, lps = toks + c.logprobs.tokens, lps + c.logprobs.token_logprobs
            tops, offs = tops + c.logprobs.top_logprobs, offs + c.logprobs.text_offset
        got[c.index] = (text, toks, lps, tops, offs)
check(got == want, f"streamed completions {got} != {want}")


# TRL's /generate/ (processed log-probs): top_k 4 keeps 4 ids; logprobs 6 lists those 4 by rank
def post(path, body):
    return serve_common.post_json(base_url + path, json.dumps(body).encode())


case = ref["processed"]
for n in (6, 2):
    status, out = post("/generate/", {"prompts": [case["prompt_ids"]], "temperature": 0.7,
                                      "top_k": 4, "max_tokens": 1, "logprobs": n,
                                      "generation_kwargs": {"seed": n}})
    check(status == 200, f"/generate/ logprobs {n}: {status} {out}")
    if status != 200:
        continue
    ids, lps = out["logprob_token_ids"][0][0], out["logprobs"][0][0]
    sampled = out["completion_ids"][0][0]
    want = dict(zip(case["top_ids"], case["top_logprobs"]))
    k = min(n, len(case["top_ids"]))
    # the n most likely kept ids, then the sampled one when it is not among them
    expect = case["top_ids"][:k] + ([sampled] if sampled not in case["top_ids"][:k] else [])
    check(ids == expect, f"/generate/ logprobs {n}: ids {ids}, want {expect}")
    check(all(i in want and close(v, want[i]) for i, v in zip(ids, lps)),
          f"/generate/ logprobs {n}: {lps}, want processed {want}")

# malformed: 400 naming the field, and the server goes on
bad = [("/v1/completions", {"model": model_name, "prompt": "1", "logprobs": 21}, "logprobs"),
       ("/v1/completions", {"model": model_name, "prompt": "1", "logprobs": -1}, "logprobs"),
       ("/v1/chat/completions", {"model": model_name, "messages": [{"role": "user", "content": "1"}],
                                 "top_logprobs": 3}, "top_logprobs"),
       ("/v1/chat/completions", {"model": model_name, "messages": [{"role": "user", "content": "1"}],
                                 "logprobs": True, "top_logprobs": "3"}, "top_logprobs"),
       ("/generate/", {"prompts": ["1"], "logprobs": 21}, "logprobs")]
for path, body, param in bad:
    status, err = post(path, body)
    check(status == 400 and err.get("error", {}).get("param") == param,
          f"{path} {body} -> {status} {err}")
check(client.models.list().data[0].id == model_name, "still serving after the malformed requests")

print("serve_logprobs: %s" % ("ok" if serve_common.failures == 0 else
                              f"{serve_common.failures} failures"), flush=True)
sys.exit(1 if serve_common.failures else 0)
