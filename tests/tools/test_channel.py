"""The worker's channel: a request that waits for an answer rings the parent's doorbell, so a parent that reads the
timing records late (``KSEARCH_TIMING_POLL_MS``) answers it at once; records that wait for nothing do not ring."""

from __future__ import annotations

import io
import os

from ksearch.tools.evaluator.worker.channel import SETTLE_REQUEST, Channel, encode_record


def test_a_request_rings_the_doorbell_and_a_record_does_not() -> None:
    read, write = os.pipe()
    os.set_blocking(read, False)
    try:
        channel = Channel(None, io.StringIO('{"ok": true}\n'), write)
        channel.send('{"op": "go", "config": 0, "run": 0}')
        assert _rung(read) == b""
        reply = channel.ask(SETTLE_REQUEST)
        assert reply.ok and _rung(read) == b"!"
    finally:
        os.close(read)
        os.close(write)


def test_without_a_doorbell_a_request_is_still_answered() -> None:
    assert Channel(None, io.StringIO('{"ok": false, "message": "no"}\n')).ask(SETTLE_REQUEST).message == "no"


def _rung(fd: int) -> bytes:
    try:
        return os.read(fd, 16)
    except BlockingIOError:
        return b""


def test_records_are_written_by_hand_from_plain_values() -> None:
    """issue 59: no serialiser of a library in the candidate's process writes what the checker reads; anything but
    plain values is refused rather than converted (an int subclass could carry methods of the candidate's)."""
    import json

    import pytest

    line = encode_record({"op": "handoff", "shapes": [[2, 3]], "digest": 'a"b', "window": None, "ok": True})
    assert json.loads(line) == {"op": "handoff", "shapes": [[2, 3]], "digest": 'a"b', "window": None, "ok": True}

    class Sneaky(int):
        pass

    with pytest.raises(TypeError):
        encode_record({"offsets": [Sneaky(3)]})
    assert json.loads(encode_record({"raised": "a\nb\x01\t", "work": {"ops": [{"op": "mm"}]}})) == {
        "raised": "a\nb\x01\t",
        "work": {"ops": [{"op": "mm"}]},
    }
    with pytest.raises(TypeError):
        encode_record({"work": {1: 2}})
