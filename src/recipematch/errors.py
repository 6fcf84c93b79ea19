"""The project's one error type for user mistakes and bad input."""


class RecipematchError(ValueError):
    """A user mistake or bad input: the message names the file, line or key and what is wrong.

    A subclass of :class:`ValueError`, so callers that already handle bad values keep doing
    so. The command line prints it as one line and exits with status 2 (``--debug`` shows
    the traceback).
    """
