"""The operator's log lines: printable whatever a target wrote, tracebacks included."""

from __future__ import annotations

import logging

from modelplane.operator.logs import MAX_LOG_RECORD, PrintableFormatter, configure

ESC = "\x1b[2J\x1b]8;;http://evil\x1b\\"


def _record(message: str, error: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(error), error, error.__traceback__) if error is not None else None
    return logging.LogRecord("modelplane.test", logging.ERROR, __file__, 1, message, (), exc_info)


def _raised(text: str) -> BaseException:
    try:
        raise RuntimeError(text)
    except RuntimeError as err:
        return err


def test_a_traceback_quoting_a_target_is_escaped_and_keeps_its_lines() -> None:
    line = PrintableFormatter("%(message)s").format(
        _record(f"reconcile failed{ESC}", _raised(f"the target said {ESC}"))
    )
    assert "\x1b" not in line
    assert "reconcile failed\\u001b[2J" in line
    assert "RuntimeError: the target said \\u001b[2J" in line
    # Still a traceback a person reads: one frame per line.
    assert line.splitlines()[1] == "Traceback (most recent call last):"


def test_a_carriage_return_cannot_overwrite_the_line() -> None:
    line = PrintableFormatter("%(message)s").format(_record("real\rfake"))
    assert line == "real fake"


def test_a_record_is_capped() -> None:
    line = PrintableFormatter("%(message)s").format(_record("x" * (2 * MAX_LOG_RECORD)))
    assert len(line) == MAX_LOG_RECORD
    assert line.endswith("…")


def test_the_operator_logs_through_the_formatter() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure(verbose=False)
        (handler,) = root.handlers
        assert isinstance(handler.formatter, PrintableFormatter)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_a_newline_in_a_message_cannot_forge_a_record() -> None:
    formatter = PrintableFormatter("%(levelname)s %(message)s")
    line = formatter.format(_record("reconcile failed: x\nINFO modelplane Ready"))
    assert line == "ERROR reconcile failed: x INFO modelplane Ready"


def test_a_newline_in_an_exception_text_cannot_forge_a_record() -> None:
    formatter = PrintableFormatter("%(levelname)s %(message)s")
    error = _raised("the target said x\nINFO modelplane Ready\u2028INFO again")
    error.add_note("a note\nINFO forged")
    lines = formatter.format(_record("reconcile failed", error)).splitlines()
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[2].startswith('  File "')
    # The frames keep their lines; the target's text is on one line of its own.
    assert lines[-1] == (
        "RuntimeError: the target said x INFO modelplane Ready\\u2028INFO again a note INFO forged"
    )
    assert not any(line.startswith("INFO") for line in lines)


def test_a_chained_traceback_keeps_its_headings() -> None:
    try:
        try:
            raise ValueError("first\nINFO forged")
        except ValueError as inner:
            raise RuntimeError("second") from inner
    except RuntimeError as err:
        error = err
    lines = PrintableFormatter("%(message)s").format(_record("failed", error)).splitlines()
    assert "The above exception was the direct cause of the following exception:" in lines
    assert lines.count("Traceback (most recent call last):") == 2
    assert not any(line.startswith("INFO") for line in lines)


def test_an_exception_text_another_formatter_cached_is_one_line() -> None:
    record = _record("failed")
    record.exc_text = "Traceback\nINFO forged"
    line = PrintableFormatter("%(message)s").format(record)
    assert line == "failed\nTraceback INFO forged"
