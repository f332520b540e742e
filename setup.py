"""Build of the C kernels; everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "format._kernels",
            ["format/_kernels.c"],
            # -O3 vectorises the unpacking and copy loops; no -march: wheels run on any x86_64
            # or aarch64.
            extra_compile_args=["-O3"],
        ),
        # keeps gRPC threads' Python thread states across Flight calls (flight_server.metrics pins)
        Extension("flight_server._threadstate", ["flight_server/_threadstate.c"]),
        # sends handler errors with their own gRPC status (flight_server.grpc_status); needs no
        # Arrow header or library at build time
        Extension(
            "flight_server._grpcstatus",
            ["flight_server/_grpcstatus.cc"],
            language="c++",
            extra_compile_args=["-std=c++17", "-O2"],
            libraries=["dl"],
        ),
    ]
)
