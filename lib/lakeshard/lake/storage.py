"""delta-rs storage options for a table URI: the ``[storage]`` section of the config, secrets from the environment.

delta-rs reaches object stores with its own clients (``object_store``), configured per call through
``storage_options``. :func:`storage_options` picks the section for the URI's scheme and resolves ``env:NAME``
values, so every delta-rs call of a store gets the same options and no secret has to sit in a file. The
options are never logged: errors name the key and the variable, not the value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from lakeshard.config import LakeshardConfig
from lakeshard.errors import ConfigError

__all__ = ["OBJECT_STORE_SCHEMES", "storage_options"]

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
