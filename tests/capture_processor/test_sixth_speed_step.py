"""The sixth speed step (issue 27) changes no output. Each switch is held to the code it replaces on inputs built to
break it: `redaction.SHARED_JOIN` (the candidates joined once for the rules that search the same ones, until a rule
changes one) on rows where early rules change candidates that later rules search; `documents.UNICODE_BY_RE2` (the
documents with `\\u` escapes found by one RE2 search over them all) on batches with and without them, with many
escapes in one document, and with a text Arrow cannot hold; `payloads.FACTS_UNCHECKED` (payloads parsed for their
facts without fast_json's digit-run check) on responses whose numbers orjson and `json` read differently, where the
facts read them; `redaction.BUDGET_BY_ARROW` (the budget's bytes summed per document by Arrow) on documents either side
of the budget; `documents.SPLICED` (a document planned as its text and the spans to redact, rendered by copying the
text between changed spans) on seeded documents of escapes, nested JSON, cut literals, stray quotes and secrets."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow as pa
import pytest

from capture_core import documents, fast_json, openai_format, payloads, redaction
from capture_core.documents import DocumentBatch
from capture_core.redaction import DEFAULT_RULES, Redactor
from tests.capture_processor.test_compiled_rules import SECRETS, _rows


def _redacted(rows: list[str | None], rules: tuple[str, ...]) -> tuple[Any, ...]:
    redactor = Redactor(rules)
    texts, hits, over = redactor.redact_owned(pa.array(rows, pa.string()))
    return texts.to_pylist(), hits, over, redactor.counts


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("required_texts", [True, False])
def test_one_join_for_the_rules_redacts_as_a_join_per_rule(
    seed: int, required_texts: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Neighbours that share a boundary (a second pass), a value an earlier rule's marker stands beside, rows where
    # email changes a row that phone and the card rule search next.
    extra = ["a@b.co,415-555-0100,4111111111111111", "x@example.org 123-45-6789 x@example.org", "@", "",
             "415-555-0100 415-555-0100 415-555-0100", "bob@example.com\\nAKIAIOSFODNN7EXAMPLE"]  # fmt: skip
    rows = [*_rows(seed), *extra]
    monkeypatch.setattr(redaction, "REQUIRED_TEXTS", required_texts)
    joins: list[int] = []
    real_join = redaction._join

    def counting_join(encoded: list[bytes], positions: Any) -> Any:
        joins.append(len(positions))
        return real_join(encoded, positions)

    monkeypatch.setattr(redaction, "_join", counting_join)
    rules = (*DEFAULT_RULES, "ip_address")
    shared = _redacted(rows, rules)
    few = ["word 12 text", "bob@example.com", "99.5 x"] * 3  # only email changes: the rules after it share a join
    shared_few = _redacted(few, rules)
    shared_joins = len(joins)
    monkeypatch.setattr(redaction, "SHARED_JOIN", False)
    joins.clear()
    assert _redacted(rows, rules) == shared
    assert _redacted(few, rules) == shared_few
    assert sum(shared[3].values()) > 100  # the rows held secrets, and they were redacted
    assert shared_joins < len(joins)  # the switch did take effect: fewer joins than one per rule and pass


def test_a_join_is_not_reused_after_a_rule_changed_a_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    # email replaces the address; the candidates joined before it would show phone the old text (and the card rule
    # a number that email's marker now stands beside).
    rows = ["mail 4111111111111111@x.co now", "call 415-555-0100", "plain text"]
    fast = _redacted(rows, DEFAULT_RULES)
    monkeypatch.setattr(redaction, "SHARED_JOIN", False)
    assert _redacted(rows, DEFAULT_RULES) == fast
    assert fast[0][1] == "call [REDACTED:phone]"


def _batch_results(texts: list[tuple[str, bool]]) -> list[tuple[str, set[str]]]:
    batch = DocumentBatch(Redactor(DEFAULT_RULES))
    ids = [batch.add(text, as_json=as_json) for text, as_json in texts]
    batch.redact()
    return [batch.result(document) for document in ids]


def _documents(seed: int) -> list[tuple[str, bool]]:
    rng = random.Random(seed)
    out: list[tuple[str, bool]] = []
    for index in range(120):
        secret = rng.choice(SECRETS)
        value = rng.choice(["line\n" + secret, secret + "\tend", 'say "' + secret + '"', "é " + secret, "plain"])
        text = json.dumps({"k": value, "n": index}, ensure_ascii=rng.random() < 0.5)  # \u escapes in some
        if rng.random() < 0.1:
            text = text.replace("é", "\\u00e9")
        out.append((text, rng.random() < 0.9))
    out.append(('{"a": "\\u0040 x\\nbob@example.com"}', True))  # a \u escape and a match after an escape
    out.append(('prose with "quote" and \\n: 415-555-0100', False))  # escaped text that is not JSON
    return out


@pytest.mark.parametrize("seed", range(3))
def test_unicode_escapes_found_by_arrow_plan_alike(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = _documents(seed)
    fast = _batch_results(texts)
    monkeypatch.setattr(documents, "UNICODE_BY_RE2", False)
    assert _batch_results(texts) == fast
    assert sum(bool(rules) for _, rules in fast) > 20


@pytest.mark.parametrize(
    "texts",
    [
        [('{"k": "a\\nb"}', True), ('{"k": "x\\ny bob@example.com"}', True)],  # no \u at all
        [('{"k": "\\u0041\\nb"}', True), ('{"k": "\\u00e9 bob@example.com\\n"}', True)],  # every document has one
        # many in one document, and the shortest
        [('{"k": "' + "\\u4e2d" * 500 + '\\n a@b.co"}', True), ('{"k": "x\\ny"}', True), ('"\\u"', True)],
        [('{"k": "\\\\u0041 \\n bob@example.com"}', True), ('{"k": "end\\\\"}', True), ('{"k": "u\\n"}', True)],
    ],
)
def test_batches_with_no_or_only_unicode_escapes_plan_alike(
    texts: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _batch_results(texts)
    monkeypatch.setattr(documents, "UNICODE_BY_RE2", False)
    assert _batch_results(texts) == fast


def test_a_text_arrow_cannot_hold_takes_the_per_document_path(monkeypatch: pytest.MonkeyPatch) -> None:
    lone = '{"k": "\ud800 \\u0041"}'  # a lone surrogate character (not an escape): UTF-8 cannot hold it
    assert documents._arrow_texts([lone]) is None
    texts = [(lone, True), ('{"k": "\\u0041 bob@example.com\\n"}', True)]
    fast = _batch_results(texts)
    monkeypatch.setattr(documents, "UNICODE_BY_RE2", False)
    assert _batch_results(texts) == fast
    assert fast[1][1] == {"email"}


BIG = ["18446744073709551616", "-9223372036854775809", "99999999999999999999", "18446744073709551615",
       "-9223372036854775808", "1.5", "1e400", "0"]  # fmt: skip


def _facts(text: str) -> openai_format.ExchangeFacts:
    parsed = payloads._parsed(text)
    return openai_format.exchange_facts(parsed, parsed, streamed=False, path=None)


@pytest.mark.parametrize("seed", range(3))
def test_facts_read_alike_without_the_digit_run_check(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    texts = []
    for _ in range(200):
        choices = ", ".join(
            f'{{"index": {rng.choice(BIG)}, "finish_reason": "r{position}"}}' for position in range(rng.randint(0, 4))
        )
        texts.append(
            f'{{"object": "chat.completion", "model": "m", "choices": [{choices}], "stream": {rng.choice(BIG)}, '
            f'"usage": {{"prompt_tokens": {rng.choice(BIG)}, "completion_tokens": {rng.choice(BIG)}}}, '
            f'"details": {{"generated_tokens": {rng.choice(BIG)}}}, "messages": [{rng.choice(BIG)}]}}'
        )
    fast = [_facts(text) for text in texts]
    monkeypatch.setattr(payloads, "FACTS_UNCHECKED", False)
    assert [_facts(text) for text in texts] == fast
    monkeypatch.setattr(fast_json, "FAST", False)
    assert [_facts(text) for text in texts] == fast
    assert any(facts.finish_reasons and len(facts.finish_reasons) > 2 for facts in fast)


def test_a_float_index_is_read_again() -> None:
    text = '{"choices": [{"index": 18446744073709551616, "finish_reason": "a"}, {"index": 1, "finish_reason": "b"}]}'
    assert fast_json.loads_unchecked(text)["choices"][0]["index"] == 1.8446744073709552e19  # orjson's reading
    assert payloads._parsed(text)["choices"][0]["index"] == 18446744073709551616  # json's, as the facts need
    assert _facts(text).finish_reasons == ["b", "a"]


@pytest.mark.parametrize("text", ["-9223372036854775809", "[1, -9999999999999999999]", '{"a": -12345678901234567890}'])
def test_integers_below_orjsons_range_are_read_by_json(text: str) -> None:
    assert fast_json.loads(text) == json.loads(text)
    assert repr(fast_json.loads(text)) == repr(json.loads(text))


@pytest.mark.parametrize("by_length", [True, False])
def test_the_budget_summed_by_arrow_finds_the_same_documents(by_length: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # Three documents: one over the budget only when its rows are summed, one just under, one row on its own over.
    monkeypatch.setattr(redaction, "MAX_CANDIDATES_PER_DOCUMENT", 20)
    monkeypatch.setattr(redaction, "BUDGET_BY_LENGTH", by_length)
    many = " ".join(f"u{index}@example.com" for index in range(12))
    rows = [many, "plain", many, " ".join(["a@b.co"] * 19), "x@y.org", " ".join(["a@b.co"] * 21), many + " " + many]
    owners = [0, 0, 0, 1, 1, 2, 3]

    def redacted() -> tuple[Any, ...]:
        redactor = Redactor(DEFAULT_RULES)
        texts, hits, over = redactor.redact_owned(pa.array(rows, pa.string()), owners)
        return texts.to_pylist(), hits, over, redactor.counts, redactor.over_budget

    fast = redacted()
    monkeypatch.setattr(redaction, "BUDGET_BY_ARROW", False)
    assert redacted() == fast
    assert fast[2] == {0, 2, 3}


def test_a_literal_is_encoded_as_json_dumps_encodes_it() -> None:
    rng = random.Random(5)
    alphabet = ['"', "\\", "/", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "\u2028", "\ud800", "\udfff", "😀", "a", " "]
    values = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(3000)]
    assert [documents.encode_literal(value) for value in values] == [
        json.dumps(value, ensure_ascii=False)[1:-1] for value in values
    ]


FRAGMENTS = ['"', '\\"', "\\\\", "\\n", "\\u00e9", "\\ud83d", " ", ":", ",", "{", "}", "[", "]", "abc", "mail",
             "bob@example.com", '{\\"k\\": \\"v\\\\n x\\"}', '"long enough value"', '"ab"', "é", "\n", "\\",
             '{\\"to\\": \\"carol@example.org\\\\n\\"}', "415-555-0100", "\\nAKIAIOSFODNN7EXAMPLE", "\ue006", "\ue000",
             '\\\\\\"', '"sk-' + "B" * 24 + '"']  # fmt: skip


def _spliced_text(batch: DocumentBatch, node: Any) -> list[tuple[str, Any]]:
    """Each span's text and what it holds: a piece's text, or a nested plan's spans."""
    out: list[tuple[str, Any]] = []
    for start, end, value, literal in node.spans:
        held = batch._pieces[value] if isinstance(value, int) else _spliced_text(batch, value)
        out.append((node.text[start:end], held, literal))
    return out


def test_the_spliced_plan_holds_the_pieces_of_the_plan_part_by_part(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(documents, "MATCHLESS", False)  # the same pieces (the seventh step keeps some out: its test)
    rng = random.Random(2706)
    for _ in range(600):
        text = "".join(rng.choices(FRAGMENTS, k=rng.randint(0, 40)))
        spliced, parts = DocumentBatch(Redactor(DEFAULT_RULES)), DocumentBatch(Redactor(DEFAULT_RULES))
        spliced._owner = parts._owner = 3
        node = spliced._plan_spliced(text, 1)
        parts._plan_json(text, 1)
        assert spliced._pieces == parts._pieces and spliced._owners == parts._owners, text
        for span_text, held, literal in _spliced_text(spliced, node):  # each span is what its piece was cut from
            if not literal:
                assert span_text == held, text
            elif isinstance(held, str):
                assert documents.decode_literal(span_text) == held, text


@pytest.mark.parametrize("seed", range(3))
def test_spliced_documents_render_as_documents_rendered_part_by_part(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    texts = []
    for _ in range(300):
        text = "".join(rng.choices(FRAGMENTS, k=rng.randint(0, 50)))
        texts.append((text, rng.random() < 0.8))
    texts += [
        (json.dumps({"args": json.dumps({"to": "bob@example.com", "n": "x\ny"}), "k": "a\nb"}), True),  # nested
        ('{"cut": "mail bob@example.com\\nand more', True),  # cut inside a literal
        ('{"a": "' + "bob@example.com\\n" * 3 + '", "b": "short", "c": "\\nAKIAIOSFODNN7EXAMPLE"}', True),
    ]
    fast = _batch_results(texts)
    monkeypatch.setattr(documents, "SPLICED", False)
    assert _batch_results(texts) == fast
    assert sum(bool(rules) for _, rules in fast) > 30
    assert "bob@example.com" not in fast[-3][0] and "bob@example.com" not in fast[-2][0]
