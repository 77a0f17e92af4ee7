"""delta-rs storage options for a table URI: the ``[storage]`` section of the config, secrets from the environment.

delta-rs reaches object stores with its own clients (``object_store``), configured per call through
``storage_options``. :func:`storage_options` picks the section for the URI's scheme and resolves ``env:NAME``
values, so every delta-rs call of a store gets the same options and no secret has to sit in a file. The
options are never logged: errors name the key and the variable, not the value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from lakeshard.config import LakeshardConfig
from lakeshard.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["OBJECT_STORE_SCHEMES", "arrow_filesystem", "storage_options"]

# URI scheme -> the [storage] section that configures it (the schemes delta-rs' object stores accept).
OBJECT_STORE_SCHEMES = {
    "s3": "s3", "s3a": "s3",
    "abfs": "azure", "abfss": "azure", "az": "azure", "adl": "azure", "azure": "azure",
    "gs": "gcs", "gcs": "gcs",
}
_ENV_PREFIX = "env:"


def storage_options(config: LakeshardConfig, uri: str, *,
                    env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """Return the delta-rs storage options for ``uri``, or None for a local path or an unconfigured store.

    Example::

        DeltaTable(uri, storage_options=storage_options(cfg, uri))

    Raises:
        ConfigError: an ``env:NAME`` value names a variable that is not set (the key and the variable are
            named, no value is shown).
    """
    section = OBJECT_STORE_SCHEMES.get(urlsplit(uri).scheme.lower())
    if section is None:
        return None
    configured: Mapping[str, str] = getattr(config.storage, section)
    if not configured:
        return None
    environ = os.environ if env is None else env
    out: dict[str, str] = {}
    for key, value in configured.items():
        if value.startswith(_ENV_PREFIX):
            name = value[len(_ENV_PREFIX):]
            if name not in environ:
                raise ConfigError(f"storage.{section}.{key} is read from the environment variable {name}, "
                                  "which is not set")
            out[key] = environ[name]
        else:
            out[key] = value
    return out


def arrow_filesystem(options: Mapping[str, str] | None, uri: str) -> tuple[pafs.FileSystem, str] | None:
    """Return a pyarrow filesystem for ``uri`` built from delta-rs storage options, and the path inside it.

    For code that reads a table's files with pyarrow next to delta-rs (log listings, Parquet footers), so both
    use the same credentials. None when there are no options or the store has no pyarrow mapping here (GCS:
    pyarrow takes a service account only through ``GOOGLE_APPLICATION_CREDENTIALS``); the caller then uses
    ``pyarrow.fs.FileSystem.from_uri`` (the default credential chain).

    Example::

        found = arrow_filesystem(storage_options(cfg, uri), uri)
        fs, path = found if found else pafs.FileSystem.from_uri(uri)
    """
    import pyarrow.fs as pafs

    if not options:
        return None
    parts = urlsplit(uri)
    section = OBJECT_STORE_SCHEMES.get(parts.scheme.lower())
    opts = {k.lower(): v for k, v in options.items()}
    if section == "s3":
        endpoint = opts.get("aws_endpoint_url") or opts.get("aws_endpoint") or opts.get("endpoint")
        scheme = None
        if endpoint and "://" in endpoint:
            scheme, endpoint = endpoint.split("://", 1)
        fs = pafs.S3FileSystem(
            access_key=opts.get("aws_access_key_id"), secret_key=opts.get("aws_secret_access_key"),
            session_token=opts.get("aws_session_token"), region=opts.get("aws_region") or opts.get("region"),
            endpoint_override=endpoint, scheme=scheme)
        return fs, f"{parts.netloc}{parts.path}".rstrip("/")
    if section == "azure":
        container, _, host = parts.netloc.partition("@")
        account = opts.get("azure_storage_account_name") or host.split(".", 1)[0]
        fs = pafs.AzureFileSystem(
            account, account_key=opts.get("azure_storage_account_key") or opts.get("azure_storage_access_key"),
            client_id=opts.get("azure_client_id") or opts.get("azure_storage_client_id"),
            client_secret=opts.get("azure_client_secret") or opts.get("azure_storage_client_secret"),
            tenant_id=opts.get("azure_tenant_id") or opts.get("azure_storage_tenant_id"),
            sas_token=opts.get("azure_storage_sas_key") or opts.get("azure_storage_sas_token"))
        return fs, f"{container}{parts.path}".rstrip("/")
    return None
