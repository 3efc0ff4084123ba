"""See the package's docstring."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hyperpod_inference_iac.serving.hugging_face_token import SecretSync, SyncedCaller

HERE = Path(__file__).parent
SYNC = SecretSync(namespace="inference", secrets_manager_name="p/s/api-key", kubernetes_secret_name="s-api-key",
                  key="api-key", keys_file="api-keys", keys_file_callers=(
                      SyncedCaller("team-a", "p/s/api-key/team-a"), SyncedCaller("s-api-key", "p/s/api-key"),
                      SyncedCaller("gone", "p/s/api-key/gone", revoked=True)))
# What External Secrets hands the template (entries of missing stages and secrets skipped), and the file expected.
CASES = {
    "every stage": ({"team-a.current": "A1", "team-a.pending": "A2", "team-a.previous": "A0",
                     "s-api-key.current": "L1", "s-api-key.previous": "L0"},
                    "team-a:A1\nteam-a:A2\nteam-a:A0\ns-api-key:L1\ns-api-key:L0\n"),
    "pending is current": ({"team-a.current": "A1", "team-a.pending": "A1", "s-api-key.current": "L1"},
                           "team-a:A1\ns-api-key:L1\n"),
    "one caller's secret gone": ({"s-api-key.current": "L1", "s-api-key.pending": "L2"},
                                 "s-api-key:L1\ns-api-key:L2\n"),
}


def main() -> int:
    go = shutil.which("go")
    if go is None:
        print("go is not on PATH (apt-get install golang-go): nothing rendered")
        return 2
    template = SYNC.manifests(region="us-west-2", reader_role_arn="arn")[2]["spec"]["target"]["template"]["data"]
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "tpl.json").write_text(json.dumps(template))
        (Path(work) / "cases.json").write_text(json.dumps({name: data for name, (data, _) in CASES.items()}))
        env = {**os.environ, "GOCACHE": str(Path(work) / "cache"), "GOFLAGS": "-mod=mod"}
        out = subprocess.run([go, "run", str(HERE / "render.go"), str(Path(work) / "tpl.json"),
                              str(Path(work) / "cases.json")], capture_output=True, text=True, env=env, check=True)
    rendered = json.loads(out.stdout)
    failed = 0
    for name, (_, expected) in CASES.items():
        got = rendered[name]["api-keys"]
        print(f"{'ok  ' if got == expected else 'FAIL'} {name}: {got!r}")
        failed += got != expected
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
