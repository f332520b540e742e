"""Build the C kernels with AddressSanitizer and UBSan and run tests against that build.

A kernel that reads or writes past a buffer usually survives a plain build unnoticed (the
bytes past it are mapped); under the sanitizers the first such access stops the run with
its stack, as does undefined behaviour (a pointer that overflows, a shift too far). The tests
(by default the kernels' own, hostile inputs included) import the sanitized module in place
of the installed one: a `sitecustomize` on PYTHONPATH loads it as `quiver.format._kernels`
before anything imports the package. Where gcc has no sanitizer runtimes, it says so and
passes.

    python scripts/sanitized_kernels.py [pytest arguments...]
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = [
    "tests/engine/file/test_v21_kernels.py",
    "tests/engine/file/test_v21_read.py",
    "tests/engine/file/test_v21_compression.py",
    "tests/engine/file/test_v21_steps.py",
    "tests/engine/file/test_take_items.py",
    "tests/engine/file/test_list_bytes.py",
    "tests/engine/index/test_split_words.py",
    "tests/engine/index/test_topk_kernels.py",
    "tests/engine/index/test_ngram.py",
]
SITE = """\
import importlib.machinery, importlib.util, os, sys

_path = os.environ["QUIVER_SANITIZED_KERNELS"]
_loader = importlib.machinery.ExtensionFileLoader("quiver.format._kernels", _path)
_spec = importlib.util.spec_from_file_location("quiver.format._kernels", _path, loader=_loader)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
sys.modules["quiver.format._kernels"] = _module
"""


def _runtime(name: str) -> str | None:
    """gcc's path to a sanitizer runtime library, or None where it has none."""
    found = subprocess.run(
        ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return found if os.path.isabs(found) and os.path.exists(found) else None


def build(out_dir: Path) -> Path:
    """The sanitized `_kernels` extension, compiled into `out_dir` with `sitecustomize.py`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"_kernels{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-O1",
            "-g",
            "-ffp-contract=off",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
            "-fno-omit-frame-pointer",
            f"-I{sysconfig.get_paths()['include']}",
            str(ROOT / "format" / "_kernels.c"),
            "-o",
            str(target),
        ],  # fmt: skip
        check=True,
    )
    (out_dir / "sitecustomize.py").write_text(SITE)
    return target


def main(argv: list[str]) -> int:
    runtimes = [_runtime("libasan.so"), _runtime("libubsan.so")]
    if None in runtimes:
        print("sanitized kernels: gcc has no AddressSanitizer / UBSan runtime here; skipped")
        return 0
    out_dir = ROOT / "build" / "sanitized"
    target = build(out_dir)
    env = {
        **os.environ,
        "QUIVER_SANITIZED_KERNELS": str(target),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(out_dir), os.environ.get("PYTHONPATH")])),
        "LD_PRELOAD": ":".join(runtimes),  # (the interpreter is not instrumented)
        "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    }
    check = "from quiver.format import _kernels; print(_kernels.__file__)"
    loaded = subprocess.run(
        [sys.executable, "-c", check], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    if Path(loaded) != target:
        print(f"sanitized kernels: {loaded} was imported instead of {target}")
        return 1
    args = argv or TESTS
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], env=env, cwd=ROOT
    ).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
