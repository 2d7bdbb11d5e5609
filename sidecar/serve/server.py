"""HTTP: a Flask app factory, served by waitress.

`create_app(config, source)` takes any `DocumentSource` (sidecar/serve/source.py): a poller, or
a test's own. Requests serve the latest poll and never trigger one.
"""

from __future__ import annotations

import hmac
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, abort, jsonify, request, send_from_directory
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import HTTPException

from sidecar import __version__
from sidecar.documents.bounds import escape_steering
from sidecar.documents.contract import json_schema
from sidecar.documents.document import NoDefaultJob, UnknownJob, for_viewer
from sidecar.documents.runs import (
    AmbiguousRun,
    NoPreviousRun,
    RunsUnavailable,
    UnknownRun,
    check_run_name,
    parse_since,
)
from sidecar.documents.watch import with_comparison
from sidecar.serve.cluster import MAX_JOB_CHARS, ClusterBusy, ClusterCache, ClusterError
from sidecar.serve.hosts import HostPolicy
from sidecar.serve.peers import OwnerOnly, SocketOwner, caller_uid
from sidecar.serve.source import Document, Documents, DocumentSource, RunsSource
from sidecar.verdict.watch import parse_cursor

STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")
API = "/api/dsh-gpu-dashboard"
# The page served at `/`. Its own files are under static/page/, those it shares with the DSH plugin
# under static/shared/; all are served under /static/, so its relative URLs work behind a path prefix.
INDEX_PAGE = "page/index.html"
# The page's own files: the same bytes as in the package, no data. They are served without the
# token because a browser cannot send a header when it navigates or loads a script; the page then
# sends the token (from `/?token=`, kept in the tab's sessionStorage) as `Authorization: Bearer`.
# No cookie carries it: a browser sends a cookie to every port of the host, another user's
# listener included.
# Served without the token: the page and its files hold no data, and a browser cannot send the
# header when it loads them (the page then sends it with every request for data).
PUBLIC_PATHS = ("/healthz", "/")
PUBLIC_PREFIXES = ("/static/",)
# Served to any local user by a sidecar without a token (which serves only its own user and root):
# nothing else, the page included.
PEER_PUBLIC_PATHS = ("/healthz",)
# A token cookie (this name, + "_<port>"): never accepted, and expired wherever one arrives.
LEGACY_TOKEN_COOKIE = "dsh_sidecar_token"
JSON_SCHEMA = json_schema()  # of every document served here (sidecar/documents/contract.py)


@dataclass(frozen=True)
class ServerConfig:
    token: str | None = None
    interval_s: float = 1.5
    job_name: str | None = None
    static_dir: str = STATIC_DIR
    hosts: HostPolicy = field(default_factory=HostPolicy)
    # Who may read it beyond the token (sidecar.serve.peers.OwnerOnly: a sidecar without a token serves
    # only its own user and root); None: whoever passes the token check.
    peers: OwnerOnly | None = None
    # The uid owning a request's client socket (sidecar.serve.peers.SocketOwner, the CLI hands in the
    # sources' lookup): root's discovery answers each caller with its own job by default. None: no
    # caller is told apart (tests of the app alone).
    socket_owner: SocketOwner | None = None
    # Set by the first request let past the guards: someone reads this sidecar, so it serves on for
    # its default grace after the job ends (sidecar/cli/main.py); else it stops with the job.
    read: threading.Event = field(default_factory=threading.Event)


class _JsonProvider(DefaultJSONProvider):
    """Flask's JSON with no steering character raw (bidi overrides, C1 controls, U+2028): a name a
    process chose reaches a page, a terminal (`curl`) or an agent escaped (bounds.escape_steering)."""

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        return escape_steering(super().dumps(obj, **kwargs))


def _public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def _token_ok(expected: str, given: str | None) -> bool:
    if not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


def create_app(
    config: ServerConfig,
    source: DocumentSource,
    metrics: Callable[[], tuple[bytes, str]] | None = None,
    cluster: ClusterCache | None = None,
    runs: RunsSource | None = None,
) -> Flask:
    """The app. `cluster`: the cluster document's reader (a sidecar started with --prometheus);
    None: the cluster route answers 404 saying how to turn it on. `runs`: the run ledger's reader;
    None (--no-runs): the runs routes answer 404 saying so."""
    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = 1024  # GET-only API: no body is ever needed
    app.json = _JsonProvider(app)
    app.json.sort_keys = False
    app.json.ensure_ascii = False  # UTF-8: a non-ASCII name costs its bytes, not 6-12 per character
    app.url_map.merge_slashes = False  # "//etc/passwd" gets a 404, not a redirect

    _install_guards(app, config)
    _install_routes(app, config, source, metrics, cluster, runs)
    _install_cluster_route(app, cluster)
    _install_runs_routes(app, runs)
    return app


def _install_guards(app: Flask, config: ServerConfig) -> None:
    """Before every request: the Host check, read-only methods, the token; after: the headers."""

    @app.before_request
    def _guard() -> Response | None:
        host = request.environ.get("HTTP_HOST")
        if not config.hosts.allows(host):
            shown = repr(host[:64]) if host is not None else "no Host header"
            return _error(
                421,
                f"this sidecar does not answer to {shown}: use {config.hosts.describe()} "
                "(start it with --allow-host NAME for another name)",
            )
        if request.method not in ("GET", "HEAD"):
            return _error(405, "method not allowed: this API is read-only (GET, HEAD)")
        if config.token and not _public(request.path):
            header = request.headers.get("Authorization", "")
            bearer = header[7:] if header.startswith("Bearer ") else None
            if not _token_ok(config.token, bearer):
                return _error(
                    401, "missing or wrong token: send 'Authorization: Bearer TOKEN' (the page: open /?token=TOKEN)"
                )
        refusal = _authorise(config)
        if refusal is None:
            config.read.set()
        return refusal

    @app.after_request
    def _headers(resp: Response) -> Response:
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["X-Frame-Options"] = "SAMEORIGIN"
        resp.headers["Referrer-Policy"] = "no-referrer"
        resp.headers["Cache-Control"] = "no-store"
        for name in request.cookies:
            if name.startswith(LEGACY_TOKEN_COOKIE):  # a token in a cookie leaks to every port: drop it
                resp.delete_cookie(name)
        if resp.mimetype == "text/html":
            resp.headers["Content-Security-Policy"] = (
                "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; connect-src 'self'"
            )
        return resp

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        return _error(exc.code or 500, exc.description or exc.name)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:  # a bug must answer 500 JSON, never take the server down
        app.logger.exception("unexpected error")
        return _error(500, f"internal error: {type(exc).__name__}")


def _authorise(config: ServerConfig) -> Response | None:
    """The caller's user may read this sidecar (config.peers), else 403 saying why."""
    if config.peers is None or request.path in PEER_PUBLIC_PATHS:
        return None
    why = config.peers.refusal(request.environ)
    return _error(403, why) if why else None


def _install_routes(
    app: Flask,
    config: ServerConfig,
    source: DocumentSource,
    metrics: Callable[[], tuple[bytes, str]] | None,
    cluster: ClusterCache | None,
    runs: RunsSource | None,
) -> None:
    """The routes; each serves what the last poll published and never triggers one."""
    _install_document_routes(app, source, config.socket_owner, runs)
    _install_page_routes(app, config, metrics, cluster, runs_served=runs is not None)


def _install_document_routes(
    app: Flask, source: DocumentSource, socket_owner: SocketOwner | None, runs: RunsSource | None
) -> None:
    """The health check and the documents of the API, from the source's last poll (the watch's
    comparison from the run ledger, `runs`)."""

    def viewer() -> int | None:
        return caller_uid(request.environ, socket_owner)

    def seen() -> Documents:
        """The source as this request's caller sees it: a sidecar listing every user's jobs answers
        without ?job= with the caller's own job only (a PerCallerSource's for_caller)."""
        view: Callable[[Callable[[], int | None]], Documents] | None = getattr(source, "for_caller", None)
        return view(viewer) if view is not None else source

    @app.get("/healthz")
    def healthz() -> Response:
        _, last = source.snapshot()
        return jsonify({"ok": last is not None, "last_poll": last})

    def serve(make: Callable[[], Document | None]) -> Response:
        """A document from the source: 404 for a job it does not watch, 503 before the first poll.
        The jobs it lists are marked `yours` or not for this request's caller (document.for_viewer)."""
        try:
            doc = make()
            if doc is not None and doc.get("jobs"):  # the caller is looked up only for a list of jobs
                doc = for_viewer(doc, viewer())
        except UnknownJob as exc:
            return _error(404, f"no job {str(exc.args[0])[:64]!r} here: GET {API}/jobs lists the jobs")
        except NoDefaultJob:
            return _error(404, f"none of the jobs here is yours: GET {API}/jobs lists them, then ask for one with ?job=ID")
        if doc is None:
            return _error(503, "no poll has completed yet; retry in a moment")
        return jsonify(doc)

    @app.get(f"{API}/status")
    def status() -> Response:
        return serve(lambda: seen().status_document(request.args.get("job")))

    @app.get(f"{API}/jobs")
    def jobs() -> Response:
        return serve(seen().jobs_document)

    @app.get(f"{API}/history")
    def history() -> Response:
        since_raw = request.args.get("since")
        since = None
        if since_raw not in (None, ""):
            try:
                since = float(since_raw)
            except ValueError:
                return _error(400, "since must be a UNIX time in seconds, e.g. since=1733140000")
            if not math.isfinite(since):
                return _error(400, "since must be a finite number")
        return serve(lambda: seen().history_document(request.args.get("job"), since))

    _install_watch_route(app, seen, serve, runs)


def _install_watch_route(
    app: Flask,
    seen: Callable[[], Documents],
    serve: Callable[[Callable[[], Document | None]], Response],
    runs: RunsSource | None,
) -> None:
    """GET /watch[?job=ID][&since=CURSOR]: a job's verdict and the watch events after the cursor, with
    its run against the previous one when there is news (documents/watch.py); `seen` and `serve` are
    the document routes' own (the caller's view of the source, a document or its refusal)."""
    compare = runs.compare_document if runs is not None else None

    @app.get(f"{API}/watch")
    def watch() -> Response:
        """Never waits (documents/watch.py says why): a watcher asks again with its cursor."""
        since_raw = request.args.get("since")
        try:
            since = parse_cursor(since_raw) if since_raw else None
        except ValueError as exc:
            return _error(400, str(exc))

        def make() -> Document | None:
            doc = seen().watch_document(request.args.get("job"), since)
            return None if doc is None else with_comparison(doc, compare)

        return serve(make)


def _install_cluster_route(app: Flask, cluster: ClusterCache | None) -> None:
    """GET /api/dsh-gpu-dashboard/cluster[?job=KEY]: the cluster document from Prometheus (cached,
    one query set in flight); 404 without --prometheus, 502 when Prometheus fails."""

    @app.get(f"{API}/cluster")
    def cluster_route() -> Response:
        if cluster is None:
            return _error(
                404,
                "no cluster view: this sidecar was started without --prometheus URL "
                "(or $DSH_PROMETHEUS_URL), the Prometheus that scrapes every node's sidecar",
            )
        job = request.args.get("job") or None
        if job is not None and len(job) > MAX_JOB_CHARS:
            return _error(400, f"job must be a job key or job id of at most {MAX_JOB_CHARS} characters")
        try:
            return jsonify(cluster.get(job))
        except ClusterBusy as exc:
            resp = _error(503, str(exc))
            resp.headers["Retry-After"] = "1"
            return resp
        except ClusterError as exc:
            return _error(502, f"Prometheus did not answer: {exc}")


def _install_runs_routes(app: Flask, runs: RunsSource | None) -> None:
    """The run ledger's documents (issue 40): GET /runs[?since=], /runs/<id>, /compare?a=[&b=].
    Parameters are checked before the ledger is read: a run's name by check_run_name (its charset
    and length), `since` by parse_since; one that cannot be is a 400 saying what is accepted."""

    def answer(make: Callable[[RunsSource], Document]) -> Response:
        if runs is None:
            return _error(404, "this sidecar keeps no runs: it was started with --no-runs (or without a runs ledger)")
        try:
            return jsonify(make(runs))
        except AmbiguousRun as exc:  # the runs it could be, as the runs list shows them
            return _error(400, str(exc), candidates=list(exc.candidates))
        except (UnknownRun, NoPreviousRun) as exc:
            return _error(404, str(exc))
        except RunsUnavailable as exc:
            return _error(503, f"the runs cannot be read: {exc}")

    def name(value: str | None, what: str) -> str:
        if not value:
            raise ValueError(f"{what} is required: a run's id, as GET {API}/runs lists them")
        return check_run_name(value)

    @app.get(f"{API}/runs")
    def runs_route() -> Response:
        since = request.args.get("since")
        try:
            since_unix_s = parse_since(since, time.time()) if since else None
        except ValueError as exc:
            return _error(400, str(exc))
        return answer(lambda r: r.runs_document(since_unix_s))

    @app.get(f"{API}/runs/<path:run>")
    def run_route(run: str) -> Response:
        try:
            checked = name(run, "the run")
        except ValueError as exc:
            return _error(400, str(exc))
        return answer(lambda r: r.run_document(checked))

    @app.get(f"{API}/compare")
    def compare_route() -> Response:
        b = request.args.get("b") or None
        try:
            a, b = name(request.args.get("a"), "a"), None if b is None else name(b, "b")
        except ValueError as exc:
            return _error(400, str(exc))
        return answer(lambda r: r.compare_document(a, b))


def _install_page_routes(
    app: Flask,
    config: ServerConfig,
    metrics: Callable[[], tuple[bytes, str]] | None,
    cluster: ClusterCache | None,
    *,
    runs_served: bool,
) -> None:
    """What is not a document of a poll: the schema, /metrics, the page and its files, the version."""

    @app.get(f"{API}/schema")
    def schema() -> Response:
        return jsonify(JSON_SCHEMA)

    @app.get("/metrics")
    def metrics_route() -> Response:
        if metrics is None:
            abort(404)
        body, content_type = metrics()
        return Response(body, content_type=content_type)

    @app.get("/")
    def index() -> Response:
        return send_from_directory(config.static_dir, INDEX_PAGE)

    @app.get("/static/<path:path>")
    def static_files(path: str) -> Response:
        # send_from_directory refuses paths that escape the folder (werkzeug's safe_join).
        return send_from_directory(config.static_dir, path)

    @app.get("/version")
    def version() -> Response:
        # `cluster`: the cluster route serves (--prometheus); the page asks it only then, so a sidecar
        # without Prometheus shows no 404 in the browser's console on every poll. `runs`: the runs
        # routes serve (a run ledger; not --no-runs): the Runs view says how to turn them on otherwise.
        return jsonify({"version": __version__, "cluster": cluster is not None, "runs": runs_served})


def _error(code: int, message: str, **more: object) -> Response:
    resp = jsonify({"error": message, "status": code, **more})
    resp.status_code = code
    return resp
