"""Quiver's Lance format engine: read (and, later, write) Lance datasets in pure Python.

Import the public API from the submodules, e.g. ``from format.dataset import dataset``
(never ``import format`` bare, which would shadow the builtin).
"""
