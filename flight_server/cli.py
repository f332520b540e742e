"""The `quiver` command line (also `python -m flight_server`).

    quiver serve --root ./data --host 127.0.0.1 --port 8815 [--advertise URI ...]
    quiver inspect PATH_OR_URI [--version N|TAG]
    quiver demo --root ./data        # create the demo dataset if the root has none
    quiver hash-password [--pbkdf2]  # read a password (prompt or stdin), print its hash
    quiver api-key                   # print a new API key and the hash for the auth file

Without a subcommand, the arguments are those of `serve`; every `serve` flag can also
come from a `QUIVER_*` environment variable (see `flight_server.config`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

# Arrow's C++ code allocates from its default pool, which pyarrow picks once, when it loads:
# mimalloc unless this says otherwise. Flight's IPC writer takes fresh offsets and bitmaps
# for every sliced batch it sends from there, and mimalloc kept ~50 MB of them resident (the
# memory benchmark's full scan: 285 -> 234 MB peak RSS with the system allocator).
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

from quiver.flight_server.config import ConfigError, ServerConfig, add_serve_arguments  # noqa: E402
from quiver.format.errors import LanceError  # noqa: E402

COMMANDS = ("serve", "inspect", "demo", "hash-password", "api-key")

STARTED_BY = os.getppid()
"""The process that started this one, for `--exit-with-parent`. The `quiver` command sets it
from `quiver.STARTED_BY`, read before its imports: a parent that dies while they run is seen."""


def _inspect(args: argparse.Namespace) -> int:
    version: int | str | None = args.version
    if isinstance(version, str) and version.isdigit():
        version = int(version)
    from quiver.format.dataset import dataset

    ds = dataset(args.uri, version=version)
    info = {
        "uri": ds.uri,
        "version": ds.version,
        "latest_version": ds.latest_version,
        "data_storage_version": ds.data_storage_version,
        "rows": ds.count_rows(),
        "fragments": [
            {"id": f.fragment_id, "physical_rows": f.physical_rows, "deleted": f.num_deletions}
            for f in ds.get_fragments()
        ],
        "schema": [str(f) for f in ds.schema],
        "versions": [
            {"version": v["version"], "timestamp": v["timestamp"].isoformat()}
            for v in ds.versions()
        ],
        "tags": {name: t["version"] for name, t in ds.tags.list().items()},
    }
    json.dump(info, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _setup_logging(level: str) -> None:
    # The access log writes a line per call, and the format shows no caller, thread or
    # process: finding those (a stack walk per record) cost more than the line itself
    # (the logging HOWTO's "Optimization").
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


def _demo(args: argparse.Namespace) -> int:
    from quiver.flight_server.demo import ensure_demo

    config = ServerConfig.from_namespace(args)
    created = ensure_demo(config.root, config.storage_options)
    if created:
        print(f"quiver: created the demo dataset {created!r} under {config.root}", file=sys.stderr)
    return 0


def _serve(args: argparse.Namespace) -> int:
    from quiver.flight_server.health import HealthServer, serve_until_signalled
    from quiver.flight_server.server import build_server

    config = ServerConfig.from_namespace(args)
    _setup_logging(config.log_level)
    try:
        server = build_server(config)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - e.g. the port is taken
        print(f"quiver: cannot serve on {config.bind_location()}: {e}", file=sys.stderr)
        return 1
    health = None
    if config.health_port is not None:
        try:
            health = HealthServer(config.host, config.health_port).start()
        except Exception as e:  # noqa: BLE001 - e.g. the port is taken
            print(f"quiver: cannot serve health on port {config.health_port}: {e}", file=sys.stderr)
            server.shutdown()
            return 1
    metrics = None
    if config.metrics_port is not None:
        from quiver.flight_server.metrics import serve as serve_metrics

        try:
            metrics = serve_metrics(config.host, config.metrics_port)
        except Exception as e:  # noqa: BLE001 - e.g. the port is taken
            print(
                f"quiver: cannot serve metrics on port {config.metrics_port}: {e}", file=sys.stderr
            )
            if health is not None:
                health.stop(0)
            server.shutdown()
            return 1

    namespace = None
    if config.namespace_port is not None:
        from quiver.flight_server.namespace import start_namespace

        try:
            namespace = start_namespace(config, server.service, server.authenticator)
        except Exception as e:  # noqa: BLE001 - e.g. the port is taken
            print(
                f"quiver: cannot serve the namespace on port {config.namespace_port}: {e}",
                file=sys.stderr,
            )
            if metrics is not None:
                metrics.stop()
            if health is not None:
                health.stop(0)
            server.shutdown()
            return 1

    def ready() -> None:
        where = ", ".join(server.locations)
        extra = f"; health on {config.host}:{health.port}" if health is not None else ""
        if metrics is not None:
            extra += f"; metrics on http://{config.host}:{metrics.port}/metrics"
        if namespace is not None:
            extra += f"; namespace on {namespace.url}"
        print(f"quiver: serving {config.root} at {where}{extra} (Ctrl-C stops)", file=sys.stderr)
        sys.stderr.flush()

    # SIGTERM/SIGINT: health NOT_SERVING, new calls UNAVAILABLE, running calls finish (up to
    # --drain-seconds), then shutdown and exit 0. With --exit-with-parent, the same once the
    # process that started the server is gone (this process is then adopted by another).
    still_wanted = (lambda: os.getppid() == STARTED_BY) if args.exit_with_parent else None
    try:
        return serve_until_signalled(
            server,
            server.drain,
            health_server=health,
            drain_seconds=config.drain_seconds,
            on_ready=ready,
            on_drain=lambda: _draining(server, namespace),
            still_wanted=still_wanted,
        )
    finally:
        if namespace is not None:
            namespace.stop()
        if metrics is not None:
            metrics.stop()


def _draining(server: Any, namespace: Any) -> None:
    """Mark every front door not serving: new calls are refused, running ones finish."""
    server.service.set_serving(False)
    if namespace is not None:
        namespace.app.serving = False


def _hash_password(args: argparse.Namespace) -> int:
    from quiver.flight_server.auth import main as hash_main

    return hash_main(["--pbkdf2"] if args.pbkdf2 else [])


def _api_key(args: argparse.Namespace) -> int:
    from quiver.flight_server.auth import new_api_key

    key, digest = new_api_key()
    print(f"API key (give it to the client; it is not stored): {key}")
    print(f'for the user\'s entry in the auth file: "api_keys": ["{digest}"]')
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The server's argument parser (`python -m flight_server`; the `quiver` command adds
    commands for people to it: `quiver.cli`)."""
    parser = argparse.ArgumentParser(prog="quiver", description="Serve Lance datasets over Flight.")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def add_commands(sub: Any) -> None:
    """Add the server's commands (serve, inspect, demo, hash-password) to `sub`, the
    subparsers of a parser."""
    p = sub.add_parser("serve", help="run the Arrow Flight server")
    add_serve_arguments(p)
    p.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="drain and stop when the process that started the server exits (for scripts "
        "and tests that start their own server)",
    )
    p.set_defaults(func=_serve)
    p = sub.add_parser("inspect", help="describe a Lance dataset (versions, schema, fragments)")
    p.add_argument("uri", help="dataset path or URI (file://, memory://, s3://)")
    p.add_argument("--version", help="version number or tag (default: latest)")
    p.set_defaults(func=_inspect)
    p = sub.add_parser("demo", help="create the demo dataset under the root if it has none")
    p.add_argument("--root", help="storage root (env QUIVER_ROOT, default ./data)")
    p.set_defaults(func=_demo)
    p = sub.add_parser(
        "hash-password",
        help="print a salted password hash for the auth file (reads the password from a "
        "prompt, or one line of stdin)",
    )
    p.add_argument("--pbkdf2", action="store_true", help="pbkdf2_sha256 instead of scrypt")
    p.set_defaults(func=_hash_password)
    p = sub.add_parser(
        "api-key", help="print a new random API key and the hash to put in the auth file"
    )
    p.set_defaults(func=_api_key)


def run(args: argparse.Namespace) -> int:
    """Run parsed arguments of a server command; the process exit code."""
    try:
        return int(args.func(args))
    except ConfigError as e:
        print(f"quiver: {e}", file=sys.stderr)
        return 2
    except LanceError as e:
        print(f"quiver: {e}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv.insert(0, "serve")
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
