"""Where namespace clients find a table's files, and the storage options they need.

pylance, lancedb, DuckDB and lance-spark open the ``location`` DescribeTable and DeclareTable
answer and read and write the files themselves, with the ``storage_options`` of the answer
merged over their own. On a local root the location is the dataset's path and no options are
needed. On an S3 root it is ``s3://bucket/prefix/name.lance``, and the options say how to
reach the bucket (``aws_endpoint``, ``aws_region``, ``allow_http``) and, when the server is
configured to vend credentials (``--vend-credentials``), with what:

- ``static``: the server's own S3 credentials (its storage options, else what botocore
  finds: environment, profile, instance role);
- ``sts``: temporary credentials from STS (``AssumeRole`` of ``--vend-role-arn``, else
  ``GetSessionToken``) lasting ``--vend-seconds``.

Vended options carry ``expires_at_millis``: pylance asks DescribeTable again for fresh ones
before then. Without vending, clients bring their own credentials.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from quiver.flight_server.names import dataset_uri

VEND_MODES = ("none", "static", "sts")
DEFAULT_VEND_SECONDS = 3600
MIN_VEND_SECONDS = 900  # STS's shortest session
_REFRESH_MARGIN = 0.2  # STS credentials are renewed once 80 % of their life has passed


def _first(options: dict[str, Any], *keys: str) -> Any:
    lowered = {k.lower(): v for k, v in options.items()}
    for key in keys:
        if lowered.get(key) not in (None, ""):
            return lowered[key]
    return None


class Locations:
    """Locations and storage options of the datasets under one root."""

    def __init__(
        self,
        root: str,
        storage_options: dict[str, Any] | None = None,
        *,
        vend: str = "none",
        vend_seconds: int = DEFAULT_VEND_SECONDS,
        role_arn: str | None = None,
    ) -> None:
        if vend not in VEND_MODES:
            raise ValueError(f"--vend-credentials must be one of {', '.join(VEND_MODES)}")
        self.root = root
        self.options = dict(storage_options or {})
        self.s3 = root.split("://", 1)[0].lower() in ("s3", "s3a") if "://" in root else False
        self.vend = vend if self.s3 else "none"
        self.vend_seconds = vend_seconds
        self.role_arn = role_arn
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, str]] | None = None

    def location(self, name: str) -> str:
        """Where dataset `name`'s files are, as clients open them."""
        uri = dataset_uri(self.root, name)
        if uri.startswith("s3a://"):
            uri = "s3://" + uri[len("s3a://") :]
        return uri

    def storage_options(self) -> dict[str, str] | None:
        """The options a client needs to open the locations (None: none)."""
        if not self.s3:
            return None
        out: dict[str, str] = {}
        client_kwargs = self.options.get("client_kwargs") or {}
        endpoint = client_kwargs.get("endpoint_url") or _first(
            self.options, "endpoint_url", "aws_endpoint", "aws_endpoint_url", "endpoint"
        )
        if endpoint:
            out["aws_endpoint"] = str(endpoint)
            if str(endpoint).startswith("http://"):
                out["allow_http"] = "true"
        region = client_kwargs.get("region_name") or _first(
            self.options, "aws_region", "region", "region_name", "aws_default_region"
        )
        if region:
            out["aws_region"] = str(region)
        if self.vend != "none":
            out.update(self._credentials())
        return out or None

    # -- vending ------------------------------------------------------------------------
    def _credentials(self) -> dict[str, str]:
        with self._lock:
            now = time.time()
            if self._cached is not None and now < self._cached[0]:
                return dict(self._cached[1])
            if self.vend == "static":
                creds = self._static()
                renew = now + self.vend_seconds * (1 - _REFRESH_MARGIN)
                creds["expires_at_millis"] = str(int((now + self.vend_seconds) * 1000))
            else:
                creds, expires = self._sts()
                renew = now + (expires - now) * (1 - _REFRESH_MARGIN)
                creds["expires_at_millis"] = str(int(expires * 1000))
            self._cached = (renew, creds)
            return dict(creds)

    def _static(self) -> dict[str, str]:
        key = _first(self.options, "key", "aws_access_key_id", "access_key_id")
        secret = _first(self.options, "secret", "aws_secret_access_key", "secret_access_key")
        token = _first(self.options, "token", "aws_session_token", "session_token")
        if not key or not secret:
            import botocore.session

            found = botocore.session.get_session().get_credentials()
            if found is None:
                raise RuntimeError("no S3 credentials to vend (--vend-credentials static)")
            frozen = found.get_frozen_credentials()
            key, secret, token = frozen.access_key, frozen.secret_key, frozen.token
        out = {"aws_access_key_id": str(key), "aws_secret_access_key": str(secret)}
        if token:
            out["aws_session_token"] = str(token)
        return out

    def _sts(self) -> tuple[dict[str, str], float]:
        import botocore.session

        session = botocore.session.get_session()
        kwargs: dict[str, Any] = {}
        client_kwargs = self.options.get("client_kwargs") or {}
        if client_kwargs.get("endpoint_url"):
            kwargs["endpoint_url"] = client_kwargs["endpoint_url"]
        region = client_kwargs.get("region_name") or _first(self.options, "aws_region", "region")
        key = _first(self.options, "key", "aws_access_key_id")
        secret = _first(self.options, "secret", "aws_secret_access_key")
        if key and secret:
            kwargs["aws_access_key_id"] = key
            kwargs["aws_secret_access_key"] = secret
            token = _first(self.options, "token", "aws_session_token")
            if token:
                kwargs["aws_session_token"] = token
        sts = session.create_client("sts", region_name=region or "us-east-1", **kwargs)
        if self.role_arn:
            answer = sts.assume_role(
                RoleArn=self.role_arn,
                RoleSessionName="quiver-namespace",
                DurationSeconds=self.vend_seconds,
            )
        else:
            answer = sts.get_session_token(DurationSeconds=self.vend_seconds)
        c = answer["Credentials"]
        creds = {
            "aws_access_key_id": c["AccessKeyId"],
            "aws_secret_access_key": c["SecretAccessKey"],
            "aws_session_token": c["SessionToken"],
        }
        return creds, c["Expiration"].timestamp()
