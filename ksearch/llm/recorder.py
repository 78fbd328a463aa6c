"""Where the client's calls are kept, so a resumed node never pays for the same call twice: the protocol, an in-memory
recorder for tests and throw-away runs, and the run's rows in the workspace database."""

from __future__ import annotations

import threading
from typing import Protocol

from ksearch.llm.usage import RecordedCall, RoleUsage, Usage
from ksearch.store import Store

_FIELDS = set(RecordedCall.model_fields)


class CallRecorder(Protocol):
    """Where calls are stored; the run store implements it on SQLite."""

    def find(self, call_key: str) -> RecordedCall | None: ...

    def record(self, call: RecordedCall) -> None: ...

    def note_error(self, call_key: str, error: str) -> None:
        """Set the error of a call recorded without one (a person's reply, validated when the graph reads it)."""
        ...


class MemoryRecorder:
    """A :class:`CallRecorder` in a dict, for tests and throw-away runs."""

    def __init__(self) -> None:
        self.calls: dict[str, RecordedCall] = {}
        self._lock = threading.Lock()

    def find(self, call_key: str) -> RecordedCall | None:
        with self._lock:
            return self.calls.get(call_key)

    def record(self, call: RecordedCall) -> None:
        with self._lock:
            self.calls[call.call_key] = call

    def note_error(self, call_key: str, error: str) -> None:
        with self._lock:
            call = self.calls.get(call_key)
            if call is not None and call.error is None:
                call.error = error

    def usage(self) -> Usage:
        """Totals over everything recorded."""
        with self._lock:
            total = Usage()
            for call in self.calls.values():
                total.add(call)
            return total


class StoreRecorder:
    """Finds and records calls by (run, call key), so a resumed node never pays for the same call twice."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id

    def find(self, call_key: str) -> RecordedCall | None:
        row = self.store.find_llm_call(self.run_id, call_key)
        if row is None:
            return None
        return RecordedCall.model_validate({k: v for k, v in row.items() if k in _FIELDS and v is not None})

    def record(self, call: RecordedCall) -> None:
        self.store.record_llm_call(self.run_id, call.model_dump())

    def note_error(self, call_key: str, error: str) -> None:
        self.store.note_llm_call_error(self.run_id, call_key, error)

    def usage(self) -> Usage:
        per_role = self.store.usage(self.run_id)
        total = per_role.pop("total")

        def role_usage(row: dict) -> RoleUsage:
            return RoleUsage(
                input_tokens=int(row["input_tokens"]),
                output_tokens=int(row["output_tokens"]),
                cost_usd=float(row["cost_usd"]),
                calls=int(row["calls"]),
            )

        base = role_usage(total)
        return Usage(**base.model_dump(), per_role={role: role_usage(r) for role, r in per_role.items()})
