"""The loader of ``ksearch.tasks.keyless``: ``python -P -m ksearch.tasks.keyless_loader NAME OUT [--kernelbench-root
DIR] [--validate DEVICE]`` imports the task file in this process (started without the key), validates it when asked,
and writes its answer (the task's description, or the error) to OUT as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ksearch.errors import UserError
from ksearch.redaction import holds_secret


def main(argv: list[str]) -> int:
    """The loader: ``NAME OUT [--kernelbench-root DIR] [--validate DEVICE]``; writes its answer to OUT."""
    from ksearch.tasks.described import describe
    from ksearch.tasks.registry import resolve_task

    name, out, rest = argv[0], Path(argv[1]), argv[2:]
    options = dict(zip(rest[::2], rest[1::2], strict=False))
    if holds_secret():
        answer: dict = {"ok": False, "error": "the task loader was started with a secret-named variable"}
    else:
        try:
            task = resolve_task(name, kernelbench_root=options.get("--kernelbench-root"))
            if "--validate" in options:
                task.validate(options["--validate"])
            answer = {"ok": True, "description": describe(task).model_dump(mode="json")}
        except UserError as exc:
            answer = {"ok": False, "kind": type(exc).__name__, "error": str(exc), "hint": exc.hint}
    out.write_text(json.dumps(answer), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
