"""TLS and mutual TLS with throwaway certificates (flight_server.tls, pyarrow.flight)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from tls_certs import TlsMaterial, make_tls_material

from quiver.flight_server.tls import TlsConfigError, load_tls


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


class TinyServer(flight.FlightServerBase):
    def do_get(self, context, ticket):
        return flight.RecordBatchStream(pa.table({"x": [1, 2, 3]}))


def _read(client: flight.FlightClient) -> int:
    return client.do_get(flight.Ticket(b"t")).read_all().num_rows


def test_load_tls_validates_combinations(certs, tmp_path) -> None:
    assert load_tls(None, None) is None
    with pytest.raises(TlsConfigError, match="go together"):
        load_tls(certs.server_cert, None)
    with pytest.raises(TlsConfigError, match="needs --tls-cert"):
        load_tls(None, None, certs.ca_cert)
    with pytest.raises(TlsConfigError, match="cannot read"):
        load_tls(tmp_path / "nope.crt", certs.server_key)
    with pytest.raises(TlsConfigError, match="not a PEM"):
        load_tls(certs.server_key, certs.server_key)
    files = load_tls(certs.server_cert, certs.server_key)
    assert not files.mutual and "verify_client" not in files.server_kwargs()
    mutual = load_tls(certs.server_cert, certs.server_key, certs.ca_cert)
    kwargs = mutual.server_kwargs()
    assert mutual.mutual and kwargs["verify_client"] is True
    assert kwargs["root_certificates"] == certs.read("ca_cert")


def test_tls(certs) -> None:
    files = load_tls(certs.server_cert, certs.server_key)
    with TinyServer(("127.0.0.1", 0), **files.server_kwargs()) as server:
        uri = f"grpc+tls://127.0.0.1:{server.port}"
        assert _read(flight.connect(uri, tls_root_certs=certs.read("ca_cert"))) == 3
        assert (
            _read(
                flight.connect(
                    f"grpc+tls://localhost:{server.port}", tls_root_certs=certs.read("ca_cert")
                )
            )
            == 3
        )
        # A client that does not trust the CA is refused.
        with pytest.raises(flight.FlightUnavailableError):
            _read(flight.connect(uri, tls_root_certs=certs.read("other_ca_cert")))
        # A plaintext client cannot talk to it.
        with pytest.raises(flight.FlightUnavailableError):
            flight.connect(f"grpc://127.0.0.1:{server.port}").wait_for_available(timeout=2)


def test_mutual_tls(certs) -> None:
    files = load_tls(certs.server_cert, certs.server_key, certs.ca_cert)
    with TinyServer(("127.0.0.1", 0), **files.server_kwargs()) as server:
        uri = f"grpc+tls://127.0.0.1:{server.port}"
        ca = certs.read("ca_cert")
        good = flight.connect(
            uri,
            tls_root_certs=ca,
            cert_chain=certs.read("client_cert"),
            private_key=certs.read("client_key"),
        )
        assert _read(good) == 3
        with pytest.raises(flight.FlightUnavailableError):
            _read(flight.connect(uri, tls_root_certs=ca))  # no client certificate
        other = flight.connect(
            uri,
            tls_root_certs=ca,
            cert_chain=certs.read("other_client_cert"),
            private_key=certs.read("other_client_key"),
        )
        with pytest.raises(flight.FlightUnavailableError):
            _read(other)  # a certificate from another CA
