"""What a GPU's compute capability string says: one parser for advice tiers and the rules. Floor 0."""

from __future__ import annotations

import re


def parse_cc(cc: str | None) -> tuple[int, int] | None:
    """``"7.5"`` / ``"sm_75"`` / ``"75"`` -> (7, 5); None when the string says no version."""
    if not cc:
        return None
    s = str(cc).strip().lower()
    m = re.match(r"^(?:sm_?)?(\d+)\.(\d+)", s)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.match(r"^(?:sm_?)?(\d)(\d)$", s)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.match(r"^(?:sm_?)?(\d{2})(\d)$", s)  # sm_100, sm_120
    if m:
        return int(m.group(1)), int(m.group(2))
    return None
