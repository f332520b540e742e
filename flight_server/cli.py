"""The `quiver` command line: `quiver inspect URI` describes a Lance dataset."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from format.dataset import dataset
from format.errors import LanceError


def _inspect(args: argparse.Namespace) -> int:
    version: int | str | None = args.version
    if isinstance(version, str) and version.isdigit():
        version = int(version)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="quiver", description="Serve Lance datasets over Flight.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="describe a Lance dataset (versions, schema, fragments)")
    p.add_argument("uri", help="dataset path or URI (file://, memory://, s3://)")
    p.add_argument("--version", help="version number or tag (default: latest)")
    p.set_defaults(func=_inspect)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except LanceError as e:
        print(f"quiver: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
