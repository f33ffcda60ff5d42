"""rlhf train against a Hugging Face Hub served from 127.0.0.1 (fake_hub.py), with the real
huggingface_hub client inside rlhf's embedded Python:

  1. base_model: org/tiny downloads into a fresh HF cache (only the files a model needs) and
     trains; the adapter names its base by the Hub id, the model card too (a local base: by
     its absolute path, and the card names none).
  2. The same config with HF_HUB_OFFLINE=1 trains from the cache without starting Python at all
     (PYTHONHOME points nowhere: an interpreter could not start) and without one request, to
     the same adapter bytes.
  3. push_to_hub (hub_model_id, hub_strategy: checkpoint, hub_revision) creates a private
     repository and uploads: the repository ends byte-identical to the output directory, the
     last checkpoint under last-checkpoint/.
  4. Bad input, each one clear message and nothing written: a missing model id offline, a
     private repository without a token, pushing without a token; hub_model_id accepted or
     refused exactly as huggingface_hub's validate_repo_id.
  5. The Python API: the same resolver for model="org/tiny", push_to_hub(commit_message,
     blocking, token, revision), save_model with args.push_to_hub.

usage: test_hub.py RLHF_BINARY SOURCE_DIR WORK_DIR SITE_PACKAGES
"""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_hub import TOKEN, FakeHub  # noqa: E402

rlhf, src, work, site = (pathlib.Path(a).resolve() for a in sys.argv[1:5])
signal.alarm(600)  # bounded whatever happens
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


shutil.rmtree(work, ignore_errors=True)
work.mkdir(parents=True)
cache = work / "cache"
model_src = src / "models" / "tiny-arith"
model_files = {p.name: p.read_bytes() for p in model_src.iterdir() if p.is_file()}
served = dict(model_files)
# what a real repository also holds and a run must not download
served["consolidated.safetensors"] = b"\0" * 4096
served["pytorch_model.bin"] = b"\0" * 4096
served["README.md"] = b"# tiny\n"

hub = FakeHub(lifetime=500).start()
hub.add_repo("org/tiny", served)
hub.add_repo("org/private", served, private=True)


def write_config(name, **extra):
    lines = [
        "rl: dpo",
        "adapter: lora",
        "lora_r: 4",
        "lora_target_linear: true",
        "datasets:",
        "  - path: %s" % (src / "examples" / "data" / "arith_pref_intel.jsonl"),
        "    type: chatml.intel",
        "sequence_len: 64",
        "micro_batch_size: 4",
        "max_steps: 2",
        "learning_rate: 2e-3",
        "seed: 7",
    ] + ["%s: %s" % kv for kv in extra.items()]
    path = work / (name + ".yaml")
    path.write_text("\n".join(lines) + "\n")
    return path


def run(config, **env_extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_")) and k not in ("PYTHONHOME", "PYTHONPATH")}
    env.update(HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(cache), HF_HOME=str(work / "hf-home"),
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
               PYTHONPATH=str(site), OMP_NUM_THREADS="1", NO_PROXY="127.0.0.1")
    env.update(env_extra)
    env = {k: v for k, v in env.items() if v is not None}
    p = subprocess.run([str(rlhf), "train", str(config)], env=env, cwd=work,
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stderr


def front_matter(readme):
    text = readme.read_text()
    return text.split("---\n")[1] if text.startswith("---\n") else ""


# ---- 1. download into a fresh cache, train ----
out1 = work / "out-download"
rc, err = run(write_config("download", base_model="org/tiny", output_dir=out1))
check(rc == 0, "base_model: org/tiny downloads and trains (rc %d)\n%s" % (rc, err[-3000:]))
sha = hub.repos["org/tiny"].branches["main"]
repo_dir = cache / "models--org--tiny"
snapshot = repo_dir / "snapshots" / sha
check((repo_dir / "refs" / "main").read_text() == sha if (repo_dir / "refs" / "main").exists()
      else False, "refs/main names the commit the Hub served")
got = sorted(p.name for p in snapshot.iterdir()) if snapshot.is_dir() else []
check(got == sorted(model_files), "the snapshot holds exactly the model's files: %s" % got)
check(all((snapshot / f).read_bytes() == model_files[f] for f in got),
      "downloaded files are byte-identical to the served ones")
adapter_cfg = json.loads((out1 / "adapter_config.json").read_text()) if rc == 0 else {}
check(adapter_cfg.get("base_model_name_or_path") == "org/tiny",
      "the adapter names its base by the Hub id: %r" % adapter_cfg.get("base_model_name_or_path"))
fm = front_matter(out1 / "README.md") if rc == 0 else ""
check("base_model: org/tiny\n" in fm and "library_name: peft\n" in fm and "- dpo\n" in fm,
      "the model card's front matter: base_model, library_name, the method tag\n" + fm)

# a local base given by a relative path: the adapter records its absolute path (a relative one
# breaks AutoPeftModelForCausalLM run from another directory), the card no base_model
out_local = work / "out-local"
rc, err = run(write_config("local", base_model=os.path.relpath(model_src, work),
                           output_dir=out_local))
local_cfg = json.loads((out_local / "adapter_config.json").read_text()) if rc == 0 else {}
check(local_cfg.get("base_model_name_or_path") == str(model_src),
      "a local base is recorded by its absolute path: %r (rc %d)"
      % (local_cfg.get("base_model_name_or_path"), rc))
check(rc == 0 and "base_model:" not in front_matter(out_local / "README.md"),
      "a local base is not named as base_model in the card (TRL's rule)")

# ---- 2. offline, from the cache, with no Python ----
n_requests = len(hub.requests)
out2 = work / "out-offline"
rc, err = run(write_config("offline", base_model="org/tiny", output_dir=out2),
              HF_HUB_OFFLINE="1", PYTHONHOME="/nonexistent/python-home", PYTHONPATH=None)
check(rc == 0, "HF_HUB_OFFLINE=1 trains from the cache without Python (rc %d)\n%s"
      % (rc, err[-3000:]))
check(len(hub.requests) == n_requests, "offline: no request reached the Hub")
check(rc == 0 and (out2 / "adapter_model.safetensors").read_bytes()
      == (out1 / "adapter_model.safetensors").read_bytes(),
      "offline from the cache trains the same adapter, byte for byte")

# the cache found where huggingface_hub looks for it: HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub,
# ~/.cache/huggingface/hub (HF_HUB_CACHE unset); a revision that is a commit hash names its
# snapshot directly, an unknown branch is not in the cache
for name, env in [("hf-home", {"HF_HOME": str(work / "home-a")}),
                  ("xdg", {"XDG_CACHE_HOME": str(work / "xdg")}),
                  ("home", {"HOME": str(work / "home-b")})]:
    link = {"hf-home": work / "home-a" / "hub", "xdg": work / "xdg" / "huggingface" / "hub",
            "home": work / "home-b" / ".cache" / "huggingface" / "hub"}[name]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(cache)
    env = dict({"HF_HUB_CACHE": None, "HF_HOME": None, "XDG_CACHE_HOME": None}, **env)
    rc, err = run(write_config("cache-" + name, base_model="org/tiny",
                               output_dir=work / ("out-cache-" + name)),
                  HF_HUB_OFFLINE="1", PYTHONHOME="/nonexistent/python-home", PYTHONPATH=None,
                  **env)
    check(rc == 0, "offline, the cache under %s (rc %d)\n%s" % (link, rc, err[-1500:]))
rc, err = run(write_config("by-commit", base_model="org/tiny", revision_of_model=sha,
                           output_dir=work / "out-by-commit"),
              HF_HUB_OFFLINE="1", PYTHONHOME="/nonexistent/python-home", PYTHONPATH=None)
check(rc == 0, "offline, revision_of_model: <commit hash> (rc %d)\n%s" % (rc, err[-1500:]))
rc, err = run(write_config("by-branch", base_model="org/tiny", model_revision="nosuch",
                           output_dir=work / "out-by-branch"),
              HF_HUB_OFFLINE="1", PYTHONHOME="/nonexistent/python-home", PYTHONPATH=None)
check(rc == 1 and "revision nosuch" in err and "refs/nosuch" in err
      and not (work / "out-by-branch").exists(),
      "offline, model_revision: a branch the cache does not know is refused\n" + err[-1500:])

# ---- 3. push_to_hub ----
out3 = work / "out-push"
rc, err = run(write_config("push", base_model="org/tiny", output_dir=out3,
                           hub_model_id="me/pushed", hub_strategy="checkpoint", save_steps=1,
                           hub_revision="runs"),
              HF_TOKEN=TOKEN)
check(rc == 0, "push_to_hub trains and uploads (rc %d)\n%s" % (rc, err[-3000:]))
pushed = hub.repos.get("me/pushed")
check(pushed is not None and pushed.private, "the repository was created private (Axolotl's)")
if pushed is not None and rc == 0:
    _, files = pushed.files_at("runs")
    files = files or {}
    local = {str(p.relative_to(out3)): p.read_bytes() for p in out3.rglob("*")
             if p.is_file() and not p.relative_to(out3).parts[0].startswith(("checkpoint-", "_"))}
    root = {k: v for k, v in files.items() if not k.startswith("last-checkpoint/")}
    check(sorted(root) == sorted(local), "the branch holds the output directory's files: %s"
          % sorted(root))
    check(all(root.get(k) == v for k, v in local.items()), "uploaded files are byte-identical")
    ckpt = {str(p.relative_to(out3 / "checkpoint-2")): p.read_bytes()
            for p in (out3 / "checkpoint-2").rglob("*") if p.is_file()}
    last = {k[len("last-checkpoint/"):]: v for k, v in files.items()
            if k.startswith("last-checkpoint/")}
    check(last == ckpt, "last-checkpoint/ is checkpoint-2, byte for byte")
    check(pushed.messages[-1] == "End of training"
          and "Training in progress, step 1" in pushed.messages
          and "Training in progress, step 2, checkpoint" in pushed.messages,
          "commit messages as transformers': %s" % pushed.messages)
    check("main" not in pushed.branches or pushed.branches["main"] != pushed.branches["runs"],
          "hub_revision: the commits went to branch runs")
    meta = hub.card_metadata[-1] if hub.card_metadata else {}
    check(meta.get("base_model") == "org/tiny" and meta.get("library_name") == "peft"
          and meta.get("tags") == ["generated_from_trainer", "trl", "dpo", "lora"]
          and meta.get("model_name") == "pushed",
          "the Hub parsed the model card's YAML: %r" % meta)
    check("hub_model_id: me/pushed" not in front_matter(out3 / "README.md")
          and 'model="me/pushed"' in (out3 / "README.md").read_text(),
          "the model card's quick start names the pushed repository")


# ---- 4. bad input: one clear message, nothing written ----
def bad(name, want, config_keys, **env):
    out = work / ("out-" + name)
    n = len(hub.requests)
    rc, err = run(write_config(name, output_dir=out, **config_keys), **env)
    errors = [line for line in err.splitlines() if line.startswith("rlhf: error:")]
    check(rc == 1 and len(errors) == 1 and all(w in errors[0] for w in want),
          "%s: exit 1 with one message naming %s\n%s" % (name, want, err[-2000:]))
    check(not out.exists(), "%s: nothing written" % name)
    return n


n = bad("offline-missing", ["base_model", "org/absent", "HF_HUB_OFFLINE", "hf download org/absent"],
        {"base_model": "org/absent"}, HF_HUB_OFFLINE="1")
check(len(hub.requests) == n, "offline-missing: no request reached the Hub")
check(not (cache / "models--org--absent").exists(), "offline-missing: nothing in the cache")
bad("private-no-token", ["base_model", "org/private", "private", "HF_TOKEN"],
    {"base_model": "org/private"})
bad("push-no-token", ["push_to_hub", "me/other", "HF_TOKEN"],
    {"base_model": "org/tiny", "hub_model_id": "me/other"})
check("me/other" not in hub.repos, "push-no-token: no repository created")


# hub_model_id is checked as huggingface_hub's validate_repo_id checks a repo id (the client
# itself is the reference: an id it accepts goes on to the push, which offline fails there)
from huggingface_hub.utils import HFValidationError, validate_repo_id  # noqa: E402

names = ["me/ok", "ok", "Org_1/name.v2-x", "a/b/c", "-bad/x", "x/bad-", ".x/y", "x--y/z",
         "x/y..z", "x/y.git", "x/" + "y" * 97, "x y/z", "caf\u00e9/z", "x/_y_"]
for name in names:
    try:
        validate_repo_id(name)
        valid = True
    except HFValidationError:
        valid = False
    rc, err = run(write_config("id", base_model=os.path.relpath(model_src, work),
                               output_dir=work / "out-id", hub_model_id='"%s"' % name),
                  HF_HUB_OFFLINE="1", HF_TOKEN=TOKEN)
    refused = "is not a Hub repository id" in err
    check(rc == 1 and refused != valid and not (work / "out-id").exists(),
          "hub_model_id %r: %s as validate_repo_id says\n%s"
          % (name, "accepted" if valid else "refused", err[-600:]))

# ---- 5. the Python API: the same resolver (a Hub id given to the trainer, found in the HF
# cache by the library), push_to_hub(commit_message, blocking, token, revision) ----
library = os.environ.get("RLHF_HUB_LIBRARY")
if not library:
    print("skip the Python API's part: no librlhf.so loadable here (a sanitizer build)")
else:
    os.environ.update(RLHF_LIBRARY=library, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(cache),
                      HF_HOME=str(work / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1",
                      HF_HUB_DISABLE_PROGRESS_BARS="1", NO_PROXY="127.0.0.1")
    os.environ.pop("HF_TOKEN", None)
    sys.path.insert(0, str(src / "python"))
    os.chdir(work)
    from rlhf import DPOConfig, DPOTrainer

    rows = [{"prompt": "What is %d + %d?" % (a, a), "chosen": str(2 * a),
             "rejected": str(2 * a + 1)} for a in range(1, 9)]
    n = len(hub.requests)
    trainer = DPOTrainer(model="org/tiny", train_dataset=rows,
                         args=DPOConfig(output_dir=str(work / "py-out"), max_steps=1,
                                        per_device_train_batch_size=4,
                                        hub_model_id="me/py-pushed"))
    check(len(hub.requests) == n, "Python API: model='org/tiny' came from the cache (no request)")
    check(trainer.model.name_or_path == "org/tiny", "Python API: name_or_path is the Hub id")
    trainer.train()
    future = trainer.push_to_hub(commit_message="from python", blocking=False, token=TOKEN,
                                 revision="py")
    url = future.result(timeout=120)
    pushed = hub.repos.get("me/py-pushed")
    check(pushed is not None and url.startswith(hub.url + "/me/py-pushed/commit/"),
          "Python API: push_to_hub(blocking=False) returns a future of the commit URL: %s" % url)
    if pushed is not None:
        _, files = pushed.files_at("py")
        out = work / "py-out"
        local = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*")
                 if p.is_file() and not p.relative_to(out).parts[0].startswith(("checkpoint-", "_"))}
        check(files == local, "Python API: the branch py holds output_dir byte for byte: %s"
              % sorted(files or {}))
        check(pushed.messages[-1] == "from python" and not pushed.private,
              "Python API: commit_message used; hub_private_repo None leaves the account's "
              "default (public here)")
        trainer.args.push_to_hub = True
        os.environ["HF_TOKEN"] = TOKEN
        trainer.save_model()
        del os.environ["HF_TOKEN"]
        check(pushed.messages[-1] == "Model save" and pushed.branches["main"] in pushed.commits
              and pushed.files_at("main")[1] == local,
              "Python API: save_model with args.push_to_hub pushes output_dir (\"Model save\", "
              "to main)")
        # args.push_to_hub: the repository when the trainer is made, each checkpoint pushed
        # (hub_strategy every_save, TrainingArguments' default), hub_token as the credential
        ckpt_trainer = DPOTrainer(
            model="org/tiny", train_dataset=rows,
            args=DPOConfig(output_dir=str(work / "py-ckpt"), max_steps=2, save_steps=1,
                           per_device_train_batch_size=4, push_to_hub=True,
                           hub_model_id="me/py-ckpt", hub_token=TOKEN))
        made = hub.repos.get("me/py-ckpt")
        check(made is not None and made.messages == ["initial commit"],
              "Python API: push_to_hub=True creates the repository when the trainer is made")
        ckpt_trainer.train()
        check(made is not None and made.messages[1:] == ["Training in progress, step 1",
                                                         "Training in progress, step 2"],
              "Python API: each checkpoint pushed: %s" % (made.messages if made else None))
        check("base_model: org/tiny" in front_matter(out / "README.md")
              and "library_name: transformers" in front_matter(out / "README.md"),
              "Python API: the model card names the Hub base, library transformers")

hub.stop()
print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
