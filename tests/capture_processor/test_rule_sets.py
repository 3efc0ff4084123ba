"""Every rule set, not only the default one, through the whole processor, differentially (issue 27).

The speed work was proven equal to the plain path with the default rules; a leak that only an opt-in rule showed
(`ip_address` matches `1::` in 3 characters, shorter than the default rules' shortest match) proved that is not
enough. Here each rule set a deployment can configure (every rule alone, every rule with the defaults, the defaults
minus each one, and `REDACT=none`) redacts seeded random documents in every shape the processor meets, with a secret
sample per rule at its shortest length and longer, and two oracles judge the result:

- **the plain path** (`plain_path()`, every speed switch off) gives the same text, byte for byte;
- **a reference** that decodes the JSON document with the stdlib, runs `Redactor.redact_text` on each string value
  and key (and on the values of JSON a string holds), and compares values, not bytes;
- **the same document without an escape** (redacted as one text, where the batch plans the other literal by literal):
  the values agree. This found a leak of the default rules: a secret access key named by its key
  (`"SecretAccessKey": "…"`) without a digit or an upper-case letter was redacted without an escape and kept with
  one (fixed in documents.py; regression tests in test_redaction_holes.py).

Where the design intentionally differs from the reference, the shape is left out of it and says why:

- a value split across two JSON strings (`["alice.smith@", "example.com"]`) is two values to both; the processor
  never joins them (only a stream's deltas are joined, and that is checked through `convert_stream`);
- text between literals (a malformed document's gap) has no decoded value: only the plain path judges it;
- JSON inside a string without a backslash is one value to the processor (redacted whole, no rule crosses a quote),
  its values to the reference: compared after decoding both, as values;
- a string that holds a quote and a backslash and is not JSON (prose quoting code) is opened as JSON by design: its
  literals' escapes are decoded and a changed literal re-encoded, so its text differs from the reference's; it is
  held only to keeping no active sample the reference removes (`JsonLike`).

Whole capture records (streams split across deltas, BASE64 in other charsets, JSON with escapes, plain text) go
through `convert_stream` with each rule set, on the fast and the plain path, and every planted sample of an active
rule must be gone from the rows; a sample of a rule that is not active must be kept (no rule redacts another's).
"""

from __future__ import annotations

import base64
import io
import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capture_core.alb_format import redact_urls
from capture_core.documents import DocumentBatch
from capture_core.outputs import QuarantineSource
from capture_core.processor import convert_stream
from capture_core.records import ChunkContext
from capture_core.redaction import DEFAULT_RULES, RULES, Redactor
from capture_core.routing import Tier
from tests.capture_processor import transcripts
from tests.capture_processor.test_fast_path import plain_path
from tests.capture_processor.test_llm_traffic import all_strings, record, side
from tests.capture_processor.transcripts import split

# Each rule's samples: its shortest match that the validator confirms, and longer ones.
SAMPLES: dict[str, tuple[str, ...]] = {
    "email": ("a@b.co", "alice.smith@example.com"),
    "phone": ("415-555-0100", "+44 20 7946 0958"),
    "access_token": ("Bearer abcdefgh", "AKIAIOSFODNN7EXAMPLE", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
    "aws_secret_key": (
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    "private_key": ("-----BEGIN PRIVATE KEY-----", transcripts.SECRETS["private_key"]),
    "payment_card": ("675912345674", "4111 1111 1111 1111", "4111-1111-1111-1111"),
    "us_ssn": ("123-45-6789",),
    "iban": ("NO9386011117947", "gb82 west 1234 5698 7654 32"),
    "ip_address": ("1::", "10.0.0.1", "2001:db8::8a2e:370:7334"),
}
SAMPLES_FLAT = [sample for samples in SAMPLES.values() for sample in samples]
# What each sample leaves behind when it leaks (the sample itself, or its middle when the sample is long).
WITNESSES = {sample: sample if len(sample) < 20 else sample[6:-6] for samples in SAMPLES.values() for sample in samples}


def rule_sets() -> dict[str, tuple[str, ...]]:
    sets: dict[str, tuple[str, ...]] = {"defaults": DEFAULT_RULES, "none": ()}
    for name in RULES:
        sets[f"only-{name}"] = (name,)
        if name not in DEFAULT_RULES:
            sets[f"defaults+{name}"] = (*DEFAULT_RULES, name)
        else:
            sets[f"defaults-{name}"] = tuple(rule for rule in DEFAULT_RULES if rule != name)
    sets["all"] = tuple(RULES)
    return sets


RULE_SETS = rule_sets()
# The fast set: the rule sets that differ most from the defaults (the opt-in rule alone and with them, no rule, the
# defaults without the rule with the shortest default match). The rest are slow-marked (`-m slow` runs them).
FAST_SETS = ("defaults+ip_address", "only-ip_address", "defaults-email", "none")


def _params() -> list[Any]:
    return [pytest.param(name, marks=() if name in FAST_SETS else (pytest.mark.slow,), id=name) for name in RULE_SETS]


# -- documents in every shape ----------------------------------------------------------------------------------------

_FILLER = ["hello", "x", "é", "ü ñ", "line\nbreak", "tab\there", 'say "hi"', "back\\slash", "😀", "a/b", ""]


def _escape_one(text: str, rng: random.Random) -> str:
    """`text` as a JSON literal's body with one of its ASCII characters written as a \\uXXXX escape."""
    body = json.dumps(text)[1:-1]
    plain = [at for at, character in enumerate(body) if character.isalnum()]
    if not plain:
        return body
    at = rng.choice(plain)
    return body[:at] + f"\\u{ord(body[at]):04x}" + body[at + 1 :]


def documents(seed: int) -> list[tuple[str, str, bool, bool]]:
    """(shape, text, as_json, reference applies) for every sample in every shape, with seeded fillers around it."""
    rng = random.Random(seed)
    out: list[tuple[str, str, bool, bool]] = []
    for samples in SAMPLES.values():
        for secret in samples:
            filler = rng.choice(_FILLER)
            sep = rng.choice([" ", "\n", "\t", "\r\n", ": ", "\\n "])
            out += [
                ("value", json.dumps({"k": filler, "v": secret}), True, True),
                ("value-ascii", json.dumps({"k": filler + "é", "v": secret}, ensure_ascii=True), True, True),
                ("key", json.dumps({secret: filler, "n": "a\nb"}), True, True),
                ("nested", json.dumps({"arguments": json.dumps({"note": secret, "n": filler + "\n"})}), True, True),
                ("nested-plain", json.dumps({"arguments": json.dumps({"note": secret})}), True, True),
                ("after-escape", json.dumps({"v": filler + "\n" + secret + sep + "more"}), True, True),
                ("u-escape", '{"e": "x\\ny", "v": "' + _escape_one(secret, rng) + '"}', True, True),
                ("short-literal", json.dumps({"a": secret, "b": filler + "\\n"}), True, True),
                ("list", json.dumps(["x\ny", secret, [secret, {"z": secret}]]), True, True),
                ("gap", '{"a": "x\\ny"} ' + secret + ' {"b": 1}', True, False),
                ("gap-short", '{"a": "x\\ny"}' + secret + "{}", True, False),
                ("prose-json", "See: " + json.dumps({"v": secret, "n": "a\nb"}) + " ok", False, False),
                ("plain", filler + sep + secret + sep + filler, False, False),
                (
                    "split-values",
                    json.dumps({"v": [secret[: len(secret) // 2], secret[len(secret) // 2 :]], "n": "\n"}),
                    True,
                    False,
                ),  # the processor never joins two values: left out of both the reference and leaks
            ]
    rng.shuffle(out)
    return out


@contextmanager
def _plain(enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    with pytest.MonkeyPatch.context() as monkeypatch:
        plain_path(monkeypatch)
        yield


def batch_results(rules: tuple[str, ...], docs: list[tuple[str, str, bool, bool]], *, plain: bool) -> list[str]:
    with _plain(plain):
        batch = DocumentBatch(Redactor(rules))
        ids = [batch.add(text, as_json=as_json) for _, text, as_json, _ in docs]
        batch.redact()
        return [batch.result(document)[0] for document in ids]


class JsonLike(str):
    """A string that holds a backslash and a quote and is not JSON (a prose prompt that quotes code): the processor
    opens it as JSON wherever it may be (issue 27: a service-account file pasted after prose), decodes its literals'
    escapes and re-encodes a literal where something was redacted, so its text differs from redacting it whole by
    design. Compared only for leaks (`agree`): no active sample that the reference removes is left in it."""


def _loads(text: str) -> Any:
    """JSON with each object as its list of pairs (keys redacted alike must not merge)."""
    return json.loads(text, object_pairs_hook=lambda pairs: ("object", [list(pair) for pair in pairs]))


def reference(redactor: Redactor, value: Any, depth: int = 0) -> Any:
    """Each string value and key decoded and redacted on its own; a string that is JSON itself, its values."""
    if isinstance(value, str):
        if depth < 3 and value.lstrip()[:1] in ("{", "["):
            try:
                return ("json", reference(redactor, _loads(value), depth + 1))
            except ValueError:
                pass
        redacted = redactor.redact_text(value)
        return JsonLike(redacted) if "\\" in value and '"' in value and redactor.rules else redacted
    if isinstance(value, (list, tuple)):
        return type(value)(reference(redactor, item, depth) for item in value)
    return value


def as_values(value: Any, depth: int = 0) -> Any:
    """The processor's output read as the reference reads its input: a string that is JSON, as its values."""
    if isinstance(value, str):
        if depth < 3 and value.lstrip()[:1] in ("{", "["):
            try:
                return ("json", as_values(_loads(value), depth + 1))
            except ValueError:
                pass
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(as_values(item, depth) for item in value)
    return value


def agree(got: Any, want: Any, active: set[str]) -> bool:
    """The processor's values (`as_values`) are the reference's; a JsonLike string only keeps no active sample the
    reference removes."""
    if isinstance(want, JsonLike):
        return isinstance(got, str) and not (_witnesses_of(got) - _witnesses_of(want)) & active
    if isinstance(want, (list, tuple)):
        return (
            type(got) is type(want)
            and len(got) == len(want)
            and all(agree(g, w, active) for g, w in zip(got, want, strict=True))
        )
    return bool(got == want and type(got) is type(want))


def active_samples(rules: tuple[str, ...]) -> list[str]:
    return [WITNESSES[sample] for name in rules for sample in SAMPLES[name]]


def _witnesses_of(text: str) -> set[str]:
    return {witness for witness in WITNESSES.values() if witness in text}


@pytest.mark.parametrize("name", _params())
def test_a_batch_redacts_alike_on_both_paths_and_as_each_value_alone(name: str) -> None:
    rules = RULE_SETS[name]
    redactor = Redactor(rules)
    for seed in range(2):
        docs = documents(seed)
        fast = batch_results(rules, docs, plain=False)
        plain = batch_results(rules, docs, plain=True)
        active = set(active_samples(rules))
        for (shape, text, _, referenced), got, want in zip(docs, fast, plain, strict=True):
            assert got == want, (name, shape, text)
            if referenced:
                assert agree(as_values(_loads(got)), reference(redactor, _loads(text)), active), (name, shape, text)
            if shape != "split-values":
                leaked = _witnesses_of(got) & active
                # A sample kept only where a rule that is not active owns it, or where it is part of a longer one.
                assert not {w for w in leaked if w in _witnesses_of(text)}, (name, shape, text, got)
        if not rules:
            assert fast == [text for _, text, _, _ in docs]


def test_every_rule_set_a_deployment_can_configure_is_run() -> None:
    names = set(RULE_SETS)
    assert {f"only-{rule}" for rule in RULES} <= names and "none" in names and "defaults" in names
    assert {f"defaults-{rule}" for rule in DEFAULT_RULES} <= names
    assert {f"defaults+{rule}" for rule in RULES if rule not in DEFAULT_RULES} <= names
    assert all(len(SAMPLES[rule]) >= 1 for rule in RULES) and set(SAMPLES) == set(RULES)
    for rule, samples in SAMPLES.items():  # each sample is found by its own rule alone, and by no other rule
        for sample in samples:
            assert Redactor((rule,)).redact_text(sample) != sample, (rule, sample)
            others = [other for other in RULES if other != rule and Redactor((other,)).redact_text(sample) != sample]
            assert not others, (rule, sample, others)


# -- whole capture records through convert_stream ---------------------------------------------------------------------


def b64(text: str, charset: str = "utf-8") -> str:
    return base64.b64encode(text.encode(charset)).decode()


def capture_object(seed: int) -> bytes:
    """Capture records holding every sample: JSON with escapes, streams of each server split across deltas (plain and
    BASE64), tool-call arguments streamed, plain text in other charsets."""
    rng = random.Random(seed)
    lines = []
    for number, secret in enumerate(sample for samples in SAMPLES.values() for sample in samples):
        pieces = rng.choice([2, 3, 5, 9])
        answer = rng.choice(["Sure: ", "ok\n", 'He said "', "café\t"]) + secret + rng.choice([" end", "\n", '".'])
        chat = transcripts.chat_request("line one\n" + secret + "\\n after", stream=False)
        lines += [
            record(f"{number}-json", side(chat), side('{"choices": []}')),
            record(
                f"{number}-vllm",
                side(transcripts.chat_request("go")),
                side(
                    b64(transcripts.vllm_chat(split(answer, pieces), tool_args=split(json.dumps({"note": secret}), 3))),
                    "text/event-stream",
                    "BASE64",
                ),
            ),
            record(f"{number}-sglang", None, side(transcripts.sglang_chat(split(answer, pieces)), "text/event-stream")),
            record(f"{number}-tgi", None, side(transcripts.tgi_chat(split(answer, pieces)), "text/event-stream")),
            record(
                f"{number}-completion",
                None,
                side(transcripts.vllm_completion(split(answer, pieces + 1)), "text/event-stream"),
            ),
            record(
                f"{number}-latin1",
                side(b64("é " + secret + " à", "iso-8859-1"), "text/plain; charset=ISO-8859-1", "BASE64"),
                None,
            ),
            record(f"{number}-utf16", side(b64("\ufeff" + secret, "utf-16-le"), "text/plain", "BASE64"), None),
            "{not json, " + json.dumps(secret)[1:-1] + "\\n",  # a line for the quarantine: its raw text redacted
            record(f"{number}-unknown", None, side(f'data: {{"x": {json.dumps(secret)}}}\n\n', "text/event-stream")),
        ]
    rng.shuffle(lines)
    return ("\n".join(lines) + "\n").encode()


def converted(rules: tuple[str, ...], data: bytes, directory: Path, *, plain: bool) -> tuple[list[dict[str, Any]], str]:
    directory.mkdir()
    context = ChunkContext("h/pod/2026/11/30/10/x.jsonl", "h", None, datetime(2026, 11, 30, 10, tzinfo=UTC))
    with _plain(plain):
        conversion = convert_stream(
            io.BytesIO(data), Tier.POD, context, Redactor(rules), directory, QuarantineSource("b", "k", "v")
        )
    rows = [row for file in conversion.partition_files for row in pq.read_table(file.path).to_pylist()]
    quarantine = conversion.quarantine.path.read_text() if conversion.quarantine.entries else ""
    return rows, quarantine


@pytest.mark.parametrize("name", _params())
def test_capture_records_convert_alike_on_both_paths_with_no_active_sample_left(name: str, tmp_path: Path) -> None:
    rules = RULE_SETS[name]
    data = capture_object(len(name))
    fast_rows, fast_quarantine = converted(rules, data, tmp_path / "fast", plain=False)
    plain_rows, plain_quarantine = converted(rules, data, tmp_path / "plain", plain=True)

    assert fast_rows == plain_rows
    assert fast_quarantine == plain_quarantine
    texts = [text for row in fast_rows for text in all_strings(row)] + [fast_quarantine]
    for witness in active_samples(rules):
        leaked = [text for text in texts if witness in text]
        assert not leaked, (name, witness, leaked[0][:300])
    if not rules:  # nothing redacted: every sample is where it was planted
        assert all(any(witness in text for text in texts) for witness in WITNESSES.values())
    assert len(fast_rows) == data.count(b"\n") - len(SAMPLES_FLAT)  # every line but the quarantine's
    assert "{not json" in fast_quarantine


# -- random documents -------------------------------------------------------------------------------------------------

_TOKENS = [
    " ",
    "\n",
    "\t",
    "\r\n",
    '"',
    "\\",
    "/",
    "é",
    "\u2028",
    "\ue000",
    "\ue006",
    "😀",
    "\b",
    "\\n",
    ":",
    ".",
    "-",
    "=",
    "a",
    "0",
    "{",
    "}",
    "[",
    "]",
    ",",
    "key:",
    "x\\u0041",
]


def _random_text(rng: random.Random) -> str:
    samples = [sample for samples in SAMPLES.values() for sample in samples]
    parts = [rng.choice(samples) if rng.random() < 0.3 else rng.choice(_TOKENS) for _ in range(rng.randint(0, 6))]
    return "".join(parts)


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.random()
    if depth < 3 and kind < 0.25:
        return {_random_text(rng): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    if depth < 3 and kind < 0.4:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 3 and kind < 0.5:  # JSON inside a string (tool-call arguments)
        return json.dumps(_random_value(rng, depth + 1), ensure_ascii=rng.random() < 0.5)
    if kind < 0.6:
        return rng.choice([0, 1.5, -7, True, None, 10**20])
    return _random_text(rng)


def random_documents(seed: int, count: int) -> list[tuple[str, str, bool, bool]]:
    rng = random.Random(seed)
    docs = []
    for _ in range(count):
        value = {"v": _random_value(rng)}
        text = json.dumps(value, ensure_ascii=rng.random() < 0.3, indent=rng.choice([None, 2]))
        docs.append(("random", text, True, True))
    return docs


@pytest.mark.parametrize("name", _params())
def test_random_documents_redact_alike_on_both_paths_and_as_each_value_alone(name: str) -> None:
    rules = RULE_SETS[name]
    redactor = Redactor(rules)
    docs = random_documents(len(name), 300)
    active = set(active_samples(rules))
    fast = batch_results(rules, docs, plain=False)
    plain = batch_results(rules, docs, plain=True)
    for (_, text, _, _), got, want in zip(docs, fast, plain, strict=True):
        assert got == want, (name, text)
        assert agree(as_values(_loads(got)), reference(redactor, _loads(text)), active), (name, text, got)


# -- the same document with and without an escape elsewhere -----------------------------------------------------------

# 40-character secret access keys that only their name identifies (the bare form asks for upper and lower case and a
# digit, and no hex digest): about one real key in a thousand has no digit.
NAMED_ONLY_KEYS = (
    "wJalrXUtnFEMIKMDENGbPxRfiCYEXAMPLEKEYabc",  # no digit
    "wjalrxutnfemi/k7mdeng/bpxrficyexamplekey",  # no upper case
    "0123456789abcdef0123456789abcdef01234567",  # hex
)
KEY_NAMES = ("aws_secret_access_key", "SecretAccessKey", "AWS_SECRET_KEY", "secretAccessKey", "my_aws_secret_key")


def escape_pairs() -> list[tuple[str, str]]:
    """(document without a backslash, the same with a value holding a line break after it): the first is redacted
    as one text, the second literal by literal."""
    values = [*NAMED_ONLY_KEYS, *(sample for samples in SAMPLES.values() for sample in samples if "\n" not in sample)]
    pairs = []
    for value in values:
        for key in (*KEY_NAMES, "note", "k"):
            for separator in (": ", ":", " : "):
                plain = "{" + json.dumps(key) + separator + json.dumps(value) + "}"
                pairs.append((plain, plain[:-1] + ', "n": "a\\nb"}'))
    return pairs


@pytest.mark.parametrize("name", _params())
def test_a_document_redacts_alike_with_and_without_an_escape_elsewhere(name: str) -> None:
    """A document with an escape anywhere is redacted literal by literal, one without as one text; their values must
    agree (an opt-in rule's short match and a secret access key named by its key both broke this)."""
    rules = RULE_SETS[name]
    pairs = escape_pairs()
    docs = [(shape, text, True, True) for pair in pairs for shape, text in zip(("whole", "split"), pair, strict=True)]
    results = batch_results(rules, docs, plain=False)
    assert results == batch_results(rules, docs, plain=True)
    for (whole, split_doc), whole_result, split_result in zip(pairs, results[::2], results[1::2], strict=True):
        assert json.loads(split_result) == json.loads(whole_result) | {"n": "a\nb"}, (name, whole, split_doc)


# -- the load balancer's URLs: the same value with and without an encoded character elsewhere ------------------------

# Values with a `/` as URLs carry them (a query value may hold `/` unencoded, RFC 3986 section 3.4).
URL_SAMPLES = (
    "hooks.slack.com/services/T0000000/B0000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "Bearer abc/defghijk",
    "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
)


# Not promised: a secret access key between a path's slashes (`/u/wJal…KEY/x`, `/u/aws_secret_access_key=wJal…/x`):
# either form takes 40 base64 characters, `/` among them, followed by one that is not, so inside a path the run is the
# path. (A key that holds `/` cannot be one path segment; in a query value it can, and is found there.)


def url_pairs() -> list[tuple[str, str, bool]]:
    """(URL, the same URL with an encoded space in another component, is a query column) for each sample as a query
    value (encoded as clients encode it, `/` kept) and as a path segment: the first is redacted whole when nothing in
    it is encoded, the second component by component."""
    pairs = []
    samples = [sample for samples in SAMPLES.values() for sample in samples if "\n" not in sample] + list(URL_SAMPLES)
    for sample in samples:
        value = quote(sample, safe="/:@=")
        for url in (f"https://api.example.com:443/v1/chat?v={value}&z=ab", f"/v1/u/{value}/x?z=ab"):
            pairs.append((url, url.replace("z=ab", "z=a%20b"), False))
        pairs.append((f"v={value}&z=ab", f"v={value}&z=a%20b", True))
    return pairs


@pytest.mark.parametrize("name", _params())
def test_a_url_redacts_alike_with_and_without_an_encoded_character_elsewhere(name: str) -> None:
    rules = RULE_SETS[name]
    redactor = Redactor(rules)
    for is_query in (False, True):
        pairs = [(plain, encoded) for plain, encoded, query in url_pairs() if query == is_query]
        plain = redact_urls(redactor, pa.array([p for p, _ in pairs], pa.string()), is_query=is_query).to_pylist()
        encoded = redact_urls(redactor, pa.array([e for _, e in pairs], pa.string()), is_query=is_query).to_pylist()
        for (url, _), whole, split_url in zip(pairs, plain, encoded, strict=True):
            assert split_url.replace("z=a%20b", "z=ab") == whole, (name, url)
            left = {w for w in _witnesses_of(unquote(split_url)) if w in set(active_samples(rules))}
            if "/u/" in url:  # a bare secret key between a path's slashes is a run of path characters (see url_pairs)
                left -= {WITNESSES[sample] for sample in SAMPLES["aws_secret_key"]}
            assert not left, (name, url)


@pytest.mark.parametrize("encoded", ["", "&z=a%20b"])
def test_a_url_parameter_named_as_a_secret_access_key_is_redacted(encoded: str) -> None:
    key = NAMED_ONLY_KEYS[0]
    urls = [
        f"/v1/x?aws_secret_access_key={key}{encoded}",
        f"/v1/x?a=1&SecretAccessKey={key}{encoded}",
        f"/v1/x?etag={key}{encoded}",
    ]

    redacted = redact_urls(Redactor(DEFAULT_RULES), pa.array(urls, pa.string())).to_pylist()

    assert redacted[:2] == [url.replace(key, "[REDACTED:aws_secret_key]") for url in urls[:2]]
    assert redacted[2] == urls[2]  # not named: the bare form judges it (no digit: kept)


def test_the_order_of_the_rules_asked_changes_no_output() -> None:
    """REDACT's order is the user's; the rules apply in RULES' order whatever it is. Two values that touch used to be
    redacted one way or the other by it (`ip_address` first left twelve digits of `1::4111 1111 1111 1111`)."""
    docs = documents(3) + random_documents(7, 200)
    docs.append(("touching", json.dumps({"v": "1::4111 1111 1111 1111", "n": "a\nb"}), True, True))
    forward = batch_results(tuple(RULES), docs, plain=False)
    rng = random.Random(0)
    for _ in range(3):
        order = list(RULES)
        rng.shuffle(order)
        assert batch_results(tuple(order), docs, plain=False) == forward, order
    assert "1111 1111 1111" not in forward[-1]
    assert batch_results(("ip_address", *DEFAULT_RULES), docs[-1:], plain=False) == forward[-1:]


@pytest.mark.parametrize("name", _params())
def test_random_capture_records_convert_alike_on_both_paths(name: str, tmp_path: Path) -> None:
    """Seeded random JSON payloads (the random documents' values: samples touching escapes, quotes, private-use and
    joint characters, JSON in strings) as requests, and BASE64 responses, through `convert_stream`."""
    rules = RULE_SETS[name]
    rng = random.Random(len(name))
    lines = []
    for number in range(120):
        request = {"messages": [{"role": "user", "content": _random_value(rng)}], "x": _random_value(rng)}
        answer = {"choices": [{"message": {"content": str(_random_value(rng))}}]}
        lines.append(
            record(
                f"r{number}",
                side(json.dumps(request, ensure_ascii=rng.random() < 0.3)),
                side(b64(json.dumps(answer)), "application/json", "BASE64"),
            )
        )
    data = ("\n".join(lines) + "\n").encode()

    fast = converted(rules, data, tmp_path / "fast", plain=False)
    assert fast == converted(rules, data, tmp_path / "plain", plain=True)
    assert len(fast[0]) == 120
