"""What the detector libraries would cost and buy against the processor's own rules.

    .venv/bin/python -m pip install phonenumbers detect-secrets   # into a scratch venv is fine
    .venv/bin/python benchmarks/redaction_detectors_bench.py --texts 4000

The same generated corpus (multi-line chat texts, a fifth of them with one planted value each:
emails, phone numbers, AWS keys, tokens, card numbers, SSNs, IBANs, private keys; and look-alikes
that must survive: ids, timestamps, version strings, hex digests, UUIDs, CSV rows, ISBNs) goes
through each detector in the same run:

- the processor's Redactor (RE2 over an Arrow column, validators on the candidates), every
  default rule, and the phone rule alone;
- Google's libphonenumber through `phonenumbers` (`PhoneNumberMatcher`, region US, leniency VALID);
- Yelp's detect-secrets (`scan_line` with its default plugins), line by line.

Reported per detector: MB/s of text scanned, recall on the planted values it is meant for, and the
look-alikes it flagged. Microsoft Presidio is not run: presidio-analyzer requires spaCy even with
pattern recognizers only (see docs/capture-processor.md, "Detector libraries").
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "lambda" / "capture_processor"))
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

PLANTED = {
    "email": ["alice.smith@example.com", "ops+alerts@mail.example.co.uk", "x_y.z@sub.example.org"],
    "phone": ["+44 20 7946 0958", "(415) 555-0100", "415-555-0199", "+1 415 555 0123", "+49 30 901820"],
    "access_token": [
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "xoxb-1234567890-abcdefghijkl",
        "hf_abcdefghijklmnopqrstuvwxyz0123456789",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ],
    "aws_secret_key": ["aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"],
    "private_key": [
        "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n"
        "-----END RSA PRIVATE KEY-----"
    ],
    "payment_card": ["4111 1111 1111 1111", "5500-0000-0000-0004", "340000000000009"],
    "us_ssn": ["123-45-6789", "078-05-1120"],
    "iban": ["GB82 WEST 1234 5698 7654 32", "DE89370400440532013000"],
}
LOOK_ALIKES = [
    "order 12345678901 shipped",
    "2026-11-30T10:15:00Z",
    "version 1.2.3.4",
    "sha1 da39a3ee5e6b4b0d3255bfef95601890afd80709",
    "id 550e8400-e29b-41d4-a716-446655440000",
    "9,45,45,42,7,5,0",
    "ISBN 978-3-16-148410-0",
    "port 8080",
    "build 4111111111111112",
    "ticket 123-45-678",
    "tracking 1Z999AA10123456784",
    "ts 1764497700123",
]


def corpus(count: int, seed: int = 3) -> tuple[list[str], list[tuple[int, str, str]], list[int]]:
    from capture_processor_bench import _text

    rng = random.Random(seed)
    texts, planted, look_alike_rows = [], [], []
    for index in range(count):
        text = _text(rng, (1, 3), (2, 4))
        if index % 5 == 0:
            kind = rng.choice(sorted(PLANTED))
            value = rng.choice(PLANTED[kind])
            text += rng.choice(["\n", " ", "\n\n- ", ": "]) + value + rng.choice(["\n", ". ", ""])
            planted.append((index, kind, value))
        elif index % 5 == 1:
            text += "\n" + rng.choice(LOOK_ALIKES)
            look_alike_rows.append(index)
        texts.append(text)
    return texts, planted, look_alike_rows


def timed(function, texts):
    started = time.perf_counter()
    flagged = function(texts)
    return time.perf_counter() - started, flagged


def ours(rules):
    import pyarrow as pa

    from capture_core.redaction import Redactor

    def run(texts):
        redactor = Redactor(rules)
        redacted = redactor.redact(pa.array(texts, pa.string())).to_pylist()
        return {index for index, (old, new) in enumerate(zip(texts, redacted, strict=True)) if old != new}

    return run


def phonenumbers_detector(texts):
    import phonenumbers

    return {
        index
        for index, text in enumerate(texts)
        if any(True for _ in phonenumbers.PhoneNumberMatcher(text, "US", leniency=phonenumbers.Leniency.VALID))
    }


def detect_secrets_detector(texts):
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    flagged = set()
    with default_settings():
        for index, text in enumerate(texts):
            for line in text.splitlines():
                if any(True for _ in scan_line(line)):
                    flagged.add(index)
                    break
    return flagged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=4000)
    args = parser.parse_args()
    from capture_core.redaction import DEFAULT_RULES

    texts, planted, look_alikes = corpus(args.texts)
    megabytes = sum(len(text.encode()) for text in texts) / 1e6
    print(
        f"corpus: {len(texts)} texts, {megabytes:.1f} MB, {len(planted)} planted values, {len(look_alikes)} look-alikes"
    )
    detectors = [
        ("processor rules (all defaults)", ours(DEFAULT_RULES), set(PLANTED)),
        ("processor rule phone", ours(("phone",)), {"phone"}),
        ("phonenumbers PhoneNumberMatcher", phonenumbers_detector, {"phone"}),
        ("detect-secrets scan_line", detect_secrets_detector, {"access_token", "aws_secret_key", "private_key"}),
    ]
    print(f"{'detector':34} {'MB/s':>8} {'recall':>14} {'look-alikes flagged':>20}  missed kinds")
    for name, detector, kinds in detectors:
        try:
            seconds, flagged = timed(detector, texts)
        except ImportError as error:
            print(f"{name:34} not installed ({error.name}); pip install it to compare")
            continue
        meant = [(index, kind) for index, kind, _ in planted if kind in kinds]
        found = sum(index in flagged for index, _ in meant)
        missed = sorted({kind for index, kind in meant if index not in flagged})
        false = sum(index in flagged for index in look_alikes)
        print(
            f"{name:34} {megabytes / seconds:8.1f} {found:>6}/{len(meant):<7} {false:>12}/{len(look_alikes):<7}  "
            f"{', '.join(missed) or '-'}"
        )


if __name__ == "__main__":
    main()
