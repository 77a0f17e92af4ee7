"""Object-store URIs get delta-rs storage options from the ``[storage]`` config section, secrets from the env."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeshard.config import load_config
from lakeshard.errors import ConfigError
from lakeshard.lake.embedded.storage_options import storage_options

TOML = """
lakehouse = "s3://bucket/lh"
[storage]
s3 = { AWS_REGION = "eu-west-1", AWS_ACCESS_KEY_ID = "env:LK_KEY", AWS_SECRET_ACCESS_KEY = "env:LK_SECRET" }
azure = { AZURE_STORAGE_ACCOUNT_NAME = "acct", AZURE_STORAGE_CLIENT_SECRET = "env:LK_AZ" }
gcs = { GOOGLE_SERVICE_ACCOUNT_KEY = "env:LK_GCS" }
"""
ENV = {"LK_KEY": "AKIA-not-real", "LK_SECRET": "s3cr3t-value", "LK_AZ": "az-s3cr3t", "LK_GCS": "{}"}


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "lakeshard.toml"
    path.write_text(TOML)
    return path


def test_each_object_store_gets_its_section_with_secrets_from_the_environment(config_file: Path) -> None:
    cfg = load_config(config_file, env=ENV)
    assert storage_options(cfg, "s3://bucket/lh/events", env=ENV) == {
        "AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKIA-not-real", "AWS_SECRET_ACCESS_KEY": "s3cr3t-value"}
    assert storage_options(cfg, "s3a://bucket/x", env=ENV)["AWS_REGION"] == "eu-west-1"
    assert storage_options(cfg, "abfss://c@acct.dfs.core.windows.net/lh", env=ENV) == {
        "AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_CLIENT_SECRET": "az-s3cr3t"}
    assert storage_options(cfg, "gs://bucket/lh", env=ENV) == {"GOOGLE_SERVICE_ACCOUNT_KEY": "{}"}


def test_local_paths_get_none_and_unconfigured_stores_get_none(config_file: Path, tmp_path: Path) -> None:
    cfg = load_config(config_file, env=ENV)
    assert storage_options(cfg, str(tmp_path), env=ENV) is None
    assert storage_options(cfg, f"file://{tmp_path}", env=ENV) is None
    assert storage_options(load_config(env={}), "s3://bucket/lh", env={}) is None


def test_a_missing_secret_names_the_variable_and_secrets_are_never_shown(config_file: Path) -> None:
    cfg = load_config(config_file, env=ENV)
    with pytest.raises(ConfigError, match=r"storage\.s3\.AWS_SECRET_ACCESS_KEY.*LK_SECRET") as err:
        storage_options(cfg, "s3://bucket/lh", env={"LK_KEY": "AKIA-not-real"})
    assert "AKIA-not-real" not in str(err.value)
    assert "s3cr3t" not in repr(cfg) and "env:LK_SECRET" not in repr(cfg)


def test_storage_options_from_the_environment_as_json(tmp_path: Path) -> None:
    env = {"LAKESHARD_STORAGE_S3": '{"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "env:LK_KEY"}', **ENV}
    cfg = load_config(env=env)
    expected = {"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AKIA-not-real"}
    assert storage_options(cfg, "s3://b/t", env=env) == expected
    with pytest.raises(ConfigError, match="LAKESHARD_STORAGE_S3"):
        load_config(env={"LAKESHARD_STORAGE_S3": "not json"})


def test_pyarrow_reads_object_stores_with_the_same_options() -> None:
    import pyarrow.fs as pafs

    from lakeshard.lake.embedded.storage_options import arrow_filesystem

    found = arrow_filesystem({"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                              "AWS_ENDPOINT_URL": "http://localhost:9000"}, "s3://bucket/lh/events")
    assert found is not None
    fs, path = found
    assert isinstance(fs, pafs.S3FileSystem) and fs.region == "eu-west-1" and path == "bucket/lh/events"
    assert arrow_filesystem(None, "s3://bucket/lh") is None
    assert arrow_filesystem({"GOOGLE_SERVICE_ACCOUNT_KEY": "{}"}, "gs://bucket/lh") is None


def test_the_store_for_an_object_store_lakehouse_sends_delta_rs_to_the_configured_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lakeshard.lake import open_lazy_store

    # A closed local port as the S3 endpoint: the request can only go there if the options reached delta-rs.
    (tmp_path / "lakeshard.toml").write_text('lakehouse = "s3://bucket/lh"\n[storage]\ns3 = { AWS_ENDPOINT_URL = '
                                             '"http://127.0.0.1:9", AWS_ALLOW_HTTP = "true", AWS_REGION = "x", '
                                             'AWS_ACCESS_KEY_ID = "a", AWS_SECRET_ACCESS_KEY = "env:LK_SECRET", '
                                             'max_retries = "0" }\n')
    monkeypatch.setenv("LK_SECRET", "s3cr3t-value")
    cfg = load_config(tmp_path / "lakeshard.toml", env={})
    store = open_lazy_store(cfg)
    with pytest.raises(Exception, match=r"127\.0\.0\.1:9") as err:
        store.version(cfg.table_uri("events"))
    assert "s3cr3t-value" not in str(err.value)
