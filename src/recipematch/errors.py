class RecipematchError(Exception):
    """A user mistake or bad input: the message names the file, line or key and what is wrong."""
