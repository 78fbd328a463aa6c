"""A worker and a trusted checker in one test process, talking as they do through an evaluator session."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ksearch.contracts.exchange import CheckerCommand, Handoff, HandoffReply
from ksearch.tools.evaluator.checker import Checker
from ksearch.tools.evaluator.worker import Channel


class LoopbackChannel(Channel):
    """``Channel.ask`` answered by an in-process ``Checker`` (the session's relay, without processes)."""

    def __init__(self, checker: Checker) -> None:
        super().__init__(None, None)
        self.checker = checker
        self.handoffs: list[Handoff] = []
        self.phases: list[str] = []

    def phase(self, name: str) -> None:
        self.phases.append(name)

    def ask(self, message: BaseModel) -> HandoffReply:
        data: dict[str, Any] = message.model_dump()
        if data.get("op") == "grow":
            answer = self.checker.handle(CheckerCommand(op="staging", min_bytes=data["min_bytes"]))
        else:
            handoff = Handoff.model_validate(data)
            self.handoffs.append(handoff)
            answer = self.checker.handle(CheckerCommand(op="handoff", handoff=handoff))
        return HandoffReply.model_validate(answer)
