"""The project's one error type for user mistakes and bad input."""


class RecipematchError(ValueError):
    """A user mistake or bad input: the message names the file, line or key and what is wrong.

    A subclass of :class:`ValueError`, so callers that already handle bad values keep doing
    so. The command line prints it as one line and exits with status 2 (``--debug`` shows
    the traceback).
    """


def short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message, at most ``limit`` characters (≥ 8), built without
    ever forming the whole ``repr``: nested containers are cut at depth 3 and after 6 items
    (:mod:`reprlib`), so a value built from YAML aliases that would expand to gigabytes is
    quoted in microseconds. The cut is marked with ``...``."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel = 3
    r.maxtuple = r.maxlist = r.maxarray = r.maxdict = r.maxset = r.maxfrozenset = r.maxdeque = 6
    r.maxstring = r.maxlong = r.maxother = max(8, limit)
    try:
        text = r.repr(value)
    except ValueError:  # an int past Python's digit limit for str(); say its size instead
        text = f"<int of {value.bit_length()} bits>" if isinstance(value, int) else f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: max(8, limit) - 3] + "..."
