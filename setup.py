"""Build of the C and C++ helpers and the package layout; the rest is in pyproject.toml.

The repository keeps the design's top-level folders (`format/`, `flight_server/`,
`clients/`, `wire/`); an installed Quiver is one top-level package, `quiver`, in which each
folder is a subpackage (`quiver.format`, `quiver.flight_server`, ...), so installing Quiver
never claims generic names like `format` or `clients` in a user's environment.
"""

from setuptools import Extension, find_packages, setup

FOLDERS = ("format", "flight_server", "clients", "wire")

packages = ["quiver"]
package_dir = {"quiver": "quiver"}
for folder in FOLDERS:
    package_dir[f"quiver.{folder}"] = folder
    packages.append(f"quiver.{folder}")
    packages += [f"quiver.{folder}.{p}" for p in find_packages(where=folder)]

setup(
    packages=packages,
    package_dir=package_dir,
    ext_modules=[
        Extension(
            "quiver.format._kernels",
            ["format/_kernels.c"],
            # -O3 vectorises the unpacking and copy loops; no -march: wheels run on any x86_64
            # or aarch64; no fused multiply-adds, so float kernels round each step as numpy
            # does (BM25 weights equal pylance's to the bit).
            extra_compile_args=["-O3", "-ffp-contract=off"],
        ),
        # keeps gRPC threads' Python thread states across Flight calls (flight_server.metrics pins)
        Extension("quiver.flight_server._threadstate", ["flight_server/_threadstate.c"]),
        # sends handler errors with their own gRPC status (flight_server.grpc_status); needs no
        # Arrow header or library at build time
        Extension(
            "quiver.flight_server._grpcstatus",
            ["flight_server/_grpcstatus.cc"],
            language="c++",
            extra_compile_args=["-std=c++17", "-O2"],
            libraries=["dl"],
        ),
    ],
)
