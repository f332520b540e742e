"""MkDocs hooks: the parts of the docs generated from the code, so they cannot drift.

- `<!-- generated: actions -->`: every DoAction as the server lists it, from the wire
  contract (`wire.requests.ACTION_SHAPES`); the build fails when the page's own table of
  bodies and results misses an action.
- `<!-- generated: serve-help -->`: `quiver serve --help`, from the CLI's parser;
- `<!-- generated: quiver-help -->`: `quiver --help` and each command's for people.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from typing import Any

ACTIONS = "<!-- generated: actions -->"
SERVE_HELP = "<!-- generated: serve-help -->"
QUIVER_HELP = "<!-- generated: quiver-help -->"


def _actions(markdown: str) -> str:
    from quiver.wire.requests import ACTION_SHAPES

    missing = [a.name for a in ACTION_SHAPES if f"`{a.name}`" not in markdown.split(ACTIONS)[0]]
    if missing:
        raise ValueError(f"the actions table above {ACTIONS} misses {', '.join(missing)}")
    rows = ["| action | right | what ListActions says |", "|---|---|---|"]
    for a in ACTION_SHAPES:
        summary = a.summary.replace("|", "\\|")
        rows.append(f"| `{a.name}` | {a.right or 'none'} | {summary} |")
    return "\n".join(rows)


def _help(parser: Any, argv: list[str]) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        try:
            parser.parse_args(argv)
        except SystemExit:
            pass
    return f"```text\n{out.getvalue().rstrip()}\n```"


def _serve_help() -> str:
    from quiver.flight_server.cli import build_parser

    return _help(build_parser(), ["serve", "--help"])


def _quiver_help() -> str:
    from quiver.cli import PEOPLE, build_parser

    parts = [_help(build_parser(), ["--help"])]
    parts += [f"`quiver {c}`\n\n" + _help(build_parser(), [c, "--help"]) for c in PEOPLE]
    return "\n\n".join(parts)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill the generated parts of a page."""
    if ACTIONS in markdown:
        markdown = markdown.replace(ACTIONS, _actions(markdown))
    if SERVE_HELP in markdown:
        markdown = markdown.replace(SERVE_HELP, _serve_help())
    if QUIVER_HELP in markdown:
        markdown = markdown.replace(QUIVER_HELP, _quiver_help())
    return markdown
