"""DuckDB's lance extension (duckdb-extension-lance 1.5.5, from PyPI) attached to Quiver's
REST namespace: CREATE TABLE, INSERT, SELECT, UPDATE, DELETE and SHOW ALL TABLES, checked
over Flight. The extension needs DuckDB 1.5.5, so it runs from the virtual environment
`make test` builds for it (`.venv-duckdb-lance`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from namespace_helpers import call, namespace_server

from quiver.clients import Client

ROOT = Path(__file__).resolve().parents[2]
DUCKDB_PYTHON = ROOT / ".venv-duckdb-lance" / "bin" / "python"

SCRIPT = """
import glob, json, sys
import duckdb
site = sys.prefix + "/lib/python3*/site-packages/duckdb_extension_lance"
ext = glob.glob(site + "/extensions/*/lance.duckdb_extension")[0]
def connect():
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.sql(f"LOAD '{ext}'")
    con.sql(f"ATTACH 'dd' AS l (TYPE LANCE, ENDPOINT '{sys.argv[1]}')")
    return con
out = {}
connect().sql("CREATE TABLE l.main.users(id INT, name VARCHAR)")
con = connect()  # the extension binds a table created in the same session with no columns
con.sql("INSERT INTO l.main.users VALUES (1, 'alice'), (2, 'bob'), (3, 'carol')")
out["inserted"] = con.sql("SELECT * FROM l.main.users ORDER BY id").fetchall()
con.sql("DELETE FROM l.main.users WHERE id = 2")
con.sql("UPDATE l.main.users SET name = 'z' WHERE id = 1")
out["changed"] = con.sql("SELECT * FROM l.main.users ORDER BY id").fetchall()
out["tables"] = [r[2] for r in con.sql("SHOW ALL TABLES").fetchall()]
print(json.dumps(out))
"""


@pytest.mark.skipif(
    not DUCKDB_PYTHON.exists(),
    reason="make test builds .venv-duckdb-lance for DuckDB's lance extension",
)
def test_duckdb_lance_extension(tmp_path: Path) -> None:
    with namespace_server(tmp_path / "root") as served:
        assert call(served.url, "POST", "/v1/namespace/dd/create", {}).status == 200
        done = subprocess.run(
            [str(DUCKDB_PYTHON), "-c", SCRIPT, served.url],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["inserted"] == [[1, "alice"], [2, "bob"], [3, "carol"]]
        assert out["changed"] == [[1, "z"], [3, "carol"]]
        assert out["tables"] == ["users"]
        # DuckDB's id for a table in a namespace is one part, "dd$users": the table still
        # lands in namespace dd, where Flight serves it as dataset dd/users
        with Client(served.flight) as client:
            got = client.read("dd/users").sort_by("id")
        assert got.to_pylist() == [{"id": 1, "name": "z"}, {"id": 3, "name": "carol"}]
        assert got.schema.field("id").type == pa.int32()
