"""A local HTTP server speaking the chat-completions wire format, for the model client tests."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class WireServer:
    """A local HTTP server speaking the chat-completions wire format with canned answers.

    An answer is `(status, body)`, or `(status, body, "hang")` to hold the request open until
    the server stops (a model that never answers within the client's timeout).
    """

    def __init__(self, answers: list[tuple]):
        self.answers = answers
        self.requests: list[dict] = []
        self.release = threading.Event()
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
                status, body, *hang = server.answers.pop(0)
                if hang:
                    server.release.wait()
                    return
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(message: dict) -> tuple[int, bytes]:
    body = {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    return 200, json.dumps(body).encode()


def tool_calls_message(*calls: tuple[str, str, str]) -> dict:
    """An assistant message asking for tool calls `(id, name, arguments JSON text)`."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ],
    }
