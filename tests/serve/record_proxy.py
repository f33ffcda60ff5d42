"""A recording proxy in front of `rlhf serve`, for the tests of `rlhf train` with vllm_mode:
server: python3 record_proxy.py UPSTREAM_PORT LOG [REFUSED_PATH] prints the port it listens on
(127.0.0.1),
forwards every request to http://127.0.0.1:UPSTREAM_PORT unchanged and answers with the
upstream's answer, and appends one JSON line per request to LOG: {"method", "path", and for
POST /generate/ "prompts" (how many), "n", "first_stream" (generation_kwargs', 0 when absent)}.
What the line records shows which process asked for what (the answers are the server's own, so
equal results alone could not tell server from in-process generation). A request for
REFUSED_PATH is answered 404 {"detail": "Not Found"} instead, as a vLLM server answers a path it
has not (e.g. /update_safetensors/). Standard library only."""

import http.client
import http.server
import json
import sys
import threading

upstream_port, log_path = int(sys.argv[1]), sys.argv[2]
refused = sys.argv[3] if len(sys.argv) > 3 else None
log_lock = threading.Lock()


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the trainer's libcurl handle expects

    def forward(self, method):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        entry = {"method": method, "path": self.path}
        if self.path == "/generate/":
            request = json.loads(body)
            kwargs = request.get("generation_kwargs") or {}
            entry.update(prompts=len(request["prompts"]), n=request.get("n", 1),
                         first_stream=kwargs.get("first_stream", 0))
        with log_lock, open(log_path, "a") as log:
            log.write(json.dumps(entry) + "\n")
        if self.path == refused:
            self.answer(404, "application/json", b'{"detail": "Not Found"}')
            return
        conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=600)
        headers = {"Content-Type": self.headers.get("Content-Type", "application/octet-stream")}
        conn.request(method, self.path, body=body if method == "POST" else None, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        self.answer(answer.status, answer.getheader("Content-Type", "application/json"), data)
        conn.close()

    def answer(self, status, content_type, data):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.forward("GET")

    def do_POST(self):
        self.forward("POST")

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
print(server.server_address[1], flush=True)
server.serve_forever()
