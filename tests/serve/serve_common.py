"""What the serve test scripts share: the failure count, `rlhf generate` (whose tokens are what
the server must answer with) and a raw JSON POST."""
import json
import subprocess
import urllib.error
import urllib.request

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


def post_json(url, data):
    """POSTs the bytes `data` as JSON to `url`: (status, decoded JSON body), for 4xx answers too."""
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
