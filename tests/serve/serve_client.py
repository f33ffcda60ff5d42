"""`rlhf serve` through the official openai client, and `rlhf chat` through a pipe; every expected
text comes from `rlhf generate` run here on the same prompt, seed and settings.

usage: serve_client.py RLHF MODEL_DIR BASE_URL MODEL_NAME WORKDIR
Prints a FAILED line for each mismatch and exits 1 when there was any."""
import concurrent.futures
import json
import subprocess
import sys
import time
import urllib.request

import openai

import serve_common
from serve_common import REQUEST_TIMEOUT_S, check, run_generate

rlhf, model_dir, base_url, model_name, work = sys.argv[1:6]
client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0,
                       timeout=REQUEST_TIMEOUT_S)
def generate(rows, *args):
    """`rlhf generate` over a prompts file: one result line per row."""
    return run_generate(rlhf, model_dir, f"{work}/prompts.jsonl", rows, *args)


def texts(result):
    return [c["text"] for c in result["completions"]]


# /v1/models
ids = [m.id for m in client.models.list().data]
check(ids == [model_name], f"/v1/models lists {ids}")

# completions, greedy: text, token log-probs and finish reason as `rlhf generate`
prompt = "12+30="
ref = generate([{"prompt": prompt}], "--temperature", "0", "--max-new-tokens", "12")[0]
r = client.completions.create(model=model_name, prompt=prompt, temperature=0, max_tokens=12,
                              logprobs=0)
c = ref["completions"][0]
check(r.choices[0].text == c["text"], f"greedy completion {r.choices[0].text!r} != {c['text']!r}")
check(r.choices[0].finish_reason == c["finish_reason"], "greedy finish_reason")
lps = r.choices[0].logprobs.token_logprobs
check(len(lps) == len(c["logprobs"]) and all(abs(a - b) < 1e-6 for a, b in zip(lps, c["logprobs"])),
      f"token_logprobs {lps} != generate's {c['logprobs']}")
check(r.usage.completion_tokens == len(c["token_ids"]), "usage.completion_tokens")
check(r.object == "text_completion" and r.id.startswith("cmpl-"), "completion envelope")

# completions, sampled, n > 1 in one request: completion k is generate's stream k
ref = generate([{"prompt": "3+4="}], "--temperature", "1.3", "--top-k", "0", "--n", "6", "--seed",
               "7", "--max-new-tokens", "10")[0]
r = client.completions.create(model=model_name, prompt="3+4=", temperature=1.3, n=6, seed=7,
                              max_tokens=10, extra_body={"top_k": 0})
got = [ch.text for ch in sorted(r.choices, key=lambda ch: ch.index)]
check(got == texts(ref), f"n=6 seed=7 sampled {got} != generate's {texts(ref)}")
check(len(set(got)) > 1, f"n=6 sampled completions are all the same: {got}")

# chat: the template applied as `rlhf generate --chat` / a messages row
messages = [{"role": "user", "content": "What is 21 + 4?"}]
for temp, seed in ((0, None), (1.0, 11)):
    args = ["--temperature", str(temp), "--max-new-tokens", "16", "--n", "3"]
    if seed is not None:
        args += ["--seed", str(seed)]
    ref = generate([{"messages": messages}], *args)[0]
    extra = {"seed": seed} if seed is not None else {}
    r = client.chat.completions.create(model=model_name, messages=messages, temperature=temp,
                                       max_tokens=16, n=3, **extra)
    got = [ch.message.content for ch in sorted(r.choices, key=lambda ch: ch.index)]
    check(got == texts(ref), f"chat (temperature {temp}) {got} != generate's {texts(ref)}")
    check(all(ch.message.role == "assistant" for ch in r.choices), "chat role")
    check(r.object == "chat.completion", "chat envelope")

    # streaming: the deltas of each choice add up to the same text, one finish_reason each
    stream = client.chat.completions.create(model=model_name, messages=messages, temperature=temp,
                                            max_tokens=16, n=3, stream=True,
                                            stream_options={"include_usage": True}, **extra)
    parts, reasons, usage = {}, {}, None
    for chunk in stream:
        check(chunk.object == "chat.completion.chunk", "chunk object")
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            parts[ch.index] = parts.get(ch.index, "") + (ch.delta.content or "")
            if ch.finish_reason:
                reasons[ch.index] = ch.finish_reason
    check([parts.get(i) for i in range(3)] == texts(ref),
          f"streamed chat {parts} != generate's {texts(ref)}")
    check(sorted(reasons) == [0, 1, 2], f"streamed finish reasons {reasons}")
    check(usage is not None and usage.completion_tokens ==
          sum(len(c["token_ids"]) for c in ref["completions"]), f"streamed usage {usage}")

# streamed completions, and stop strings (the text ends before the first one)
ref = generate([{"prompt": "3+4="}], "--temperature", "1.3", "--n", "4", "--seed", "3",
               "--max-new-tokens", "20")[0]
full = texts(ref)
# the stop string: a completion of 3 tokens or more without its first character, so that it
# starts inside the first token and ends in a later one: a stream must hold back its beginning
longest = max(ref["completions"], key=lambda c: len(c["text"]))
check(len(longest["token_ids"]) >= 3 and len(longest["text"]) >= 3,
      f"no completion long enough to hold a stop string: {full}")
stop = longest["text"][1:]
for streamed in (False, True):
    kw = dict(model=model_name, prompt="3+4=", temperature=1.3, n=4, seed=3, max_tokens=20,
              stop=[stop, "never-generated"])
    if streamed:
        got = {}
        for chunk in client.completions.create(stream=True, **kw):
            for ch in chunk.choices:
                got[ch.index] = got.get(ch.index, "") + ch.text
        got = [got[i] for i in range(4)]
    else:
        got = [ch.text for ch in sorted(client.completions.create(**kw).choices,
                                        key=lambda ch: ch.index)]
    want = [t.split(stop)[0] for t in full]
    check(got == want, f"completions (stream={streamed}, stop={stop!r}) {got} != {want}")


# malformed requests: OpenAI-shaped 4xx errors, and the server goes on
def raw_post(path, body):
    return serve_common.post_json(base_url + path, body)


bad = [b"{not json", b"[]", json.dumps({"model": model_name}).encode(),
       json.dumps({"model": model_name, "prompt": "1", "n": 0}).encode(),
       json.dumps({"model": model_name, "prompt": "1", "temperature": "hot"}).encode(),
       json.dumps({"model": model_name, "prompt": "1", "max_tokens": 100000}).encode(),
       json.dumps({"model": model_name, "prompt": "1", "echo": True}).encode()]
for body in bad:
    status, err = raw_post("/completions", body)
    check(status == 400 and isinstance(err.get("error", {}).get("message"), str)
          and err["error"]["type"] == "invalid_request_error", f"{body!r} -> {status} {err}")
status, err = raw_post("/chat/completions", json.dumps({"model": model_name, "messages": []}).encode())
check(status == 400 and err["error"]["param"] == "messages", f"empty messages -> {status} {err}")
try:
    client.completions.create(model="no-such-model", prompt="1", max_tokens=2)
    check(False, "an unknown model was served")
except openai.NotFoundError:
    pass
try:
    client.completions.create(model=model_name, prompt="1", max_tokens=2, n=0)
    check(False, "n=0 accepted")
except openai.BadRequestError as e:
    check("n" in str(e), f"n=0 error {e}")

# load: concurrent clients, malformed requests among them; every valid one answered as generate.
# Greedy requests waiting together with the same max_tokens share one generate() call: two
# max_tokens among them, and seeded sampled requests (which run alone) mixed in.
# (chat: the tiny model's greedy replies to "Add N" differ in length, so that a request given
# the wrong max_tokens shows)
prompts = [f"Add {n}" for n in range(48)]
want = {}
for max_tokens in (2, 6):
    ref = generate([{"messages": [{"role": "user", "content": p}]} for p in prompts],
                   "--temperature", "0", "--max-new-tokens", str(max_tokens))
    want.update({(p, max_tokens): texts(x)[0] for p, x in zip(prompts, ref)})
check(any(want[(p, 2)] != want[(p, 6)] for p in prompts), "max_tokens 2 and 6 give the same texts")


def sampled(i):
    """Request i's sampled completions (seed i, n 2) as generate gives them."""
    p = prompts[i % len(prompts)]
    return texts(generate([{"messages": [{"role": "user", "content": p}]}], "--temperature",
                          "1.0", "--n", "2", "--seed", str(i), "--max-new-tokens", "6")[0])


def abandoned_stream():
    """A streaming request whose client goes away after the first bytes."""
    body = json.dumps({"model": model_name, "prompt": "1+1=", "stream": True, "n": 4,
                       "temperature": 1.0, "max_tokens": 40}).encode()
    req = urllib.request.Request(base_url + "/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
        return resp.status, resp.read(20)


def one(i):
    if i % 7 == 3:  # 9 malformed ones mixed in
        return ("bad", raw_post("/completions", b'{"model": 1, "prompt": [[]]}')[0])
    if i % 7 == 5:  # 9 streams dropped by their clients
        status, head = abandoned_stream()
        return ("dropped", status == 200 and head.startswith(b"data: "))
    p = prompts[i % len(prompts)]
    messages = [{"role": "user", "content": p}]
    if i % 7 == 1:
        r = client.chat.completions.create(model=model_name, messages=messages, temperature=1.0,
                                           n=2, seed=i, max_tokens=6)
        return (("sampled", i),
                [ch.message.content for ch in sorted(r.choices, key=lambda ch: ch.index)])
    max_tokens = 2 + 4 * (i % 2)
    r = client.chat.completions.create(model=model_name, messages=messages, temperature=0,
                                       max_tokens=max_tokens)
    return ((p, max_tokens), r.choices[0].message.content)


start = time.time()
with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
    results = list(pool.map(one, range(64)))
elapsed = time.time() - start
answered = [(p, t) for p, t in results if p not in ("bad", "dropped")]
check(all(t for p, t in results if p == "dropped"), "a dropped stream did not start as one")
for key, t in answered:
    expected = sampled(key[1]) if key[0] == "sampled" else want[key]
    check(t == expected, f"load-test request {key}: {t!r}, generate {expected!r}")
n_valid = sum(1 for i in range(64) if i % 7 not in (3, 5))
check(len(answered) == n_valid, f"{len(answered)} valid answers of {n_valid}")
check(all(t == 400 for p, t in results if p == "bad"), "a malformed load-test request was not a 400")
print(f"load: 64 concurrent clients (9 malformed requests, 9 streams dropped) in {elapsed:.2f}s",
      flush=True)
check(client.models.list().data[0].id == model_name, "still serving after the load")

# rlhf chat: a piped conversation; each reply is generate's on the conversation rendered so far
for temp, seed in (("0", "0"), ("1.0", "5")):
    # (the second turn's reply differs when the first reply is left out of the conversation)
    turns = ["What is 2 + 3?", "Add 5", "/reset", "What is 9 + 9?"]
    out = subprocess.run([rlhf, "chat", model_dir, "--temperature", temp, "--seed", seed,
                          "--max-new-tokens", "12"], input="\n".join(turns) + "\n/exit\nignored\n",
                         check=True, capture_output=True, text=True).stdout
    replies = out.split("\n")[:-1]
    conv, expected = [], []
    for t in turns:
        if t == "/reset":
            conv = []
            continue
        conv.append({"role": "user", "content": t})
        rep = texts(generate([{"messages": conv}], "--temperature", temp, "--seed", seed,
                             "--max-new-tokens", "12")[0])[0]
        expected.append(rep)
        conv.append({"role": "assistant", "content": rep})
    check(replies == expected, f"rlhf chat (temperature {temp}) replied {replies}, "
                               f"generate {expected}")

print("serve_client: %s" % ("ok" if serve_common.failures == 0 else f"{serve_common.failures} failures"), flush=True)
sys.exit(1 if serve_common.failures else 0)
