"""What an LLM server's base URL and an API-key setting may hold (no credential ever lands in
params, DVC or MLflow)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

#: what ``*api_key_env`` keys and ``--api-key-env`` may hold: the NAME of an environment
#: variable (letters, digits, _), never a key (which would then land in params, DVC and MLflow)
ENV_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")


def server_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an LLM server's base URL, or None when it can: an http(s) URL
    with a host, a port in 1-65535 if one is given, no whitespace, no ``user:password@`` part
    and no query or fragment (a key must come from an environment variable named by
    ``api_key_env``, never from params, which DVC, MLflow and the report copy).

    Returns:
        ``None``, or a short reason that does not repeat the URL's credential parts.
    """
    if url != url.strip() or any(c.isspace() or not c.isprintable() for c in url):
        return "holds whitespace or a control character"
    try:
        u = urlsplit(url)
    except ValueError:
        return "is not a valid URL (check the host and the brackets of an IPv6 address)"
    # credentials first: a password holding '/', '#' or '?' is parsed as a port, and a port
    # error must not quote it
    if "@" in url:  # a password holding '/' or '#' moves its '@' out of the parsed host part
        return ("carries an '@' (a user:password part?): put the key in an environment variable and give its "
                "name in api_key_env")
    try:
        port = u.port
    except ValueError:
        return "is not a valid URL (the port must be a number in 1-65535)"
    if u.scheme not in ("http", "https") or not u.hostname:
        return "must be an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1"
    if ":" not in u.hostname:  # a name or IPv4 address (an IPv6 literal holds ':')
        try:
            u.hostname.encode("idna")
        except UnicodeError:
            return "has a malformed host name (an empty or over-long label, e.g. 'a..b')"
    if u.query or u.fragment or "?" in url or "#" in url:
        return "carries a query or fragment (a key there would be copied into params, logs and MLflow)"
    if port == 0:
        return "has port 0"
    return None


#: what ``mlflow.tracking_uri`` may hold: sqlite:///PATH, http(s)://HOST... or file:PATH
TRACKING_URI = re.compile(r"^(?:sqlite:///.+|https?://[^\s/]+.*|file:.+)$")
