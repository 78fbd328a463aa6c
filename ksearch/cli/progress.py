"""What a driven run shows while it goes: one line per round, and what it waits for and since when.

In a terminal a spinner line says what the run waits for (the planner's reply, a kernel's evaluation, a model
server) and for how long. Without one (a pipe, ``tee``, ``nohup``, CI) nothing can be redrawn, so a wait that
lasts becomes a line with the time it began, repeated while it lasts; a silent log then still tells a slow model
from a hung process. Each retried LLM call is a line everywhere, with its cause and the endpoint it went to.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape

from ksearch.cli._common import count, first_line, out

FIRST_NOTICE_S = 10.0
"""Without a terminal, a wait is said once it has lasted this long (short waits stay quiet)."""
REPEAT_S = 60.0
"""Without a terminal, a wait is said again every this many seconds while it lasts."""


@dataclass
class Wait:
    """What the run waits for now, and since when (wall clock, for the lines; monotonic, for the durations)."""

    what: str
    since: float
    since_monotonic: float
    said_at: float | None = None
    """Monotonic time of the last line about this wait (None: none yet)."""


def clock_time(wall: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall))


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def llm_target(data: dict[str, Any]) -> str:
    """'openai:gpt-5.2 at http://host:8000/v1': the model and, when known, where its requests go."""
    return escape(data["model"]) + (f" at {escape(data['endpoint'])}" if data.get("endpoint") else "")


class Progress:
    """Turns graph events into lines and a status, so that a long run shows where it is (see the module's doc)."""

    def __init__(
        self,
        max_rounds: int,
        *,
        announce_resume: bool = False,
        banner: list[str] | None = None,
        console: Console | None = None,
        first_notice_s: float = FIRST_NOTICE_S,
        repeat_s: float = REPEAT_S,
        inherited: tuple[str, int] | None = None,
    ) -> None:
        self.max_rounds = max_rounds
        self.banner = banner or []
        """Lines printed when a new run starts: after its task, model and device were checked, never before."""
        self.rounds = 0
        """The store's number of the last round shown (on resume, of the last round recorded before)."""
        self.announce_resume = announce_resume
        """Print "resuming RUN" once the run really goes on (after every check that could refuse it)."""
        self.console = console or out
        self.live = self.console.is_terminal
        """A terminal: the wait is a spinner line, redrawn; otherwise lines (``FIRST_NOTICE_S``, ``REPEAT_S``)."""
        self.inherited = inherited
        """A fork's parent and round: rounds up to it are the parent's, served from its records, not new ones."""
        self.first_notice_s = first_notice_s
        self.repeat_s = repeat_s
        self.status = self.console.status("starting", spinner="dots") if self.live else None
        self.wait: Wait | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="ksearch-progress", daemon=True)

    def __enter__(self) -> Progress:
        if self.status is not None:
            self.status.__enter__()
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._ticker.join(timeout=5)
        if self.status is not None:
            self.status.__exit__(*exc)

    # -- waits -------------------------------------------------------------------------------------------------

    def waiting_for(self, what: str) -> None:
        """The run waits for ``what`` from now on."""
        with self._lock:
            self.wait = Wait(what=what, since=time.time(), since_monotonic=time.monotonic())
        self._show_wait()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._show_wait()

    def _show_wait(self) -> None:
        """The spinner's text (a terminal), or a line when the wait has lasted long enough to be said (again)."""
        with self._lock:
            wait = self.wait
            if wait is None:
                return
            now = time.monotonic()
            waited = now - wait.since_monotonic
            if self.status is not None:
                self.status.update(f"waiting for {wait.what} (since {clock_time(wait.since)}, {duration(waited)})")
                return
            due = self.first_notice_s if wait.said_at is None else wait.said_at - wait.since_monotonic + self.repeat_s
            if waited < due:
                return
            wait.said_at = now
        self.console.print(
            f"{clock_time(time.time())} waiting for {wait.what} since {clock_time(wait.since)} ({duration(waited)})"
        )

    # -- events ------------------------------------------------------------------------------------------------

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        say = self.console.print
        if event == "starting":
            for line in self.banner:
                say(line)
        elif event == "resumed":
            self.rounds = data["rounds_used"]
            if self.announce_resume:
                say(f"resuming [bold]{data['run_id']}[/bold] ({count(self.rounds, 'round')} done before)")
        elif event == "plan":
            self.waiting_for("the planner: the LLM updates the world model")
        elif event == "plan_rejected":
            say(f"[yellow]planner's edit script rejected ({len(data['errors'])} errors); asking it to repair[/yellow]")
        elif event == "selected":
            for node in data["nodes"]:
                say(f"[cyan]action {node['node_id']}[/cyan]: {escape(node['title'])}")
        elif event == "write":
            self.waiting_for(
                f"the coder: round {self.rounds + 1}/{self.max_rounds}, cycle {data['cycle_id']} attempt "
                f"{data['attempt']} ({data['prompt_kind']})"
            )
        elif event == "llm_request":
            self.waiting_for(
                f"{llm_target(data)}: the {data['role']}'s reply to {data['call_key']}"
                + (f" (try {data['try']} of {data['max_attempts']})" if data["try"] > 1 else "")
            )
        elif event == "llm_retry":
            say(
                f"[yellow]{clock_time(time.time())} LLM call {data['call_key']} to {llm_target(data)} failed "
                f"(try {data['try']} of {data['max_attempts']}): {escape(data['error'])}; trying again in "
                f"{data['delay_s']:.1f}s[/yellow]"
            )
        elif event == "evaluate":
            self.waiting_for(f"the evaluation of cycle {data['cycle_id']} attempt {data['attempt']}'s kernel")
        elif event == "round":
            self.rounds = data["round_number"]  # the round's number in the store: right after a resume too
            with self._lock:
                self.wait = None  # the round is over: the next event says what comes next
            colour = "green" if data["verdict"] == "passed" else "red"
            stop = f" [dim](cycle ends: {data['stop_reason']})[/dim]" if data.get("stop_reason") else ""
            line = (
                f"round {self.rounds:>3}/{self.max_rounds} {data['cycle_id']}.{data['attempt']}: "
                f"[{colour}]{escape(first_line(data.get('summary') or data['verdict']))}[/{colour}]{stop}"
            )
            if self.inherited is not None and self.rounds <= self.inherited[1]:
                line = f"[dim]{line} (inherited from {escape(self.inherited[0])})[/dim]"
            say(line)
        elif event == "new_best":
            say(f"[bold green]new best[/bold green]: node {escape(data['node_id'])}, {escape(data['summary'])}")
        elif event == "steered":
            colour = "magenta" if data["ok"] else "yellow"
            verdict = "" if data["ok"] else " (rejected)"
            say(f"[{colour}]steering by {escape(data['author'])}{verdict}[/{colour}]: {escape(data['message'])}")
        elif event == "counters":
            colour = "blue" if data["status"] == "collected" else "yellow"
            say(
                f"[{colour}]hardware counters[/{colour}] of {escape(data['why'])}: {data['status']} "
                f"({data['wall_s']:.0f} s)"
            )
        elif event == "skill_lifted":
            say(
                f"[magenta]skill lifted[/magenta] {data['skill_id']} from cycle {data['cycle_id']}: "
                f"{escape(data['intent'])}"
            )
        elif event == "skill_trial":
            paired = f"x{data['speedup']:.3f}" if data.get("speedup") else "no paired measurement"
            status = "verified" if data["verified"] else "not verified"
            say(
                f"[magenta]skill trial[/magenta] {data['skill_id']} in cycle {data['cycle_id']}: "
                f"{data['verdict']}, {paired}, {status}{', held out' if data['held_out'] else ''}"
            )
