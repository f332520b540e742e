"""A hostile-input campaign against a real `quiver serve` process.

Every input goes through `Campaign.send`, which checks the answer: a success only where one
is allowed, otherwise an error whose `extra_info` code is among those expected, on one line,
with no traceback, Python file name or server path. `healthy()` checks the process is alive
and still serves the untouched `base` dataset exactly; `files()` lists what the root holds,
to show that refused writes leave nothing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_helpers import concat, do_put, error_code
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from quiver.clients.errors import from_flight_error

# Markers of a leak: a traceback, a Python file, a path of the server's machine. No input
# of the campaign contains one, so any found in an answer comes from the server.
LEAK_MARKERS = ("Traceback", 'File "', '", line ', ".py", "site-packages", "/tmp/", "/work/")
LEAK_MARKERS += ("/root/", "/home/", "/usr/")
# An error raised by gRPC before any Quiver code runs (a request that does not decode):
# it carries no code of ours, only gRPC's own status.
TRANSPORT = "transport"


def no_leak_marker(text: str) -> bool:
    """Whether a generated input is free of leak markers (so answers can be checked)."""
    return not any(m.lower() in text.lower() for m in LEAK_MARKERS)


def code_of(exc: BaseException) -> str:
    """The code of a Quiver error as the Python client reads it (GetSchema's from its gRPC
    status: pyarrow reads it without details), or TRANSPORT for gRPC's own refusals (which
    pyarrow words "gRPC returned ..." or "Flight returned ...", while the server's statuses
    arrive with the server's own message)."""
    if isinstance(exc, fl.FlightError) and exc.extra_info:
        return error_code(exc)
    text = str(exc)
    if text.startswith(("gRPC returned", "Flight returned")):
        return TRANSPORT
    return from_flight_error(exc).code or TRANSPORT


@dataclass
class Campaign:
    """A client of one server process, and the inputs sent to it so far."""

    client: fl.FlightClient
    root: Path
    pid: int
    base: pa.Table  # `base` as served: read back after each group of inputs
    inputs: set[str] = field(default_factory=set)
    errors: dict[str, int] = field(default_factory=dict)  # code -> answers with it

    def __repr__(self) -> str:
        return f"Campaign(pid={self.pid}, {len(self.inputs)} inputs)"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis' reports
        printer.text(repr(self))

    def send(
        self,
        label: str,
        call: Callable[[], Any],
        codes: Iterable[str],
        *,
        ok: bool = False,
    ) -> Any:
        """Send one input (`label` names it uniquely); the result, or None when refused.

        A refusal must carry one of `codes`; a success must be allowed by `ok`.
        """
        codes = set(codes)
        self.inputs.add(label)
        try:
            result = call()
        except (fl.FlightError, pa.ArrowException, OSError) as e:
            self.check_error(label, e, codes)
            return None
        assert ok, f"{label[:300]}: accepted, expected one of {sorted(codes)}"
        return result

    def check_error(self, label: str, exc: BaseException, codes: set[str]) -> str:
        """Assert `exc` is a clean error with one of `codes`; its code."""
        message = str(exc)
        code = code_of(exc)
        self.errors[code] = self.errors.get(code, 0) + 1
        assert code in codes, f"{label[:300]}: code {code}, expected {sorted(codes)}: {message}"
        assert "\n" not in message, f"{label[:300]}: {message}"
        for marker in LEAK_MARKERS:
            assert marker not in message, f"{label[:300]}: {marker!r} in {message}"
        assert str(self.root) not in message and os.getcwd() not in message, message
        return code

    # -- calls ----------------------------------------------------------------------------
    def action(self, name: str, body: Any) -> Any:
        """One DoAction; its JSON result."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        (result,) = list(self.client.do_action(fl.Action(name, raw)))
        return json.loads(result.body.to_pybytes())

    def read(self, descriptor: fl.FlightDescriptor) -> pa.Table:
        """GetFlightInfo, then DoGet of every endpoint."""
        info = self.client.get_flight_info(descriptor)
        return concat([self.client.do_get(e.ticket).read_all() for e in info.endpoints], info)

    def put(self, descriptor: fl.FlightDescriptor, data: pa.Table) -> Any:
        """One DoPut; its JSON PutResult."""
        return do_put(self.client, descriptor, data)

    # -- state ----------------------------------------------------------------------------
    def alive(self) -> None:
        """The server process still runs."""
        os.kill(self.pid, 0)

    def healthy(self) -> None:
        """Alive, answering, and serving the `base` dataset exactly as written."""
        self.alive()
        assert self.action("healthcheck", {}) == {"status": "serving"}
        got = self.read(fl.FlightDescriptor.for_path("base"))
        assert got.sort_by("id").equals(self.base), "the base dataset changed"

    def files(self) -> list[str]:
        """Every file under the root but the server's log."""
        out = []
        for dirpath, _, names in os.walk(self.root):
            out.extend(os.path.relpath(os.path.join(dirpath, n), self.root) for n in names)
        return sorted(f for f in out if f != "server.log")


def is_valid_name(name: object) -> bool:
    """The dataset name rules of docs/server.md, written out independently of the server's code."""
    if not isinstance(name, str) or not 0 < len(name) <= 1024:
        return False
    segments = name.split("/")
    if len(segments) > 16:
        return False
    for i, seg in enumerate(segments):
        if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,249}", seg) or seg in (".", ".."):
            return False
        if i < len(segments) - 1 and seg.endswith(".lance"):
            return False
    return True


# -- the served root ------------------------------------------------------------------------
TICKET_KEY = b"hostile-campaign-ticket-key-0123456789"


def base_table(n: int = 60) -> pa.Table:
    """The `base` dataset's rows before its deletions: many types, nulls, lists."""
    ids = range(n)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array([None if i % 9 == 0 else i * 0.5 for i in ids], pa.float64()),
            "s": pa.array([None if i % 7 == 0 else f"s{i % 13}" for i in ids]),
            "n": pa.array([str(i) if i % 5 else f"x{i}" for i in ids]),  # CASTs fail on x..
            "flag": pa.array([i % 2 == 0 for i in ids]),
            "tags": pa.array([[f"t{i % 3}"] * (i % 3) for i in ids], pa.list_(pa.string())),
            "v": pa.array([[i, -i] for i in ids], pa.list_(pa.float32(), 2)),
            "ts": pa.array([i * 86_400_000_000 for i in ids], pa.timestamp("us")),
        }
    )


def seed_root(root: Path) -> pa.Table:
    """Write `base` (three fragments, deletions) under `root`; the rows it serves."""
    from quiver.format.dataset import write_dataset

    ds = write_dataset(base_table(), str(root / "base.lance"), max_rows_per_file=25)
    ds.delete("id % 10 = 3")
    return ds.to_table().sort_by("id")


@dataclass
class Served:
    """A running `quiver serve` over a seeded root."""

    uri: str
    pid: int
    root: Path
    base: pa.Table
    key: bytes = TICKET_KEY


def serve_campaign(tmp: Path, *args: str) -> Iterator[Served]:
    """Seed a root under `tmp`, run `quiver serve` on it (ticket key known to the tests)."""
    from server_process import quiver_serve

    root = tmp / "root"
    root.mkdir()
    base = seed_root(root)
    key_file = tmp / "ticket.key"
    key_file.write_bytes(TICKET_KEY)
    with quiver_serve(root, "--ticket-key-file", str(key_file), *args) as (uri, pid):
        yield Served(uri, pid, root, base)


# -- fixtures (test modules import them) --------------------------------------------------
SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    # `sent` is meant to span all examples of a test: it counts them and checks health after
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
)


def examples(n: int) -> settings:
    """Bounded, reproducible hypothesis runs (no deadline: each example is a real RPC)."""
    return settings(SETTINGS, max_examples=n)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A `quiver serve` process over a freshly seeded root, for one test module."""
    yield from serve_campaign(tmp_path_factory.mktemp("hostile"))


@pytest.fixture(scope="module")
def campaign(served: Served) -> Iterator[Campaign]:
    """A client of the module's server and the inputs it sent."""
    client = fl.connect(served.uri)
    yield Campaign(client, served.root, served.pid, served.base)
    client.close()


@pytest.fixture
def sent(campaign: Campaign, record_property: Any) -> Iterator[Campaign]:
    """The campaign; afterwards the server must be healthy, and the count is recorded."""
    before = len(campaign.inputs)
    yield campaign
    record_property("hostile_inputs", len(campaign.inputs) - before)
    campaign.healthy()


# -- hypothesis strategies -----------------------------------------------------------------
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12).filter(no_leak_marker),
    st.sampled_from(["", "base", "id", "s", "id > 3", "q3", "2020-01-01T00:00:00Z", "x" * 300]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
COLUMNS = st.sampled_from(["id", "x", "s", "n", "flag", "tags", "v", "ts", "nope", "_rowid"])
LITERALS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats().map(repr),
    st.text(max_size=6).filter(no_leak_marker).map(lambda t: "'" + t.replace("'", "''") + "'"),
    st.sampled_from(
        ["NULL", "TRUE", "'2020-01-01'", "DATE '2020-01-01'", "1e400", "-0.0", "X'00'"]
    ),
)
SQL_TYPES = ["INT", "BIGINT", "DOUBLE", "STRING", "DATE", "BOOLEAN", "DECIMAL(5,2)", "TINYINT"]
FUNCTIONS = ["abs", "lower", "length", "regexp_match", "starts_with", "array_has", "nope_fn"]
OPERATORS = ["=", "!=", "<", ">=", "+", "-", "*", "/", "%", "AND", "OR", "LIKE", "||"]


def _compound(e: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(e, st.sampled_from(OPERATORS), e).map(" ".join),
        e.map(lambda x: f"NOT ({x})"),
        st.tuples(e, st.sampled_from(SQL_TYPES)).map(lambda t: f"CAST({t[0]} AS {t[1]})"),
        st.tuples(e, st.lists(LITERALS, min_size=1, max_size=3)).map(
            lambda t: f"{t[0]} IN ({', '.join(t[1])})"
        ),
        e.map(lambda x: f"{x} IS NULL"),
        st.tuples(e, e, e).map(lambda t: f"{t[0]} BETWEEN {t[1]} AND {t[2]}"),
        st.tuples(st.sampled_from(FUNCTIONS), st.lists(e, max_size=2)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"
        ),
    )


FILTERS = st.one_of(
    st.recursive(st.one_of(COLUMNS, LITERALS), _compound, max_leaves=5),
    st.text(max_size=20),
).filter(no_leak_marker)
