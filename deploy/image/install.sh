#!/bin/sh
# Install the Quiver wheel found in directory $1 into a new virtual environment $2, with its
# dependencies from the package index (binary wheels: no compiler needed). The Dockerfile's
# final stages run this script, and so does tests/deploy/test_image.py.
set -eu
wheels="$1"
venv="$2"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install --no-cache-dir --no-input --only-binary=:all: "$wheels"/quiver_lance-*.whl
