"""Text for a terminal: memory content is whatever agents wrote, and a terminal obeys
control characters (colours, cursor moves, a retitled window, text hidden by bidi
overrides). On a terminal they are shown escaped; on a pipe and with --json, text is raw."""

from __future__ import annotations

import re
from typing import TextIO

# C0 controls but tab and newline, DEL, C1 controls, and the bidi embeddings/overrides/isolates.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    """`\\x1b[2J` for ESC [ 2 J, `\\u202e` for RIGHT-TO-LEFT OVERRIDE; the rest unchanged."""
    return _CONTROL.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream is not a terminal
        return False


def for_stream(stream: TextIO, text: str) -> str:
    """`text` as it may be written to `stream`: escaped on a terminal, raw otherwise."""
    return escape_controls(text) if is_terminal(stream) else text
