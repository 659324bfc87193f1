"""A local HTTP server speaking the chat-completions wire format, for the model client tests."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class WireServer:
    """A local HTTP server speaking the chat-completions wire format with canned answers."""

    def __init__(self, answers: list[tuple[int, bytes]]):
        self.answers = answers
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers["Content-Length"])
                server.requests.append(
                    {
                        "path": self.path,
                        "authorization": self.headers.get("Authorization"),
                        "body": json.loads(self.rfile.read(length)),
                    }
                )
                status, body = server.answers.pop(0)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(message: dict) -> tuple[int, bytes]:
    return 200, json.dumps({"id": "x", "choices": [{"index": 0, "message": message}]}).encode()
