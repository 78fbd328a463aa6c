"""The ``serve`` flow: a small HTTP server (the standard library's) for a workspace's reports, on localhost.

Every page is rendered from the store on each request, so it shows a run as it goes; each page polls
``/api/version`` and reloads itself when the run has written something new. plotly.js is served once from
``/static/plotly.min.js`` instead of being inlined in every page.

Routes: ``/`` (the runs, with a comparison form), ``/runs/RUN``, ``/compare?run=A&run=B``, ``/api/version?run=A``
(no ``run``: the list of runs), ``/static/plotly.min.js``.

Only GET, and only for a ``Host`` that names this server: ``localhost``, the bound host, or an IP address. A web
page cannot read these pages through DNS rebinding (its requests carry its own domain name as ``Host``). Each
request does bounded work: at most ``MAX_RUNS_PER_REQUEST`` distinct runs.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

import structlog

from ksearch.errors import KsearchError, RunNotFoundError, UserError
from ksearch.flows import report_render
from ksearch.flows.report_gather import gather_comparison, gather_run_report
from ksearch.flows.workspace import DB_NAME, open_store, workspace_dir

log = structlog.get_logger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
PLOTLY_PATH = "/static/plotly.min.js"
MAX_RUNS_PER_REQUEST = 12
"""A comparison or a version check names at most this many distinct runs (repeats count once)."""


def host_allowed(host_header: str | None, bound_host: str) -> bool:
    """Whether a request's ``Host`` names this server: ``localhost``, the address it is bound to, or an IP literal
    (a DNS-rebinding page sends its own domain name)."""
    if not host_header:
        return False
    host = urlsplit(f"//{host_header}").hostname or ""
    if host in ("localhost", bound_host.lower()) or host.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def run_ids_of(query: dict[str, list[str]]) -> list[str]:
    """The distinct ``run`` parameters of a request, in order; UserError past ``MAX_RUNS_PER_REQUEST``."""
    ids = list(dict.fromkeys(query.get("run", [])))
    if len(ids) > MAX_RUNS_PER_REQUEST:
        raise UserError(f"a request names at most {MAX_RUNS_PER_REQUEST} runs, not {len(ids)}")
    return ids


class ReportServer(ThreadingHTTPServer):
    """Serves one workspace; ``url`` is where it listens."""

    daemon_threads = True

    def __init__(self, workspace: Path, host: str, port: int) -> None:
        self.workspace = workspace
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


def make_server(workspace: Path | None = None, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> ReportServer:
    """A server bound to ``host:port`` (port 0: any free port); call ``serve_forever()`` on it."""
    report_render.require_libraries()
    ws = workspace_dir(workspace)
    if not (ws / DB_NAME).is_file():
        raise UserError(
            f"no workspace database at {ws / DB_NAME}",
            hint="pass the workspace of your runs with --workspace DIR (or set KSEARCH_WORKSPACE)",
        )
    try:
        return ReportServer(ws, host, port)
    except OSError as exc:
        raise UserError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="choose another port with --port N (0 picks a free one)",
        ) from exc


def serve_in_thread(server: ReportServer) -> threading.Thread:
    """Run ``server`` in a daemon thread (for tests and embedding); stop it with ``server.shutdown()``."""
    thread = threading.Thread(target=server.serve_forever, name="ksearch-serve", daemon=True)
    thread.start()
    return thread


def version(workspace: Path, run_ids: list[str]) -> str:
    """Changes whenever one of the runs (or, with no runs named, the list of runs) changes in the store."""
    store = open_store(workspace, read_only=True)
    try:
        if run_ids:
            parts = [store.activity_marker(store.get_run(r)["id"]) for r in run_ids]
        else:
            parts = [f"{r['id']}:{r['updated_at']}" for r in store.list_runs()]
    finally:
        store.close()
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _version_url(run_ids: list[str]) -> str:
    return "/api/version" + ("?" + "&".join(f"run={quote(r)}" for r in run_ids) if run_ids else "")


def run_page(workspace: Path, run_id: str) -> str:
    store = open_store(workspace, read_only=True)
    try:
        report = gather_run_report(store, run_id)
    finally:
        store.close()
    assets = report_render.Assets(
        plotly_url=PLOTLY_PATH, version_url=_version_url([report.run_id]), version=version(workspace, [report.run_id])
    )
    return report_render.render_run(report, assets, links={"index": "/"})


def compare_page(workspace: Path, run_ids: list[str]) -> str:
    if len(run_ids) < 2:
        raise UserError("pick at least two runs to compare")
    store = open_store(workspace, read_only=True)
    try:
        comparison = gather_comparison(store, run_ids)
    finally:
        store.close()
    full = [r.run_id for r in comparison.runs]
    assets = report_render.Assets(
        plotly_url=PLOTLY_PATH, version_url=_version_url(full), version=version(workspace, full)
    )
    links = {"index": "/", "runs": {r: f"/runs/{quote(r)}" for r in full}}
    return report_render.render_comparison(comparison, assets, links=links)


def index_page(workspace: Path) -> str:
    store = open_store(workspace, read_only=True)
    try:
        runs = store.list_runs()
    finally:
        store.close()
    assets = report_render.Assets(version_url=_version_url([]), version=version(workspace, []))
    return report_render.render_index(runs, assets, str(workspace))


class _Handler(BaseHTTPRequestHandler):
    server: ReportServer
    server_version = "ksearch-serve"

    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        url = urlsplit(self.path)
        ws = self.server.workspace
        if not host_allowed(self.headers.get("Host"), str(self.server.server_address[0])):
            self._error(HTTPStatus.BAD_REQUEST, "this server answers only requests for localhost or its address")
            return
        try:
            try:
                query = parse_qs(url.query, max_num_fields=4 * MAX_RUNS_PER_REQUEST)
            except ValueError:
                raise UserError(f"a request names at most {MAX_RUNS_PER_REQUEST} runs") from None
            if url.path == "/":
                self._send(HTTPStatus.OK, index_page(ws))
            elif url.path.startswith("/runs/") and len(url.path) > len("/runs/"):
                self._send(HTTPStatus.OK, run_page(ws, unquote(url.path[len("/runs/") :])))
            elif url.path == "/compare":
                self._send(HTTPStatus.OK, compare_page(ws, run_ids_of(query)))
            elif url.path == "/api/version":
                body = json.dumps({"version": version(ws, run_ids_of(query))})
                self._send(HTTPStatus.OK, body, "application/json", cache="no-store")
            elif url.path == PLOTLY_PATH:
                self._send(HTTPStatus.OK, report_render.plotly_js(), "text/javascript", cache="max-age=86400")
            else:
                self._error(HTTPStatus.NOT_FOUND, f"nothing at {url.path}")
        except RunNotFoundError as exc:
            self._error(HTTPStatus.NOT_FOUND, str(exc))
        except KsearchError as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away
        except Exception as exc:  # a page must fail alone, never the server
            log.exception("serve.error", path=self.path)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    def _send(self, status: HTTPStatus, body: str, content_type: str = "text/html", cache: str = "no-cache") -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", cache)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: HTTPStatus, message: str) -> None:
        if self.path.startswith("/api/"):
            self._send(status, json.dumps({"error": message}), "application/json", cache="no-store")
        else:
            self._send(status, report_render.render_error(message, int(status)))

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the standard library's signature
        log.debug("serve.request", client=self.client_address[0], line=format % args)
