"""The worker's channel: a request that waits for an answer rings the parent's doorbell, so a parent that reads the
timing records late (``KSEARCH_TIMING_POLL_MS``) answers it at once; records that wait for nothing do not ring."""

from __future__ import annotations

import io
import os

from ksearch.tools.evaluator.worker.channel import Channel, SettleRequest


def test_a_request_rings_the_doorbell_and_a_record_does_not() -> None:
    read, write = os.pipe()
    os.set_blocking(read, False)
    try:
        channel = Channel(None, io.StringIO('{"ok": true}\n'), write)
        channel.send('{"op": "go", "config": 0, "run": 0}')
        assert _rung(read) == b""
        reply = channel.ask(SettleRequest())
        assert reply.ok and _rung(read) == b"!"
    finally:
        os.close(read)
        os.close(write)


def test_without_a_doorbell_a_request_is_still_answered() -> None:
    assert Channel(None, io.StringIO('{"ok": false, "message": "no"}\n')).ask(SettleRequest()).message == "no"


def _rung(fd: int) -> bytes:
    try:
        return os.read(fd, 16)
    except BlockingIOError:
        return b""
