"""`ServerConfig`: everything `quiver serve` takes, from flags or `QUIVER_*` variables.

A flag wins over its environment variable, which wins over the default:

| flag                        | environment                    | default       |
|-----------------------------|--------------------------------|---------------|
| --root                      | QUIVER_ROOT                    | ./data        |
| --host                      | QUIVER_HOST                    | 127.0.0.1     |
| --port                      | QUIVER_PORT                    | 8815          |
| --advertise URI (repeat)    | QUIVER_ADVERTISE (comma-sep.)  | grpc://host:port |
| --tls-cert / --tls-key      | QUIVER_TLS_CERT / _KEY         | none          |
| --tls-client-ca             | QUIVER_TLS_CLIENT_CA           | none          |
| --auth-file                 | QUIVER_AUTH_FILE               | none (no auth) |
| --token-ttl SECONDS         | QUIVER_TOKEN_TTL               | 3600          |
| --health-port PORT          | QUIVER_HEALTH_PORT             | none (no health port; 0: any) |
| --metrics-port PORT         | QUIVER_METRICS_PORT            | none (no metrics; 0: any) |
| --namespace-port PORT       | QUIVER_NAMESPACE_PORT          | none (no REST namespace; 0: any) |
| --namespace-max-body SIZE   | QUIVER_NAMESPACE_MAX_BODY      | 256MiB        |
| --managed-versioning        | QUIVER_MANAGED_VERSIONING      | off           |
| --vend-credentials MODE     | QUIVER_VEND_CREDENTIALS        | none (static, sts) |
| --vend-seconds SECONDS      | QUIVER_VEND_SECONDS            | 3600          |
| --vend-role-arn ARN         | QUIVER_VEND_ROLE_ARN           | none (sts: GetSessionToken) |
| --drain-seconds SECONDS     | QUIVER_DRAIN_SECONDS           | 30            |
| --max-rows-per-endpoint N   | QUIVER_MAX_ROWS_PER_ENDPOINT   | none (1 endpoint per fragment) |
| --batch-size N              | QUIVER_BATCH_SIZE              | 1048576 (and ~8 MiB) |
| --memory-budget SIZE        | QUIVER_MEMORY_BUDGET           | 104MiB (0: unlimited) |
| --sql-memory SIZE           | QUIVER_SQL_MEMORY              | 256MiB        |
| --spill-dir PATH            | QUIVER_SPILL_DIR               | the system's temporary directory |
| --ticket-ttl SECONDS        | QUIVER_TICKET_TTL              | 86400 (0: never expire) |
| --staged-ttl SECONDS        | QUIVER_STAGED_TTL              | 86400 (min 60) |
| --sweep-interval SECONDS    | QUIVER_SWEEP_INTERVAL          | 600 (0: no sweep) |
| --maintenance-interval SECONDS | QUIVER_MAINTENANCE_INTERVAL | 0 (off)       |
| --maintenance-fragments N   | QUIVER_MAINTENANCE_FRAGMENTS   | 16            |
| --ticket-key-file PATH      | QUIVER_TICKET_KEY_FILE         | none          |
| (environment only)          | QUIVER_TICKET_KEY              | random per process |
| (environment only)          | QUIVER_STORAGE_OPTIONS (JSON)  | {}            |
| --s3-endpoint-url URL       | QUIVER_S3_ENDPOINT_URL         | AWS's (or AWS_ENDPOINT_URL) |
| --log-level                 | QUIVER_LOG_LEVEL               | INFO          |

S3 credentials and region come from QUIVER_STORAGE_OPTIONS (s3fs's ``key``/``secret``/
``client_kwargs`` or Lance's ``aws_access_key_id``... names) or from the standard AWS_*
variables and profiles, which botocore reads itself. --s3-endpoint-url points ``s3://`` roots
at an S3-compatible server (MinIO, moto...).

--memory-budget caps the bytes all running DoGet streams and index builds hold together
(decoded batches and pages, as each stream estimates them; a build's sample, batch and
codes); one that does not fit waits for others to finish. SIZE is bytes, or a number with
a unit: KiB/MiB/GiB/TiB and the bare K/M/G/T (or Ki/Mi/Gi/Ti) are binary (1M = 1048576),
KB/MB/GB/TB are decimal (1MB = 1000000); case does not matter and an optional "B" may
follow.

--namespace-port serves the Lance REST Namespace (`flight_server.namespace`) over HTTP (HTTPS
with the TLS flags) on that port of --host, with the same auth file and rights. With
--managed-versioning, namespace clients (pylance) commit through Quiver's CreateTableVersion.
--vend-credentials hands clients of an S3 root credentials with their table locations:
`static` the server's own, `sts` temporary ones from STS lasting --vend-seconds.

--sql-memory caps what SQL queries (Flight SQL) hold together in their sorts, aggregations
and joins; beyond it they spill to files under --spill-dir.

Staged fragments (DoPut with commit=false) can be committed for --staged-ttl seconds; every
--sweep-interval the server removes the files of stagings that expired uncommitted.

With --maintenance-interval, every that many seconds each dataset under the root that has
--maintenance-fragments small fragments (under half a compacted fragment) or more is
compacted, and indices that miss fragments are brought up to date (`flight_server.
maintenance`); a round that loses to a concurrent commit leaves the dataset for the next.

The ticket key signs tickets and staged fragments; replicas behind one address must share
it. It is read from the environment or a file, never from a flag (flags show in `ps`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

DEFAULT_PORT = 8815
DEFAULT_TICKET_TTL = 24 * 3600
DEFAULT_TOKEN_TTL = 3600.0
DEFAULT_DRAIN_SECONDS = 30.0
# Most rows per DoGet batch. Batches are sized by bytes first (reads.BATCH_BYTES, ~8 MiB:
# small enough to stream in bounded memory); the row cap only matters for narrow rows, and
# a large one keeps per-step and per-message costs (planning, IPC framing, gRPC writes, a
# Spark task's per-batch handling) small for them too.
DEFAULT_BATCH_SIZE = 1 << 20
# What all DoGet streams together may hold (as the scanners estimate it). A stream of 8 MiB
# batches is accounted 25 MiB: three batches (one being sent, one queued, one being decoded)
# and 1 MiB of reading. 104 MiB admits four at once, enough to keep two cores busy (at 64 MiB
# the fourth of a client's four streams waited for another to finish, and a 2.0 full scan
# took 10-20 % longer), and not a fifth. The server idles at about 135 MB once warm (Python,
# pyarrow, gRPC, the C kernels); with four streams on top, 20 M rows streamed to four clients
# peak at ~290 MB (gRPC buffers, mapped file pages being sent and the allocator's slack come
# on top of the estimate), so a 512 MB container has room to spare.
DEFAULT_MEMORY_BUDGET = 104 * 1024 * 1024
DEFAULT_SQL_MEMORY = 256 * 1024 * 1024
MIN_SQL_MEMORY = 64 * 1024 * 1024  # below this, a sort of one scan step may not fit
DEFAULT_STAGED_TTL = 24 * 3600
DEFAULT_NAMESPACE_MAX_BODY = 256 * 1024 * 1024
DEFAULT_VEND_SECONDS = 3600
VEND_MODES = ("none", "static", "sts")
DEFAULT_SWEEP_INTERVAL = 600
DEFAULT_MAINTENANCE_FRAGMENTS = 16
MIN_STAGED_TTL = 60
_SCHEMES = ("grpc", "grpc+tcp", "grpc+tls")
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    **{f"{p}{s}": 1024 ** (i + 1) for i, p in enumerate("kmgt") for s in ("", "i", "ib")},
    **{f"{p}b": 1000 ** (i + 1) for i, p in enumerate("kmgt")},
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)


class ConfigError(ValueError):
    """A flag or variable has an unusable value; the message is one line for the user."""


def parse_size(text: str) -> int:
    """Bytes in a size such as ``1048576``, ``96MiB``, ``512MB`` or ``1.5G`` (see the module
    doc for the units); ValueError for anything else."""
    found = _SIZE.fullmatch(text)
    unit = _SIZE_UNITS.get(found.group(2).lower()) if found else None
    if found is None or unit is None:
        raise ValueError(f"not a size: {text!r}")
    return int(Fraction(found.group(1)) * unit)


def _host_in_uri(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass
class ServerConfig:
    """How to run one Quiver server process."""

    root: str = "./data"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    advertise: tuple[str, ...] = ()
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    auth_file: str | None = None
    token_ttl: float = DEFAULT_TOKEN_TTL
    health_port: int | None = None
    metrics_port: int | None = None
    namespace_port: int | None = None
    namespace_max_body: int = DEFAULT_NAMESPACE_MAX_BODY
    managed_versioning: bool = False
    vend_credentials: str = "none"
    vend_seconds: int = DEFAULT_VEND_SECONDS
    vend_role_arn: str | None = None
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    max_rows_per_endpoint: int | None = None
    batch_size: int | None = DEFAULT_BATCH_SIZE
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    sql_memory: int = DEFAULT_SQL_MEMORY
    spill_dir: str | None = None
    ticket_ttl: int = DEFAULT_TICKET_TTL
    staged_ttl: int = DEFAULT_STAGED_TTL
    sweep_interval: int = DEFAULT_SWEEP_INTERVAL
    maintenance_interval: int = 0
    maintenance_fragments: int = DEFAULT_MAINTENANCE_FRAGMENTS
    ticket_key: bytes | None = field(default=None, repr=False)
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        self.validate()

    # -- derived ------------------------------------------------------------------------
    @property
    def tls(self) -> bool:
        """Whether the server listens with TLS."""
        return bool(self.tls_cert)

    @property
    def scheme(self) -> str:
        """``grpc+tls`` with TLS, ``grpc`` otherwise."""
        return "grpc+tls" if self.tls else "grpc"

    def bind_location(self) -> str:
        """The URI the server binds to."""
        return f"{self.scheme}://{_host_in_uri(self.host)}:{self.port}"

    def advertised(self, port: int | None = None) -> list[str]:
        """The URIs endpoints name: --advertise, else this host and the bound port."""
        if self.advertise:
            return list(self.advertise)
        host = self.host
        if host in ("0.0.0.0", "::", "[::]", ""):
            import socket

            host = socket.gethostname()
        return [f"{self.scheme}://{_host_in_uri(host)}:{port if port is not None else self.port}"]

    # -- checks -------------------------------------------------------------------------
    def validate(self) -> None:
        """Refuse inconsistent settings with a one-line ConfigError."""
        if not str(self.root).strip():
            raise ConfigError("--root is empty")
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be 0..65535, not {self.port!r}")
        if not self.host:
            raise ConfigError("--host is empty")
        for uri in self.advertise:
            scheme = uri.split("://", 1)[0] if "://" in uri else ""
            if scheme not in _SCHEMES or not uri.split("://", 1)[1]:
                raise ConfigError(
                    f"--advertise {uri!r}: expected grpc://, grpc+tcp:// or grpc+tls://host:port"
                )
            if self.tls and scheme != "grpc+tls":
                raise ConfigError(f"--advertise {uri!r}: a TLS server must advertise grpc+tls://")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("--tls-cert and --tls-key go together")
        if self.tls_client_ca and not self.tls:
            raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key")
        if not isinstance(self.token_ttl, (int, float)) or not self.token_ttl > 0:
            raise ConfigError(f"--token-ttl must be > 0 seconds, not {self.token_ttl!r}")
        if self.health_port is not None and (
            not isinstance(self.health_port, int) or not 0 <= self.health_port <= 65535
        ):
            raise ConfigError(f"--health-port must be 0..65535, not {self.health_port!r}")
        if self.metrics_port is not None and (
            not isinstance(self.metrics_port, int) or not 0 <= self.metrics_port <= 65535
        ):
            raise ConfigError(f"--metrics-port must be 0..65535, not {self.metrics_port!r}")
        if self.namespace_port is not None and (
            not isinstance(self.namespace_port, int) or not 0 <= self.namespace_port <= 65535
        ):
            raise ConfigError(f"--namespace-port must be 0..65535, not {self.namespace_port!r}")
        if not isinstance(self.namespace_max_body, int) or self.namespace_max_body < 1024:
            raise ConfigError(
                f"--namespace-max-body must be >= 1024 bytes, not {self.namespace_max_body!r}"
            )
        if self.vend_credentials not in VEND_MODES:
            raise ConfigError(
                f"--vend-credentials must be one of {', '.join(VEND_MODES)}, "
                f"not {self.vend_credentials!r}"
            )
        if not isinstance(self.vend_seconds, int) or not 900 <= self.vend_seconds <= 43200:
            raise ConfigError(
                f"--vend-seconds must be 900..43200 (STS's limits), not {self.vend_seconds!r}"
            )
        if not isinstance(self.drain_seconds, (int, float)) or self.drain_seconds < 0:
            raise ConfigError(f"--drain-seconds must be >= 0, not {self.drain_seconds!r}")
        for name in ("max_rows_per_endpoint", "batch_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} must be a positive integer, not {value!r}")
        budget = self.memory_budget
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ConfigError(f"--memory-budget must be >= 0 bytes (0: unlimited), not {budget!r}")
        sql_memory = self.sql_memory
        if (
            isinstance(sql_memory, bool)
            or not isinstance(sql_memory, int)
            or sql_memory < MIN_SQL_MEMORY
        ):
            raise ConfigError(f"--sql-memory must be >= {MIN_SQL_MEMORY} bytes, not {sql_memory!r}")
        if not isinstance(self.ticket_ttl, int) or self.ticket_ttl < 0:
            raise ConfigError(f"--ticket-ttl must be >= 0 seconds, not {self.ticket_ttl!r}")
        if not isinstance(self.staged_ttl, int) or self.staged_ttl < MIN_STAGED_TTL:
            raise ConfigError(
                f"--staged-ttl must be >= {MIN_STAGED_TTL} seconds, not {self.staged_ttl!r}"
            )
        if not isinstance(self.sweep_interval, int) or self.sweep_interval < 0:
            raise ConfigError(f"--sweep-interval must be >= 0 seconds, not {self.sweep_interval!r}")
        if not isinstance(self.maintenance_interval, int) or self.maintenance_interval < 0:
            raise ConfigError(
                f"--maintenance-interval must be >= 0 seconds, not {self.maintenance_interval!r}"
            )
        if not isinstance(self.maintenance_fragments, int) or self.maintenance_fragments < 2:
            raise ConfigError(
                f"--maintenance-fragments must be >= 2, not {self.maintenance_fragments!r}"
            )
        if self.ticket_key is not None and len(self.ticket_key) < 16:
            raise ConfigError("the ticket key (QUIVER_TICKET_KEY) needs at least 16 bytes")
        if not isinstance(self.storage_options, dict):
            raise ConfigError("QUIVER_STORAGE_OPTIONS must be a JSON object")

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_args(
        cls, argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
    ) -> ServerConfig:
        """Parse `quiver serve` flags (without the subcommand) over the environment."""
        parser = argparse.ArgumentParser(prog="quiver serve")
        add_serve_arguments(parser)
        return cls.from_namespace(parser.parse_args(argv), env)

    @classmethod
    def from_namespace(
        cls, ns: argparse.Namespace, env: Mapping[str, str] | None = None
    ) -> ServerConfig:
        """Combine parsed flags (None = not given) with `QUIVER_*` variables and defaults."""
        env = os.environ if env is None else env

        def pick(attr: str, var: str) -> str | None:
            value = getattr(ns, attr, None)
            if value is not None:
                return value
            value = env.get(var)
            return value if value not in (None, "") else None

        def integer(attr: str, var: str, default: int | None) -> int | None:
            value = pick(attr, var)
            if value is None:
                return default
            try:
                return int(value)
            except (TypeError, ValueError):
                flag = "--" + attr.replace("_", "-")
                raise ConfigError(f"{flag} / {var} must be an integer, not {value!r}") from None

        def number(attr: str, var: str, default: float) -> float:
            value = pick(attr, var)
            if value is None:
                return default
            try:
                return float(value)
            except (TypeError, ValueError):
                flag = "--" + attr.replace("_", "-")
                raise ConfigError(f"{flag} / {var} must be a number, not {value!r}") from None

        def size(attr: str, var: str, default: int) -> int:
            value = pick(attr, var)
            if value is None:
                return default
            try:
                return parse_size(str(value))
            except ValueError:
                flag = "--" + attr.replace("_", "-")
                raise ConfigError(
                    f"{flag} / {var} must be a size in bytes such as 100663296, 96MiB or 1GB, "
                    f"not {value!r}"
                ) from None

        advertise: list[str] = list(getattr(ns, "advertise", None) or [])
        if not advertise and env.get("QUIVER_ADVERTISE"):
            advertise = [u.strip() for u in env["QUIVER_ADVERTISE"].split(",") if u.strip()]
        key: bytes | None = None
        key_file = pick("ticket_key_file", "QUIVER_TICKET_KEY_FILE")
        if key_file:
            try:
                with open(key_file, "rb") as f:
                    key = f.read().strip()
            except OSError as e:
                raise ConfigError(f"cannot read the ticket key file: {e.strerror}") from None
        elif env.get("QUIVER_TICKET_KEY"):
            key = env["QUIVER_TICKET_KEY"].encode("utf-8")
        options: dict[str, Any] = {}
        if env.get("QUIVER_STORAGE_OPTIONS"):
            try:
                options = json.loads(env["QUIVER_STORAGE_OPTIONS"])
            except ValueError:
                raise ConfigError("QUIVER_STORAGE_OPTIONS is not valid JSON") from None
        endpoint = pick("s3_endpoint_url", "QUIVER_S3_ENDPOINT_URL")
        if endpoint and isinstance(options, dict):
            options = dict(options)
            client_kwargs = dict(options.get("client_kwargs") or {})
            client_kwargs["endpoint_url"] = endpoint
            options["client_kwargs"] = client_kwargs
            options.pop("endpoint_url", None)
        return cls(
            root=pick("root", "QUIVER_ROOT") or "./data",
            host=pick("host", "QUIVER_HOST") or "127.0.0.1",
            port=integer("port", "QUIVER_PORT", DEFAULT_PORT),  # type: ignore[arg-type]
            advertise=tuple(advertise),
            tls_cert=pick("tls_cert", "QUIVER_TLS_CERT"),
            tls_key=pick("tls_key", "QUIVER_TLS_KEY"),
            tls_client_ca=pick("tls_client_ca", "QUIVER_TLS_CLIENT_CA"),
            auth_file=pick("auth_file", "QUIVER_AUTH_FILE"),
            token_ttl=number("token_ttl", "QUIVER_TOKEN_TTL", DEFAULT_TOKEN_TTL),
            health_port=integer("health_port", "QUIVER_HEALTH_PORT", None),
            metrics_port=integer("metrics_port", "QUIVER_METRICS_PORT", None),
            namespace_port=integer("namespace_port", "QUIVER_NAMESPACE_PORT", None),
            namespace_max_body=size(
                "namespace_max_body", "QUIVER_NAMESPACE_MAX_BODY", DEFAULT_NAMESPACE_MAX_BODY
            ),
            managed_versioning=bool(getattr(ns, "managed_versioning", False))
            or (env.get("QUIVER_MANAGED_VERSIONING") or "").lower() in ("1", "true", "yes"),
            vend_credentials=(pick("vend_credentials", "QUIVER_VEND_CREDENTIALS") or "none"),
            vend_seconds=integer(  # type: ignore[arg-type]
                "vend_seconds", "QUIVER_VEND_SECONDS", DEFAULT_VEND_SECONDS
            ),
            vend_role_arn=pick("vend_role_arn", "QUIVER_VEND_ROLE_ARN"),
            drain_seconds=number("drain_seconds", "QUIVER_DRAIN_SECONDS", DEFAULT_DRAIN_SECONDS),
            max_rows_per_endpoint=integer(
                "max_rows_per_endpoint", "QUIVER_MAX_ROWS_PER_ENDPOINT", None
            ),
            batch_size=integer("batch_size", "QUIVER_BATCH_SIZE", DEFAULT_BATCH_SIZE),
            memory_budget=size("memory_budget", "QUIVER_MEMORY_BUDGET", DEFAULT_MEMORY_BUDGET),
            sql_memory=size("sql_memory", "QUIVER_SQL_MEMORY", DEFAULT_SQL_MEMORY),
            spill_dir=pick("spill_dir", "QUIVER_SPILL_DIR"),
            ticket_ttl=integer(  # type: ignore[arg-type]
                "ticket_ttl", "QUIVER_TICKET_TTL", DEFAULT_TICKET_TTL
            ),
            staged_ttl=integer(  # type: ignore[arg-type]
                "staged_ttl", "QUIVER_STAGED_TTL", DEFAULT_STAGED_TTL
            ),
            sweep_interval=integer(  # type: ignore[arg-type]
                "sweep_interval", "QUIVER_SWEEP_INTERVAL", DEFAULT_SWEEP_INTERVAL
            ),
            maintenance_interval=integer(  # type: ignore[arg-type]
                "maintenance_interval", "QUIVER_MAINTENANCE_INTERVAL", 0
            ),
            maintenance_fragments=integer(  # type: ignore[arg-type]
                "maintenance_fragments",
                "QUIVER_MAINTENANCE_FRAGMENTS",
                DEFAULT_MAINTENANCE_FRAGMENTS,
            ),
            ticket_key=key,
            storage_options=options,
            log_level=(pick("log_level", "QUIVER_LOG_LEVEL") or "INFO").upper(),
        )


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `quiver serve` (defaults are None so the environment can fill them)."""
    a = parser.add_argument
    a(
        "--root",
        help="storage root: a directory, memory://... or s3://bucket/prefix "
        "(env QUIVER_ROOT, default ./data)",
    )
    a("--host", help="address to bind (env QUIVER_HOST, default 127.0.0.1)")
    a("--port", help="port to bind, 0 for any (env QUIVER_PORT, default 8815)")
    a(
        "--advertise",
        action="append",
        metavar="URI",
        help="URI clients use to reach this server, put in every endpoint; repeat for replicas "
        "(env QUIVER_ADVERTISE, comma-separated; default grpc://HOST:PORT)",
    )
    a("--tls-cert", help="PEM certificate chain for TLS (env QUIVER_TLS_CERT)")
    a("--tls-key", help="PEM private key for TLS (env QUIVER_TLS_KEY)")
    a(
        "--tls-client-ca",
        help="PEM CA bundle: require client certificates signed by it "
        "(mutual TLS; env QUIVER_TLS_CLIENT_CA)",
    )
    a(
        "--auth-file",
        help="JSON file of users, password hashes and per-dataset read/write rights; "
        "enables Basic -> Bearer authentication (env QUIVER_AUTH_FILE; default: no auth)",
    )
    a(
        "--token-ttl",
        metavar="SECONDS",
        help="lifetime of the bearer tokens handed out for Basic credentials "
        "(env QUIVER_TOKEN_TTL, default 3600)",
    )
    a(
        "--health-port",
        metavar="PORT",
        help="serve grpc.health.v1 on this port of --host, 0 for any "
        "(env QUIVER_HEALTH_PORT; default: none)",
    )
    a(
        "--metrics-port",
        metavar="PORT",
        help="serve Prometheus metrics over HTTP on this port of --host, 0 for any "
        "(env QUIVER_METRICS_PORT; default: none)",
    )
    a(
        "--namespace-port",
        metavar="PORT",
        help="serve the Lance REST Namespace over HTTP on this port of --host, 0 for any "
        "(env QUIVER_NAMESPACE_PORT; default: none)",
    )
    a(
        "--namespace-max-body",
        metavar="SIZE",
        help="largest namespace request body, e.g. an Arrow stream to insert "
        "(env QUIVER_NAMESPACE_MAX_BODY, default 256MiB)",
    )
    a(
        "--managed-versioning",
        action="store_true",
        default=None,
        help="namespace clients commit new versions through Quiver (CreateTableVersion) "
        "(env QUIVER_MANAGED_VERSIONING=1)",
    )
    a(
        "--vend-credentials",
        metavar="MODE",
        help="credentials handed to namespace clients of an S3 root: none, static (the "
        "server's) or sts (temporary) (env QUIVER_VEND_CREDENTIALS, default none)",
    )
    a(
        "--vend-seconds",
        metavar="SECONDS",
        help="lifetime of vended credentials (env QUIVER_VEND_SECONDS, default 3600)",
    )
    a(
        "--vend-role-arn",
        metavar="ARN",
        help="with --vend-credentials sts: the role to assume (env QUIVER_VEND_ROLE_ARN; "
        "default: GetSessionToken)",
    )
    a(
        "--drain-seconds",
        metavar="SECONDS",
        help="on SIGTERM, how long running calls may finish before shutdown "
        "(env QUIVER_DRAIN_SECONDS, default 30)",
    )
    a(
        "--max-rows-per-endpoint",
        metavar="N",
        help="split fragments with more rows into row-range endpoints "
        "(env QUIVER_MAX_ROWS_PER_ENDPOINT; default: one endpoint per fragment)",
    )
    a(
        "--batch-size",
        metavar="N",
        help="most rows per streamed batch, which also holds about 8 MiB at most "
        "(env QUIVER_BATCH_SIZE, default 1048576)",
    )
    a(
        "--memory-budget",
        metavar="SIZE",
        help="bytes all running DoGet streams may hold together; streams beyond it wait "
        "their turn. Bytes or e.g. 96MiB, 512MB, 1G (K/M/G binary, KB/MB/GB decimal) "
        "(env QUIVER_MEMORY_BUDGET, default 104MiB; 0: unlimited)",
    )
    a(
        "--sql-memory",
        metavar="SIZE",
        help="bytes SQL queries may hold together in sorts, aggregations and joins before "
        "they spill to disk (env QUIVER_SQL_MEMORY, default 256MiB)",
    )
    a(
        "--spill-dir",
        metavar="PATH",
        help="where SQL queries spill (env QUIVER_SPILL_DIR, default the system's temporary "
        "directory)",
    )
    a(
        "--ticket-ttl",
        metavar="SECONDS",
        help="how long tickets stay redeemable (env QUIVER_TICKET_TTL, default 86400; 0: forever)",
    )
    a(
        "--staged-ttl",
        metavar="SECONDS",
        help="how long staged fragments (DoPut commit=false) stay committable; the sweep "
        "removes expired ones' files (env QUIVER_STAGED_TTL, default 86400)",
    )
    a(
        "--sweep-interval",
        metavar="SECONDS",
        help="how often to remove the files of expired, uncommitted stagings "
        "(env QUIVER_SWEEP_INTERVAL, default 600; 0: never)",
    )
    a(
        "--maintenance-interval",
        metavar="SECONDS",
        help="how often to compact datasets with many small fragments and bring their "
        "indices up to date (env QUIVER_MAINTENANCE_INTERVAL, default 0: never)",
    )
    a(
        "--maintenance-fragments",
        metavar="N",
        help="small fragments a dataset has before maintenance compacts it "
        "(env QUIVER_MAINTENANCE_FRAGMENTS, default 16)",
    )
    a(
        "--ticket-key-file",
        metavar="PATH",
        help="file holding the key that signs tickets, shared by replicas "
        "(env QUIVER_TICKET_KEY_FILE, or the key itself in QUIVER_TICKET_KEY)",
    )
    a(
        "--s3-endpoint-url",
        metavar="URL",
        help="endpoint of an S3-compatible server for s3:// roots "
        "(env QUIVER_S3_ENDPOINT_URL; default: AWS, or AWS_ENDPOINT_URL)",
    )
    a("--log-level", help="DEBUG, INFO, WARNING... (env QUIVER_LOG_LEVEL, default INFO)")
