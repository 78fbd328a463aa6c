"""The inputs and expected outputs the trusted checker makes: inputs regenerated from the claimed seeds (or the ones it
handed to the worker), their digest and what making them cost, references cached where they repeat, an audit's
expectation whole or at sampled positions, and the device memory it gives back."""

from __future__ import annotations

import copy
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ksearch.contracts.exchange import StagedInput, StagingHandle
from ksearch.tools.evaluator.checker.checker_records import TEST_KINDS, InputClaim
from ksearch.tools.evaluator.checker.reference_cache import ReferenceCache, nbytes_of
from ksearch.tools.evaluator.checker.work_checks import largest_input
from ksearch.tools.evaluator.shared.seeds import input_digest
from ksearch.tools.evaluator.shared.staging import layout

if TYPE_CHECKING:
    from ksearch.tasks.base import ExpectedSample
    from ksearch.tools.evaluator.shared.staging import StagingOwner

HANDED_KEPT = 4
"""Input sets made for the worker kept for their handoffs (a loop uses each before it asks for the next)."""
HANDED_SHARE = 0.5
"""Of the reference cache's budget, the most the kept handed sets may hold together: KernelBench's 6.4 GB ReLU input
four times over would be 26 GB beside the worker's own rotated sets (on an H100 its normal mode ran out of memory,
2026-12-07, for a reason not read yet). A set beyond it is made again at its handoff, a draw on the device."""
_T = TypeVar("_T")


@dataclass(frozen=True)
class HandedInputs:
    """Inputs made here and left in the staging buffer for the worker: where each lies, their digest, the buffer."""

    inputs: list[StagedInput]
    digest: str
    handle: StagingHandle
    nbytes: int


class References:
    """One checker's inputs and references on ``device``; ``low_memory`` is the evaluation's mode (``begin``)."""

    def __init__(self, device: str, cache_bytes: int) -> None:
        self.device = device
        self.cache = ReferenceCache(cache_bytes)
        self.handed_budget = int(cache_bytes * HANDED_SHARE)
        self.low_memory = False
        """This evaluation's mode: cache nothing, keep no inputs, give memory back after each judgment."""
        self.input_bytes: dict[tuple[str, str], int] = {}
        """(task, benchmark config) -> bytes of its inputs (deterministic per config; kept across evaluations)."""
        self.reference_bytes: dict[tuple[str, str], int] = {}
        """(task, config) -> bytes of its reference as computed here (``worth_caching``; kept across evaluations)."""
        self.input_elements: dict[tuple[str, str], int] = {}
        """(task, config) -> elements of its largest input, as regenerated here (``work_checks.judge_traced``)."""
        self.input_costs: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
        """(task, benchmark config) -> the milliseconds its ``make_inputs`` and its input digest took here, each time
        (kept across evaluations): the parent's allowance for the same work in the worker between timed windows."""
        self.kept: tuple[tuple[str, str, int], dict[int, Any]] | None = None
        """(task, config, input seed) and the inputs that config's audits do not re-randomise, of the set last audited:
        each audit of the set then makes only its new activations (``regenerated``)."""
        self.handed: dict[tuple[int, int, int | None], tuple[list[Any], str]] = {}
        """(benchmark config, input seed, activation seed) -> the inputs this checker made for a fresh seed and handed
        to the worker through the staging buffer, and their digest: the handoff of the call on them is judged on
        these, not on inputs made again (``regenerated``). At most ``HANDED_KEPT`` sets and ``handed_budget`` bytes;
        none in low-memory mode."""

    def forget_inputs(self) -> None:
        """Drop the inputs kept for this evaluation's handoffs and audits (at its start and end, and before the retry
        after an out-of-memory error)."""
        self.kept = None
        self.handed = {}

    def keep_handed(self, claim: InputClaim, inputs: list[Any], digest: str) -> None:
        """Keep the inputs handed to the worker for ``claim`` until its handoff (not in low-memory mode), the oldest
        dropped beyond ``HANDED_KEPT`` sets or ``handed_budget`` bytes; a set dropped or never kept is made again from
        its seed at its handoff (``regenerated``)."""
        if self.low_memory or nbytes_of(inputs) > self.handed_budget:
            return
        self.handed[(claim.config_index, claim.input_seed, claim.activation_seed)] = (inputs, digest)
        while len(self.handed) > HANDED_KEPT or self.handed_bytes() > self.handed_budget:
            self.handed.pop(next(iter(self.handed)))

    def handed_bytes(self) -> int:
        return sum(nbytes_of(inputs) for inputs, _ in self.handed.values())

    def hand_over(self, task: Any, config: Any, claim: InputClaim, staging: StagingOwner) -> HandedInputs | None:
        """Make the inputs ``claim`` names here and leave the ones the worker needs (an audit's activations, or a
        fresh set whole) in the staging buffer, so the task's generator never runs in the candidate's process for
        an audit (issue 59: a wrapper of it showed a kernel each audit's values before the call). Kept for the
        handoff's judgment. None when an input cannot be handed over (neither a contiguous tensor nor a plain value):
        the worker then makes the set itself."""
        import torch

        inputs, digest = self.retrying_out_of_memory(lambda: self.regenerated(task, config, claim))
        if claim.activation_seed is not None:
            positions = task.activation_inputs(config)
            wanted = range(len(inputs)) if positions is None else positions
        else:
            wanted = range(len(inputs))
        tensors: list[tuple[int, Any]] = []
        items: list[StagedInput] = []
        for position in wanted:
            value = inputs[position]
            if type(value) is torch.Tensor and value.is_contiguous():
                tensors.append((position, value))
            elif value is None or type(value) in (int, float, str):
                items.append(StagedInput(position=position, value=value))
            else:
                return None
        offsets, total = layout([t.numel() * t.element_size() for _, t in tensors])
        handle = self.retrying_out_of_memory(lambda: staging.ensure(total))
        for (position, tensor), offset in zip(tensors, offsets, strict=True):
            size = tensor.numel() * tensor.element_size()
            target = staging.buffer[offset : offset + size].view(tensor.dtype).view(tensor.shape)
            target.copy_(tensor)
            items.append(
                StagedInput(position=position, offset=offset, shape=list(tensor.shape), dtype=str(tensor.dtype))
            )
        self.sync()
        self.keep_handed(claim, inputs, digest)
        return HandedInputs(sorted(items, key=lambda item: item.position), digest, handle, total)

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)

    def retrying_out_of_memory(self, work: Callable[[], _T]) -> _T:
        """``work()``, once more after an out-of-memory error with the reference cache and the kept inputs (each made
        again from its seeds when asked) dropped and the allocator's free blocks given back (the GPU is shared with the
        candidate's worker, and with other sessions on a machine running several searches)."""
        import torch

        try:
            return work()
        except torch.OutOfMemoryError:
            self.cache.clear()
            self.forget_inputs()
            self.release_memory()
            return work()

    def release_memory(self, *, collect: bool = True) -> None:
        """Give the allocator's free blocks back to the device (cached references stay): between evaluations the
        checker holds only what it keeps. ``collect``: first free what only reference cycles still hold."""
        if self.device.startswith("cuda"):
            import gc

            import torch

            if collect:
                gc.collect()
            torch.cuda.empty_cache()

    def reference(self, task: Any, config: Any, claim: InputClaim) -> tuple[str, Any]:
        """The input digest and the whole reference of ``claim``, from the cache where it was computed before."""
        key = (
            task.name,
            claim.kind in TEST_KINDS,
            config.name,
            claim.prepare_seed,
            claim.input_seed,
            claim.activation_seed,
        )
        found = self.cache.get(key)
        if found is not None:
            return found
        return self.retrying_out_of_memory(lambda: self.compute(task, config, claim, key))

    def compute(self, task: Any, config: Any, claim: InputClaim, key: tuple[Any, ...]) -> tuple[str, Any]:
        inputs, digest = self.regenerated(task, config, claim)
        prepare_config = config.model_copy(update={"seed": claim.prepare_seed})
        expected = task.expected(prepare_config, inputs)  # after the digest; nothing reads the inputs again
        del inputs
        if not self.low_memory and claim.kind != "audit" and self.worth_caching(task, config, expected):
            self.cache.put(key, digest, expected)  # an audit's activations are its own: never asked again
        return digest, expected

    def worth_caching(self, task: Any, config: Any, expected: Any) -> bool:
        """Whether to keep a reference: only where the cache holds every correctness reference of the task (their
        sizes as computed here, this one's for those not computed yet). An evaluation asks for them in the same
        order each time, and a cache that holds fewer than all is swept before it is asked again (least recently
        used first out): it would never hit, and would hold up to a fifth of the GPU beside the worker's inputs
        (KernelBench's 6.4 GB ReLU: two outputs of 6.4 GB)."""
        size = nbytes_of(expected)
        self.reference_bytes[(task.name, config.name)] = size
        names = [test.name for test in task.test_configs(self.device)]
        return sum(self.reference_bytes.get((task.name, name), size) for name in names) <= self.cache.budget

    def audit_expectation(
        self, task: Any, config: Any, claim: InputClaim, *, whole: bool
    ) -> tuple[str, Any, ExpectedSample | None, bool]:
        """An audit's input digest and expectation: with ``whole`` (a config's first audit, one in
        ``WHOLE_AUDIT_ODDS`` after it, or sampling off) the whole reference, else the reference at sampled positions
        where the task offers them (else the whole one); the last item says whether it is whole."""
        if not whole:
            digest, expected, sample = self.audit_reference(task, config, claim)
            return digest, expected, sample, sample is None
        digest, expected = self.compute(task, config, claim, ())
        return digest, expected, None, True

    def audit_reference(self, task: Any, config: Any, claim: InputClaim) -> tuple[str, Any, ExpectedSample | None]:
        """An audit's input digest and, where the task offers one, the reference at positions drawn here with the
        system's randomness (``Task.expected_sample``), else the whole reference (then the sample is None). Never
        cached: each audit has activations of its own."""
        import torch

        inputs, digest = self.regenerated(task, config, claim)
        prepare_config = config.model_copy(update={"seed": claim.prepare_seed})
        generator = torch.Generator(device=self.device).manual_seed(secrets.randbits(63))
        sample = None if task.output_is_tuple else task.expected_sample(prepare_config, inputs, generator)
        expected = task.expected(prepare_config, inputs) if sample is None else None
        return digest, expected, sample

    def regenerated(self, task: Any, config: Any, claim: InputClaim) -> tuple[list[Any], str]:
        """The inputs ``claim`` names (its set's seed, and an audit's activation seed) made here, and their digest;
        for a timed output, what making and digesting them cost (the parent's allowance for the worker's same work)."""
        if claim.kind != "test":
            handed = self.handed.pop((claim.config_index, claim.input_seed, claim.activation_seed), None)
            if handed is not None:  # made when the seed was issued (``hand_over``)
                return handed
        started = time.perf_counter()
        if claim.activation_seed is None:
            inputs = task.make_inputs(config.model_copy(update={"seed": claim.input_seed}), self.device)
        else:  # the audit's activations, and the set's other inputs (made once per set)
            inputs = task.make_inputs(config.model_copy(update={"seed": claim.activation_seed}), self.device)
            positions = task.activation_inputs(config)
            if positions is not None:
                for position, value in self.kept_inputs(task, config, claim.input_seed, positions).items():
                    inputs[position] = copy.deepcopy(value)  # a reference may write it (tensors are cloned)
        self.sync()
        generated = time.perf_counter()
        self.input_bytes[(task.name, config.name)] = nbytes_of(inputs)
        self.input_elements[(task.name, config.name)] = largest_input(inputs)
        digested = time.perf_counter()
        digest = input_digest(inputs)
        if claim.kind not in TEST_KINDS:  # the worker does the same between timed windows: timed here, trusted
            costs = self.input_costs.setdefault((task.name, config.name), ([], []))
            costs[0].append((generated - started) * 1e3)
            costs[1].append((time.perf_counter() - digested) * 1e3)
        return inputs, digest

    def kept_inputs(self, task: Any, config: Any, input_seed: int, positions: Sequence[int]) -> dict[int, Any]:
        """The inputs of the set of ``input_seed`` that audits do not re-randomise, by position: made here once per
        set (every audit of ``gpumode-benchmark``'s loop re-randomises the one set it reuses, whose other inputs, a
        TriMul's weights, stay), not kept in low-memory mode."""
        key = (task.name, config.name, input_seed)
        if self.kept is not None and self.kept[0] == key:
            return self.kept[1]
        made = task.make_inputs(config.model_copy(update={"seed": input_seed}), self.device)
        active = set(positions)
        kept = {position: value for position, value in enumerate(made) if position not in active}
        del made
        self.kept = None if self.low_memory else (key, kept)
        return kept
