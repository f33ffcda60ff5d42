"""What serve_client.py and vllm_client.py share: the failure count and `rlhf generate`, whose
tokens are what the server must answer with."""
import json
import subprocess

failures = 0


def check(cond, what):
    """Counts and prints a failed check; the script exits 1 when any failed."""
    global failures
    if not cond:
        failures += 1
        print("FAILED:", what, flush=True)


def run_generate(rlhf, model_dir, path, rows, *args):
    """`rlhf generate` over `rows` written as a prompts file at `path`: one result per row."""
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    out = subprocess.run([rlhf, "generate", "--model", model_dir, "--prompts", path, *args],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines()]
