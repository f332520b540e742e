"""Nearest-neighbour search through a real server: a CMD descriptor's `nearest` object
(GetFlightInfo + DoGet, or one DoExchange that carries `q`), DoExchange with batches of
query vectors, and the Python client's `nearest` / `nearest_batch`; every answer compared
whole with pylance's on the dataset."""

from __future__ import annotations

import json

import flight_helpers
import lance
import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_helpers import Served, assert_clean_error
from vectors import DIM, assert_same_neighbours, build, pylance_nearest, vector_table

from quiver.clients import Client, InvalidArgument

served = flight_helpers.served


@pytest.fixture(scope="module")
def datasets(served: Served) -> dict[str, str]:
    """Name -> URI: an index of each type (pylance), appended to and deleted from."""
    out = {}
    for name, kind, metric in (
        ("pq", "IVF_PQ", "l2"),
        ("flat_cos", "IVF_FLAT", "cosine"),
        ("sq_dot", "IVF_SQ", "dot"),
        ("plain", None, "l2"),
    ):
        out[name] = build(served.root / f"{name}.lance", kind, metric)
    return out


@pytest.fixture(scope="module")
def client(served: Served) -> Client:
    with Client(served.uri) as c:
        yield c


def queries(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def command(name: str, q: np.ndarray, **options: object) -> dict:
    nearest = {"column": "vec", "q": q.tolist(), "k": 10, "nprobes": 2}
    nearest.update(options.pop("nearest", {}))
    return {"dataset": name, "nearest": nearest, **options}


CASES = [
    {},
    {"columns": ["id"], "with_row_id": True},
    {"filter": "id % 3 = 0"},
    {"filter": "cat = 'c2'", "prefilter": True, "columns": ["cat", "id"]},
    {"nearest": {"refine_factor": 2, "k": 7}},
]


@pytest.mark.parametrize("name", ["pq", "flat_cos", "sq_dot", "plain"])
def test_descriptor_search_matches_pylance(served: Served, datasets, name: str) -> None:
    q = queries(1, 1)[0]
    for case in CASES:
        cmd = command(name, q, **json.loads(json.dumps(case)))
        info = served.info(cmd)
        assert len(info.endpoints) == 1 and info.total_records == -1
        got = served.read_info(info)
        nearest = {**cmd["nearest"], "q": q}
        options = {k: v for k, v in cmd.items() if k not in ("dataset", "nearest")}
        expected = pylance_nearest(datasets[name], nearest=nearest, **options)
        assert_same_neighbours(got, expected, f"{name} {case}")
        schema = served.client.get_schema(fl.FlightDescriptor.for_command(json.dumps(cmd)))
        assert schema.schema.equals(expected.schema)


def exchange(served: Served, cmd: dict) -> pa.Table:
    """The answer of a DoExchange whose descriptor carries the search (no batches sent)."""
    writer, reader = served.client.do_exchange(fl.FlightDescriptor.for_command(json.dumps(cmd)))
    writer.done_writing()
    table = reader.read_all()
    writer.close()
    return table


@pytest.mark.parametrize("name", ["pq", "flat_cos", "sq_dot", "plain"])
def test_do_exchange_with_q_answers_in_one_call(served: Served, datasets, name: str) -> None:
    """The descriptor's search answered at once: what GetFlightInfo + DoGet return."""
    q = queries(7, 3)
    for case in [*CASES, {"limit": 4}, {"columns": ["id"], "limit": 1}]:
        for vectors in (q[0], q):
            cmd = command(name, vectors, **json.loads(json.dumps(case)))
            got = exchange(served, cmd)
            nearest = {**cmd["nearest"], "q": vectors}
            options = {k: v for k, v in cmd.items() if k not in ("dataset", "nearest")}
            expected = pylance_nearest(datasets[name], nearest=nearest, **options)
            assert_same_neighbours(got, expected, f"DoExchange with q: {name} {case}")
            assert got.equals(served.read(cmd))


def test_do_exchange_with_q_reads_the_version_asked(served: Served, datasets) -> None:
    import lance

    uri = build(served.root / "versioned.lance", "IVF_PQ", "l2")
    version = lance.dataset(uri).version
    q = queries(8, 1)[0]
    near = vector_table(2, 200_000, 9)
    near = near.set_column(
        2, "vec", pa.FixedSizeListArray.from_arrays(pa.array(np.tile(q, 2)), DIM)
    )
    lance.write_dataset(near, uri, mode="append")
    old = exchange(served, command("versioned", q, columns=["id"], version=version))
    assert not set(old.column("id").to_pylist()) & {200_000, 200_001}
    new = exchange(served, command("versioned", q, columns=["id"]))
    assert set(new.column("id").to_pylist()[:2]) == {200_000, 200_001}
    with pytest.raises(fl.FlightError) as e:
        exchange(served, command("versioned", q, nearest={"k": 0}))
    assert "k" in assert_clean_error(e.value, "invalid_argument", served.root)


def test_list_of_vectors_in_a_descriptor(served: Served, datasets) -> None:
    q = queries(2, 3)
    got = served.read(command("pq", q, columns=["id"]))
    expected = pylance_nearest(
        datasets["pq"], nearest={"column": "vec", "q": q, "k": 10, "nprobes": 2}, columns=["id"]
    )
    assert_same_neighbours(got, expected, "batch in a descriptor")
    assert got.column("query_index").to_pylist() == sorted(got.column("query_index").to_pylist())


@pytest.mark.parametrize("name", ["pq", "sq_dot", "plain"])
def test_do_exchange_batches_match_pylance(client: Client, datasets, name: str) -> None:
    q = queries(3, 23)
    options = {"nprobes": 2, "filter": "id % 2 = 1", "prefilter": True, "with_row_id": True}
    got = client.nearest_batch(name, "vec", q, k=5, batch_rows=4, columns=["id"], **options)
    nearest = {"column": "vec", "q": q, "k": 5, "nprobes": 2}
    expected = pylance_nearest(
        datasets[name],
        nearest=nearest,
        columns=["id"],
        filter="id % 2 = 1",
        prefilter=True,
        with_row_id=True,
    )
    assert_same_neighbours(got, expected, f"DoExchange {name}")
    assert set(got.column("query_index").to_pylist()) == set(range(23))


def test_client_nearest_matches_pylance(client: Client, datasets) -> None:
    q = queries(4, 1)[0]
    got = client.nearest("flat_cos", "vec", q, k=8, nprobes=3, refine_factor=2, columns=["id"])
    nearest = {"column": "vec", "q": q, "k": 8, "nprobes": 3, "refine_factor": 2}
    assert_same_neighbours(
        got, pylance_nearest(datasets["flat_cos"], nearest=nearest, columns=["id"]), "client"
    )


def test_distance_range_over_flight_matches_pylance(
    served: Served, client: Client, datasets
) -> None:
    q = queries(11, 1)[0]
    ref = lance.dataset(datasets["pq"])
    whole = {"column": "vec", "q": q, "k": 300, "use_index": False}
    d = np.sort(ref.to_table(nearest=whole, columns=["id"]).column("_distance").to_numpy())
    bounds = (float(d[3] + d[4]) / 2, float(d[30] + d[31]) / 2)
    nearest = {"column": "vec", "q": q, "k": 10, "nprobes": 2, "distance_range": bounds}
    want = pylance_nearest(datasets["pq"], nearest=nearest, columns=["id"])
    got = client.nearest("pq", "vec", q, k=10, nprobes=2, distance_range=bounds, columns=["id"])
    assert_same_neighbours(got, want, "client")
    raw = served.read(command("pq", q, nearest={"distance_range": [bounds[0], None]}))
    open_above = {**nearest, "distance_range": (bounds[0], None)}
    assert_same_neighbours(raw, pylance_nearest(datasets["pq"], nearest=open_above), "descriptor")
    with pytest.raises(fl.FlightError) as e:
        served.info(command("pq", q, nearest={"distance_range": [1.0]}))
    assert "distance_range" in assert_clean_error(e.value, "invalid_argument", served.root)


def test_search_effort_over_flight_matches_pylance(client: Client, datasets) -> None:
    q = queries(12, 1)[0]
    for effort in (0.0, 0.3, 1.0):
        nearest = {"column": "vec", "q": q, "k": 10, "search_effort": effort}
        want = pylance_nearest(datasets["pq"], nearest=nearest, columns=["id"])
        got = client.nearest("pq", "vec", q, k=10, search_effort=effort, columns=["id"])
        assert_same_neighbours(got, want, f"effort {effort}")


def test_approx_mode_over_flight_matches_pylance(served: Served, client: Client) -> None:
    uri = build(served.root / "rq.lance", "IVF_RQ", "l2", appended=0, delete=None)
    q = queries(13, 1)[0]
    for mode in ("fast", "normal", "accurate"):
        nearest = {"column": "vec", "q": q, "k": 10, "nprobes": 3, "approx_mode": mode}
        want = pylance_nearest(uri, nearest=nearest, columns=["id"])
        got = client.nearest("rq", "vec", q, k=10, nprobes=3, approx_mode=mode, columns=["id"])
        assert_same_neighbours(got, want, f"approx_mode {mode}")


def test_ticket_pins_the_version(served: Served, client: Client, datasets) -> None:
    """A ticket planned before an append answers for its version: the new rows, nearer
    than anything, are not in it; a new plan finds them."""
    import lance

    uri = build(served.root / "pinned.lance", "IVF_PQ", "l2")
    q = queries(5, 1)[0]
    info = served.info(command("pinned", q, columns=["id"]))
    near = vector_table(3, 100_000, 9)
    near = near.set_column(
        2, "vec", pa.FixedSizeListArray.from_arrays(pa.array(np.tile(q, 3)), DIM)
    )
    lance.write_dataset(near, uri, mode="append")
    old = served.read_info(info)
    assert not set(old.column("id").to_pylist()) & {100_000, 100_001, 100_002}
    new = client.nearest("pinned", "vec", q, k=10, nprobes=2, columns=["id"])
    assert set(new.column("id").to_pylist()[:3]) == {100_000, 100_001, 100_002}


def test_bad_searches_are_invalid_arguments(served: Served, client: Client, datasets) -> None:
    q = queries(6, 1)[0]
    bad = [
        ({"nearest": {"column": "nope"}}, "nope"),
        ({"nearest": {"column": "id"}}, "not a vector"),
        ({"nearest": {"k": 0}}, "k"),
        ({"nearest": {"nprobs": 3}}, "nprobs"),
        ({"nearest": {"metric": "manhattan"}}, "manhattan"),
        ({"filter": "nope > 1"}, "nope"),
        ({"appended_since": 1}, "appended_since"),
    ]
    for options, text in bad:
        cmd = command("pq", q, **json.loads(json.dumps(options)))
        with pytest.raises(fl.FlightError) as e:
            served.info(cmd)
        message = assert_clean_error(e.value, "invalid_argument", served.root)
        assert text in message, message
    cmd = {"dataset": "pq", "nearest": {"column": "vec", "q": [1.0, 2.0]}}
    with pytest.raises(fl.FlightError) as e:
        served.info(cmd)
    assert "2 values" in assert_clean_error(e.value, "invalid_argument", served.root)
    with pytest.raises(InvalidArgument, match="8 values"):
        client.nearest_batch("pq", "vec", np.zeros((3, 8), np.float32))
    with pytest.raises(InvalidArgument, match="nearest.q"):
        client.nearest("pq", "vec", np.zeros(0, np.float32))


def test_do_exchange_without_a_search_is_unimplemented(served: Served) -> None:
    for descriptor in (
        fl.FlightDescriptor.for_path("pq"),
        fl.FlightDescriptor.for_command(json.dumps({"dataset": "pq"})),
    ):
        with pytest.raises(fl.FlightError) as e:
            writer, reader = served.client.do_exchange(descriptor)
            writer.begin(pa.schema([("q", pa.list_(pa.float32()))]))
            writer.done_writing()
            reader.read_all()
        assert "nearest" in assert_clean_error(e.value, "unimplemented", served.root)


def test_vectors_nested_in_structs(served: Served, client: Client) -> None:
    """A vector column nested in a struct (`meta.vec`), named by its path: GetFlightInfo +
    DoGet and DoExchange batches answer as pylance."""
    rng = np.random.default_rng(12)
    vectors = rng.standard_normal((1500, DIM)).astype(np.float32)
    meta = pa.StructArray.from_arrays(
        [pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM)], names=["vec"]
    )
    uri = str(served.root / "nested.lance")
    lance.write_dataset(pa.table({"id": np.arange(1500), "meta": meta}), uri)
    lance.dataset(uri).create_index("meta.vec", "IVF_FLAT", num_partitions=3)
    q = queries(13, 5)
    got = client.nearest("nested", "meta.vec", q[0], k=6, nprobes=2, columns=["id"])
    nearest = {"column": "meta.vec", "q": q[0], "k": 6, "nprobes": 2}
    assert_same_neighbours(got, pylance_nearest(uri, nearest=nearest, columns=["id"]), "one")
    got = client.nearest_batch(
        "nested", "meta.vec", q, k=3, batch_rows=2, nprobes=2, columns=["id"]
    )
    nearest = {"column": "meta.vec", "q": q, "k": 3, "nprobes": 2}
    assert_same_neighbours(got, pylance_nearest(uri, nearest=nearest, columns=["id"]), "batches")
