"""What the serve test scripts share: the failure count, `rlhf generate` (whose tokens are what
the server must answer with) and a raw JSON POST."""
import json
import subprocess
import urllib.error
import urllib.request

failures = 0

# Seconds a client waits for an answer. Not a latency check (tests assert no wall-clock time): a
# hung server is caught by ctest's TIMEOUT (300 s) anyway, and on a loaded 2-core machine a
# request queued behind the load test's 64 clients waited past the 30 s this was (CI-like run,
# load average ~3.8, 2026-11-29).
REQUEST_TIMEOUT_S = 240


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
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
