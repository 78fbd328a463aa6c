"""The flags a search is started with, declared once for ``run``, ``fork`` and ``sweep``.

Each is a typer option (name and help); the aliases give the type and the commands their defaults. ``fork`` takes
them optional: a flag left out keeps the forked run's setting.
"""

from __future__ import annotations

from typing import Annotated

import typer

MODEL = typer.Option(
    "--model",
    "-m",
    help="provider:model (e.g. openai:gpt-5.2), replay:FILE|RUN, or interactive "
    "(you answer each call: ksearch pending / respond)",
)
BASE_URL = typer.Option("--base-url", help="OpenAI-compatible server URL (vLLM, SGLang, Ollama, gateways).")
DEVICE = typer.Option(
    "--device",
    help="auto (a GPU if torch sees one, else cpu), cuda / cuda:N, or cpu (Triton interpreter, correctness only).",
)
MAX_ROUNDS = typer.Option("--max-rounds", help="Rounds budget: one round = one kernel written and evaluated.")
STAGNATION_WINDOW = typer.Option("--stagnation-window", help="A cycle ends after this many rounds without improvement.")
MAX_TOKENS = typer.Option(
    "--max-tokens", help="Stop when the run has used this many tokens (a fork's inherited calls count)."
)
TEMPERATURE = typer.Option("--temperature", help="Sampling temperature (provider default if unset).")
RUN_ID = typer.Option("--run-id", help="Name the run (default: TASK-DATE-TIME-XXXX).")
RUN_TIMEOUT = typer.Option("--run-timeout", help="Seconds one candidate may run before it is killed.")

ModelOpt = Annotated[str, MODEL]
BaseUrlOpt = Annotated[str | None, BASE_URL]
DeviceOpt = Annotated[str, DEVICE]
MaxRoundsOpt = Annotated[int, MAX_ROUNDS]
StagnationWindowOpt = Annotated[int, STAGNATION_WINDOW]
MaxTokensOpt = Annotated[int | None, MAX_TOKENS]
TemperatureOpt = Annotated[float | None, TEMPERATURE]
RunIdOpt = Annotated[str | None, RUN_ID]
RunTimeoutOpt = Annotated[float, RUN_TIMEOUT]
