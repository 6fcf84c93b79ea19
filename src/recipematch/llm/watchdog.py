"""A wall-clock bound on one HTTP exchange, whatever the server sends.

``requests``' ``timeout=`` bounds each socket read, not the exchange: a server that sends one
byte of a header every half second, an endless stream of ``100 Continue`` answers, endless
chunk trailers or a compressed body that never decodes to anything keeps a call alive for as
long as it likes. :class:`CallWatchdog` closes the sockets an exchange uses when its time is
up, so the blocked read returns at once and the call ends as a ``timeout`` (the LLM backends'
``deadline_s``, a bound the paper's scale needs: Section 3 sends ~10^5 calls to a server).

A :func:`watched_session` routes every connection through connection classes that register
their socket with the watchdog of the thread's current call, right before the request is sent
(a pooled connection is registered again on each reuse).
"""

from __future__ import annotations

import socket
import threading

import requests
import urllib3
import urllib3.connection
import urllib3.connectionpool
from requests.adapters import HTTPAdapter

_CURRENT = threading.local()


class CallWatchdog:
    """Shut down, ``seconds`` from entry, every socket the current thread's requests use.

    Use as ``with CallWatchdog(s) as wd: ...``; afterwards :attr:`fired` says whether time ran
    out (an exchange cut short then fails with a connection error, which the caller reads as a
    timeout). A socket registered after the watchdog fired is shut down at once.

    Args:
        seconds: the bound, > 0 (values <= 0 fire at once).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = max(0.0, float(seconds))
        self._fired = threading.Event()
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._timer: threading.Timer | None = None

    @property
    def fired(self) -> bool:
        return self._fired.is_set()

    def register(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._socks.append(sock)
            if self._fired.is_set():
                _shutdown(sock)

    def _fire(self) -> None:
        with self._lock:
            self._fired.set()
            for s in self._socks:
                _shutdown(s)

    def __enter__(self) -> CallWatchdog:
        self._previous = getattr(_CURRENT, "watchdog", None)
        _CURRENT.watchdog = self
        self._timer = threading.Timer(self.seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        _CURRENT.watchdog = self._previous


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def _register(conn) -> None:
    wd = getattr(_CURRENT, "watchdog", None)
    if wd is not None:
        wd.register(getattr(conn, "sock", None))


class _Watched:
    """Mixin for a urllib3 connection: register the socket on connect and before each response."""

    def connect(self) -> None:
        super().connect()
        _register(self)

    def getresponse(self, *args, **kwargs):
        _register(self)
        return super().getresponse(*args, **kwargs)


class _WatchedHTTPConnection(_Watched, urllib3.connection.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, urllib3.connection.HTTPSConnection):
    pass


class _WatchedHTTPPool(urllib3.connectionpool.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(urllib3.connectionpool.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


class _WatchedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_WATCHED_POOLS)

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if type(manager) is urllib3.ProxyManager:  # a SOCKS manager keeps its own pools (not watched)
            manager.pool_classes_by_scheme = dict(_WATCHED_POOLS)
        return manager


_WATCHED_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


def watched_session() -> requests.Session:
    """A ``requests.Session`` whose connections (direct or through an HTTP proxy) a
    :class:`CallWatchdog` can cut."""
    s = requests.Session()
    adapter = _WatchedAdapter()
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    return s
