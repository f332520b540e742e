"""The shape of the code: layers import only downward, no import cycles, small modules, and
one wire contract that gives every server error code a client exception class."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pyarrow.flight as flight
import pytest

import quiver.flight_server.errors as server_errors
from quiver.clients.errors import from_flight_error
from quiver.flight_server import grpc_status
from quiver.wire import errors as wire_errors
from quiver.wire import status as wire_status
from quiver.wire.requests import ACTION_SHAPES

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("wire", "format", "flight_server", "clients", "quiver")
MAX_LINES = 800
# Which top-level packages each may import (besides itself).
ALLOWED = {
    "wire": set(),
    "format": set(),
    "flight_server": {"format", "wire"},
    "clients": {"wire"},
    # the public API and the command for people, over everything else
    "quiver": {"format", "flight_server", "clients", "wire"},
}
# Inside the engine, each layer imports only the ones before it.
ENGINE_LAYERS = (
    "format.io",
    "format.expr",
    "format.table",
    "format.file",
    "format.index",
    "format.dataset",
)


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if path.name.endswith("_pb2.py") or "node_modules" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import that can run: module level or inside functions (lazy), not the
    annotation-only ones under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking_only(node):
            yield from (n for child in node.orelse for n in _imports_of(child))
            continue
        yield from _imports_of(node)


def _imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


FOLDERS = ("wire", "format", "flight_server", "clients")


def _local(name: str) -> str:
    """A module's name in the repository (`format.io`) for its installed name
    (`quiver.format.io`): each folder is a subpackage of `quiver` (setup.py)."""
    head, _, rest = name.partition(".")
    if head == "quiver" and rest.partition(".")[0] in FOLDERS:
        return rest
    return name


def _owner(name: str) -> str | None:
    """The project module `name` is or lives in."""
    name = _local(name)
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [t for a in node.names if (t := _owner(a.name))]
    base = node.module or ""
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    out = []
    for a in node.names:
        full = _local(f"{base}.{a.name}")
        target = full if full in MODULES else _owner(base)
        if target:
            out.append(target)
    return out


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            graph[module] |= {t for t in _targets(module, node) if t != module}
    return graph


GRAPH = _graph()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_sees_lazy_imports_and_cycles() -> None:
    lazy = ast.parse("def f():\n    from quiver.format.dataset import core\n")
    assert [_targets("format.dataset.scan", n) for n in _imports(lazy)] == [["format.dataset.core"]]
    hidden = ast.parse("if TYPE_CHECKING:\n    import format.dataset.core\n")
    assert list(_imports(hidden)) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_folders_are_imported_as_quiver_subpackages() -> None:
    """An installed wheel has no top-level `format`, `clients`... (setup.py): code that
    imported them so would only run from a checkout."""
    wrong = []
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if parts[0] in (".venv", "build", "site") or "node_modules" in parts:
            continue
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            wrong += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in FOLDERS]
    assert wrong == []


def test_no_import_cycles() -> None:
    assert _cycles(GRAPH) == []


def test_packages_import_only_downward() -> None:
    wrong = []
    for module, targets in GRAPH.items():
        if ".examples." in module:
            continue  # runnable examples may start a demo server of their own
        top = module.split(".")[0]
        for t in targets:
            other = t.split(".")[0]
            if other != top and other not in ALLOWED[top]:
                wrong.append(f"{module} -> {t}")
    assert wrong == []


def test_engine_layers_import_only_downward() -> None:
    def layer(module: str) -> int | None:
        return next((i for i, p in enumerate(ENGINE_LAYERS) if module.startswith(p)), None)

    wrong = []
    for module, targets in GRAPH.items():
        mine = layer(module)
        if mine is None:
            continue
        for t in targets:
            theirs = layer(t)
            if theirs is not None and theirs > mine:
                wrong.append(f"{module} -> {t}")
    assert wrong == []


def test_modules_are_small() -> None:
    big = {
        m: n
        for m, p in MODULES.items()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert big == {}


def _server_codes() -> set[str]:
    """Every code the server can put in `extra_info`: its exception classes, the engine
    errors it translates, and the literal codes it raises Flight errors with."""
    codes = {c.code for c in vars(server_errors).values() if _is_error_class(c)}
    codes |= {code for _, code in server_errors.ENGINE_ERRORS}
    codes.add("internal")
    for module, path in MODULES.items():
        if not module.startswith("flight_server"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None))
                == "make_flight_error"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                codes.add(node.args[0].value)
    return {c for c in codes if c}


def _is_error_class(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, wire_errors.QuiverError)


def test_every_server_code_has_a_client_class() -> None:
    codes = _server_codes()
    assert {"not_found", "failed_precondition", "data_corrupt", "commit_conflict"} <= codes
    missing = sorted(codes - set(wire_errors.ERROR_CLASSES))
    assert missing == []
    for code in codes:
        sent = server_errors.make_flight_error(code, "m", retryable=False)
        got = from_flight_error(sent)
        assert type(got) is wire_errors.ERROR_CLASSES[code] and got.code == code


def test_server_and_client_raise_the_same_classes() -> None:
    assert server_errors.NotFound is wire_errors.NotFound
    assert server_errors.FailedPrecondition is wire_errors.FailedPrecondition
    sent = server_errors.to_flight_error(
        server_errors.CommitConflict("lost", retryable=True, version=4)
    )
    got = from_flight_error(sent)
    assert isinstance(got, wire_errors.CommitConflict) and got.retryable and got.version == 4
    found = wire_status.decode(sent.extra_info)  # type: ignore[attr-defined]
    assert found is not None and found.details == {
        "code": "commit_conflict",
        "retryable": True,
        "version": 4,
    }


@pytest.mark.parametrize("shape", ACTION_SHAPES, ids=lambda s: s.name)
def test_actions_are_registered_once(shape: object) -> None:
    from quiver.flight_server.actions import ACTIONS_BY_NAME

    action = ACTIONS_BY_NAME[shape.name]  # type: ignore[attr-defined]
    assert action.keys == shape.keys and action.summary == shape.summary  # type: ignore[attr-defined]
    assert len(ACTION_SHAPES) == len({s.name for s in ACTION_SHAPES}) == len(ACTIONS_BY_NAME)


def test_errors_carry_the_status_of_their_code() -> None:
    error = server_errors.make_flight_error("not_found", "x")
    assert error.grpc_code == wire_status.NOT_FOUND  # type: ignore[attr-defined]
    assert isinstance(error, grpc_status.StatusError) or isinstance(error, flight.FlightError)
