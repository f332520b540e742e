"""Reading the deployment files: Dockerfile instructions, the Docker build context."""

from __future__ import annotations

import fnmatch
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


@dataclass
class Stage:
    """One FROM ... AS name stage: its base and its instructions (keyword, argument text)."""

    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [text for kw, text in self.instructions if kw == keyword]


def dockerfile_stages(path: Path = REPO / "Dockerfile") -> list[Stage]:
    """The stages of a Dockerfile, continuation lines joined, comments dropped."""
    logical: list[str] = []
    current = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1].strip() + " "
            continue
        logical.append(current + line)
        current = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name, parts[0]))
        elif stages:
            stages[-1].instructions.append((keyword, rest.strip()))
    return stages


def dockerignore_patterns(path: Path = REPO / ".dockerignore") -> list[str]:
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line.lstrip("/") for line in lines if line and not line.startswith("#")]


def ignored(relative: str, patterns: list[str]) -> bool:
    """Whether the build context leaves out `relative` (a path or one of its parents matches
    a pattern; `**/` matches at any depth), as .dockerignore's rules do for these patterns."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        for prefix in prefixes:
            if fnmatch.fnmatchcase(prefix, pattern):
                return True
            last = prefix.split("/")[-1]
            if pattern.startswith("**/") and fnmatch.fnmatchcase(last, pattern[3:]):
                return True
    return False


def copy_build_context(dest: Path) -> list[str]:
    """Copy the checkout into `dest` as `docker build .` sends it (less .dockerignore's
    patterns); returns the relative paths copied."""
    patterns = dockerignore_patterns()
    copied: list[str] = []
    for top, dirs, files in os.walk(REPO):
        rel_top = os.path.relpath(top, REPO)
        rel_top = "" if rel_top == "." else rel_top + "/"
        dirs[:] = [d for d in dirs if not ignored(rel_top + d, patterns)]
        for name in files:
            rel = rel_top + name
            if ignored(rel, patterns):
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, target)
            copied.append(rel)
    return copied
