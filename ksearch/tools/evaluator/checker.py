"""The trusted checker: recomputes the reference in its own process and judges the candidate's saved outputs.

Started by the evaluator as ``python -P -m ksearch.tools.evaluator.checker REQUEST.json`` *after* the candidate's worker has
exited and its process group was killed. It never imports the candidate. It regenerates every input from the same
task, seed and device (inputs are deterministic in the seed, and a cheap digest of them must equal the one the
worker reported), computes ``task.expected`` on those pristine inputs, loads the candidate's outputs with
``torch.load(weights_only=True)`` (no code runs on load) and compares them with ``task.check``.

Result channel: the checker writes its JSON result to its own stdout, which only the parent holds (the checker moves
Python's ``sys.stdout`` onto stderr first, so library prints cannot corrupt it). The candidate is gone by then and
never had that pipe, so nothing it wrote can become the verdict.

The protocol both sides share is in ``ksearch.contracts.exchange`` (records) and ``seeds`` (salted seeds, digests).
"""

from __future__ import annotations

import os
import platform
import stat
import sys
import traceback
from pathlib import Path
from typing import Any

from ksearch.contracts.evaluation import Mismatch, Rejection, Verdict
from ksearch.contracts.exchange import CheckRequest, CheckResult, OutputRecord
from ksearch.tools.evaluator.seeds import input_digest, salted_seed


class _Fail(Exception):
    def __init__(self, verdict: Verdict, error: str, *, mismatch: Mismatch | None = None, rule: str = "") -> None:
        super().__init__(error)
        self.verdict, self.error, self.mismatch = verdict, error, mismatch
        self.rejection = Rejection(rule=rule, evidence=error) if rule else None


def _significant(shape: tuple[int, ...], strides: list[int]) -> list[tuple[int, int]]:
    return [(i, s) for i, (n, s) in enumerate(zip(shape, strides, strict=True)) if n > 1]


class Checker:
    def __init__(self, request: CheckRequest) -> None:
        from ksearch.tasks.registry import resolve_task

        self.request = request
        self.task = resolve_task(request.task)
        self.device = request.device
        self.outputs_checked = 0

    def run(self) -> CheckResult:
        import torch

        from ksearch.contracts.exchange import WorkerResult
        from ksearch.tools.timing import MAX_INPUT_SETS, SEED_STRIDE

        if self.device.startswith("cuda"):
            index = torch.device(self.device).index or 0
            torch.cuda.set_device(index)
            self.device = f"cuda:{index}"
        configs = (
            self.task.test_configs(self.device) if self.request.kind == "test" else self.task.benchmark_configs(self.device)
        )
        passed = 0
        try:
            try:
                claims = WorkerResult.model_validate_json(Path(self.request.worker_result_path).read_text("utf-8"))
            except Exception as exc:  # noqa: BLE001 - a forged or truncated report is the candidate's fault
                raise _Fail(Verdict.CRASHED, f"the worker's report is unreadable: {type(exc).__name__}") from None
            by_config: dict[int, list[OutputRecord]] = {}
            for record in claims.records:
                by_config.setdefault(record.config_index, []).append(record)
            for index, config in enumerate(configs):
                records = by_config.get(index, [])
                if not records:
                    raise _Fail(Verdict.INCORRECT, f"{config.name}: no output was produced for this config",
                                mismatch=Mismatch(config=config.name, message=f"{config.name}: no output"))
                base = salted_seed(config.seed, self.request.salt)
                for record in records:
                    offset = record.input_seed - base
                    if (record.config != config.name or record.prepare_seed != base or offset % SEED_STRIDE
                            or not 0 <= offset // SEED_STRIDE < MAX_INPUT_SETS):  # fmt: skip
                        raise _Fail(Verdict.REJECTED, f"{config.name}: the worker reported an output for seeds the "
                                    "evaluation did not use", rule="forged_record")  # fmt: skip
                    self.check_record(config, record)
                passed += 1
        except _Fail as failure:
            return self.result(failure.verdict, passed, len(configs), failure.error, failure.mismatch, failure.rejection)
        return self.result(Verdict.PASSED, passed, len(configs))

    def check_record(self, config: Any, record: OutputRecord) -> None:
        import torch

        prepare_config = config.model_copy(update={"seed": record.prepare_seed})
        input_config = config.model_copy(update={"seed": record.input_seed})
        inputs = self.task.make_inputs(input_config, self.device)
        digest = input_digest(inputs)
        if digest != record.digest:
            raise _Fail(
                Verdict.REJECTED,
                f"{config.name}: the inputs the candidate was given (digest {record.digest[:12]}) differ from the "
                f"inputs regenerated from the same seed (digest {digest[:12]}): either the inputs were modified "
                "before they were recorded or the task's input generator is not deterministic",
                rule="input_digest",
            )
        expected = self.task.expected(prepare_config, [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
        output = self.load_output(config.name, record.file)
        expecteds = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        outputs = output if isinstance(output, list) else [output]
        wanted = self.task.output_strides(prepare_config, expected)
        if wanted is not None and len(outputs) == len(expecteds) and len(record.stride) == len(outputs):
            wanted_list = wanted if isinstance(wanted, list) else [wanted]
            for position, (tensor, have, want) in enumerate(zip(outputs, record.stride, wanted_list, strict=False)):
                shape = tuple(tensor.shape)
                if len(have) == len(shape) == len(want) and _significant(shape, have) != _significant(shape, list(want)):
                    message = (f"{config.name}: output {position} has strides {tuple(have)}, expected {tuple(want)} "
                               "(return a contiguous tensor)")  # fmt: skip
                    raise _Fail(Verdict.INCORRECT, message, mismatch=Mismatch(config=config.name, message=message))
        if not self.task.allow_nonfinite:
            for position, tensor in enumerate(outputs):
                if (tensor.is_floating_point() or tensor.is_complex()) and not bool(torch.isfinite(tensor).all()):
                    bad = torch.nonzero(~torch.isfinite(tensor))
                    where = [int(i) for i in bad[0]] if bad.numel() else []
                    message = (f"{config.name}: {int((~torch.isfinite(tensor)).sum())} non-finite output values "
                               f"(nan/inf) in output {position}, first at {where}")  # fmt: skip
                    raise _Fail(Verdict.INCORRECT, message,
                                mismatch=Mismatch(config=config.name, worst_index=where, message=message))  # fmt: skip
        on_device = [t.to(self.device) for t in outputs]
        candidate_output: Any = tuple(on_device) if self.task.output_is_tuple else on_device[0]
        if not self.task.output_is_tuple and len(on_device) != 1:
            candidate_output = tuple(on_device)
        mismatch = self.task.check(prepare_config, candidate_output, expected)
        self.outputs_checked += 1
        if mismatch is not None:
            if record.input_seed != record.prepare_seed:
                mismatch = mismatch.model_copy(update={"message": f"timed output: {mismatch.message}"})
            raise _Fail(Verdict.INCORRECT, mismatch.message, mismatch=mismatch)

    def load_output(self, config_name: str, file: str) -> list[Any] | Any:
        import torch

        folder = Path(self.request.outputs_dir)
        if Path(file).name != file or not file:
            raise _Fail(Verdict.REJECTED, f"{config_name}: output file name {file!r} escapes the output folder",
                        rule="forged_record")  # fmt: skip
        path = folder / file
        try:
            info = os.lstat(path)
        except OSError:
            raise _Fail(Verdict.INCORRECT, f"{config_name}: the output was not saved",
                        mismatch=Mismatch(config=config_name, message=f"{config_name}: output missing")) from None  # fmt: skip
        if not stat.S_ISREG(info.st_mode):
            raise _Fail(Verdict.REJECTED, f"{config_name}: the output file is not a regular file", rule="forged_record")
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
            output = payload["output"]
        except Exception as exc:  # noqa: BLE001 - an unreadable file is the candidate's fault
            raise _Fail(Verdict.INCORRECT, f"{config_name}: the saved output is unreadable ({type(exc).__name__})",
                        mismatch=Mismatch(config=config_name, message=f"{config_name}: output unreadable")) from None  # fmt: skip
        items = output if isinstance(output, list) else [output]
        if not items or not all(isinstance(t, torch.Tensor) for t in items):
            raise _Fail(Verdict.INCORRECT, f"{config_name}: the saved output is not a tensor",
                        mismatch=Mismatch(config=config_name, message=f"{config_name}: not a tensor"))  # fmt: skip
        items = [t.detach().as_subclass(torch.Tensor) for t in items]
        return items if isinstance(output, list) else items[0]

    def result(
        self,
        verdict: Verdict,
        passed: int,
        total: int,
        error: str = "",
        mismatch: Mismatch | None = None,
        rejection: Rejection | None = None,
    ) -> CheckResult:
        return CheckResult(
            verdict=verdict,
            configs_passed=passed,
            configs_total=total,
            outputs_checked=self.outputs_checked,
            mismatch=mismatch,
            rejection=rejection,
            error=error,
            environment=checker_environment(self.device),
        )


def checker_environment(device: str) -> dict[str, str]:
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "device_name": "cpu"}
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index or 0
        major, minor = torch.cuda.get_device_capability(index)
        env.update(device_name=torch.cuda.get_device_name(index), compute_capability=f"{major}.{minor}",
                   cuda=str(torch.version.cuda))  # fmt: skip
    return env


def warm_up(device: str) -> None:
    """Pay torch's and CUDA's start-up cost while the worker still runs."""
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.init()
        torch.empty(1, device=device)


def main(argv: list[str] | None = None) -> int:
    result_fd = os.dup(1)
    os.dup2(2, 1)  # anything printed by torch or the task goes to stderr; fd ``result_fd`` carries only the result
    sys.stdout = sys.stderr
    args = sys.argv[1:] if argv is None else argv
    try:
        request = CheckRequest.model_validate_json(Path(args[0]).read_text(encoding="utf-8"))
        checker = Checker(request)
        warm_up(request.device)
        # Started alongside the worker: wait until the parent says the worker is dead and its files are final.
        if not sys.stdin.isatty() and sys.stdin.readline().strip() != "go":
            raise RuntimeError("the parent did not send 'go' (evaluation aborted)")
        result = checker.run()
    except Exception:  # noqa: BLE001 - the parent turns this into a harness failure with the traceback
        result = CheckResult(verdict=Verdict.CRASHED, error="checker failed:\n" + traceback.format_exc()[-3000:])
    with os.fdopen(result_fd, "w", encoding="utf-8") as channel:
        channel.write(result.model_dump_json())
    return 0


if __name__ == "__main__":
    from ksearch.tools.evaluator.sandbox import die_with_parent

    if os.environ.get("KSEARCH_PARENT_PID"):
        die_with_parent(int(os.environ["KSEARCH_PARENT_PID"]))
    status = main()
    sys.stderr.flush()
    os._exit(status)
