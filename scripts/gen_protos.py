"""Generate the Python protobuf modules of `format/proto/` from `protos/*.proto`.

protoc emits top-level imports (``import file_pb2``); they are rewritten to package
imports so the generated code lives inside `quiver.format.proto`. ``--check`` regenerates into a
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
PROTO_DIR = ROOT / "protos"
OUT_DIR = ROOT / "format" / "proto"
_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


def generate(out_dir: Path) -> list[Path]:
    """Run protoc on every .proto file and return the generated module paths."""
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(PROTO_DIR.glob("*.proto"))
    args = ["protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={out_dir}"]
    if protoc.main(args + [str(p) for p in protos]) != 0:
        raise SystemExit("protoc failed")
    outputs = []
    for proto in protos:
        module = out_dir / f"{proto.stem}_pb2.py"
        text = _IMPORT.sub(r"from quiver.format.proto import \1 as \2", module.read_text())
        module.write_text(text)
        outputs.append(module)
    return outputs


def main() -> int:
    """Regenerate the modules, or with --check compare them with a fresh generation."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if generated code is stale")
    args = parser.parse_args()
    if not args.check:
        generate(OUT_DIR)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        stale = [
            m.name
            for m in generate(Path(tmp))
            if not (OUT_DIR / m.name).exists()
            or not filecmp.cmp(m, OUT_DIR / m.name, shallow=False)
        ]
    if stale:
        print("stale generated protobuf modules (run `make protos`):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
