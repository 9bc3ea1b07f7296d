"""JSON text before it is parsed: how deep its brackets nest.

Every JSON file refseg reads (golden manifests, run configs, report folders) may come from
someone else. Counting the nesting on the text first keeps :func:`json.loads`' recursion far from
Python's limit, so that a hostile file is refused in one line instead of exhausting the stack.
A leaf module: it imports nothing of refseg's.
"""
from __future__ import annotations

INFRASTRUCTURE = "reading JSON that someone else may have written"


def bracket_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings in ``text``: the document's depth
    when it is valid JSON, an upper bound when it is not."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest
