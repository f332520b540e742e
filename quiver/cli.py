"""The `quiver` command: the server's commands and commands for people.

    quiver serve --root ./data                       # the Flight server (see flight_server.cli)
    quiver ls ./data | s3://bucket/prefix | grpc://host:8815
    quiver describe ./data/sales.lance | grpc://host:8815/sales [--version N | --tag T]
    quiver versions TARGET          quiver tags TARGET
    quiver head TARGET [-n 10] [--columns id,x] [--filter "x > 5"] [--version N | --tag T]
    quiver delete TARGET --where "x < 0"
    quiver compact TARGET [--target-rows N]
    quiver cleanup TARGET [--older-than 7d] [--retain N]

A TARGET is a dataset: a path or URI ending in `.lance` (local, `s3://`, `memory://`),
or `grpc://host:port/name` (`grpc+tls://` too) on a server. Local datasets are handled
by the same service the server runs, so a command answers alike wherever the dataset is.
`--json` prints the result as JSON for scripts; an error is one line on stderr and exit
code 1 (2 for a command line that does not parse). On a terminal, stderr shows the progress
of a read from a server (rows, endpoints) and the time so far of a delete, compact or cleanup
(`--no-progress` turns it off). `--token` (or `QUIVER_TOKEN`) and
`--tls-root-certs` reach a server that asks for them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import quiver
from quiver.flight_server import cli as server_cli
from quiver.wire.errors import QuiverError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["main"]

PEOPLE = ("ls", "describe", "versions", "tags", "head", "delete", "compact", "cleanup")
CELL = 48  # characters of a table cell before it is cut
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class CommandError(Exception):
    """A command that cannot run as given (one line for the user)."""


# ------------------------------------------------------------------------------- targets
class Local:
    """Datasets under a local or object-store root, through the server's own service."""

    def __init__(self, root: str) -> None:
        from quiver.flight_server.service import DatasetService

        self.service = DatasetService(root)

    def action(self, name: str, body: dict[str, Any]) -> Any:
        from quiver.wire.requests import json_bytes

        return self.service.action(name, json_bytes(body))

    def datasets(self) -> list[dict[str, Any]]:
        return [
            {"dataset": s.name, "version": s.version, "rows": s.rows, "fragments": s.fragments}
            for s in self.service.list_datasets()
        ]

    def head(self, name: str, n: int, ref: dict[str, Any], **read: Any) -> pa.Table:
        from quiver.format.dataset import dataset

        read.pop("progress", None)  # a local read of `n` rows has nothing to show

        version = ref.get("version", ref.get("tag"))
        ds = dataset(self.service.uri(name), version=version)
        return ds.to_table(columns=read["columns"], filter=read["filter"], limit=n)

    def close(self) -> None:
        pass


class Remote:
    """Datasets of a Quiver server, through the Python client."""

    def __init__(self, uri: str, token: str | None, tls_root_certs: str | None) -> None:
        from quiver.clients import Client

        self.client = Client(uri, token=token, tls_root_certs=tls_root_certs)

    def action(self, name: str, body: dict[str, Any]) -> Any:
        return self.client.action(name, body)

    def datasets(self) -> list[dict[str, Any]]:
        out = []
        for name in self.client.datasets():
            d = self.client.describe(name)
            out.append(
                {
                    "dataset": name,
                    "version": d["version"],
                    "rows": d["rows"],
                    "fragments": d["fragments"],
                }
            )
        return out

    def head(self, name: str, n: int, ref: dict[str, Any], **read: Any) -> pa.Table:
        return self.client.read(name, limit=n, **ref, **read)

    def close(self) -> None:
        self.client.close()


def _is_server(target: str) -> bool:
    return target.startswith(("grpc://", "grpc+tls://", "grpc+tcp://"))


def open_root(target: str, args: argparse.Namespace) -> Local | Remote:
    """The datasets of a root: a directory or URI, or a server's address."""
    if _is_server(target):
        scheme, rest = target.split("://", 1)
        return Remote(f"{scheme}://{rest.split('/', 1)[0]}", *_credentials(args))
    return Local(target.rstrip("/") or "/")


def open_dataset(target: str, args: argparse.Namespace) -> tuple[Local | Remote, str]:
    """Where a dataset is (its root) and its name there."""
    if _is_server(target):
        scheme, rest = target.split("://", 1)
        address, _, name = rest.partition("/")
        if not name.strip("/"):
            raise CommandError(f"{target}: name a dataset, as in {scheme}://{address}/sales")
        return Remote(f"{scheme}://{address}", *_credentials(args)), name.strip("/")
    path = target.rstrip("/")
    parent, _, leaf = path.rpartition("/")
    if not leaf.endswith(".lance") or leaf == ".lance":
        raise CommandError(
            f"{target}: name a dataset, a path or URI ending in .lance (or grpc://host:port/name)"
        )
    if "://" in path and "/" not in path.split("://", 1)[1]:
        raise CommandError(f"{target}: a dataset must sit under a root, as in s3://bucket/x.lance")
    return Local(parent or "."), leaf.removesuffix(".lance")


def _credentials(args: argparse.Namespace) -> tuple[str | None, str | None]:
    return args.token or os.environ.get("QUIVER_TOKEN") or None, args.tls_root_certs


# ------------------------------------------------------------------------------- output
def _cell(value: Any) -> str:
    if isinstance(value, (dict, list)):
        text = json.dumps(value, default=str, separators=(",", ":"))
    elif value is None:
        text = ""
    else:
        text = str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= CELL else text[: CELL - 1] + "…"


def table_text(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows as an aligned text table with a header."""
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join([line.rstrip(), rule, *(b.rstrip() for b in body)])


def _show_progress(args: argparse.Namespace) -> bool:
    """Progress goes to stderr when a person watches it: a terminal, no --json, no
    --no-progress."""
    return not args.json and not args.no_progress and sys.stderr.isatty()


def _run(args: argparse.Namespace, where: Local | Remote, name: str, body: dict[str, Any]) -> Any:
    """One action on the dataset, the time so far on stderr while it runs; closes `where`."""
    from quiver.clients.progress import Elapsed

    try:
        with Elapsed(_show_progress(args), f"{name} {body['dataset']}"):
            return where.action(name, body)
    finally:
        where.close()


def _print(args: argparse.Namespace, result: Any, text: str) -> None:
    print(json.dumps(result, default=str, indent=2) if args.json else text)


# ------------------------------------------------------------------------------- commands
def _ref(args: argparse.Namespace) -> dict[str, Any]:
    if args.version is not None and args.tag is not None:
        raise CommandError("give --version or --tag, not both")
    if args.version is not None:
        return {"version": args.version}
    return {"tag": args.tag} if args.tag is not None else {}


def _ls(args: argparse.Namespace) -> int:
    where = open_root(args.target, args)
    try:
        found = where.datasets()
    finally:
        where.close()
    columns = ["dataset", "version", "rows", "fragments"]
    _print(args, found, table_text(found, columns) if found else "(no datasets)")
    return 0


def _describe(args: argparse.Namespace) -> int:
    where, name = open_dataset(args.target, args)
    try:
        d = where.action("describe", {"dataset": name, **_ref(args)})
    finally:
        where.close()
    lines = [
        f"dataset     {d['dataset']}",
        f"version     {d['version']} of {d['latest_version']} ({d['timestamp']})",
        f"storage     {d['data_storage_version']}",
        f"rows        {d['rows']:,} in {d['fragments']} fragment(s)",
        "",
        table_text(d["schema"], ["name", "type", "nullable"]),
    ]
    if d.get("indices"):
        lines += ["", table_text(d["indices"], ["name", "type", "columns", "fragments"])]
    if d.get("tags"):
        tags = [{"tag": t, "version": v} for t, v in sorted(d["tags"].items())]
        lines += ["", table_text(tags, ["tag", "version"])]
    _print(args, d, "\n".join(lines))
    return 0


def _versions(args: argparse.Namespace) -> int:
    where, name = open_dataset(args.target, args)
    try:
        found = where.action("list_versions", {"dataset": name})["versions"]
    finally:
        where.close()
    _print(args, found, table_text(found, ["version", "timestamp", "rows", "fragments"]))
    return 0


def _tags(args: argparse.Namespace) -> int:
    where, name = open_dataset(args.target, args)
    try:
        found = where.action("list_tags", {"dataset": name})["tags"]
    finally:
        where.close()
    rows = [{"tag": t, **info} for t, info in sorted(found.items())]
    text = table_text(rows, ["tag", "version", "created_at", "updated_at"]) if rows else "(no tags)"
    _print(args, found, text)
    return 0


def _head(args: argparse.Namespace) -> int:
    if args.n < 0:
        raise CommandError("-n must be 0 or more")
    columns = [c.strip() for c in args.columns.split(",")] if args.columns else None
    where, name = open_dataset(args.target, args)
    try:
        table = where.head(
            name,
            args.n,
            _ref(args),
            columns=columns,
            filter=args.filter,
            progress=_show_progress(args),
        )
    finally:
        where.close()
    rows = table.to_pylist()
    text = table_text(rows, table.column_names)
    _print(args, rows, f"{text}\n({table.num_rows} row(s))")
    return 0


def _delete(args: argparse.Namespace) -> int:
    where, name = open_dataset(args.target, args)
    done = _run(args, where, "delete", {"dataset": name, "predicate": args.where})
    _print(args, done, f"deleted {done['deleted_rows']:,} row(s): version {done['version']}")
    return 0


def _compact(args: argparse.Namespace) -> int:
    where, name = open_dataset(args.target, args)
    body: dict[str, Any] = {"dataset": name}
    if args.target_rows is not None:
        body["target_rows_per_fragment"] = args.target_rows
    done = _run(args, where, "compact", body)
    text = f"{done['fragments_removed']} fragment(s) rewritten into {done['fragments_added']}" + (
        f": version {done['version']}" if done.get("version") is not None else ""
    )
    _print(args, done, text)
    return 0


def duration_seconds(text: str) -> float:
    """`90`, `90s`, `15m`, `12h`, `7d` or `2w` in seconds."""
    m = _DURATION.match(text.strip())
    if m is None:
        raise CommandError(f"not a duration: {text!r} (use 90s, 15m, 12h, 7d or 2w)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _cleanup(args: argparse.Namespace) -> int:
    where, name = open_dataset(args.target, args)
    body: dict[str, Any] = {"dataset": name}
    if args.older_than is not None:
        body["older_than_seconds"] = duration_seconds(args.older_than)
    if args.retain is not None:
        body["retain_versions"] = args.retain
    done = _run(args, where, "cleanup", body)
    text = (
        f"removed {done['old_versions']} old version(s), {done['data_files_removed']} data "
        f"file(s), {done['bytes_removed']:,} bytes"
    )
    _print(args, done, text)
    return 0


# ------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    """The `quiver` parser: the server's commands and the commands for people."""
    parser = argparse.ArgumentParser(
        prog="quiver", description="Serve Lance datasets over Flight, and look after them."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    server_cli.add_commands(sub)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the result as JSON")
    common.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress on stderr (shown on a terminal while reads and actions run)",
    )
    common.add_argument("--token", help="bearer token for a server (env QUIVER_TOKEN)")
    common.add_argument("--tls-root-certs", help="PEM file of the server's CA (grpc+tls://)")
    ref = argparse.ArgumentParser(add_help=False)
    ref.add_argument("--version", type=int, help="a version number (default: the latest)")
    ref.add_argument("--tag", help="a tag naming the version")
    dataset_help = "a dataset: path/to/name.lance, s3://bucket/name.lance, grpc://host:port/name"

    def command(name: str, help: str, func: Any, *parents: Any) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, parents=[common, *parents])
        p.set_defaults(func=func)
        return p

    p = command("ls", "list the datasets under a root or on a server", _ls)
    p.add_argument("target", help="a directory, s3://bucket/prefix or grpc://host:port")
    p = command("describe", "schema, version, rows, fragments, indices and tags", _describe, ref)
    p.add_argument("target", help=dataset_help)
    p = command("versions", "every version with its time and rows", _versions)
    p.add_argument("target", help=dataset_help)
    p = command("tags", "the dataset's tags", _tags)
    p.add_argument("target", help=dataset_help)
    p = command("head", "the first rows, optionally filtered, as a table", _head, ref)
    p.add_argument("target", help=dataset_help)
    p.add_argument("-n", type=int, default=10, help="rows to show (default 10)")
    p.add_argument("--columns", help="comma-separated columns (default: all)")
    p.add_argument("--filter", help="a SQL filter, as in 'x > 5 AND s LIKE \"a%%\"'")
    p = command("delete", "delete the rows a SQL predicate matches (one new version)", _delete)
    p.add_argument("target", help=dataset_help)
    p.add_argument("--where", required=True, help="the SQL predicate")
    p = command("compact", "rewrite small fragments into larger ones", _compact)
    p.add_argument("target", help=dataset_help)
    p.add_argument("--target-rows", type=int, help="rows per fragment to aim for")
    p = command("cleanup", "remove old versions and the files only they use", _cleanup)
    p.add_argument("target", help=dataset_help)
    p.add_argument("--older-than", help="keep versions younger than this (90s, 12h, 7d, 2w)")
    p.add_argument("--retain", type=int, help="keep at least this many of the newest versions")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `quiver` command line; the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        build_parser().parse_args(argv)  # prints every command's summary and exits
    if not argv or argv[0] not in PEOPLE:
        server_cli.STARTED_BY = quiver.STARTED_BY
        return server_cli.main(argv)  # serve (the default), inspect, demo, hash-password, api-key
    args = build_parser().parse_args(argv)
    from quiver.format.errors import LanceError

    try:
        return int(args.func(args))
    except (CommandError, QuiverError, LanceError) as e:
        print(f"quiver: {_one_line(e)}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"quiver: {args.target}: {e.strerror or e}", file=sys.stderr)
        return 1


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split("\n")[0].split()) or type(e).__name__
