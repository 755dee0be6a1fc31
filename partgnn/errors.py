"""Exceptions that the command line turns into one clear line and a non-zero exit."""


class InputError(Exception):
    """Bad user input: a missing or malformed file, a wrong column, an out-of-range value.

    The message is one line that names the file, event or field and says what is wrong; the CLI
    prints it as ``partgnn: error: <message>`` and exits with status 2.
    """


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (library errors can span many lines)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
