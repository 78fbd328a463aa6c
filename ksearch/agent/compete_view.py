"""The planner's section on the best known competing kernels (``--compete``): per timed shape, the run's best against
each competitor, furthest behind first, and a competing kernel's code. Pure: the caller reads the store."""

from __future__ import annotations

import math

from ksearch.agent.code_view import fenced
from ksearch.agent.config import Competitor
from ksearch.contracts.evaluation import Evaluation


def _gap(best_ms: float, their_ms: float) -> str:
    """``x0.91 (it is 9 % faster)``: their time over ours, below 1 where the competitor is faster."""
    ratio = their_ms / best_ms
    if abs(ratio - 1.0) < 0.005:
        return f"x{ratio:.2f} (level)"
    who = "it is" if ratio < 1.0 else "the run's best is"
    return f"x{ratio:.2f} ({who} {abs(1.0 / ratio - 1.0) if ratio < 1.0 else ratio - 1.0:.0%} faster)"


def competitor_block(competitor: Competitor, best: Evaluation | None, code: str | None) -> str:
    """One competitor: where its times come from, then per shape the run's best against it."""
    lines = [f"## {competitor.name} ({competitor.source}; {competitor.where})"]
    ours = {t.config: t.headline_ms for t in best.timings} if best is not None else {}
    shared = [c for c in competitor.times_ms if c in ours]
    if shared:
        logs = [math.log(competitor.times_ms[c] / ours[c]) for c in shared]
        ratio = math.exp(sum(logs) / len(logs))
        ours_geo = math.exp(sum(math.log(ours[c]) for c in shared) / len(shared))
        their_geo = math.exp(sum(math.log(competitor.times_ms[c]) for c in shared) / len(shared))
        lines.append(
            f"Geometric mean over the {len(shared)} shapes both have: the run's best {ours_geo:.4f} ms, it "
            f"{their_geo:.4f} ms: x{ratio:.2f}"
        )
        lines.append("Per shape, where the run's best is furthest behind first (its time over the best's):")
        for c in sorted(shared, key=lambda c: competitor.times_ms[c] / ours[c]):
            their, mine = competitor.times_ms[c], ours[c]
            lines.append(f"  {c}: the run's best {mine:.4f} ms, it {their:.4f} ms: {_gap(mine, their)}")
    else:
        why = "nothing has been timed in this run yet" if best is None or not best.timings else "no shape in common"
        lines.append(f"Per shape ({why}):")
        lines.extend(f"  {c}: it {ms:.4f} ms" for c, ms in competitor.times_ms.items())
        if not competitor.times_ms:
            lines.append("  (not timed: it was evaluated on the CPU interpreter)")
    if code is not None:
        lines.append("Its code (to study what it does differently):\n" + fenced(code))
    return "\n".join(lines)


def competitors_view(competitors: list[Competitor], best: Evaluation | None, codes: dict[str, str]) -> str:
    """Every competitor's block, or a line saying there are none. ``codes``: candidate id -> code."""
    if not competitors:
        return "(none given: `ksearch run ... --compete FILE` puts the best known kernels or their times here)"
    return "\n\n".join(
        competitor_block(c, best, codes.get(c.candidate_id) if c.candidate_id else None) for c in competitors
    )
