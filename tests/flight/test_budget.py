"""`MemoryBudget`: FIFO admission, oversized leases, growth, cancellation; and through a
real server, that every DoGet path (finished, abandoned, waiting, drained) gives its lease
back."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pytest
from flight_helpers import AccessLog, assert_clean_error, start

from quiver.flight_server import memory
from quiver.flight_server.budget import Lease, MemoryBudget
from quiver.flight_server.errors import Cancelled, Unavailable
from quiver.flight_server.server import QuiverFlightServer
from quiver.format.dataset import write_dataset


def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


class Waiter(threading.Thread):
    """admit() in a thread; records the lease or the error and the admission order."""

    def __init__(
        self,
        budget: MemoryBudget,
        estimate: int,
        order: list[str] | None = None,
        name: str = "",
        cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__(daemon=True)
        self.budget, self.estimate, self.order, self.label = budget, estimate, order, name
        self.cancelled = cancelled
        self.lease: Lease | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.lease = self.budget.admit(self.estimate, self.cancelled)
            if self.order is not None:
                self.order.append(self.label)
        except BaseException as e:  # noqa: BLE001 - inspected by the test
            self.error = e


def test_admits_within_the_limit_at_once_and_counts() -> None:
    budget = MemoryBudget(100)
    a = budget.admit(60)
    b = budget.admit(40)
    assert (budget.in_use, budget.active, budget.waiting, budget.admitted_total) == (100, 2, 0, 2)
    a.release()
    a.release()  # idempotent
    assert budget.in_use == 40 and a.nbytes == 0
    with b:
        pass
    assert (budget.in_use, budget.active, budget.peak) == (0, 0, 100)


def test_the_budget_tells_each_change_of_running_streams() -> None:
    seen: list[int] = []
    budget = MemoryBudget(100, seen.append)
    a = budget.admit(40)
    b = budget.admit(40)
    a.release()
    a.release()  # a second release changes nothing, so tells nothing
    b.grow_to(60)
    b.release()
    assert seen == [1, 2, 1, 0]


def test_the_allocator_maps_big_buffers_while_streams_crowd() -> None:
    """glibc's mmap threshold: 16 MiB for a stream alone (its buffers are reused from the
    heap), 4 MiB while two or more run (big ones are given back when freed)."""
    if not memory.tune_allocator():
        pytest.skip("no glibc")
    try:
        budget = MemoryBudget(None, memory.streams_running)
        first = budget.admit(1)
        assert memory.mmap_threshold() == memory.MMAP_THRESHOLD == 16 << 20
        second = budget.admit(1)
        assert memory.mmap_threshold() == memory.CROWD_MMAP_THRESHOLD == 4 << 20
        first.release()
        assert memory.mmap_threshold() == 16 << 20
        second.release()
        assert memory.mmap_threshold() == 16 << 20
    finally:
        memory.streams_running(0)


def test_unlimited_budget_never_waits() -> None:
    for limit in (None, 0):
        budget = MemoryBudget(limit)
        leases = [budget.admit(10**12) for _ in range(5)]
        assert budget.in_use == 5 * 10**12 and budget.waiting == 0
        for lease in leases:
            lease.release()
        assert budget.in_use == 0
    with pytest.raises(ValueError):
        MemoryBudget(-1)


def test_admission_is_first_come_first_served() -> None:
    budget = MemoryBudget(100)
    first = budget.admit(80)
    order: list[str] = []
    big = Waiter(budget, 50, order, "big")
    big.start()
    _until(lambda: budget.waiting == 1)
    small = Waiter(budget, 10, order, "small")  # would fit now, but queues behind "big"
    small.start()
    _until(lambda: budget.waiting == 2)
    time.sleep(0.3)
    assert order == [] and budget.in_use == 80
    first.release()
    for w in (big, small):
        w.join(5)
        assert not w.is_alive() and w.error is None
    assert order == ["big", "small"]
    assert budget.in_use == 60 and budget.waiting == 0


def test_a_stream_bigger_than_the_budget_runs_alone() -> None:
    budget = MemoryBudget(100)
    small = budget.admit(10)
    huge = Waiter(budget, 500)
    huge.start()
    _until(lambda: budget.waiting == 1)
    time.sleep(0.2)
    assert huge.lease is None  # something else is held
    small.release()
    huge.join(5)
    assert huge.lease is not None and budget.in_use == 500 and budget.active == 1
    later = Waiter(budget, 1)
    later.start()
    time.sleep(0.3)
    assert later.lease is None  # nothing is admitted beside an oversized stream
    huge.lease.release()
    later.join(5)
    assert later.lease is not None and budget.in_use == 1
    later.lease.release()
    assert budget.peak == 500


def test_grow_to_never_blocks_and_only_delays_later_admissions() -> None:
    budget = MemoryBudget(100)
    a = budget.admit(50)
    b = budget.admit(50)
    started = time.monotonic()
    a.grow_to(1000)  # far over the limit, with another lease held: still returns at once
    a.grow_to(10)  # smaller: no change
    assert time.monotonic() - started < 0.1
    assert a.nbytes == 1000 and budget.in_use == 1050 and budget.peak == 1050
    waiter = Waiter(budget, 10)
    waiter.start()
    _until(lambda: budget.waiting == 1)
    b.release()
    time.sleep(0.2)
    assert waiter.lease is None  # 1000 + 10 > 100
    a.release()
    a.grow_to(5000)  # after release: ignored
    waiter.join(5)
    assert waiter.lease is not None and budget.in_use == 10


def test_release_wakes_every_waiter_that_fits() -> None:
    budget = MemoryBudget(100)
    held = budget.admit(100)
    waiters = [Waiter(budget, 25) for _ in range(4)]
    for w in waiters:
        w.start()
    _until(lambda: budget.waiting == 4)
    held.release()
    for w in waiters:
        w.join(5)
        assert w.lease is not None
    assert budget.in_use == 100 and budget.admitted_total == 5


def test_a_cancelled_waiter_raises_and_leaves_the_counters_right() -> None:
    budget = MemoryBudget(100)
    held = budget.admit(90)
    gone = threading.Event()
    order: list[str] = []
    head = Waiter(budget, 50, order, "head", cancelled=gone.is_set)
    head.start()
    _until(lambda: budget.waiting == 1)
    behind = Waiter(budget, 10, order, "behind")  # fits, but waits behind the head
    behind.start()
    _until(lambda: budget.waiting == 2)
    started = time.monotonic()
    gone.set()
    head.join(5)
    assert isinstance(head.error, Cancelled) and head.error.code == "cancelled"
    assert time.monotonic() - started < 1.0
    behind.join(5)  # the head left the queue: the next in line goes in
    assert order == ["behind"]
    assert (budget.in_use, budget.active, budget.waiting, budget.admitted_total) == (100, 2, 0, 2)
    held.release()
    assert budget.in_use == 10


def test_whatever_the_cancel_check_raises_propagates_and_dequeues() -> None:
    budget = MemoryBudget(10)
    held = budget.admit(10)
    stopping = threading.Event()

    def check() -> bool:
        if stopping.is_set():
            raise Unavailable("the server shut down")
        return False

    w = Waiter(budget, 5, cancelled=check)
    w.start()
    _until(lambda: budget.waiting == 1)
    stopping.set()
    w.join(5)
    assert isinstance(w.error, Unavailable) and budget.waiting == 0 and budget.in_use == 10
    held.release()


def _stress(grow: bool) -> None:
    limit = 1000
    budget = MemoryBudget(limit)
    lock = threading.Lock()
    held = {"bytes": 0, "leases": 0}
    violations: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    rounds = 40

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(rounds):
                estimate = rng.choice([rng.randint(1, 400), rng.randint(1, 400), 1500])
                lease = budget.admit(estimate)
                # bookkeeping inside the grant/release window: a subset of what is held
                with lock:
                    held["bytes"] += estimate
                    held["leases"] += 1
                    if held["bytes"] > limit and held["leases"] > 1:
                        violations.append((held["bytes"], held["leases"]))
                if grow and rng.random() < 0.3:
                    lease.grow_to(rng.randint(1, 3000))
                time.sleep(rng.random() * 0.002)
                with lock:
                    held["bytes"] -= estimate
                    held["leases"] -= 1
                lease.release()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(12)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
        assert not t.is_alive(), "the budget deadlocked"
    assert errors == []
    if not grow:
        assert violations == [] and budget.peak <= 1500
    assert (budget.in_use, budget.active, budget.waiting) == (0, 0, 0)
    assert budget.admitted_total == 12 * rounds


def test_concurrent_streams_never_exceed_the_limit_except_alone() -> None:
    _stress(grow=False)


def test_concurrent_streams_that_grow_never_deadlock() -> None:
    _stress(grow=True)


# -- through a real server: every DoGet path gives its lease back ----------------------------


@pytest.fixture
def budget_server(
    tmp_path: Path,
) -> Iterator[tuple[QuiverFlightServer, fl.FlightClient, AccessLog]]:
    """A server with a 4 MiB budget over 2 endpoints of 100,000 rows (10 MB each) streamed
    in 1,000-row batches: more than gRPC buffers, so a stream is still running when a
    client stops reading."""
    ids = pa.array(range(200_000), pa.int64())
    text = pc.binary_repeat(pc.utf8_lpad(pc.cast(ids, pa.string()), 10, "0"), 10)
    data = pa.table({"id": ids, "s": text})
    write_dataset(data, str(tmp_path / "t.lance"), max_rows_per_file=100_000)
    server, log = start(tmp_path, memory_budget=4 * 2**20, batch_size=1000)
    client = fl.connect(server.locations[0])
    yield server, client, log
    client.close()
    server.shutdown()
    logging.getLogger("quiver.access").removeHandler(log)


def _tickets(client: fl.FlightClient) -> list[fl.Ticket]:
    info = client.get_flight_info(fl.FlightDescriptor.for_path("t"))
    assert len(info.endpoints) == 2
    return [e.ticket for e in info.endpoints]


def _idle(budget: MemoryBudget) -> bool:
    return budget.in_use == 0 and budget.active == 0 and budget.waiting == 0


def test_a_finished_stream_releases_its_lease(budget_server) -> None:
    server, client, _ = budget_server
    for ticket in _tickets(client):
        assert client.do_get(ticket).read_all().num_rows == 100_000
    _until(lambda: _idle(server.budget))
    assert server.budget.admitted_total == 2 and server.budget.peak >= 2**20


def test_a_client_that_stops_reading_midway_releases_its_lease(budget_server) -> None:
    server, client, log = budget_server
    reader = client.do_get(_tickets(client)[0])
    reader.read_chunk()
    assert server.budget.active == 1
    reader.cancel()
    del reader
    _until(lambda: _idle(server.budget), timeout=10)
    (call,) = log.find("DoGet")
    assert call["status"] == "cancelled" and call["rows"] < 100_000


def test_a_waiting_stream_starts_when_memory_frees(budget_server) -> None:
    server, client, _ = budget_server
    tickets = _tickets(client)
    held = server.budget.admit(4 * 2**20)  # the whole budget
    got: list[int] = []
    reading = threading.Thread(
        target=lambda: got.append(client.do_get(tickets[0]).read_all().num_rows)
    )
    reading.start()
    _until(lambda: server.budget.waiting == 1)
    time.sleep(0.3)
    assert got == []
    held.release()
    reading.join(10)
    assert got == [100_000]
    _until(lambda: _idle(server.budget))


def test_a_client_that_gives_up_waiting_leaves_the_queue(budget_server) -> None:
    server, client, _ = budget_server
    held = server.budget.admit(4 * 2**20)
    options = fl.FlightCallOptions(timeout=1.0)
    with pytest.raises(fl.FlightError):
        client.do_get(_tickets(client)[0], options).read_all()
    _until(lambda: server.budget.waiting == 0, timeout=5)  # Cancelled within a poll or two
    assert server.budget.active == 1 and server.budget.admitted_total == 1
    held.release()
    assert _idle(server.budget)
    assert client.do_get(_tickets(client)[1]).read_all().num_rows == 100_000  # still serving


def test_a_drain_past_its_deadline_ends_waiting_streams(budget_server) -> None:
    server, client, _ = budget_server
    held = server.budget.admit(4 * 2**20)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            client.do_get(_tickets(client)[0]).read_all()
        except BaseException as e:  # noqa: BLE001 - inspected below
            errors.append(e)

    reading = threading.Thread(target=read)
    reading.start()
    _until(lambda: server.budget.waiting == 1)
    server.drain.stop_streams()
    reading.join(5)
    assert len(errors) == 1
    assert "before the stream began" in assert_clean_error(errors[0], "unavailable")
    held.release()
    assert _idle(server.budget)


def test_a_stream_ended_by_the_drain_midway_fails_cleanly_and_releases(budget_server) -> None:
    server, client, _ = budget_server
    reader = client.do_get(_tickets(client)[0])
    reader.read_chunk()
    server.drain.stop_streams()
    with pytest.raises((fl.FlightError, pa.ArrowException)) as e:
        while True:
            reader.read_chunk()
    # pyarrow would send an exception raised while streaming with its traceback
    assert "during the stream" in assert_clean_error(e.value, "unavailable")
    _until(lambda: _idle(server.budget))
