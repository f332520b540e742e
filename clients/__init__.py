"""Clients of the Quiver Flight server (Python, Spark, Node.js); arriving with issues 4-5."""
