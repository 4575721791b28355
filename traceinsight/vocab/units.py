"""How times read to people: one formatter every report, rule message and the job report share. Floor 0."""

from __future__ import annotations

def fmt_ns(ns: float) -> str:
    """Human time: 950 ns, 12.3 µs, 4.56 ms, 1.23 s."""
    ns = float(ns)
    a = abs(ns)
    if a < 1e3:
        return f"{ns:.0f} ns"
    if a < 1e6:
        return f"{ns / 1e3:.1f} µs"
    if a < 1e9:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.2f} s"

def format_what_if(what_if: dict | None) -> str:
    """"step 176.3 -> 118.6 ms (-33 %)", the one-line form the reports show ("" when there is no prediction)."""
    if not what_if or what_if.get("step_ns") is None or not what_if.get("baseline_step_ns"):
        return ""
    b, p = float(what_if["baseline_step_ns"]), float(what_if["step_ns"])
    unit, div = ("s", 1e9) if b >= 1e10 else ("ms", 1e6) if b >= 1e6 else ("µs", 1e3)

    def num(x: float) -> str:
        v = x / div
        return f"{v:.1f}" if v >= 10 else f"{v:.2f}"

    pct = 100.0 * (p - b) / b
    if p > b and num(p) != num(b):
        # a change that speeds something up cannot make the step longer: a longer replayed step is the model's
        # reordering of work off the critical path, and the line says the fix gives nothing back, not that it costs
        return f"step {num(b)} {unit}: no shorter (the replay gives nothing back)"
    text = f"step {num(b)} → {num(p)} {unit} ({'−' if pct < 0 else '+'}{abs(pct):.0f} %)"
    m = what_if.get("marker_step_ns")
    if isinstance(m, (int, float)) and m > 0 and abs(b - m) >= 0.01 * m and num(float(m)) != num(b):
        # the replay's step runs until the step's GPU work ends; the report's step line times the markers: a
        # reader who sees that figure elsewhere is told why the left one differs
        text += f" (steps timed until their GPU work ends; their markers' median: {num(float(m))} {unit})"
    return text


def finite(value: object, default: float = 0.0) -> float:
    """A finite float from a field of an untrusted file (a report given back to the tool), else ``default``: NaN,
    infinities, strings and None never reach a figure."""
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return default
    return out if out == out and out not in (float("inf"), float("-inf")) else default
