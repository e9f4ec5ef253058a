"""The viewer's HTTP server: a fixed set of routes (the pages, their assets, JSON answers), on 127.0.0.1 unless told
otherwise. No part of a URL is ever used as a path on disk.

Every request must name this server in its ``Host`` header (127.0.0.1, localhost or the bound address, with its
port): a page elsewhere that rebinds its own name to 127.0.0.1 cannot read the logs. The one route that writes
(``POST /api/label``, with ``--label``) also needs this session's token, which only the labelling page served here
carries, and an ``Origin`` (when the browser sends one) of this server."""

from __future__ import annotations

import ipaddress
import json
import secrets
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Optional
from urllib.parse import parse_qs, urlsplit

from .._errors import OptionError
from ..data import json_safe
from ._store import Filters, ScoreStore, query_value

__all__ = ["ViewServer", "serve"]

_ASSETS = {  # route -> (file in adherence/view/static, content type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
    "/label.js": ("label.js", "text/javascript; charset=utf-8"),
}
_MAX_BODY = 4096
_SECURITY = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _asset(name: str) -> bytes:
    return (resources.files("adherence.view") / "static" / name).read_bytes()


class _Handler(BaseHTTPRequestHandler):
    store: ScoreStore
    quiet = True
    hosts: frozenset = frozenset()
    origins: frozenset = frozenset()
    token: str = ""
    session: Any = None  # a LabelSession with --label

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
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the browser closed the page before the answer arrived

    def _json(self, status: int, obj: Any) -> None:
        body = json.dumps(json_safe(obj), ensure_ascii=False, default=str).encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8")

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self.do_GET()

    def _host_ok(self) -> bool:
        """The request names this server (DNS rebinding: a foreign name that resolves here is refused)."""
        if (self.headers.get("Host") or "").lower() in self.hosts:
            return True
        self._json(403, {"error": "this server answers only requests addressed to it (Host header refused)"})
        return False

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if not self._host_ok():
            return
        route = urlsplit(self.path).path
        if route != "/api/label" or self.session is None:
            self._json(404, {"error": "no such page"})
            return
        origin = self.headers.get("Origin")
        if origin is not None and origin.lower() not in self.origins:
            self._json(403, {"error": "writes are accepted only from this server's own page (Origin refused)"})
            return
        if not secrets.compare_digest(self.headers.get("X-Adherence-Token") or "", self.token):
            self._json(403, {"error": "writes need this session's token (open the labelling page of this server)"})
            return
        try:
            size = int(self.headers.get("Content-Length") or 0)
            if not 0 < size <= _MAX_BODY:
                raise OptionError(f"a label is a small JSON object (got {size} bytes)")
            body = json.loads(self.rfile.read(size).decode("utf-8"))
            if not isinstance(body, dict):
                raise OptionError("a label is a JSON object {index, label}")
            self._json(200, self.session.write(body.get("index"), body.get("label")))
        except (OptionError, ValueError, UnicodeDecodeError) as exc:
            self._json(400, {"error": str(exc)})

    def _label_turn(self, index: int) -> dict:
        s = self.session
        if not 0 <= index < len(s.turns):
            raise OptionError(f"index must be 0 to {len(s.turns) - 1}")
        cid, ti = s.turns[index]
        conv = self.store.conversation(0, cid)
        turns = conv["turns"]
        this = next((t for t in turns if t["turn_index"] == ti), None)
        if this is None:
            raise KeyError(cid)
        return {
            "index": index,
            "conversation_id": cid,
            "turn_index": ti,
            "role": conv.get("role"),
            "history": [
                {"user": t.get("user"), "assistant": t.get("assistant")} for t in turns if t["turn_index"] < ti
            ],
            "user": this.get("user"),
            "assistant": this.get("assistant"),
            # blind by default: the scorer's verdict beside the turn would pull the label towards it
            "score": this.get("score") if s.show_scores else None,
            "method": this.get("method") if s.show_scores else None,
            "blind": not s.show_scores,
            "label": s.mine().get((cid, ti)),
        }

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if not self._host_ok():
            return
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=False)
        route = url.path
        try:
            if route == "/label" and self.session is not None:
                page = _asset("label.html").replace(b"__TOKEN__", self.token.encode("ascii"))
                self._send(200, page, "text/html; charset=utf-8")
            elif route == "/api/label/state" and self.session is not None:
                self._json(200, self.session.state())
            elif route == "/api/label/turn" and self.session is not None:
                self._json(200, self._label_turn(_int(query, "index", 0)))
            elif route in _ASSETS:
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


class _Server(ThreadingHTTPServer):
    """The HTTP server, quiet when a browser goes away mid-answer (a closed tab is not an error of the viewer)."""

    def handle_error(self, request, client_address) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            return
        super().handle_error(request, client_address)


class ViewServer:
    """``adherence view``'s server over a ``ScoreStore``; ``url`` once started (port 0 picks a free one)."""

    def __init__(
        self, store: ScoreStore, host: str = "127.0.0.1", port: int = 8765, quiet: bool = True, session: Any = None
    ) -> None:
        self.token = secrets.token_urlsafe(24)
        handler: Any = type("Handler", (_Handler,), {"store": store, "quiet": quiet, "session": session,
                                                     "token": self.token})  # fmt: skip
        try:
            self.httpd = _Server((host, port), handler)
        except OSError as exc:
            raise OptionError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port") from None
        self.httpd.daemon_threads = True
        h, p = self.httpd.server_address[:2]
        host_name = h.decode() if isinstance(h, bytes) else str(h)
        shown = "[" + host_name + "]" if ":" in host_name else host_name
        self.url = f"http://{shown}:{p}/"
        names = {shown, "127.0.0.1", "localhost", "[::1]"} | ({host.lower()} if host else set())
        handler.hosts = frozenset(f"{n}:{p}".lower() for n in names)
        handler.origins = frozenset(f"http://{h}" for h in handler.hosts)
        self.public = not _loopback(host_name)
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


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def serve(
    paths: list,
    host: str = "127.0.0.1",
    port: int = 8765,
    session: Any = None,
    allow_unpublished: bool = False,
    labels: Optional[str] = None,
    columns: Optional[dict] = None,
) -> None:
    """Open the outputs and serve them until interrupted (with ``session``, the labelling page at ``/label``;
    with ``labels``, a labels file's labels over the turns; ``columns``: the outputs' own column names)."""
    store = ScoreStore(paths, allow_unpublished=allow_unpublished, labels=labels, columns=columns)
    for p in store.unpublished:
        print(f"adherence view: warning: {p} was never published (its job did not finish): its rows may be incomplete",
              file=sys.stderr)  # fmt: skip
    server = ViewServer(store, host, port, quiet=True, session=session)
    if server.public:
        print(f"adherence view: warning: listening on {host}, which other machines can reach: anyone who can reach it "
              "can read these logs", file=sys.stderr)  # fmt: skip
    print(f"adherence view: {store.rows:,} turns from {len(paths)} output(s) at {server.url} (Ctrl-C to stop)",
          file=sys.stderr, flush=True)  # fmt: skip
    if session is not None:
        st = session.state()
        print(f"adherence view: label at {server.url}label as {session.labeller!r}: {st['labelled']} of {st['size']} "
              f"sampled turns labelled so far, into {session.path}", file=sys.stderr, flush=True)  # fmt: skip
    try:
        server.serve_forever()
    finally:
        server.httpd.server_close()
