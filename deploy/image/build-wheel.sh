#!/bin/sh
# Build Quiver's wheel from the source tree $1 into the directory $2, compiling the C and
# C++ extensions (format/_kernels.c, flight_server/_threadstate.c,
# flight_server/_grpcstatus.cc: needs gcc, g++ and the Python headers). The Dockerfile's build stage runs this script, and so does
# tests/deploy/test_image.py: what the image gets is what CI checks.
set -eu
src="$1"
out="$2"
"${PYTHON:-python3}" -m pip wheel --no-cache-dir --no-deps --wheel-dir "$out" "$src"
