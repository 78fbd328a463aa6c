"""The worker's side of its conversation with the parent: phases, handoffs and timed windows out on the message
socket (``KSEARCH_MSG_FD``), answers in on stdin."""

from __future__ import annotations

import os
import select
import time
from typing import TextIO

from pydantic import BaseModel

from ksearch.contracts.exchange import HandoffReply

SPIN_WAIT_S = 1.0
"""How long a handoff of the timing phase waits for the checker's answer without sleeping (then it blocks)."""


def spin_until_readable(fd: int, limit_s: float) -> None:
    """Poll ``fd`` without sleeping until it is readable, for at most ``limit_s`` seconds.

    Upstream's benchmark process never sleeps between a shape's checked call and its timed loop (its check runs in the
    same thread, and CUDA's synchronisations spin). A worker that blocked while the checker judged that call would leave
    its CPU idle just before the loop, and on the cloud machines measured (bench/RESULTS.md, "Timing fidelity") a CPU
    back from idle launches slower for a while: the launch-bound shapes then read 10-20 % above upstream's. The parent
    sends one answer per message, so nothing is buffered ahead of the line waited for; past ``limit_s`` (a slow
    judgment) the caller's blocking read takes over."""
    deadline = time.monotonic() + limit_s
    while not select.select([fd], [], [], 0)[0] and time.monotonic() < deadline:
        pass


class Channel:
    """The worker's side of the conversation with the parent: phases and handoffs out, answers in. Slotted: a
    candidate cannot wrap ``send`` on the instance."""

    __slots__ = ("answers", "doorbell_fd", "msg_fd")

    def __init__(self, msg_fd: int | None, answers: TextIO | None, doorbell_fd: int | None = None) -> None:
        self.msg_fd = msg_fd
        self.answers = answers
        self.doorbell_fd = doorbell_fd
        """Written after each request that waits for an answer: the parent may otherwise read late."""

    def send(self, payload: str) -> None:
        if self.msg_fd is None:
            return
        data = (payload.rstrip("\n") + "\n").encode()
        while data:
            data = data[os.write(self.msg_fd, data) :]

    def phase(self, name: str) -> None:
        try:
            self.send('{"op": "phase", "phase": "%s"}' % name)
        except OSError:
            pass  # the parent enforces limits from its own clock; a lost phase only costs precision

    def ask(self, message: BaseModel, *, spin: bool = False) -> HandoffReply:
        """Send ``message`` and read the answer; ``spin``: wait for it without sleeping (``spin_until_readable``)."""
        self.request(message)
        return self.answer(spin=spin)

    def request(self, message: BaseModel) -> None:
        """Send ``message``, whose answer ``answer`` reads: the worker may do its own work in between."""
        self.send(message.model_dump_json())
        if self.doorbell_fd is not None:
            try:
                os.write(self.doorbell_fd, b"!")
            except OSError:
                pass  # a full pipe already rings

    def answer(self, *, spin: bool = False) -> HandoffReply:
        if spin and self.answers is not None:
            spin_until_readable(self.answers.fileno(), SPIN_WAIT_S)
        line = self.answers.readline() if self.answers is not None else ""
        if not line:
            raise RuntimeError("the evaluator closed the channel (evaluation aborted)")
        return HandoffReply.model_validate_json(line)


class GrowRequest(BaseModel):
    """The staging buffer must hold ``min_bytes``."""

    op: str = "grow"
    min_bytes: int


class SettleRequest(BaseModel):
    """Every output handed off so far judged: the answer is the verdict."""

    op: str = "settle"
