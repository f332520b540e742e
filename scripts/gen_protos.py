"""Generate the Python protobuf modules from the repository's .proto files.

`protos/*.proto` (Lance's messages) become modules of `format/proto/`, and
`protos/flight_sql/*.proto` (the Flight SQL messages) modules of `flight_server/sql/`.
protoc emits top-level imports (``import file_pb2``); they are rewritten to package imports
so the generated code lives inside its `quiver.*` package. ``--check`` regenerates into a
temporary directory and exits non-zero when the committed modules are stale.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
# (directory of .proto files, the package directory its modules go to, that package's name)
SETS = (
    (ROOT / "protos", ROOT / "format" / "proto", "quiver.format.proto"),
    (ROOT / "protos" / "flight_sql", ROOT / "flight_server" / "sql", "quiver.flight_server.sql"),
)
_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


def generate(proto_dir: Path, out_dir: Path, package: str) -> list[Path]:
    """Run protoc on every .proto file of `proto_dir`; the generated module paths."""
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(proto_dir.glob("*.proto"))
    args = ["protoc", f"-I{proto_dir}", f"-I{include}", f"--python_out={out_dir}"]
    if protoc.main(args + [str(p) for p in protos]) != 0:
        raise SystemExit("protoc failed")
    outputs = []
    for proto in protos:
        module = out_dir / f"{proto.stem}_pb2.py"
        text = _IMPORT.sub(rf"from {package} import \1 as \2", module.read_text())
        module.write_text(text)
        outputs.append(module)
    return outputs


def main() -> int:
    """Regenerate the modules, or with --check compare them with a fresh generation."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if generated code is stale")
    args = parser.parse_args()
    if not args.check:
        for proto_dir, out_dir, package in SETS:
            generate(proto_dir, out_dir, package)
        return 0
    stale = []
    for proto_dir, out_dir, package in SETS:
        with tempfile.TemporaryDirectory() as tmp:
            stale += [
                m.name
                for m in generate(proto_dir, Path(tmp), package)
                if not (out_dir / m.name).exists()
                or not filecmp.cmp(m, out_dir / m.name, shallow=False)
            ]
    if stale:
        print("stale generated protobuf modules (run `make protos`):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
