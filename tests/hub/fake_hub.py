"""A Hugging Face Hub on 127.0.0.1 for tests: the endpoints the real huggingface_hub client uses
to download a model repository (snapshot_download) and to upload a folder (create_repo,
create_branch, upload_folder), backed by a dict in memory.

    GET  /api/models/<repo>/revision/<rev>         repo_info: sha, siblings
    GET  /api/models/<repo>/tree/<rev>[/<path>]    list_repo_tree (one page)
    HEAD|GET /<repo>/resolve/<rev>/<file>          a file, with X-Repo-Commit and ETag
    POST /api/repos/create                         create_repo (409 when it exists)
    POST /api/models/<repo>/branch/<branch>        create_branch (409 when it exists)
    POST /api/models/<repo>/preupload/<rev>        every file "regular" (sent inside the commit)
    POST /api/models/<repo>/commit/<rev>           the NDJSON commit: header + base64 files
    POST /api/validate-yaml                        a README.md's front matter (parsed as YAML)
    GET  /api/whoami-v2                            the token's user

A private repository answers 401 RepoNotFound without the token, as the Hub does. Writes need
the token. Only loopback; the server stops itself after `lifetime` seconds whatever happens.
"""

import base64
import hashlib
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "hf_fake_test_token"


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, files, private=False):
        self.private = private
        self.branches = {}  # name -> commit sha
        self.commits = {}  # sha -> {path: bytes}
        self.messages = []  # commit summaries, in order
        self.commit("main", dict(files), "initial commit")

    def commit(self, branch, files, message, parent=None):
        digest = hashlib.sha1(message.encode())
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + files[path])
        sha = digest.hexdigest()
        self.commits[sha] = files
        self.branches[branch] = sha
        self.messages.append(message)
        return sha

    def files_at(self, rev):
        sha = self.branches.get(rev, rev)
        return sha, self.commits.get(sha)


class FakeHub:
    def __init__(self, lifetime=240):
        self.repos = {}
        self.requests = []  # (method, path, authorized)
        self.card_metadata = []  # each README.md front matter validated, parsed
        self.lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                hub._handle(self, "GET")

            def do_HEAD(self):
                hub._handle(self, "HEAD")

            def do_POST(self):
                hub._handle(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.timer = threading.Timer(lifetime, self.stop)
        self.timer.daemon = True

    def start(self):
        self.thread.start()
        self.timer.start()
        return self

    def stop(self):
        self.timer.cancel()
        self.server.shutdown()
        self.server.server_close()

    def add_repo(self, repo_id, files, private=False):
        self.repos[repo_id] = Repo(files, private)

    # ---- the protocol ----

    def _send(self, h, method, status, body=b"", headers=None, content_type="application/json"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        if method != "HEAD":
            h.wfile.write(body)

    def _error(self, h, method, status, code, message):
        self._send(h, method, status, {"error": message},
                   {"X-Error-Code": code, "X-Error-Message": message})

    def _repo(self, h, method, repo_id, authorized):
        repo = self.repos.get(repo_id)
        if repo is None or (repo.private and not authorized):
            # the Hub hides private repositories from anonymous callers
            status = 401 if repo is not None or not authorized else 404
            self._error(h, method, status, "RepoNotFound", "Repository not found")
            return None
        return repo

    def _handle(self, h, method):
        url = urllib.parse.urlsplit(h.path)
        path = urllib.parse.unquote(url.path)
        authorized = h.headers.get("Authorization") == "Bearer " + TOKEN
        body = b""
        if method == "POST":
            body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        with self.lock:
            self.requests.append((method, path, authorized))
            try:
                self._route(h, method, path, body, authorized)
            except Exception as e:  # a bug here must show, not hang the client
                self._error(h, method, 500, "Internal", "fake hub: %r" % e)

    def _route(self, h, method, path, body, authorized):
        parts = path.strip("/").split("/")
        if path == "/api/whoami-v2":
            if not authorized:
                return self._error(h, method, 401, "Unauthorized", "Invalid credentials")
            return self._send(h, method, 200, {"name": "me", "type": "user", "orgs": []})
        if path == "/api/validate-yaml" and method == "POST":
            # the model card's front matter must be YAML mapping the Hub's typed keys
            import yaml
            content = json.loads(body)["content"]
            errors = []
            try:
                meta = yaml.safe_load(content.split("---\n")[1]) if content.startswith("---\n") else {}
                if not isinstance(meta, dict) or not isinstance(meta.get("tags", []), list) \
                        or not isinstance(meta.get("library_name", ""), str):
                    errors.append({"message": "metadata: wrong types %r" % (meta,)})
                self.card_metadata.append(meta)
            except yaml.YAMLError as e:
                errors.append({"message": "invalid YAML: %s" % e})
            return self._send(h, method, 400 if errors else 200,
                              {"errors": errors, "warnings": []})
        if path == "/api/repos/create" and method == "POST":
            if not authorized:
                return self._error(h, method, 401, "Unauthorized", "Invalid credentials")
            req = json.loads(body)
            repo_id = "%s/%s" % (req.get("organization") or "me", req["name"])
            if repo_id in self.repos:
                return self._send(h, method, 409, {"error": "You already created this repo",
                                                   "url": "%s/%s" % (self.url, repo_id)},
                                  {"X-Error-Code": "RepoExists"})
            private = bool(req.get("private")) or req.get("visibility") == "private"
            self.repos[repo_id] = Repo({}, private)
            return self._send(h, method, 200, {"url": "%s/%s" % (self.url, repo_id), "name": repo_id})
        if parts[:2] == ["api", "models"] and len(parts) >= 6:
            repo_id, op, rest = "/".join(parts[2:4]), parts[4], parts[5:]
            repo = self._repo(h, method, repo_id, authorized)
            if repo is None:
                return None
            return self._api(h, method, repo, repo_id, op, rest, body, authorized)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo_id, rev, file = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
            repo = self._repo(h, method, repo_id, authorized)
            if repo is None:
                return None
            sha, files = repo.files_at(rev)
            if files is None:
                return self._error(h, method, 404, "RevisionNotFound", "Invalid rev id: " + rev)
            if file not in files:
                return self._error(h, method, 404, "EntryNotFound", "Entry not found")
            data = files[file]
            return self._send(h, method, 200, data,
                              {"X-Repo-Commit": sha, "ETag": '"%s"' % git_blob_sha1(data)},
                              content_type="application/octet-stream")
        return self._error(h, method, 404, "NotFound", "no such endpoint: " + path)

    def _api(self, h, method, repo, repo_id, op, rest, body, authorized):
        rev = rest[0]
        if op == "revision" and method == "GET":
            sha, files = repo.files_at(rev)
            if files is None:
                return self._error(h, method, 404, "RevisionNotFound", "Invalid rev id: " + rev)
            return self._send(h, method, 200, {
                "id": repo_id, "modelId": repo_id, "sha": sha, "private": repo.private,
                "siblings": [{"rfilename": f} for f in sorted(files)], "tags": [],
                "lastModified": "2026-01-01T00:00:00.000Z"})
        if op == "tree" and method == "GET":
            sha, files = repo.files_at(rev)
            if files is None:
                return self._error(h, method, 404, "RevisionNotFound", "Invalid rev id: " + rev)
            return self._send(h, method, 200, [
                {"type": "file", "oid": git_blob_sha1(files[f]), "size": len(files[f]), "path": f}
                for f in sorted(files)])
        if method != "POST":
            return self._error(h, method, 404, "NotFound", "no such endpoint")
        if not authorized:
            return self._error(h, method, 401, "Unauthorized", "Invalid credentials")
        if op == "branch":
            if rev in repo.branches:
                return self._error(h, method, 409, "BranchExists", "Reference already exists")
            repo.branches[rev] = repo.branches["main"]
            return self._send(h, method, 200, {})
        if op == "preupload":
            req = json.loads(body)
            return self._send(h, method, 200, {"files": [
                {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                for f in req["files"]]})
        if op == "commit":
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            header = next(line["value"] for line in lines if line["key"] == "header")
            _, files = repo.files_at(rev)
            files = dict(files or {})
            for line in lines:
                if line["key"] == "file":
                    value = line["value"]
                    assert value.get("encoding") == "base64", value.get("encoding")
                    files[value["path"]] = base64.b64decode(value["content"])
                elif line["key"] != "header":
                    raise ValueError("unsupported commit operation " + line["key"])
            sha = repo.commit(rev, files, header["summary"])
            return self._send(h, method, 200, {
                "commitUrl": "%s/%s/commit/%s" % (self.url, repo_id, sha), "commitOid": sha,
                "pullRequestUrl": None})
        return self._error(h, method, 404, "NotFound", "no such endpoint")
