"""`rlhf serve` as TRL's vLLM server: replays the calls of TRL 1.9's
trl.generation.vllm_client.VLLMClient (which refuses to start without vllm installed) with
`requests`, bodies exactly as it sends them, and reads the answers as it parses them. Expected
tokens come from `rlhf generate` run here at the same settings.

usage: vllm_client.py RLHF MODEL_DIR BASE_URL WORKDIR   (BASE_URL without /v1)
Prints a FAILED line for each mismatch and exits 1 when there was any."""
import json
import math
import subprocess
import sys

import requests

import serve_common
from serve_common import check, run_generate

rlhf, model_dir, base_url, work = sys.argv[1:5]
session = requests.Session()
def generate(rows, *args):
    """`rlhf generate` over a prompts file: one result line per row."""
    return run_generate(rlhf, model_dir, f"{work}/vllm_prompts.jsonl", rows, *args)


def body(prompts_key, prompts, n=1, repetition_penalty=1.0, temperature=1.0, top_p=1.0, top_k=0,
         min_p=0.0, max_tokens=16, logprobs=0, structured_outputs_regex=None,
         generation_kwargs=None, **extra):
    """VLLMClient.generate's / .chat's JSON body, with its defaults."""
    b = {prompts_key: prompts, "n": n, "repetition_penalty": repetition_penalty,
         "temperature": temperature, "top_p": top_p, "top_k": top_k, "min_p": min_p,
         "max_tokens": max_tokens, "logprobs": logprobs,
         "structured_outputs_regex": structured_outputs_regex,
         "generation_kwargs": generation_kwargs or {}}
    if prompts_key == "prompts":
        b["images"] = None
    else:
        b["chat_template_kwargs"] = {}
        b["tools"] = None
    b.update(extra)
    return b


def post(path, b):
    """VLLMClient's parse of a 200 answer: the four keys, or it raises."""
    r = session.post(f"{base_url}{path}", json=b)
    if r.status_code != 200:
        raise Exception(f"Request failed: {r.status_code}, {r.text}")
    j = r.json()
    return {k: j[k] for k in ("prompt_ids", "completion_ids", "logprobs", "logprob_token_ids")}


def shape_ok(out, n_seqs):
    """parse_logprobs' contract: logprobs and logprob_token_ids (seqs, len, 1), the id = the token."""
    cids, lps, lids = out["completion_ids"], out["logprobs"], out["logprob_token_ids"]
    return (len(cids) == n_seqs and len(lps) == n_seqs and len(lids) == n_seqs and all(
        len(lp) == len(c) and len(li) == len(c) and all(len(x) == 1 for x in lp) and
        [x[0] for x in li] == c for c, lp, li in zip(cids, lps, lids)))


# check_server / get_world_size
r = requests.get(f"{base_url}/health/")
check(r.status_code == 200 and r.json() == {"status": "ok"}, f"GET /health/: {r.status_code} {r.text}")
r = session.get(f"{base_url}/get_world_size/")
check(r.status_code == 200 and r.json()["world_size"] == 1, f"/get_world_size/: {r.text}")

# greedy text prompts: completion_ids and logprobs equal `rlhf generate --temperature 0`'s
prompts = ["3+4=", "12+7=", "1"]
out = post("/generate/", body("prompts", prompts, temperature=0.0, max_tokens=12))
ref = generate([{"prompt": p} for p in prompts], "--temperature", "0", "--max-new-tokens", "12")
want = [r["completions"][0]["token_ids"] for r in ref]
check(out["completion_ids"] == want, f"greedy /generate/: {out['completion_ids']} != {want}")
check(shape_ok(out, 3), f"greedy /generate/ logprobs shape: {out}")
ref_lps = [r["completions"][0]["logprobs"] for r in ref]
check(all(abs(a[0] - b) < 1e-5 for lp, rl in zip(out["logprobs"], ref_lps) for a, b in zip(lp, rl)),
      f"greedy /generate/ logprobs {out['logprobs']} != rlhf generate's {ref_lps}")
check(len(out["prompt_ids"]) == 3 and all(out["prompt_ids"]), f"prompt_ids: {out['prompt_ids']}")

# the same prompts as token ids: the same completions
tok = post("/generate/", body("prompts", out["prompt_ids"], temperature=0.0, max_tokens=12))
check(tok["completion_ids"] == want and tok["prompt_ids"] == out["prompt_ids"],
      f"token-id prompts: {tok}")

# truncate_prompt_tokens (through generation_kwargs): each prompt keeps its last k tokens
long_ids = out["prompt_ids"][1]
tr = post("/generate/", body("prompts", [long_ids], temperature=0.0, max_tokens=4,
                             generation_kwargs={"truncate_prompt_tokens": 2}))
check(tr["prompt_ids"] == [long_ids[-2:]], f"truncate_prompt_tokens 2: {tr['prompt_ids']}")

# sampled, n = 3, seed in generation_kwargs: rlhf generate --seed's tokens
samp = post("/generate/", body("prompts", ["3+4="], n=3, temperature=1.3, max_tokens=10,
                               generation_kwargs={"seed": 5}))
ref = generate([{"prompt": "3+4="}], "--temperature", "1.3", "--top-k", "0", "--top-p", "1",
               "--n", "3", "--seed", "5", "--max-new-tokens", "10")[0]
want = [c["token_ids"] for c in ref["completions"]]
check(samp["completion_ids"] == want, f"sampled n=3 seed 5: {samp['completion_ids']} != {want}")
check(shape_ok(samp, 3), "sampled logprobs shape")

# logprobs None: no logprobs (parse_logprobs' (None, None))
nolp = post("/generate/", body("prompts", ["3+4="], temperature=0.0, max_tokens=4, logprobs=None))
check(nolp["logprobs"] is None and nolp["logprob_token_ids"] is None, f"logprobs None: {nolp}")

# /chat/: the chat template applied, as `rlhf generate` on {"messages"}
conv = [{"role": "user", "content": "What is 3+4?"}]
chat = post("/chat/", body("messages", [conv, conv], temperature=0.0, max_tokens=12))
ref = generate([{"messages": conv}], "--temperature", "0", "--max-new-tokens", "12")[0]
want = ref["completions"][0]["token_ids"]
check(chat["completion_ids"] == [want, want], f"greedy /chat/: {chat['completion_ids']} != {want}")
check(shape_ok(chat, 2), "/chat/ logprobs shape")

# what cannot be honoured: 400 naming the field
refusals = [
    ("/generate/", body("prompts", ["1"], images=[["aGVsbG8="]]), "images"),
    ("/generate/", body("prompts", ["1"], structured_outputs_regex="[0-9]+"),
     "structured_outputs_regex"),
    ("/generate/", body("prompts", ["1"], guided_decoding_regex="[0-9]+"), "guided_decoding_regex"),
    ("/generate/", body("prompts", ["1"], logprobs=21), "logprobs"),  # over max_logprobs 20
    ("/generate/", body("prompts", ["1"], generation_kwargs={"frequency_penalty": 0.5}),
     "generation_kwargs"),
    ("/chat/", body("messages", [conv], chat_template_kwargs={"enable_thinking": False}),
     "chat_template_kwargs"),
    ("/generate/", body("prompts", []), "prompts"),
]
for path, b, name in refusals:
    r = session.post(f"{base_url}{path}", json=b)
    err = r.json().get("error", {}) if r.headers.get("content-type") == "application/json" else {}
    check(r.status_code == 400 and err.get("param") == name and name in err.get("message", ""),
          f"{path} with {name}: {r.status_code} {r.text}")

# weight updates over NCCL: 501 saying so
for path, b in [("/init_communicator/", {"host": "0.0.0.0", "port": 51216, "world_size": 2}),
                ("/update_named_param/", {"name": "w", "dtype": "torch.float32", "shape": [2]}),
                ("/close_communicator/", {})]:
    r = session.post(f"{base_url}{path}", json=b)
    check(r.status_code == 501 and "NCCL" in r.json()["error"]["message"],
          f"{path}: {r.status_code} {r.text}")

print(f"vllm_client.py: {'FAILED' if serve_common.failures else 'ok'} ({serve_common.failures} failures)")
sys.exit(1 if serve_common.failures else 0)
