"""The secrets' readers: every `ExternalSecret` of the rendered manifests, read with its `SecretStore`'s role (the
service account's IRSA annotation) from the templates' secrets, the way External Secrets' AWS provider reads each
`remoteRef`: ``GetSecretValue(SecretId=key, VersionStage=version or AWSCURRENT)``
(external-secrets/external-secrets, pkg/provider/aws/secretsmanager/secretsmanager.go, ``fetch``).

External Secrets is not this project's code: the calls are made here by boto3 with the reader role's session, each
decided by `CallGate` (the role's identity policies and the secret's resource policy, whose ``OnlyReaderAndClients``
deny names the reader), enforcement paused for them (moto checks Secrets Manager against ``*`` only). Proves: each
reader may read exactly what its manifest asks, through the secret's policy, and the KMS decryption Secrets Manager
makes for it; a reader asking for another server's secret is refused. Cannot prove: External Secrets' own behaviour
(its cache, its handling of a missing ``AWSPENDING``), the web identity trust, conditions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.rehearsal.conftest import Secrets
from tests.support.rehearsal import Rehearsal
from tests.support.synth import Assembly

pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]


def readers(assembly: Assembly) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(ExternalSecret, its reader's role ARN, its remoteRefs) of the rendered manifests."""
    objects = [obj for documents in assembly.manifests.values() for obj in documents]

    def named(kind: str, namespace: str, name: str) -> dict[str, Any]:
        [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name
                   and o["metadata"].get("namespace") == namespace]
        return found

    found = []
    for external in (o for o in objects if o["kind"] == "ExternalSecret"):
        namespace = external["metadata"].get("namespace")
        store = named(external["spec"]["secretStoreRef"].get("kind", "SecretStore"), namespace,
                      external["spec"]["secretStoreRef"]["name"])
        account = store["spec"]["provider"]["aws"]["auth"]["jwt"]["serviceAccountRef"]["name"]
        role = named("ServiceAccount", namespace, account)["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
        found.append((external["metadata"]["name"], role, [item["remoteRef"] for item in external["spec"]["data"]]))
    assert found, "the manifests render no ExternalSecret"
    return found


def read(rehearsal: Rehearsal, secrets: Secrets, role_arn: str, key: str, version: str | None,
         record: Path) -> tuple[str | None, list[dict[str, Any]]]:
    """External Secrets' fetch of one remoteRef under the role: the value (None: no such version) and the calls."""
    record.write_text("")
    client = rehearsal.client("secretsmanager", rehearsal.credentials(role_arn))
    client.meta.events.register("before-parameter-build", secrets.gate(rehearsal, role_arn, record).hook)
    value: str | None = None
    with rehearsal.server.enforcement_paused():
        try:
            value = client.get_secret_value(SecretId=key, VersionStage=version or "AWSCURRENT")["SecretString"]
        except ClientError as error:
            if error.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
    return value, [json.loads(line) for line in record.read_text().splitlines()]


@pytest.mark.parametrize("index", range(2))
def test_each_reader_reads_what_its_manifest_asks_through_the_secrets_policy(
    rehearsal: Rehearsal, assembly: Assembly, secrets: Secrets, index: int, tmp_path: Path
) -> None:
    found = readers(assembly)
    assert len(found) == 2  # (the API keys' and the Hugging Face token's; a new one: raise the range)
    _, role, refs = found[index]
    sm = rehearsal.client("secretsmanager")
    for ref in refs:
        value, calls = read(rehearsal, secrets, role, ref["key"], ref.get("version"), tmp_path / "calls")
        assert calls and all(call["refused"] is None for call in calls), calls
        assert calls[0]["resource"] == secrets.template_arn[ref["key"]]
        try:  # (by its label: moto's answer without VersionStage is its default version, not moved by a rotation)
            expected = sm.get_secret_value(SecretId=ref["key"], VersionStage=ref.get("version", "AWSCURRENT"))
        except ClientError:
            expected = {}
        assert value == expected.get("SecretString")
        key_arn = rehearsal.key_arn(secrets.kms_key[ref["key"]])
        assert rehearsal.identity_allows(role, "kms:Decrypt", key_arn), (role, key_arn)


def test_a_reader_is_refused_another_servers_secret(rehearsal: Rehearsal, assembly: Assembly, secrets: Secrets,
                                                    tmp_path: Path) -> None:
    """The negative: each reader asks for the other's secret; both the identity policy and the secret's deny refuse."""
    found = readers(assembly)
    for (_, role, _), (_, _, other_refs) in ((found[0], found[1]), (found[1], found[0])):
        with pytest.raises(ClientError, match=r"AccessDeniedException.*secretsmanager:GetSecretValue"):
            read(rehearsal, secrets, role, other_refs[0]["key"], other_refs[0].get("version"), tmp_path / "calls")
        [call] = [json.loads(line) for line in (tmp_path / "calls").read_text().splitlines()]
        assert call["refused"], call


def test_the_secrets_policy_refuses_a_reader_whatever_its_iam_allows(
    rehearsal: Rehearsal, assembly: Assembly, secrets: Secrets, tmp_path: Path
) -> None:
    """docs/security.md: each caller's key is readable by its clients, the reader and the rotation function only,
    "whatever their IAM policies allow". The Hugging Face token's reader, its identity widened to every secret, is
    still refused the API key by the secret's own ``OnlyReaderAndClients`` deny."""
    found = readers(assembly)
    [(_, api_reader, api_refs)] = [entry for entry in found if "api-key" in entry[2][0]["key"]]
    [(_, other_reader, _)] = [entry for entry in found if entry[1] != api_reader]
    gate = secrets.gate(rehearsal, other_reader, tmp_path / "calls", identity=[{"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": "*"}]}])
    assert gate.refusal("secretsmanager:GetSecretValue", secrets.template_arn[api_refs[0]["key"]]) == (
        "an explicit deny in a resource-based policy (OnlyReaderAndClients)")
    widened = secrets.gate(rehearsal, api_reader, tmp_path / "calls", identity=gate.identity)
    assert widened.refusal("secretsmanager:GetSecretValue", secrets.template_arn[api_refs[0]["key"]]) is None
