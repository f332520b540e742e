"""The generated protobuf modules match protos/*.proto (run `make protos` after editing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_code_is_fresh():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_wire_numbers_of_pylance_14_fields():
    from quiver.format.proto import table_pb2

    fields = table_pb2.Manifest.DESCRIPTOR.fields_by_name
    assert fields["transaction_section"].number == 23
    assert fields["transaction_section_deprecated"].number == 21
    assert fields["max_allocated_field_id"].number == 24
    assert table_pb2.DataFragment.DESCRIPTOR.fields_by_name["physical_rows"].number == 4
