"""Reading the asset bundle offline: files merged per target as the CLI merges them, references resolved."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeshard.bundle import BundleError, load_bundle, merge

ROOT = Path(__file__).resolve().parents[2]


def test_a_target_override_merges_key_by_key_and_lists_append() -> None:
    base = {"job": {"name": "x", "trigger": {"file_arrival": {"url": "/v"}}, "tags": ["a"]}}
    over = {"job": {"trigger": {"pause_status": "UNPAUSED"}, "tags": ["b"]}}
    assert merge(base, over) == {"job": {"name": "x", "tags": ["a", "b"],
                                         "trigger": {"file_arrival": {"url": "/v"}, "pause_status": "UNPAUSED"}}}


def test_production_merges_every_file_s_override_and_keeps_lookups_as_lookups() -> None:
    bundle = load_bundle(ROOT)
    prod = bundle.merged("prod")
    schema = prod["resources"]["schemas"]["lakeshard"]
    assert schema["catalog_name"] == "${var.catalog}" and schema["lifecycle"] == {"prevent_destroy": True}
    assert prod["resources"]["jobs"]["ingest"]["trigger"]["pause_status"] == "UNPAUSED"
    assert prod["variables"]["service_principal"]["lookup"] == {"service_principal": "lakeshard-prod"}
    assert "generate_traffic" not in prod["resources"]["jobs"]  # a dev-only resource
    prod["resources"]["jobs"].clear()  # the caller's copy: the bundle's files are unchanged
    assert "ingest" in bundle.merged("prod")["resources"]["jobs"]


def test_development_names_get_the_deployer_s_prefix_before_references_resolve() -> None:
    dev = load_bundle(ROOT).resolved("dev", user="ada")
    resources = dev["resources"]
    assert resources["schemas"]["lakeshard"]["name"] == "dev_ada_lakeshard_dev"
    assert resources["volumes"]["landing"]["schema_name"] == "dev_ada_lakeshard_dev"
    assert resources["jobs"]["ingest"]["name"] == "[dev ada] lakeshard-ingest"
    assert resources["pipelines"]["downstream"]["configuration"]["lakeshard.events_table"] == \
        "main.dev_ada_lakeshard_dev.events"
    assert resources["jobs"]["ingest"]["parameters"][0]["default"] == "s3://lakeshard-dev/ada/lakehouse"
    assert resources["jobs"]["maintenance"]["tasks"][-1]["pipeline_task"]["pipeline_id"] == \
        "${resources.pipelines.downstream.id}"  # only a deploy knows it


def test_an_unknown_target_names_the_known_ones() -> None:
    with pytest.raises(BundleError, match=r"databricks.yml: no target 'staging' \(known targets: dev, prod\)$"):
        load_bundle(ROOT).merged("staging")
