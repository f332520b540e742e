"""Quiver's Arrow Flight server over the `format` engine (issue 4); for now, the CLI."""
