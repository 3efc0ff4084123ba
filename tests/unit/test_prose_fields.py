"""The table of what rests on prose (hyperpod_inference_iac.cluster.prose_fields) is whole: every overlay field and
kind, and
every key the operator's add-on configuration sets, has its row; and the preflight confirms each row."""

from __future__ import annotations

from typing import Any

from aws_cdk import App, Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_s3 as s3

from hyperpod_inference_iac import InferenceOperator
from hyperpod_inference_iac.charts.crd_schema import overlays
from hyperpod_inference_iac.cluster.inference_operator import OPERATOR_ADDON
from hyperpod_inference_iac.cluster.prose_fields import ADDON, PROSE_FIELDS, ConfirmedBy, addon_rows, crd_rows
from hyperpod_inference_iac.preflight import _leaf_paths
from tests.unit.test_platform_constructs import CONTEXT, ENV, _cluster


def test_every_overlay_field_and_kind_has_a_row() -> None:
    rows = {(row.kind, row.path) for row in crd_rows()}
    for overlay in overlays():
        if overlay.schema is not None:
            assert (overlay.kinds[0], ()) in rows, overlay.file
        for field in overlay.fields:
            for kind in overlay.kinds:
                assert (kind, field.path) in rows, (overlay.file, kind, field.path)


def test_every_row_of_a_custom_resource_is_in_an_overlay() -> None:
    """A row whose overlay went (the real CRD replaced it) goes too: the table names only what rests on prose."""
    in_overlays = {(kind, field.path) for overlay in overlays() for field in overlay.fields for kind in overlay.kinds}
    in_overlays |= {(overlay.kinds[0], ()) for overlay in overlays() if overlay.schema is not None}
    assert {(row.kind, row.path) for row in crd_rows()} <= in_overlays


def _operator_configuration() -> Any:
    """The add-on configuration with every optional key: the gateway's controller and the gated-model role."""
    stack = Stack(App(context=CONTEXT), "Prose", env=ENV)
    operator = InferenceOperator(
        stack, "Operator", cluster=_cluster(stack), hyperpod_cluster_arn="arn",
        tls_bucket=s3.Bucket.from_bucket_name(stack, "Tls", "hyperpod-tls-x"), gated_model_namespaces=("inference",),
        inference_gateway=True, addon_version="v2.0.0-eksbuild.2",
        certificate=acm.Certificate.from_certificate_arn(
            stack, "Cert", "arn:aws:acm:us-west-2:111122223333:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"))
    assert "inferenceGateway" in operator.configuration and "jumpstartGatedModelDownloadRoleArn" in \
        operator.configuration
    return operator.configuration


def test_every_key_the_operator_sets_has_a_row() -> None:
    assert ADDON == OPERATOR_ADDON
    configuration = _operator_configuration()
    rows = {row.path for row in addon_rows()}
    missing = [path for path in _leaf_paths(configuration) if path not in rows]
    assert not missing, f"add-on keys without a row in prose_fields.PROSE_FIELDS: {missing}"


def test_each_row_says_what_confirms_it() -> None:
    for row in PROSE_FIELDS:
        assert row.source and row.confirmed_by in ConfirmedBy
        assert (row.crd_name is None) == (row.confirmed_by is ConfirmedBy.ADDON_SCHEMA)
