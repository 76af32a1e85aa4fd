"""Source URLs of traces kept in ClickHouse: ``chdb://PATH`` (in-process ClickHouse) and
``clickhouse://[user[:password]@]host[:port]/database`` (a server, over HTTP), each with
``?table=`` (the spans table; default ``otel_traces``), ``samples=`` (agentscope's samples
table; default ``agentscope_samples``), ``since=`` and ``until=`` (ISO 8601 times, epoch
seconds, or durations before now: ``1h``), ``service=`` and ``input=`` (``store``, the
default: the window's spans are read into the embedded store and analysed there;
``clickhouse``: the analysis' input is computed in ClickHouse, docs/clickhouse.md). Parsed
here, read by
:mod:`agentscope.store.clickhouse`. Credentials come from the URL or from
``CLICKHOUSE_USER`` / ``CLICKHOUSE_PASSWORD``; what outputs show of a URL
(:attr:`Remote.display`) never holds a password.
"""

from __future__ import annotations

import datetime
import math
import os
import re
import time
import urllib.parse
from typing import Any, NamedTuple, Optional

from .errors import StoreError

SCHEMES = ("chdb", "clickhouse")
DEFAULT_TABLE = "otel_traces"
DEFAULT_SAMPLES = "agentscope_samples"
INPUTS = ("store", "clickhouse")  # where the analysis' input is computed (?input=)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# the last second a signed 64-bit count of nanoseconds holds (2262-04-11), less a day: a
# window is widened by a day either side
LAST_S = (1 << 63) // 1_000_000_000 - 86_400


class Remote(NamedTuple):
    """A ClickHouse source, parsed from its URL (:func:`parse`)."""

    scheme: str  # chdb | clickhouse
    path: Optional[str]  # chdb: the data directory
    host: Optional[str]
    port: Optional[int]
    database: str
    table: str
    samples: str
    user: Optional[str]
    password: Optional[str]
    since: Optional[int]  # epoch ns
    until: Optional[int]
    service: Optional[str]
    moving: bool = False  # since or until given as a duration before now: moves with the clock
    input: str = "store"  # store | clickhouse: where the analysis' input is computed

    @property
    def display(self) -> str:
        """The URL without its password: what outputs name."""
        if self.scheme == "chdb":
            where = f"chdb://{self.path}"
        else:
            who = f"{self.user}@" if self.user else ""
            where = f"clickhouse://{who}{self.host}:{self.port}/{self.database}"
        return f"{where}?table={self.table}"

    def quoted(self, table: str) -> str:
        return f"`{self.database}`.`{table}`"


def is_url(source: Any) -> bool:
    """Whether ``source`` names a ClickHouse source (chdb:// or clickhouse://)."""
    return isinstance(source, str) and source.split("://", 1)[0].lower() in SCHEMES \
        and "://" in source


# passwords taken out of URLs (without_password), by (host, port, user): each URL keeps its
# own, and no output shows them
_PASSWORDS: dict = {}


def without_password(source: str) -> str:
    """``source`` without the password in its URL: the command line keeps the password here,
    for :func:`parse` of the same server and user, so that no output can show it."""
    url = urllib.parse.urlsplit(source)
    options = [k for k, _ in urllib.parse.parse_qsl(url.query, keep_blank_values=True)]
    if "@" in url.path or "@" in url.fragment or any("@" in k for k in options):
        # (a password with an unencoded / ? or #: urlsplit cut it, and the rest of it is in
        # the path, the fragment or an option's name; echo none of it. An option's value,
        # a service name, may hold an @)
        raise StoreError("the ClickHouse URL's password must be percent-encoded (/ as %2F, "
                         "? as %3F, # as %23, @ as %40), or given in CLICKHOUSE_PASSWORD")
    try:
        password = url.password
        port = url.port or 8123
    except ValueError:
        raise StoreError("the ClickHouse URL's host or port cannot be read (a password "
                         "must be percent-encoded)") from None
    if password is None:
        return source
    user = url.username or ""
    _PASSWORDS[(url.hostname, port, urllib.parse.unquote(user))] = \
        urllib.parse.unquote(password)
    host = url.netloc.rsplit("@", 1)[1]
    netloc = f"{user}@{host}" if user else host
    return urllib.parse.urlunsplit(url._replace(netloc=netloc))


def parse(source: str) -> Remote:
    """The :class:`Remote` of a chdb:// or clickhouse:// URL (StoreError naming what is wrong
    with it; never echoing a password)."""
    url = urllib.parse.urlsplit(source)
    scheme = url.scheme.lower()
    if scheme not in SCHEMES:
        raise StoreError(f"not a ClickHouse URL (chdb:// or clickhouse://): {scheme}://...")
    query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"table", "samples", "since", "until", "service", "input"})
    if unknown:
        raise StoreError(f"unknown option{'s' if len(unknown) > 1 else ''} in the ClickHouse "
                         f"URL: {', '.join(unknown)} (table, samples, since, until, service, "
                         "input)")

    def one(key: str, default: Optional[str] = None) -> Optional[str]:
        values = query.get(key)
        return values[-1] if values else default

    table, samples = one("table", DEFAULT_TABLE), one("samples", DEFAULT_SAMPLES)
    for what, name in (("table", table), ("samples table", samples)):
        if not _NAME.match(name or ""):
            raise StoreError(f"the {what} name in the ClickHouse URL must be letters, digits "
                             f"and _: {name!r}")
    since, until = _time(one("since"), "since"), _time(one("until"), "until")
    moving = any(_ago(one(k)) is not None for k in ("since", "until"))
    if since is not None and until is not None and until <= since:
        raise StoreError("the ClickHouse URL's until is not after its since")
    service = one("service")
    where = one("input", "store")
    if where not in INPUTS:
        raise StoreError(f"the ClickHouse URL's input is {' or '.join(INPUTS)}, not "
                         f"{where!r}")
    if scheme == "chdb":
        path = urllib.parse.unquote(url.netloc + url.path)
        if not path:
            raise StoreError("a chdb URL names a data directory: chdb://PATH?table=otel_traces")
        return Remote("chdb", path, None, None, "default", table, samples, None, None, since,
                      until, service, moving, where)
    database = url.path.strip("/") or "default"
    if not _NAME.match(database):
        raise StoreError(f"the database name in the ClickHouse URL must be letters, digits "
                         f"and _: {database!r}")
    if not url.hostname:
        raise StoreError("a clickhouse URL names a host: clickhouse://HOST[:PORT]/DATABASE")
    user = urllib.parse.unquote(url.username) if url.username else \
        os.environ.get("CLICKHOUSE_USER")
    try:
        port = url.port or 8123
    except ValueError:
        raise StoreError("the port in the ClickHouse URL is not a port") from None
    if url.password is not None:
        password = urllib.parse.unquote(url.password)
    else:
        password = _PASSWORDS.get((url.hostname, port, user or ""),
                                  os.environ.get("CLICKHOUSE_PASSWORD"))
    return Remote("clickhouse", None, url.hostname, port, database, table, samples, user,
                  password, since, until, service, moving, where)


# a duration as Prometheus writes one (1h, 30m, 1h30m, 7d, 1w), meaning "that long ago"
_DURATION = re.compile("".join(f"(?:([0-9]{{1,12}}){unit})?" for unit in "wdhms") + r"\Z")
_UNIT_S = (604_800, 86_400, 3_600, 60, 1)


def _ago(value: Optional[str]) -> Optional[int]:
    """The seconds of ``value`` where it is a duration (``1h30m``), else None."""
    got = _DURATION.match((value or "").strip())
    if not got or not any(got.groups()):
        return None
    return sum(int(n) * unit for n, unit in zip(got.groups(), _UNIT_S) if n)


def _time(value: Optional[str], what: str) -> Optional[int]:
    """Epoch ns of an ISO 8601 time (UTC unless it says), of epoch seconds, or of a duration
    (``1h``, ``30m``, ``1h30m``, ``7d``, ``1w``: that long before now, read at each parse: a
    window that moves, for ``serve``)."""
    if value is None or value == "":
        return None
    seconds = _ago(value)
    if seconds is not None:
        at = time.time_ns() - seconds * 1_000_000_000
        if at < 0:
            raise StoreError(f"the ClickHouse URL's {what} reaches before 1970: {value!r}")
        return at
    try:
        seconds = float(value)
    except ValueError:
        seconds = None
    if seconds is not None:
        if not math.isfinite(seconds) or not 0 <= seconds < LAST_S:
            raise StoreError(f"the ClickHouse URL's {what} is outside 1970-2262: {value!r}")
        return int(round(seconds * 1e9))
    try:
        at = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise StoreError(f"the ClickHouse URL's {what} is neither an ISO 8601 time, epoch "
                         f"seconds nor a duration before now (1h, 30m, 7d): {value!r}") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=datetime.timezone.utc)
    delta = at - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    seconds = delta.days * 86_400 + delta.seconds
    if not 0 <= seconds < LAST_S:
        raise StoreError(f"the ClickHouse URL's {what} is outside 1970-2262: {value!r}")
    return seconds * 1_000_000_000 + delta.microseconds * 1000


def with_window(source: str, since: Optional[str] = None, until: Optional[str] = None,
                service: Optional[str] = None) -> str:
    """``source`` with these options in its query string (each replacing the URL's own): what
    ``--since``, ``--until`` and ``--service`` of the command line choose. StoreError for a
    value :func:`parse` refuses."""
    url = urllib.parse.urlsplit(source)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(url.query, keep_blank_values=True)]
    given = {k: v for k, v in (("since", since), ("until", until), ("service", service))
             if v is not None}
    query = [(k, v) for k, v in query if k not in given] + list(given.items())
    # (not urlunsplit: it drops the // of chdb:///PATH, whose host is empty)
    out = source.split("?", 1)[0].split("#", 1)[0] + "?" + urllib.parse.urlencode(query)
    parse(out)  # (refused here, naming the value, rather than at the first query)
    return out
