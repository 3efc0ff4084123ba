"""Two capture sidecar metrics agents of ONE app in DIFFERENT stacks (two of ours, or a consumer's own stack beside
ours) on one log group, or on one namespace of one cluster, are refused at synth with one error naming the property
(``CaptureSidecarMetrics.log_group_name`` / ``namespace``) and both construct paths; stacks of another account or
region share nothing. Also from a consumer's app outside this repository (a script in a temporary folder that imports
the library only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from hyperpod_inference_iac import CaptureSidecarMetrics, sidecar_metrics_log_group_name
from hyperpod_inference_iac.foundation.validation import ConfigError

ACCOUNT, REGION = "111122223333", "us-west-2"


def _cluster(stack: Stack) -> Any:
    region, account = stack.region, stack.account
    return eks.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="gpu-cluster",
        kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
            stack, "Kubectl", service_token=f"arn:aws:lambda:{region}:{account}:function:gpu-cluster-kubectl",
            role=iam.Role.from_role_arn(stack, "KubectlRole", f"arn:aws:iam::{account}:role/gpu-cluster-kubectl")),
        open_id_connect_provider=iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(
            stack, "Oidc", f"arn:aws:iam::{account}:oidc-provider/oidc.eks.{region}.amazonaws.com/id/EXAMPLE0123"))


def _agent(app: App, stack_name: str, *, region: str = REGION, **props: Any) -> CaptureSidecarMetrics:
    stack = Stack(app, stack_name, env=Environment(account=ACCOUNT, region=region))
    return CaptureSidecarMetrics(stack, "SidecarMetrics", cluster=_cluster(stack), cluster_name="gpu-cluster",
                                 alarm_name_prefix=stack_name.lower(), **({"namespace": "inference"} | props))


def test_two_stacks_on_one_log_group_are_one_error_naming_the_property_and_both_paths() -> None:
    app = App()
    _agent(app, "Ours")
    with pytest.raises(ConfigError) as raised:
        _agent(app, "Theirs", namespace="team-x")  # (another namespace, the default log group: the same)
    assert raised.value.codes == ["CaptureSidecarMetrics.SharedLogGroup"]
    message = str(raised.value)
    assert "log_group_name" in message and "Ours/SidecarMetrics" in message and "Theirs/SidecarMetrics" in message
    assert "/aws/containerinsights/gpu-cluster/capture-sidecar" in message and "Traceback" not in message


def test_two_stacks_on_one_namespace_are_refused_even_with_log_groups_of_their_own() -> None:
    app = App()
    _agent(app, "Ours")
    with pytest.raises(ConfigError) as raised:
        _agent(app, "Theirs", log_group_name="/theirs/capture-sidecar")
    assert raised.value.codes == ["CaptureSidecarMetrics.SecondAgent"]
    assert "Ours/SidecarMetrics" in str(raised.value)


def test_both_mistakes_at_once_are_two_errors_of_one_run() -> None:
    app = App()
    _agent(app, "Ours")
    with pytest.raises(ConfigError) as raised:
        _agent(app, "Theirs")
    assert sorted(raised.value.codes) == ["CaptureSidecarMetrics.SecondAgent", "CaptureSidecarMetrics.SharedLogGroup"]


def test_names_of_their_own_or_another_region_are_fine() -> None:
    app = App()
    _agent(app, "Ours")
    other = _agent(app, "Theirs", namespace="team-x",
                   log_group_name=sidecar_metrics_log_group_name("gpu-cluster", "team-x"))
    assert other.log_group_name == "/aws/containerinsights/gpu-cluster/capture-sidecar/team-x"
    # The same names in another region (another environment of one app: its own log groups and cluster).
    elsewhere = _agent(app, "OursInEurope", region="eu-west-1")
    assert elsewhere.log_group_name == "/aws/containerinsights/gpu-cluster/capture-sidecar"


CONSUMER_APP = """
    import json
    from aws_cdk import App, Environment, Stack
    from aws_cdk import aws_eks_v2 as eks
    from aws_cdk import aws_iam as iam
    from hyperpod_inference_iac import CaptureSidecarMetrics, ConfigError

    ENV = Environment(account="111122223333", region="us-west-2")

    def cluster(stack):
        return eks.Cluster.from_cluster_attributes(
            stack, "Cluster", cluster_name="gpu-cluster",
            kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
                stack, "Kubectl", service_token="arn:aws:lambda:us-west-2:111122223333:function:kubectl",
                role=iam.Role.from_role_arn(stack, "KubectlRole", "arn:aws:iam::111122223333:role/kubectl")),
            open_id_connect_provider=iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(
                stack, "Oidc", "arn:aws:iam::111122223333:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/X"))

    app = App()
    platform = Stack(app, "Platform", env=ENV)  # (the stack that uses the library as our app does)
    CaptureSidecarMetrics(platform, "Agent", cluster=cluster(platform), namespace="inference",
                          cluster_name="gpu-cluster", alarm_name_prefix="platform")
    team = Stack(app, "TeamMonitoring", env=ENV)  # (the consumer's own stack, its own namespace)
    try:
        CaptureSidecarMetrics(team, "TeamAgent", cluster=cluster(team), namespace="team-x",
                              cluster_name="gpu-cluster", alarm_name_prefix="team")
    except ConfigError as error:
        print(json.dumps({"codes": error.codes, "message": str(error)}))
        raise SystemExit(1)
    app.synth()
    print(json.dumps({"codes": []}))
"""


@pytest.mark.slow  # (a Python process of its own that imports the CDK: ~10 s)
def test_a_consumers_app_outside_the_repository_gets_the_same_one_error(tmp_path: Path) -> None:
    script = tmp_path / "consumer_app.py"
    script.write_text(textwrap.dedent(CONSUMER_APP))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["codes"] == ["CaptureSidecarMetrics.SharedLogGroup"]
    assert "log_group_name" in report["message"]
    assert "Platform/Agent" in report["message"] and "TeamMonitoring/TeamAgent" in report["message"]
