"""TLS and mutual TLS for the Flight server, from PEM files.

- ``--tls-cert`` + ``--tls-key``: the server's certificate chain and private key; the server
  listens on ``grpc+tls://`` and advertises ``grpc+tls://`` locations.
- ``--tls-client-ca``: mutual TLS: every client must present a certificate signed by this
  CA bundle (pyarrow client: ``cert_chain=``, ``private_key=``); others are refused during
  the TLS handshake.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

__all__ = ["TlsConfigError", "TlsFiles", "load_tls"]


class TlsConfigError(ValueError):
    """TLS flags that do not fit together, or a file that cannot be read."""


@dataclass(frozen=True)
class TlsFiles:
    cert: bytes
    key: bytes
    client_ca: bytes | None = None

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None

    def server_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``FlightServerBase.__init__``."""
        kwargs: dict[str, Any] = {"tls_certificates": [(self.cert, self.key)]}
        if self.client_ca is not None:
            kwargs["verify_client"] = True
            kwargs["root_certificates"] = self.client_ca
        return kwargs


def _read_pem(path: str | os.PathLike[str], flag: str, marker: bytes) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TlsConfigError(f"{flag}: cannot read {os.fspath(path)!r}: {e.strerror}") from None
    if marker not in data:
        raise TlsConfigError(f"{flag}: {os.fspath(path)!r} is not a PEM file")
    return data


def load_tls(
    cert: str | os.PathLike[str] | None,
    key: str | os.PathLike[str] | None,
    client_ca: str | os.PathLike[str] | None = None,
) -> TlsFiles | None:
    """Read the TLS files; None when TLS is off. Refuses incomplete combinations."""
    if not cert and not key:
        if client_ca:
            raise TlsConfigError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if not cert or not key:
        raise TlsConfigError("--tls-cert and --tls-key go together")
    return TlsFiles(
        cert=_read_pem(cert, "--tls-cert", b"-----BEGIN CERTIFICATE-----"),
        key=_read_pem(key, "--tls-key", b"PRIVATE KEY-----"),
        client_ca=(
            _read_pem(client_ca, "--tls-client-ca", b"-----BEGIN CERTIFICATE-----")
            if client_ca
            else None
        ),
    )
