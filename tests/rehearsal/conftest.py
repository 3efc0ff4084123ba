"""The rehearsal's shared pieces, once per session (every module is in the xdist group "rehearsal", so one worker
runs them all): the run's one real `cdk synth` of the default app (shared with tests/platform), one moto server
(its own process, IAM enforcement on after the set-up) holding what the templates create, one stand-in model
server, and an AWS CLI for the NVMe loaders' shell scripts.
docs/rehearsal.md says what this proves and what it cannot."""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.sidecar import conftest as sidecar_tests
from tests.sidecar.conftest import Sidecar, wait_for_port
from tests.support.rehearsal import (
    CallGate,
    ContainerRuntime,
    Credentials,
    FunctionRuntime,
    MotoServer,
    Rehearsal,
    container_runtimes,
    free_loopback_port,
    split_s3_uri,
)
from tests.support.synth import REPO, Assembly, default_assembly
from tests.support.waiting import eventually

HERE = Path(__file__).parent
# Seconds each shared piece took, printed at the end of the run. Under xdist the worker writes them to a file in
# the run's base temp folder, where the controller (which prints the summary) finds them.
TIMINGS: dict[str, float] = {}
TIMINGS_FILE = "rehearsal-timings.json"
_timings_path: list[Path] = []


def record_timing(name: str, seconds: float) -> None:
    TIMINGS[name] = seconds
    if _timings_path:
        _timings_path[0].write_text(json.dumps(TIMINGS))


def pytest_terminal_summary(terminalreporter, config) -> None:  # type: ignore[no-untyped-def]
    timings = dict(TIMINGS)
    factory = getattr(config, "_tmp_path_factory", None)
    if not timings and factory is not None and (factory.getbasetemp() / TIMINGS_FILE).is_file():
        timings = json.loads((factory.getbasetemp() / TIMINGS_FILE).read_text())
    if timings:
        terminalreporter.section("rehearsal timings")
        for name, seconds in timings.items():
            terminalreporter.write_line(f"{name}: {seconds:.1f} s")


@dataclass(frozen=True)
class Platform:
    account: str
    region: str
    reader_role_arns: tuple[str, ...]


@pytest.fixture(scope="session")
def platform() -> Platform:
    config = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    return Platform(str(config["environment"]["account"]), config["environment"]["region"],
                    tuple(config.get("capture", {}).get("readerRoleArns", [])))


# ------------------------------------------------------------------------------------------------ the AWS CLI


class AwsCli:
    """An `aws` command for the loaders' scripts: the AWS CLI of this environment (a dev dependency, pinned in
    constraints.txt), behind a shim so the scripts find it on PATH. Missing, the rehearsal fails: it never
    skips a runtime for want of an install step."""

    def __init__(self, tmp: Path) -> None:
        self.bin = tmp / "bin"
        self.bin.mkdir(parents=True)
        shim = self.bin / "aws"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m awscli "$@"\n')
        shim.chmod(0o755)

    def ready(self) -> Path:
        if importlib.util.find_spec("awscli") is None:
            pytest.fail("the AWS CLI (awscli, a dev dependency in pyproject.toml) is not installed: run make setup")
        return self.bin


@pytest.fixture(scope="session")
def _awscli_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AwsCli]:
    base = tmp_path_factory.getbasetemp()
    _timings_path[:] = [(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / TIMINGS_FILE]
    yield AwsCli(tmp_path_factory.mktemp("awscli"))


@pytest.fixture(scope="session")
def aws_cli_bin(_awscli_build: AwsCli) -> Path:
    return _awscli_build.ready()


# ---------------------------------------------------------------------------------------- synth, moto, stand-in


@pytest.fixture(scope="session")
def assembly(tmp_path_factory: pytest.TempPathFactory, _awscli_build: AwsCli) -> Assembly:
    """The run's one synth of the default app (tests/support/synth.py), shared with tests/platform: this
    checkout's library, even when the venv's editable install points at another checkout."""
    started = time.monotonic()
    shared = default_assembly(tmp_path_factory)
    record_timing("cdk synth of the default app (or waiting for the run's one)", time.monotonic() - started)
    return shared


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory, platform: Platform) -> Iterator[MotoServer]:
    server = MotoServer(account=platform.account, log_path=tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def rehearsal(moto_server: MotoServer, assembly: Assembly, platform: Platform) -> Rehearsal:
    started = time.monotonic()
    loaded = Rehearsal(moto_server, assembly.templates, account=platform.account, region=platform.region)
    record_timing("templates loaded into moto", time.monotonic() - started)
    return loaded


# The stand-in model server of the sidecar's own tests (tests/sidecar/standin_server.py), a fixture here too.
standin_port = sidecar_tests.standin_port


def base_environment(home: Path) -> dict[str, str]:
    """What a process gets besides its runtime's settings: no AWS_* of the test session, a HOME of its own."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1"}


def translate_mounts(values: dict[str, str], mounts: dict[str, Path]) -> dict[str, str]:
    """A container's paths on this machine: a value under one of its volume mounts (``/tmp/capture-spool`` under the
    ``/tmp`` emptyDir) points into the folder standing in for that volume."""
    translated = {}
    for name, value in values.items():
        for mount_path, folder in sorted(mounts.items(), key=lambda item: -len(item[0])):
            if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
                value = str(folder) + value[len(mount_path.rstrip("/")):]
                break
        translated[name] = value
    return translated


def volume_folders(mount_paths: list[str], root: Path) -> dict[str, Path]:
    folders = {}
    for index, mount_path in enumerate(mount_paths):
        folder = root / f"volume-{index}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        folders[mount_path] = folder
    return folders


# ---------------------------------------------------------------------------------------- the capture sidecar


def capture_sidecars(assembly: Assembly) -> list[ContainerRuntime]:
    """Every container the manifests configure to capture to S3 with an API key or none (the portable servers'
    capture sidecars). A gateway's capture entry (the sidecar in JWT mode) is rehearsed by test_gateway_entry.py,
    under its own role with the rendered manifest's environment and real tokens (``gateway_entries`` there)."""
    found = [runtime for runtime in container_runtimes(assembly.manifests)
             if "CAPTURE_S3_URI" in runtime.env and "JWT_ISSUER" not in runtime.env]
    assert found, "the manifests configure no capture sidecar: nothing to rehearse"
    return found


@dataclass
class RehearsedSidecar(Sidecar):
    env: dict[str, str] = field(default_factory=dict)  # what the process was started with


def start_sidecar(rehearsal: Rehearsal, runtime: ContainerRuntime, credentials: Credentials, standin_port: int,
                  workdir: Path, **overrides: str) -> RehearsedSidecar:
    """`python -m capture_sidecar` with the manifest's environment, its role's credentials and moto as S3; only the
    upstream, the listening address and ports, and the volumes' folders are this machine's."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = base_environment(workdir)
    env.update(translate_mounts(runtime.env, volume_folders(list(runtime.mounts), workdir)))
    env.update(UPSTREAM_URL=f"http://127.0.0.1:{standin_port}", LISTEN_HOST="127.0.0.1",
               LISTEN_PORT=str(free_loopback_port()), METRICS_PORT=str(free_loopback_port()))
    env.update(overrides)
    if env.get("API_KEYS_FILE"):  # the API key's Secret volume, as External Secrets and the kubelet fill it
        Path(env["API_KEYS_FILE"]).write_text(f"{REHEARSAL_CALLER}:{REHEARSAL_API_KEY}\n")
    env.update(rehearsal.environment(credentials))
    log_path = workdir / "sidecar.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "capture_sidecar"], cwd=REPO / "sidecar", env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
    sidecar = RehearsedSidecar(process, int(env["LISTEN_PORT"]), int(env["METRICS_PORT"]), env["CAPTURE_S3_URI"],
                               log_path, env=env)
    try:
        wait_for_port(sidecar.metrics_port, process)
        wait_for_port(sidecar.port, process)
    except BaseException:
        process.kill()
        raise AssertionError(f"the sidecar did not start:\n{log_path.read_text()}") from None
    return sidecar


# Prompts carry what the capture processor's redaction must remove before curated/.
PROMPT = json.dumps({"model": "qwen3-8b", "prompt": "Write to jane.doe@example.com or call +1 415 555 0100."})
# A sidecar with API_KEYS_FILE (the portable server's API key) gets this key in that file, and the requests carry it.
REHEARSAL_API_KEY = "rehearsal0api0key0abcdefghijklmnopqrstuvwxyz012345"
REHEARSAL_CALLER = "rehearsal-api-key"


def fill_one_batch(sidecar: Sidecar, batch_size: int, *, max_requests: int = 5000) -> int:
    """Send completions until the sidecar has sampled one batch in (its sampling percentage is the manifest's),
    then wait until it has tried to upload it; the number of requests sent."""
    connection = http.client.HTTPConnection("127.0.0.1", sidecar.port, timeout=60)
    headers = {"Content-Type": "application/json"}
    if getattr(sidecar, "env", {}).get("API_KEYS_FILE"):
        headers["Authorization"] = f"Bearer {REHEARSAL_API_KEY}"
    sent = 0
    try:
        while sent < max_requests:
            for _ in range(25):
                connection.request("POST", "/v1/completions", PROMPT, headers)
                response = connection.getresponse()
                response.read()
                assert response.status == 200, f"the sidecar answered {response.status}:\n{sidecar.log()}"
            sent += 25
            if sidecar.metrics().get("capture_sidecar_records_captured_total", 0) >= batch_size:
                break
    finally:
        connection.close()
    def tried() -> bool:
        samples = sidecar.metrics()
        return samples['capture_sidecar_uploads_total{result="ok"}'] + samples[
            'capture_sidecar_uploads_total{result="failed"}'] >= 1

    eventually(tried)  # (the callers assert what the upload did)
    return sent


@dataclass(frozen=True)
class SidecarBatch:
    """The portable sidecar's run under its own role, with the manifest's settings: what it wrote."""

    runtime: ContainerRuntime
    env: dict[str, str]
    bucket: str
    prefix: str
    keys: list[str]
    records: int
    requests: int
    metrics: dict[str, float]
    exit_code: int
    log: str


@pytest.fixture(scope="session")
def sidecar_batch(rehearsal: Rehearsal, assembly: Assembly, standin_port: int,
                  tmp_path_factory: pytest.TempPathFactory) -> SidecarBatch:
    runtime = capture_sidecars(assembly)[0]
    started = time.monotonic()
    sidecar = start_sidecar(rehearsal, runtime, rehearsal.credentials(runtime.role_arn), standin_port,
                            tmp_path_factory.mktemp("sidecar"))
    try:
        requests = fill_one_batch(sidecar, int(runtime.env.get("BATCH_SIZE", "10")))
        metrics = sidecar.metrics()
    finally:
        exit_code = sidecar.terminate()  # drains: whatever was sampled in after the batch is uploaded too
    bucket, prefix = split_s3_uri(runtime.env["CAPTURE_S3_URI"])
    s3 = rehearsal.client("s3")
    keys = sorted(item["Key"] for item in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))
    records = sum(len(s3.get_object(Bucket=bucket, Key=key)["Body"].read().splitlines()) for key in keys)
    record_timing("capture sidecar: start, one batch, drain", time.monotonic() - started)
    return SidecarBatch(runtime, sidecar.env, bucket, prefix, keys, records, requests, metrics, exit_code,
                        sidecar.log())


# ------------------------------------------------------------------- Lambda functions behind a CallGate


# The handler of the staged asset, with a gate on every botocore client of its process; its answer as a last line.
PROGRAM = """import json, logging, sys
logging.basicConfig(format="%(message)s")  # (Lambda's runtime has a handler on the root logger too)
sys.path.append(sys.argv[3])
from tests.support.rehearsal import CallGate
CallGate.load(sys.argv[2]).install()
from {module} import {name}

class Context:
    def __init__(self, seconds):
        self.seconds = seconds
    def get_remaining_time_in_millis(self):
        return int(self.seconds * 1000)

print("ANSWER " + json.dumps({name}(json.load(sys.stdin), Context(float(sys.argv[1]))), default=str))
"""


def invoke_gated(rehearsal: Rehearsal, function: FunctionRuntime, assembly: Assembly, gate: CallGate,
                 event: dict[str, Any], workdir: Path, **overrides: str) -> tuple[int, str, list[dict[str, Any]]]:
    """One invocation as Lambda makes it (the function's folder, its environment, its role's credentials), its calls
    decided by ``gate``: exit code, output, the calls made."""
    workdir.mkdir(parents=True, exist_ok=True)
    module, _, name = function.handler.rpartition(".")
    gate_file = workdir / "gate.json"
    assert gate.record is not None
    Path(gate.record).write_text("")
    gate.dump(gate_file)
    env = base_environment(workdir)
    env.update(function.environment)
    env.update(overrides)
    env.update(rehearsal.environment(rehearsal.credentials(gate.principal_arn)))
    env["AWS_LAMBDA_FUNCTION_NAME"] = function.logical_id
    timeout = rehearsal.resolver.resource(function.stack, function.logical_id)["Properties"].get("Timeout", 3)
    with rehearsal.server.enforcement_paused():  # (the gate decides: moto would check these against "*")
        result = subprocess.run([sys.executable, "-c", PROGRAM.format(module=module, name=name), str(timeout),
                                 str(gate_file), str(REPO)], input=json.dumps(event), text=True,
                                cwd=function.code_folder(assembly.directory), env=env, capture_output=True,
                                timeout=120, check=False)
    calls = [json.loads(line) for line in Path(gate.record).read_text().splitlines()]
    return result.returncode, result.stdout + result.stderr, calls


# ------------------------------------------------------------------------------------ the templates' secrets


class Secrets:
    """The templates' secrets created in moto (name, KMS key, the value CloudFormation generates), and the gate's
    view of them: the name and moto's ARN -> the template's ARN, each one's resource policy."""

    def __init__(self, rehearsal: Rehearsal) -> None:
        resolver, sm = rehearsal.resolver, rehearsal.client("secretsmanager")
        self.template_arn: dict[str, str] = {}  # name -> template ARN
        self.moto_arn: dict[str, str] = {}  # name -> moto's ARN
        self.kms_key: dict[str, str] = {}  # name -> key ARN
        self.policies: dict[str, list[dict[str, Any]]] = {}  # template ARN -> statements
        for stack, logical_id, resource in resolver.resources("AWS::SecretsManager::Secret"):
            properties = resource["Properties"]
            name = str(resolver.resolve(stack, properties["Name"]))
            key = str(resolver.resolve(stack, properties["KmsKeyId"])) if "KmsKeyId" in properties else None
            generate = properties.get("GenerateSecretString", {})
            value = sm.get_random_password(PasswordLength=generate.get("PasswordLength", 32),
                                           ExcludePunctuation=generate.get("ExcludePunctuation", False),
                                           IncludeSpace=generate.get("IncludeSpace", False))["RandomPassword"]
            created = sm.create_secret(Name=name, SecretString=value, **({"KmsKeyId": key} if key else {}))
            self.template_arn[name] = resolver.resolve(stack, {"Ref": logical_id})
            self.moto_arn[name] = created["ARN"]
            if key:
                self.kms_key[name] = key
        for stack, _, resource in resolver.resources("AWS::SecretsManager::ResourcePolicy"):
            properties = resource["Properties"]
            document, dropped = resolver.policy(stack, properties["ResourcePolicy"], where="secret policy")
            assert not dropped, dropped
            self.policies.setdefault(resolver.resolve(stack, properties["SecretId"]), []).extend(document["Statement"])

    def name_of(self, template_arn: str) -> str:
        return next(name for name, arn in self.template_arn.items() if arn == template_arn)

    def gate(self, rehearsal: Rehearsal, role_arn: str, record: Path, **changes: Any) -> CallGate:
        resources = {**{name: arn for name, arn in self.template_arn.items()},
                     **{self.moto_arn[name]: arn for name, arn in self.template_arn.items()},
                     **{arn: arn for arn in self.template_arn.values()}}
        values: dict[str, Any] = {
            "principal_arn": role_arn, "account": rehearsal.account, "region": rehearsal.region,
            "resources": resources,
            "identity": rehearsal.role_policies(role_arn.rsplit("/", 1)[-1]), "resource_policies": self.policies,
            "record": str(record)}
        values.update(changes)
        return CallGate(**values)


@pytest.fixture(scope="session")
def secrets(rehearsal: Rehearsal) -> Secrets:
    """The templates' secrets in moto, once per session (the rotation function and the readers use them)."""
    return Secrets(rehearsal)


# ------------------------------------------------------------------------- S3 requests moto logged, judged again

_S3_METHOD_ACTIONS = {"PUT": "s3:PutObject", "GET": "s3:GetObject", "HEAD": "s3:GetObject",
                      "DELETE": "s3:DeleteObject", "POST": "s3:PutObject"}


def s3_requests_refused(rehearsal: Rehearsal, role_arn: str,
                        requests: list[tuple[str, str, int]]) -> list[tuple[str, str]]:
    """The object requests moto logged (while enforcement was paused, or for calls a gate let through) that the role's
    identity policies would refuse: the read or delete of a version is its own action (``s3:GetObjectVersion``,
    ``s3:DeleteObjectVersion``)."""
    buckets = set(rehearsal.created.buckets)
    allows = rehearsal.identity_decider(role_arn)
    refused = []
    for method, target, _ in requests:
        path, _, query = target.partition("?")
        if path.split("/")[1] not in buckets or path.count("/") < 2 or not path.split("/", 2)[2]:
            continue
        action = _S3_METHOD_ACTIONS[method]
        if "versionId=" in query and action in ("s3:GetObject", "s3:DeleteObject"):
            action += "Version"
        if not allows(action, f"arn:aws:s3:::{path[1:]}"):
            refused.append((method, target))
    return refused
