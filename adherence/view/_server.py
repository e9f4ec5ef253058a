"""The viewer's HTTP server: a fixed set of routes (the page, its two assets, four JSON answers), read-only, on
127.0.0.1 unless told otherwise. No part of a URL is ever used as a path on disk."""

from __future__ import annotations

import json
import math
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Optional
from urllib.parse import parse_qs, urlsplit

from .._errors import OptionError
from ._store import Filters, ScoreStore, query_value

__all__ = ["ViewServer", "serve"]

_ASSETS = {  # route -> (file in adherence/view/static, content type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
_SECURITY = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _asset(name: str) -> bytes:
    return (resources.files("adherence.view") / "static" / name).read_bytes()


def _clean(v: Any) -> Any:
    """JSON-safe: NaN and infinities become null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


class _Handler(BaseHTTPRequestHandler):
    store: ScoreStore
    quiet = True

    def log_message(self, fmt: str, *args) -> None:
        if not self.quiet:
            sys.stderr.write("view: " + fmt % args + "\n")

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in _SECURITY.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        body = json.dumps(_clean(obj), ensure_ascii=False, default=str).encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8")

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=False)
        route = url.path
        try:
            if route in _ASSETS:
                name, ctype = _ASSETS[route]
                self._send(200, _asset(name), ctype)
            elif route == "/api/summary":
                self._json(200, self.store.summary())
            elif route == "/api/conversations":
                f = Filters.from_query(query)
                self._json(200, self.store.conversations(
                    f, sort=_one(query, "sort") or "worst", offset=_int(query, "offset", 0),
                    limit=_int(query, "limit", 50)))  # fmt: skip
            elif route == "/api/conversation":
                cid = _one(query, "id")
                if cid is None:
                    raise OptionError("give id")
                self._json(200, self.store.conversation(_int(query, "source", 0), cid))
            elif route == "/api/distributions":
                self._json(200, self.store.distributions(Filters.from_query(query)))
            else:
                self._json(404, {"error": "no such page"})
        except OptionError as exc:
            self._json(400, {"error": str(exc)})
        except KeyError:
            self._json(404, {"error": "no such conversation"})


def _one(query: dict, name: str) -> Optional[str]:
    return query_value(query, name)


def _int(query: dict, name: str, default: int) -> int:
    v = query_value(query, name, int)
    return default if v is None else v


class ViewServer:
    """``adherence view``'s server over a ``ScoreStore``; ``url`` once started (port 0 picks a free one)."""

    def __init__(self, store: ScoreStore, host: str = "127.0.0.1", port: int = 8765, quiet: bool = True) -> None:
        handler = type("Handler", (_Handler,), {"store": store, "quiet": quiet})
        try:
            self.httpd = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise OptionError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port") from None
        self.httpd.daemon_threads = True
        h, p = self.httpd.server_address[:2]
        host_name = h.decode() if isinstance(h, bytes) else str(h)
        self.url = f"http://{'[' + host_name + ']' if ':' in host_name else host_name}:{p}/"
        self._thread: Optional[threading.Thread] = None

    def start(self) -> ViewServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="adherence-view", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> ViewServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def serve(paths: list, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Open the outputs and serve them until interrupted."""
    store = ScoreStore(paths)
    server = ViewServer(store, host, port, quiet=True)
    print(f"adherence view: {store.rows:,} turns from {len(paths)} output(s) at {server.url} (Ctrl-C to stop)",
          file=sys.stderr, flush=True)  # fmt: skip
    try:
        server.serve_forever()
    finally:
        server.httpd.server_close()
