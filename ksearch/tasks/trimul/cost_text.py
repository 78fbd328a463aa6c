"""Where TriMul's flops and bytes are, per timed shape, computed from the shapes for the spec (never hand-written:
the spec once said the contraction dominates while the linear maps carry more flops at 5 of the 7 timed shapes,
7.5x at N = 256, C = 384; issue 57)."""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9


@dataclass(frozen=True)
class ShapeCost:
    label: str
    b: int
    n: int
    c: int
    h: int

    @property
    def contraction(self) -> float:
        """out[b, i, j, h] = sum_k left[b, i, k, h] right[b, j, k, h]: 2 B H N^3 flops."""
        return 2.0 * self.b * self.h * float(self.n) ** 3

    @property
    def input_maps(self) -> float:
        """The five C -> H projections: 10 B N^2 C H flops."""
        return 10.0 * self.b * self.n * self.n * self.c * self.h

    @property
    def output_map(self) -> float:
        """The H -> C output projection: 2 B N^2 H C flops."""
        return 2.0 * self.b * self.n * self.n * self.h * self.c

    @property
    def x_bytes(self) -> float:
        return 4.0 * self.b * self.n * self.n * self.c

    @property
    def maps_over_contraction(self) -> float:
        """6C / N."""
        return (self.input_maps + self.output_map) / self.contraction


def cost_table(shapes: list[ShapeCost]) -> str:
    """One line per timed shape and a sentence on which part carries more flops, from the numbers."""
    lines = []
    for s in shapes:
        flops = (
            f"contraction {s.contraction / GB:.1f} GFLOP, five input projections {s.input_maps / GB:.1f}, "
            f"output map {s.output_map / GB:.1f}"
        )
        ratio = f"the linear maps carry {s.maps_over_contraction:.2f}x the contraction's flops"
        lines.append(
            f"  {s.label} (B={s.b}, N={s.n}, C={s.c}): {flops}: {ratio}; x is {s.x_bytes / GB:.2f} GB in float32"
        )
    more = [s for s in shapes if s.maps_over_contraction > 1.0]
    fewer = [f"{s.label} (N={s.n}, C={s.c})" for s in shapes if s.maps_over_contraction < 1.0]
    summary = f"The linear maps carry more flops than the contraction at {len(more)} of the {len(shapes)} timed "
    summary += "shapes"
    summary += f"; the contraction carries more only at {', '.join(fewer)}." if fewer else "."
    return "\n".join(lines) + "\n" + summary
