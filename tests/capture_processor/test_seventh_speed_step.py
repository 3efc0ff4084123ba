"""The seventh speed step (issue 27) changes no output. Each switch is held to the code it replaces on inputs built to
break it: `documents.UNICODE_IN_SCAN` (the documents with a `\\u` escape found in the combined scan's own join of the
decoded documents) on fuzzed texts of backslashes, `u`s, quotes and escapes, where the decoded text must hold a `\\u`
exactly where the text as written does, and on batches of documents with secrets after escapes, in other charsets,
with the joint and sentinel characters; `redaction.BUDGET_BY_TOTAL` (the budget's bound checked first on all the rows
together) on documents either side of the bound; `fast_json.DUMPS_BY_ORJSON` (a reassembled stream written by orjson
when it holds no float) on values of every JSON type, controls, surrogates, integers either side of 64 bits, floats
orjson writes otherwise, non-string keys and deep nesting; and the split merge's pieces cut by one slice object, on
streams whose pieces are empty, escaped, or hold the separator's characters."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow as pa
import pytest

from capture_core import documents, fast_json, openai_format, redaction
from capture_core.redaction import DEFAULT_RULES, Redactor, rows_holding_unicode_escape
from tests.capture_processor import transcripts
from tests.capture_processor.test_compiled_rules import SECRETS
from tests.capture_processor.test_sixth_speed_step import _batch_results, _documents
from tests.capture_processor.transcripts import split

_ALPHABET = ["\\", "\\", "\\", "u", "u", "n", "t", '"', "/", "0", "4", "a", " ", "é", "\ue006", "\ue000"]


def _fuzzed_texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 16))) for _ in range(count)]


@pytest.mark.parametrize("seed", range(3))
def test_the_decoded_texts_hold_a_unicode_escape_where_the_texts_do(seed: int) -> None:
    texts = _fuzzed_texts(seed, 4000)
    decoded = documents._decoded_for_scan(pa.array(texts, pa.string())).to_pylist()
    assert ["\\u" in text for text in decoded] == ["\\u" in text for text in texts]
    assert 400 < sum("\\u" in text for text in texts) < 3600  # both kinds, many of each


@pytest.mark.parametrize("seed", range(3))
def test_one_join_finds_what_the_scan_and_the_unicode_search_find(seed: int) -> None:
    # Rows after `first` (the pieces that share the scan) hold \u too: they must not be reported.
    rng = random.Random(seed)
    rows = [text + rng.choice(["", " " + rng.choice(SECRETS), "\\u0040"]) for text in _fuzzed_texts(seed + 10, 300)]
    first = 200
    redactor = Redactor((*DEFAULT_RULES, "ip_address"))
    column = pa.array(rows, pa.string())
    found = redactor.scan_finding_unicode_escapes(column, first)
    assert found is not None
    matched, unicode_rows = found
    assert matched.to_pylist() == redactor.scan(column).to_pylist()
    assert unicode_rows == rows_holding_unicode_escape(column.slice(0, first))
    assert unicode_rows == [row for row in range(first) if "\\u" in rows[row]]
    assert redactor.scan_finding_unicode_escapes(column, 0) is not None
    assert redactor.scan_finding_unicode_escapes(column, 0)[1] == []  # type: ignore[index]


def _hostile_documents(seed: int) -> list[tuple[str, bool]]:
    rng = random.Random(seed)
    out = _documents(seed)
    for index in range(80):
        secret = rng.choice(SECRETS)
        value = rng.choice([
            "\\\\u0040 " + secret,  # a written \u, not an escape, then a secret
            "\\\\" + "\n" + secret,  # an escaped backslash, a line break
            "\ue006\ue006" + secret + "\ue000",  # the joint and a sentinel around a secret
            "café\\u " + secret + "\\",
            json.dumps({"inner": "x\n" + secret}),  # nested JSON with escapes
        ])
        text = json.dumps({"k": value, "i": index}, ensure_ascii=rng.random() < 0.5)
        out.append((text, rng.random() < 0.8))
    out.append(('{"k": "\\\\\\u0041KIAIOSFODNN7EXAMPLE"}', True))  # an escaped backslash, then a real \u escape
    out.append(('{"k": "\\\\\\\\u0041 x\\n bob@example.com"}', True))  # a written \u after two escaped backslashes
    return out


@pytest.mark.parametrize("seed", range(4))
def test_unicode_escapes_found_in_the_scan_plan_alike(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = _hostile_documents(seed)
    fast = _batch_results(texts)
    monkeypatch.setattr(documents, "UNICODE_IN_SCAN", False)
    assert _batch_results(texts) == fast
    monkeypatch.setattr(documents, "UNICODE_BY_RE2", False)
    assert _batch_results(texts) == fast
    assert sum(bool(rules) for _, rules in fast) > 50


@pytest.mark.parametrize(
    "texts",
    [
        [('{"k": "a\\nb"}', True), ('{"k": "x\\ny bob@example.com"}', True)],
        [('{"k": "\\u0041\\nb"}', True), ('{"k": "\\u00e9 bob@example.com\\n"}', True)],
        [('"\\u"', True), ('{"k": "x\\ny"}', True), ("plain bob@example.com", False)],
        [("no escape bob@example.com", False), ('{"k": "\\u0040 x"}', True), ("raw \\u0040 415-555-0100", False)],
    ],
)
def test_batches_with_and_without_unicode_escapes_plan_alike(
    texts: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _batch_results(texts)
    monkeypatch.setattr(documents, "UNICODE_IN_SCAN", False)
    assert _batch_results(texts) == fast


@pytest.mark.parametrize("by_length", [True, False])
@pytest.mark.parametrize("repeat", [19, 20, 21, 40])
def test_the_budget_checked_on_the_total_finds_the_same_documents(
    by_length: bool, repeat: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bound is least_chars (6, email) * 20 = 120 bytes: rows whose total is under, at and over it, one document
    # over the budget only when its rows are summed, and one just under.
    monkeypatch.setattr(redaction, "MAX_CANDIDATES_PER_DOCUMENT", 20)
    monkeypatch.setattr(redaction, "BUDGET_BY_LENGTH", by_length)
    cases = [
        (["a@b.co"] * repeat, [0] * repeat),
        (["a@b.co"] * repeat, list(range(repeat))),
        ([" ".join(["a@b.co"] * repeat), "plain", "x@y.org"], [0, 0, 1]),
        (["a@b.co " * 10, "a@b.co " * 10 + "a@b.co", "415-555-0100"], [0, 0, 1]),
    ]

    def redacted(rows: list[str], owners: list[int]) -> tuple[Any, ...]:
        redactor = Redactor(DEFAULT_RULES)
        texts, hits, over = redactor.redact_owned(pa.array(rows, pa.string()), owners)
        return texts.to_pylist(), hits, over, redactor.counts, redactor.over_budget

    fast = [redacted(*case) for case in cases]
    monkeypatch.setattr(redaction, "BUDGET_BY_TOTAL", False)
    assert [redacted(*case) for case in cases] == fast
    monkeypatch.setattr(redaction, "BUDGET_BY_ARROW", False)
    assert [redacted(*case) for case in cases] == fast
    assert fast[0][2] == ({0} if repeat > 20 else set())


@pytest.mark.parametrize("pieces", [3, 17, 60])
def test_the_split_merge_cuts_every_piece_alike(pieces: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Empty pieces (an event exactly the template's length), escapes, quotes, the separator's own characters.
    answers = [
        "x" * pieces,
        'He said "' + SECRETS[0] + '" \\ then\tdata: ' + " ".join(SECRETS),
        "}]}" * pieces + "data: " * 3,
    ]
    for answer in answers:
        chunks = split(answer, pieces)
        streams = [transcripts.vllm_chat(chunks), transcripts.vllm_chat(["", *chunks, "", ""]),
                   transcripts.vllm_completion(chunks)]  # fmt: skip
        for stream in streams:
            merged = openai_format.reassemble_stream(stream)
            with monkeypatch.context() as plain:
                plain.setattr(openai_format, "STREAM_SPLIT", False)
                plain.setattr(openai_format, "TEMPLATE_MERGE", False)
                assert openai_format.reassemble_stream(stream) == merged


_TEXTS = ["", "a", '"', "\\", "/", "\n\r\t\b\f", "\x00\x1f\x7f\x80\x9f", "é", "\u2028\u2029", "😀", "\ufeff",
          "\ue000\ue006", "</script>", "\ud800", "\udfff x"]  # fmt: skip
_NUMBERS = [0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1, 10**30, True, False, None, 1.5, 1e-05,
            1.5212603486793025e-05, 1e16, -0.0, float("nan"), float("inf")]  # fmt: skip


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.random()
    if depth > 3 or kind < 0.35:
        return rng.choice(_TEXTS) + rng.choice(_TEXTS) if rng.random() < 0.6 else rng.choice(_NUMBERS[:11])
    if kind < 0.4:
        return rng.choice(_NUMBERS)  # a float now and then: json's text
    if kind < 0.7:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys: list[Any] = [rng.choice(_TEXTS) + str(index) for index in range(rng.randint(0, 4))]
    if rng.random() < 0.05:
        keys.append(rng.choice([1, 2.5, None, True]))  # json writes these keys as text; orjson refuses them
    return {key: _value(rng, depth + 1) for key in keys}


@pytest.mark.parametrize("seed", range(3))
def test_a_value_is_written_as_json_dumps_writes_it(seed: int) -> None:
    rng = random.Random(seed)
    values = [_value(rng) for _ in range(3000)]
    values += [{"deep": [[[[[[]]]]]] * 2}, json.loads("[" * 300 + "]" * 300), (1, "a"), {"t": (2, 3)}, [{"x": 1.0}]]
    plain = [json.dumps(value, ensure_ascii=False, separators=(",", ":")) for value in values]
    assert [fast_json.dumps_compact(value) for value in values] == plain
    fast = sum(not fast_json._holds_other_than_plain(value) for value in values)
    assert 1000 < fast < len(values)  # both paths taken


def test_a_reassembled_stream_is_written_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    from capture_core import payloads

    plain = transcripts.vllm_chat(split("hello there é \u2028 " + SECRETS[0], 5))
    assert '"logprobs":null' in plain
    logprobs = plain.replace('"logprobs":null', '"logprobs":{"content": [{"token": "x", "logprob": -1.5e-05}]}')
    streams = [plain, logprobs]
    fast = [payloads.decode_side(stream, "JSON", "text/event-stream", False) for stream in streams]
    assert all(side.streamed and side.text is not None for side in fast)
    monkeypatch.setattr(fast_json, "DUMPS_BY_ORJSON", False)
    assert [payloads.decode_side(stream, "JSON", "text/event-stream", False) for stream in streams] == fast
    assert "-1.5e-05" in (fast[1].text or "")


def _keyed_documents(seed: int) -> list[tuple[str, bool]]:
    """Documents whose short keys, short values and gaps hold secrets or not, repeated (the remembered texts), with a
    secret exactly at the length where texts stop being judged, numbers in the gaps, lone surrogates and sentinels."""
    rng = random.Random(seed)
    keys = ["messages", "content", "a@b.co", "bob@example.com", "x" * 31 + "@", "y" * 26 + "a@b.co",
            "z" * 27 + "a@b.co", "AKIAIOSFODNN7EXAMPLE", "\ue000\ue006key", "415-555-0100", "role",
            "temperature"]  # fmt: skip
    out: list[tuple[str, bool]] = []
    for index in range(150):
        fields = []
        for _ in range(rng.randint(1, 6)):
            key = rng.choice(keys)
            value = rng.choice([*keys, f"line\\n{rng.choice(SECRETS)}", "plain\\ntext", "\\ud800 x", "é\\u00e9"])
            fields.append(f'"{key}": "{value}"')
            if rng.random() < 0.3:
                fields.append(f'"n{index}": {rng.choice(["415-555-0100", "512", "4111111111111111", "0.7"])}')
        separator = rng.choice([", ", ",\\n ", ", 123-45-6789, "])
        out.append(("{" + separator.join(fields) + "}", rng.random() < 0.9))
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("entries", [4096, 2])
def test_short_texts_without_a_match_kept_as_written_redact_alike(
    seed: int, entries: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redaction, "MATCHLESS_ENTRIES", entries)
    texts = _keyed_documents(seed) + _hostile_documents(seed)
    fast = _batch_results(texts)
    monkeypatch.setattr(documents, "MATCHLESS", False)
    assert _batch_results(texts) == fast
    monkeypatch.setattr(documents, "SPLICED", False)
    assert _batch_results(texts) == fast
    assert sum(bool(rules) for _, rules in fast) > 100


def test_matchless_judges_short_texts_only() -> None:
    redactor = Redactor(DEFAULT_RULES)
    assert redactor.matchless("messages") is True
    assert redactor.matchless("a@b.co") is False
    assert redactor.matchless("x" * 26 + "a@b.co") is False  # 32 characters: judged
    assert redactor.matchless("x" * 33) is None  # longer: not judged
    assert redactor.matchless("\ud800 lone") is None  # UTF-8 cannot hold it: not judged
    assert redactor.matchless(": 415-555-0100, ") is False
    assert redactor.matchless(": 512, ") is True
    assert Redactor(()).matchless("a@b.co") is None  # no rules: nothing to judge with


_DISRUPTIONS = [": ping\n\n", "event: delta\n", "data: [DONE]\n\n", "\n", "data:", "retry: 5\n\n", "data: {}\n\n",
                "id: 7\n", "\r\n"]  # fmt: skip


def _outcome(stream: str) -> Any:
    try:
        return openai_format.reassemble_stream(stream)
    except openai_format.NotReassembled as error:
        return ("refused", str(error))


@pytest.mark.parametrize("seed", range(3))
def test_a_stream_simple_but_in_one_part_merges_alike(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # A line break, a comment, an `event:` or `id:` line, an early [DONE], a `data:` without its space, put in the
    # head, the middle or the tail of the stream: the counts on the head and the tail alone (SIMPLE_BY_PARTS) must
    # send such a stream where the count over the whole stream does.
    rng = random.Random(seed)
    streams = []
    for _ in range(150):
        answer = 'He said "' + rng.choice(SECRETS) + '"\n ' + " ".join(rng.sample(SECRETS, 3))
        stream = transcripts.vllm_chat(split(answer, rng.randint(3, 30)))
        for _ in range(rng.randint(0, 2)):
            cuts = [index + 2 for index in range(len(stream)) if stream.startswith("\n\ndata: ", index)]
            at = rng.choice([*cuts[:2], *cuts[-2:], *rng.sample(cuts, min(3, len(cuts)))])
            stream = stream[:at] + rng.choice(_DISRUPTIONS) + stream[at:]
        if rng.random() < 0.2:
            stream = stream.replace("\n\ndata: ", "\n\ndata:", 1) if rng.random() < 0.5 else stream.rstrip("\n")
        streams.append(stream)
    fast = [_outcome(stream) for stream in streams]
    monkeypatch.setattr(openai_format, "SIMPLE_BY_PARTS", False)
    assert [_outcome(stream) for stream in streams] == fast
    assert 20 < sum(type(outcome) is dict for outcome in fast) < len(fast)


def _middle_pieces_by_count(middle: str, separator: str) -> list[str] | None:
    """`_middle_pieces` as the sixth step wrote it: the separators counted, not the middle rebuilt."""
    after, before = separator.split("\n\ndata: ", 1)
    events = (before + middle + after).split("\n\ndata: ")
    if len(events) - 1 != middle.count(separator):
        return None
    joined = "".join([event[len(before) : len(event) - len(after)] for event in events])
    if "\n" in joined:
        return None
    if "\\" not in joined and '"' not in joined and joined.isprintable():
        return [joined]
    if "\\u" in joined or ("\\" + after + "\n\n") in middle or middle.endswith("\\"):
        return None
    try:
        decoded = json.loads('"' + joined + '"')
    except ValueError:
        return None
    return [decoded] if type(decoded) is str else None


@pytest.mark.parametrize("seed", range(3))
def test_the_middle_rebuilt_from_its_pieces_cuts_as_the_count_did(seed: int) -> None:
    # Middles of common events with pieces that hold the separator's parts, `\n\ndata: ` itself, a line break, a
    # short event (shorter than the template), a stray `data:` event, separators that overlap, empty pieces.
    rng = random.Random(seed)
    before, after = '{"id":"c","choices":[{"index":0,"delta":{"content":"', '"},"finish_reason":null}]}'
    separator = after + "\n\ndata: " + before
    parts = ["", "x", "a b", '\\"', "\\\\", "\\n", "\n", "\n\ndata: ", after, before, after[:5], before[-4:], "data: ",
             "\\u00e9", "é", '"}', separator[:9], separator[-9:]]  # fmt: skip
    accepted = 0
    for _ in range(3000):
        pieces = ["".join(rng.choices(parts, k=rng.randint(0, 3))) for _ in range(rng.randint(1, 8))]
        middle = separator.join(pieces)
        if rng.random() < 0.3:  # a corruption: a cut, a doubled or shortened separator, an extra event
            at = rng.randint(0, len(middle))
            middle = middle[:at] + rng.choice(["", separator, separator[:-3], "\n\ndata: {}", after]) + middle[at:]
        expected = _middle_pieces_by_count(middle, separator)
        assert openai_format._middle_pieces(middle, separator) == expected, middle
        accepted += expected is not None
    assert 100 < accepted < 2900  # both answers, many of each
