"""A loopback OpenAI-compatible server for the fault suite: scripted replies, scripted failures, a ledger of requests.

ksearch talks to it exactly as to vLLM or a gateway (``--model openai:NAME --base-url http://127.0.0.1:PORT/v1``,
through langchain-openai and real HTTP). It lives in the test process, so it outlives every agent process the tests
kill, and its ledger is the bill: every request that reached it is one the provider would charge for.

Each request is named by the logical call it serves (``plan:0``, ``write:c1:2``...), derived from the prompt the
way a reader would: coder prompts name their cycle and attempt; planner prompts are numbered in the order their
first versions arrive (a repair prompt extends the original, so it keeps the original's number). Replies are chosen
by that name, so a resumed agent that asks the same question again gets the same answer.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.helpers.http import serving

_CODER = re.compile(r"\(cycle (\w+), attempt (\d+) of at most")
_CODER_REPAIR = "# Your previous reply could not be used"
_JSON_REPAIR = "\n\n## Your previous reply\n"
_EDIT_REPAIR = "\n\n# Your previous reply\n"


@dataclass
class Reply:
    """What the server answers to one request."""

    text: str = ""
    status: int = 200
    delay_s: float = 0.0
    """Wait this long first (a stall: the client's timeout should abandon the request)."""
    body: bytes | None = None
    """Send these bytes as the body instead of a chat completion (a malformed response)."""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    index: int
    prompt: str
    key: str
    repeat: int
    """How many requests with this key arrived before this one."""
    arrived: float
    """time.time() at arrival."""
    status: int | None = None
    """What was answered; None while in flight or when the client was gone."""


Responder = Callable[[Request], Reply]


class LoopbackLLM:
    """``respond(request) -> Reply`` decides every answer; ``requests`` is the ledger."""

    def __init__(self, respond: Responder) -> None:
        self.respond = respond
        self.requests: list[Request] = []
        self.kill_when: Callable[[Request], bool] | None = None
        """If set, SIGKILL ``agent_pid`` when a request for which it is true arrives (once), before answering."""
        self.on_arrival: Callable[[Request], None] | None = None
        """If set, called with every request as it arrives, before it is answered (to signal the agent then)."""
        self.agent_pid: int | None = None
        self._planner_bases: list[str] = []
        self._lock = threading.Lock()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def keys(self) -> list[str]:
        return [r.key for r in self.requests]

    def count(self, key: str) -> int:
        return sum(1 for r in self.requests if r.key == key)

    def _name(self, prompt: str) -> str:
        coder = _CODER.search(prompt)
        if coder:
            return f"write:{coder[1]}:{coder[2]}" + ("#repair" if _CODER_REPAIR in prompt else "")
        base, suffix = prompt, ""
        if _JSON_REPAIR in prompt:
            base, suffix = prompt.split(_JSON_REPAIR)[0], "#repair"
        if _EDIT_REPAIR in base:
            base, suffix = base.split(_EDIT_REPAIR)[0], "#edit-repair" + suffix
        if base not in self._planner_bases:
            self._planner_bases.append(base)
        return f"plan:{self._planner_bases.index(base)}{suffix}"

    def _arrive(self, prompt: str) -> Request:
        with self._lock:
            key = self._name(prompt)
            request = Request(len(self.requests), prompt, key, self.count(key), time.time())
            self.requests.append(request)
            kill = self.kill_when is not None and self.kill_when(request)
            if kill:
                self.kill_when = None
        if kill:  # the agent dies with this request in flight: it was sent, never answered
            deadline = time.monotonic() + 10
            while self.agent_pid is None and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(self.agent_pid, signal.SIGKILL)
        if self.on_arrival is not None:
            self.on_arrival(request)
        return request


@contextmanager
def loopback_llm(respond: Responder) -> Iterator[LoopbackLLM]:
    server = LoopbackLLM(respond)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            messages = body.get("messages") or [{}]
            content = messages[-1].get("content", "")
            prompt = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
            request = server._arrive(prompt)
            reply = server.respond(request)
            if reply.delay_s:
                time.sleep(reply.delay_s)
            data = reply.body if reply.body is not None else json.dumps(_payload(request, reply, body)).encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
                request.status = reply.status
            except OSError:
                pass  # the client is gone (it timed out, or was killed)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as port:
        server.port = port
        yield server


def _payload(request: Request, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
    if reply.status != 200:
        return {
            "error": {
                "message": reply.text or f"scripted HTTP {reply.status}",
                "type": "fault",
                "code": str(reply.status),
            }
        }
    return {
        "id": f"chatcmpl-{request.index}",
        "object": "chat.completion",
        "created": int(request.arrived),
        "model": body.get("model", "fault-test"),
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply.text}}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200},
    }


def scripted(replies: dict[str, str | Reply | list[str | Reply]]) -> Responder:
    """Answer each call by its name; a list gives the nth request of that name its nth entry (the last repeats)."""

    def respond(request: Request) -> Reply:
        if request.key not in replies:
            return Reply(status=500, text=f"the test script has no reply for {request.key}")
        entry = replies[request.key]
        if isinstance(entry, list):
            entry = entry[min(request.repeat, len(entry) - 1)]
        return entry if isinstance(entry, Reply) else Reply(text=entry)

    return respond
