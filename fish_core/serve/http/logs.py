"""Log lines that cannot be forged: control characters a client sent (a CR/LF in a decoded path,
an escape sequence in a name) are written as escapes, so one request is always one line."""

from __future__ import annotations

import logging
import re

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` with every control character as a visible escape (``\\r``, ``\\x1b`` …), and
    every lone surrogate (an undecodable byte of a header or path) as ``\\udcXX``, so a log
    line can always be written."""
    return CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class EscapeControl(logging.Filter):
    """Escapes the formatted message of every record of the logger it is attached to (the
    traceback of ``log.exception`` is the server's own and keeps its lines)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        escaped = printable(message)
        if escaped != message:
            record.msg, record.args = escaped, ()
        return True


def escaped_logger(name: str) -> logging.Logger:
    logger = logging.getLogger(name)
    if not any(isinstance(f, EscapeControl) for f in logger.filters):
        logger.addFilter(EscapeControl())
    return logger


log = escaped_logger("sailfish.serve")
ACCESS_LOG = escaped_logger("sailfish.serve.access")  # the standalone server's access log
