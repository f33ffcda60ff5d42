"""A Hugging Face Hub stand-in for dataset repositories, on 127.0.0.1, for tests that point the
real `datasets` / huggingface_hub clients at it with HF_ENDPOINT.

    python hf_dataset_server.py ROOT PORT_FILE [LOG_FILE]

ROOT/<org>/<name>/ is one dataset repository: its files are served as one commit whose sha is
the SHA-1 of their names and bytes (so changing a file is a new revision). Served, as the Hub
serves them:
  GET  /api/datasets/<repo>[/revision/<rev>]        dataset info (sha, siblings)
  GET  /api/datasets/<repo>/tree/<rev>[/<path>]     the file listing (recursive=1 honoured)
  POST /api/datasets/<repo>/paths-info/<rev>        info of the files named in `paths`
  HEAD/GET /datasets/<repo>/resolve/<rev>/<path>    a file, with ETag, X-Repo-Commit and
                                                    Content-Length
Anything else is 404 with the Hub's X-Error-Code headers; a repository that does not exist is
404 RepoNotFound. The port chosen by the OS is written to PORT_FILE once listening; every request
line is appended to LOG_FILE (if given), so tests can say which endpoints the client used.
"""
import hashlib
import json
import os
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.abspath(sys.argv[1])
LOG = sys.argv[3] if len(sys.argv) > 3 else None


def repo_files(repo):
    base = os.path.join(ROOT, repo)
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            out.append(os.path.relpath(full, base))
    return out


def repo_sha(repo):
    h = hashlib.sha1()
    for rel in repo_files(repo):
        h.update(rel.encode())
        with open(os.path.join(ROOT, repo, rel), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def file_oid(repo, rel):
    with open(os.path.join(ROOT, repo, rel), "rb") as f:
        data = f.read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(), len(data)


def split_repo(parts):
    """(repo, rest) where repo is org/name and exists, else (None, rest)."""
    if len(parts) >= 2 and os.path.isdir(os.path.join(ROOT, parts[0], parts[1])):
        return parts[0] + "/" + parts[1], parts[2:]
    return None, parts[2:]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        if LOG:
            with open(LOG, "a") as f:
                f.write("%s %s\n" % (self.command, self.path))

    def send_json(self, obj, status=200, headers=None):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def not_found(self, code="EntryNotFound", message="Entry not found"):
        self.send_json({"error": message}, 404, {"X-Error-Code": code, "X-Error-Message": message})

    def tree_entry(self, repo, rel):
        oid, size = file_oid(repo, rel)
        return {"type": "file", "path": rel, "size": size, "oid": oid}

    def info(self, repo):
        return {
            "id": repo,
            "_id": repo,
            "sha": repo_sha(repo),
            "private": False,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "cardData": {},
            "lastModified": "2026-01-01T00:00:00.000Z",
            "siblings": [{"rfilename": rel} for rel in repo_files(repo)],
        }

    def handle_api(self, parts, query):
        repo, rest = split_repo(parts)
        if repo is None:
            return self.not_found("RepoNotFound", "Repository not found")
        if not rest or rest[0] == "revision":
            return self.send_json(self.info(repo))
        if rest[0] == "tree":
            prefix = "/".join(rest[2:])
            recursive = query.get("recursive", ["false"])[0] in ("1", "true", "True")
            entries, dirs = [], set()
            for rel in repo_files(repo):
                if prefix and not rel.startswith(prefix.rstrip("/") + "/"):
                    continue
                tail = rel[len(prefix.rstrip("/")) + 1 :] if prefix else rel
                if not recursive and "/" in tail:
                    d = (prefix.rstrip("/") + "/" if prefix else "") + tail.split("/")[0]
                    if d not in dirs:
                        dirs.add(d)
                        entries.append({"type": "directory", "path": d, "size": 0, "oid": "0" * 40})
                    continue
                if recursive:
                    parent = os.path.dirname(rel)
                    while parent and parent != prefix.rstrip("/") and parent not in dirs:
                        dirs.add(parent)
                        entries.append(
                            {"type": "directory", "path": parent, "size": 0, "oid": "0" * 40}
                        )
                        parent = os.path.dirname(parent)
                entries.append(self.tree_entry(repo, rel))
            if prefix and not entries:
                return self.not_found()
            return self.send_json(entries)
        return self.not_found()

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        query = urllib.parse.parse_qs(url.query)
        if parts[:2] == ["api", "datasets"]:
            return self.handle_api(parts[2:], query)
        if parts[:1] == ["datasets"]:
            repo, rest = split_repo(parts[1:])
            if repo is None:
                return self.not_found("RepoNotFound", "Repository not found")
            if len(rest) < 2 or rest[0] != "resolve":
                return self.not_found()
            rel = "/".join(rest[2:])
            full = os.path.join(ROOT, repo, rel)
            if not os.path.isfile(full):
                return self.not_found()
            oid, size = file_oid(repo, rel)
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.send_header("ETag", '"%s"' % oid)
            self.send_header("X-Repo-Commit", repo_sha(repo))
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            if self.command != "HEAD":
                with open(full, "rb") as f:
                    self.wfile.write(f.read())
            return None
        return self.not_found()

    do_HEAD = do_GET

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length).decode()
        if parts[:2] == ["api", "datasets"]:
            repo, rest = split_repo(parts[2:])
            if repo is None:
                return self.not_found("RepoNotFound", "Repository not found")
            if rest and rest[0] == "paths-info":
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    paths = json.loads(body).get("paths", [])
                else:
                    paths = urllib.parse.parse_qs(body).get("paths", [])
                files = set(repo_files(repo))
                out = []
                for p in paths:
                    if p in files:
                        out.append(self.tree_entry(repo, p))
                    elif any(f.startswith(p.rstrip("/") + "/") for f in files):
                        out.append({"type": "directory", "path": p, "size": 0, "oid": "0" * 40})
                return self.send_json(out)
        return self.not_found()


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tmp = sys.argv[2] + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, sys.argv[2])
    server.serve_forever()


if __name__ == "__main__":
    main()
