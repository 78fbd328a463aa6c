"""Commands that show runs as web pages: ``report`` (one self-contained HTML file) and ``serve`` (a live view)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ksearch.cli._common import JsonOpt, json_mode, out, pick_run, workspace_of

app = typer.Typer()

# ksearch.flows.serve's DEFAULT_HOST and DEFAULT_PORT, for the defaults of `serve`: written out here because
# importing that flow is slow (tests/cli/test_cli_import.py checks that they agree).
SERVE_DEFAULT_HOST = "127.0.0.1"
SERVE_DEFAULT_PORT = 8765


@app.command()
def report(
    ctx: typer.Context,
    run_ids: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[RUN]...",
            help=(
                "One run id (its report) or several (a comparison); unique prefixes are enough [default: the latest "
                "run]."
            ),
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="The HTML file to write (default: report-RUN.html, or compare-RUN-and-N-more.html for several runs).",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the output file if it exists.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write one self-contained HTML file (opens offline) of a run: charts, world-model tree with diffs, per-shape
    table, LLM usage and settings; several runs give a comparison."""
    from ksearch.flows import report as report_flow
    from ksearch.flows.inspect import resolve_run_id
    from ksearch.flows.report_render import require_libraries

    json_mode(as_json)
    require_libraries()  # before the run is looked up: a missing extra is the first thing to fix
    ws = workspace_of(ctx)
    runs = [resolve_run_id(r, ws) for r in run_ids] if run_ids else [pick_run(ctx, None)]
    path = report_flow.write_report(runs, output, ws, force=force)
    size = path.stat().st_size
    if as_json:
        print(json.dumps({"path": str(path.resolve()), "bytes": size, "runs": runs}, indent=2))
        return
    out.print(f"wrote {path} ({size / 1e6:.1f} MB, opens offline)")


@app.command()
def serve(
    ctx: typer.Context,
    port: Annotated[
        int, typer.Option("--port", "-p", help="Port to listen on (0 picks a free one).")
    ] = SERVE_DEFAULT_PORT,
    host: Annotated[
        str,
        typer.Option("--host", help="Address to bind; the default keeps the pages (kernels, prompts) on this machine."),
    ] = SERVE_DEFAULT_HOST,
) -> None:
    """Serve the workspace's runs as web pages that update while a run goes (Ctrl-C stops)."""
    from ksearch.flows import serve as serve_flow

    server = serve_flow.make_server(workspace_of(ctx), host=host, port=port)
    out.print(f"serving {server.workspace} at [bold]{server.url}[/bold] (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        out.print("stopped")
    finally:
        server.server_close()
