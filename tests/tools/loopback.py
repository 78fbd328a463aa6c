"""A worker and a trusted checker in one test process, talking as they do through an evaluator session."""

from __future__ import annotations

import json
from typing import Any

from ksearch.contracts.exchange import CheckerCommand, Handoff, HandoffReply
from ksearch.tools.evaluator.checker.main import Checker
from ksearch.tools.evaluator.worker.channel import Channel, encode_record


class LoopbackChannel(Channel):
    """``Channel.request`` answered by an in-process ``Checker`` (the session's relay, without processes)."""

    def __init__(self, checker: Checker) -> None:
        super().__init__(None, None)
        self.checker = checker
        self.handoffs: list[Handoff] = []
        self.phases: list[str] = []
        self.spins: list[bool] = []
        """Per message, whether the worker asked to wait for the answer without sleeping."""
        self.sent: list[str] = []
        """Messages the worker sent without waiting for an answer (timed windows), in order."""
        self.answers_due: list[HandoffReply] = []

    def send(self, payload: str) -> None:
        self.sent.append(payload)

    def phase(self, name: str) -> None:
        self.phases.append(name)

    def request(self, fields: dict[str, object]) -> None:
        data: dict[str, Any] = json.loads(encode_record(fields))  # the line the parent would read
        if data.get("op") == "grow":
            answer = self.checker.handle(CheckerCommand(op="staging", min_bytes=data["min_bytes"]))
        elif data.get("op") == "settle":
            answer = self.checker.handle(CheckerCommand(op="settle"))
        elif data.get("op") == "seed":
            answer = self.checker.handle(
                CheckerCommand(
                    op="seed", config_index=data["config_index"], kind=data["kind"], input_seed=data.get("input_seed")
                )
            )
        else:
            handoff = Handoff.model_validate(data)
            self.handoffs.append(handoff)
            answer = self.checker.handle(CheckerCommand(op="handoff", handoff=handoff))
        self.checker.judge_pending()  # as the checker's serve loop does after each answer
        self.checker.prepare_audit()
        self.answers_due.append(HandoffReply.model_validate(answer))

    def answer(self, *, spin: bool = False) -> HandoffReply:
        self.spins.append(spin)
        return self.answers_due.pop(0)
