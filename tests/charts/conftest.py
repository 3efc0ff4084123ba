"""Synthesize each chart once per session; the schema and snapshot tests share the output."""

from __future__ import annotations

from typing import Any

import cdk8s
import pytest

from hyperpod_inference_iac.charts import InferenceChart, PortableModelServerChart, parse_models
from hyperpod_inference_iac.foundation.validation import Problems
from tests.charts import samples


@pytest.fixture(scope="session")
def inference_chart() -> InferenceChart:
    problems = Problems()
    models = [workload for _, workload in parse_models(samples.model_entries(), problems=problems)]
    problems.raise_if_any()
    return InferenceChart(
        cdk8s.Testing.app(),
        "inference",
        namespace=samples.NAMESPACE,
        models=models,
        service_accounts=samples.SERVICE_ACCOUNTS,
        custom_service_accounts_enabled=True,
        create_namespace=True,
    )


@pytest.fixture(scope="session")
def inference_manifests(inference_chart: InferenceChart) -> list[dict[str, Any]]:
    return cdk8s.Testing.synth(inference_chart)


@pytest.fixture(scope="session")
def portable_charts() -> dict[str, PortableModelServerChart]:
    """One chart per runtime; vLLM with capture and a hostname, the others without."""
    app = cdk8s.Testing.app()
    servers = {
        "vllm": samples.portable_server(),
        "tgi": samples.portable_server(name="mistral-7b", runtime="tgi", data_capture=None, hostname=None),
        "sglang": samples.portable_server(name="llama-8b", runtime="sglang", data_capture=None, node_labels=None),
    }
    return {
        runtime: PortableModelServerChart(
            app, f"portable-{runtime}", workload=samples.planned_portable(server), namespace=samples.NAMESPACE,
            values=samples.VALUES, create_namespace=runtime == "vllm")
        for runtime, server in servers.items()
    }


@pytest.fixture(scope="session")
def portable_manifests(portable_charts: dict[str, PortableModelServerChart]) -> dict[str, list[dict[str, Any]]]:
    return {runtime: cdk8s.Testing.synth(chart) for runtime, chart in portable_charts.items()}
