"""Redaction of whole documents on their decoded text, many documents at a time.

A JSON document is redacted string value by string value, after unescaping: in the raw text a
line break is the two characters `\\` `n`, so `\\nAKIA...` hides a key from any rule whose boundary
is a non-word character, and `\\u0040` hides the `@` of an email. Each JSON string literal is
found with one regex (no recursion, so 5,000-deep nesting and a payload cut mid-document are no
different from a tidy one), decoded, and handed to the redactor as one piece; a literal whose
decoded value is itself JSON with escapes (tool-call `arguments`, a capture envelope in the
quarantine) is split again, up to MAX_DEPTH levels. The text between literals is redacted as it
is, so a malformed document with secrets outside any string loses them too. Only literals that
changed are re-encoded; the document otherwise keeps its bytes, and stays valid JSON.

A document whose text has no backslash at all is one piece: its literals decode to themselves,
and no rule matches across a quote (see redaction.py), so this fast path gives the same result.

Everything is planned first and redacted in one batch, so the RE2 pass runs over all pieces of a
chunk at once.
"""

from __future__ import annotations

import json
import json.encoder
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from capture_core import fast_json
from capture_core.redaction import (
    NAMED_SECRET_KEY,
    NAMED_SECRET_PREFIX,
    OVER_BUDGET,
    OVER_BUDGET_MARKER,
    Redactor,
    rows_holding_unicode_escape,
)

MAX_DEPTH = 4
# The speed switch of the one combined scan per batch (off in the differential test's plain path: two scans).
SHARED_SCAN = True
# The speed switch of planning a document as its text and the spans to redact, rendered by copying the text between
# changed spans (off in the plain path: every part of the text kept as a part, rendered part by part).
SPLICED = True
# The speed switch of finding the documents with \\u escapes by one RE2 search over all of them (off in the plain path:
# a substring search per document in Python).
UNICODE_BY_RE2 = True
# The speed switch of that search done in the combined scan's own join of the decoded documents (off in the plain path:
# a join of the documents for it, and the others filtered for the scan).
UNICODE_IN_SCAN = True
# The speed switch of keeping short literals and gaps in which no rule matches out of the pieces (Redactor.matchless,
# remembered per text; off in the plain path: each is a piece that every rule searches).
MATCHLESS = True
# Bounded work per record: a document that may hold a match and has more string literals than this is not split
# value by value (each literal is a few Python objects); it is replaced whole, like one over the match budget.
MAX_LITERALS_PER_DOCUMENT = 100_000
# Text between string literals, or a literal's body, shorter than this cannot hold any rule's match ("a@b.co" is 6;
# a body decodes to at most as many characters as it has).
MIN_GAP = 6

# A secret access key named by its key (`{"SecretAccessKey": "..."}`): redacted as one text, the document's named form
# spans the key, the quotes and the value; planned literal by literal, the value alone has only the bare form, which
# asks for upper and lower case and a digit (about one real key in a thousand has no digit). So the value of a key that
# names one is redacted after NAMED_SECRET_PREFIX (redaction.py), taken off after.
NAMED_SECRET_CHARS = 40  # a value shorter than this holds no secret access key
_KEY_VALUE_GAP = re.compile(r"\s*[:=]\s*", re.ASCII)  # between the key's closing quote and the value's opening one
_LITERAL = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)("?)', re.S)
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.S)
_encode_string: Callable[[str], str] = json.encoder.encode_basestring
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def decode_literal(body: str) -> str:
    """The value of a JSON string literal's body; lenient: an invalid or cut escape is kept as
    written, and a lone surrogate (`\\ud800`, which UTF-8 cannot hold) becomes U+FFFD."""
    if "\\" not in body:
        return body
    try:
        value: str = fast_json.loads_unchecked(f'"{body}"')  # a JSON string literal: no number to check
    except ValueError:
        value = _ESCAPE.sub(_unescape, body)
    if "\\u" in body or "\\U" in body:
        value = without_lone_surrogates(value)
    return value


def without_lone_surrogates(value: str) -> str:
    # Pairs written as two escapes come out of json.loads as a pair of surrogates: join them.
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _unescape(match: re.Match[str]) -> str:
    escape = match[1]
    if escape[0] == "u" and len(escape) == 5:
        return chr(int(escape[1:], 16))
    return _SIMPLE_ESCAPES.get(escape, match[0])


def string_values(text: str) -> list[str]:
    """The decoded value of every string literal in a JSON-ish text, in order."""
    return [decode_literal(match[1]) for match in _LITERAL.finditer(text)]


def encode_literal(value: str) -> str:
    # What json.dumps(value, ensure_ascii=False)[1:-1] gives (JSONEncoder.encode calls this function for a str), without
    # an encoder object built per call.
    return _encode_string(value)[1:-1]


def looks_like_json(text: str) -> bool:
    stripped = text.lstrip()[:1]
    return stripped in ("{", "[")


def holds_escaped_json(text: str) -> bool:
    """True when a text may hold JSON with escapes anywhere in it, not only when it starts with `{`: a prose
    prompt that pastes a service-account file (`Here it is: {"private_key": "-----BEGIN...\\n..."}`), tool-call
    arguments with a prefix. Such a text is split at its string literals like a document: the literals are
    decoded, and what lies between them is redacted as written."""
    return "\\" in text and '"' in text


@dataclass
class _Node:
    """A document as pieces: str (kept as is), int (index of a piece to redact), or a literal."""

    parts: list[str | int | _Literal] = field(default_factory=list)


@dataclass(slots=True)
class _Literal:
    body: str  # as written, without quotes
    value: _Node | int  # the decoded value: one piece, or split again when it is JSON itself
    closed: bool  # False: the document was cut inside this literal


@dataclass(slots=True)
class _Spliced:
    """A document as its text and the spans of it to redact (SPLICED): `(start, end, value, literal)`, where `value`
    is the index of a piece (or, for a literal, its decoded value split again) and `literal` says the span is a
    literal's body, re-encoded when its value changed. Rendering copies the text between changed spans only."""

    text: str
    spans: list[tuple[int, int, _Spliced | int, bool]] = field(default_factory=list)


_Plan = _Node | _Spliced | int


# A run of a JSON number's characters and markers, holding at least one marker: a rule matched inside a number (a card
# number written as a number, `"card": 4111111111111111`), between string literals, where its marker stands unquoted.
_MARKER_TEXT = r"\[REDACTED:[a-z0-9_]+\]"
_NUMBER_WITH_MARKERS = re.compile(rf"(?:[-+0-9.eE]|{_MARKER_TEXT})*{_MARKER_TEXT}(?:[-+0-9.eE]|{_MARKER_TEXT})*")
_MARKERS = re.compile(_MARKER_TEXT)


def numbers_as_strings(original: str, redacted: str) -> str:
    """``redacted`` with each number a rule matched in (outside every string literal) written as one JSON string of its
    markers, so that a document that was valid JSON stays valid JSON (``"card": "[REDACTED:payment_card]"``). A
    document that was not valid JSON keeps its bytes as redacted. Markers inside string literals are left alone."""
    tokens = _LITERAL.split(redacted)  # [gap, body, close, gap, ..., gap]
    gaps = range(0, len(tokens), 3)
    if not any("[REDACTED:" in tokens[index] for index in gaps):
        return redacted
    try:
        json.loads(original)
    except (ValueError, RecursionError):
        return redacted
    for index in gaps:
        if "[REDACTED:" in tokens[index]:
            tokens[index] = _NUMBER_WITH_MARKERS.sub(
                lambda match: '"' + "".join(_MARKERS.findall(match[0])) + '"', tokens[index]
            )
    return tokens[0] + "".join(
        '"' + tokens[index] + tokens[index + 1] + tokens[index + 2] for index in range(1, len(tokens), 3)
    )


class DocumentBatch:
    """Documents added one by one, redacted together, read back by the id `add` returned."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        # A text shorter than every active rule's shortest match holds none (MIN_GAP bounds it: the default rules' is 6;
        # `ip_address`, off by default, matches `1::` in 3).
        self._min_gap = min(MIN_GAP, redactor.least_chars)
        self._json: set[int] = set()  # documents added as JSON
        self._gap_changed = False  # set while a document renders: a match outside its string literals was replaced
        self._pieces: list[str] = []
        self._documents: list[tuple[str, _Plan | None]] = []  # None: clean, nothing to redact
        self._escaped: list[int] = []  # JSON documents with escapes, planned only if they need it
        self._escaped_texts: list[str] = []  # their texts
        self._redacted: list[str] | None = None
        self._hits: dict[int, set[str]] = {}
        self._owners: list[int] = []  # the document of each piece
        self._document_rules: dict[int, set[str]] = {}  # documents where something was redacted
        self._over: set[int] = set()  # documents over the redaction budget: replaced whole
        self._over_planned: set[int] = set()  # those with too many string literals to split
        self._names_secrets = any(rule.name == "aws_secret_key" for rule in redactor.rules)
        self._prefixed: list[int] = []  # the pieces redacted after NAMED_SECRET_PREFIX

    def add(self, text: str, *, as_json: bool) -> int:
        self._owner = len(self._documents)
        if as_json:
            self._json.add(self._owner)
        if "\\" in text and (as_json or '"' in text):  # JSON, or a text that may hold some (holds_escaped_json)
            self._escaped.append(len(self._documents))
            self._escaped_texts.append(text)
            plan: _Plan | None = None
        else:
            plan = self._piece(text)
        self._documents.append((text, plan))
        return len(self._documents) - 1

    def redact(self) -> None:
        may_match = self._plan_escaped()
        if self._pieces:
            redacted, self._hits, self._over = self._redactor.redact_owned(
                pa.array(self._pieces, pa.string()), self._owners, may_match
            )
            self._redacted = redacted.to_pylist() if self._hits or self._over else self._pieces
            if self._prefixed and self._redacted is not self._pieces:
                for piece in self._prefixed:  # the prefix is a boundary no rule changes: it is there, as it was
                    self._redacted[piece] = self._redacted[piece].removeprefix(NAMED_SECRET_PREFIX)
        else:
            self._redacted = []
        if self._over_planned:
            self._over |= self._over_planned
            self._redactor.count_over_budget(len(self._over_planned))
        for piece, rules in self._hits.items():
            self._document_rules.setdefault(self._owners[piece], set()).update(rules)

    def _plan_escaped(self) -> pa.Array | None:
        """Most JSON documents have escapes (every line break is one) and nothing to redact. One RE2
        pass over them with the two-character escapes decoded finds those that may: its text equals
        the decoded values but for the quotes between them, which no rule matches across, so it never
        misses a match. Documents with \\u escapes, which it cannot decode, are planned regardless.

        The same pass (SHARED_SCAN) takes the pieces already planned (documents without escapes) along, so that the
        combined pattern is compiled and warmed once per chunk, not twice: returned, the rows of the pieces that may
        match, those planned here all counted as such (the redactor matches each rule row by row after it)."""
        if not self._escaped or not self._redactor.rules:
            return None
        # Those with a \\u escape are found in the scan's own join (UNICODE_IN_SCAN); else only the documents without
        # one go to the scan: those with one are found by one RE2 search over them all (UNICODE_BY_RE2), or by
        # Python's substring search, document by document.
        if UNICODE_IN_SCAN and UNICODE_BY_RE2 and (escaped_column := _arrow_texts(self._escaped_texts)) is not None:
            in_scan = self._flagged_in_one_scan(escaped_column)
            if in_scan is not None:
                return self._plan_flagged(*in_scan)
        flagged: set[int]
        escaped = _arrow_texts(self._escaped_texts) if UNICODE_BY_RE2 else None
        unicode_rows = rows_holding_unicode_escape(escaped) if escaped is not None else None
        if escaped is not None and unicode_rows is not None:
            if unicode_rows:
                flagged = {self._escaped[position] for position in unicode_rows}
                others = [document for document in self._escaped if document not in flagged]
                keep = [True] * len(escaped)
                for position in unicode_rows:
                    keep[position] = False
                texts = pc.filter(escaped, pa.array(keep, pa.bool_()))
            else:
                flagged, others, texts = set(), self._escaped, escaped
        else:
            unicode: list[int] = []
            others = []
            for document in self._escaped:
                (unicode if "\\u" in self._documents[document][0] else others).append(document)
            flagged = set(unicode)
            texts = pa.array([self._documents[document][0] for document in others], pa.string())
        planned = len(self._pieces)
        pieces_may_match: pa.Array | None = None
        if others:
            decoded = self._with_pieces(_decoded_for_scan(texts), planned)
            matched = self._redactor.scan(decoded)
            if SHARED_SCAN and planned:
                pieces_may_match = matched.slice(len(others))
                matched = matched.slice(0, len(others))
            flagged.update(others[position] for position in pc.indices_nonzero(matched).to_pylist())
        return self._plan_flagged(flagged, planned, pieces_may_match)

    def _with_pieces(self, decoded: pa.Array, planned: int) -> pa.Array:
        """The decoded documents, and the pieces planned so far after them when they share the scan (SHARED_SCAN)."""
        if SHARED_SCAN and planned:
            return pa.concat_arrays([decoded, pa.array(self._pieces, pa.string())])
        return decoded

    def _flagged_in_one_scan(self, escaped: pa.Array) -> tuple[set[int], int, pa.Array | None] | None:
        """`_plan_escaped`'s flagged documents, with those holding a `\\u` found in the scan's own join
        (UNICODE_IN_SCAN): every escaped document is decoded and scanned (those with a `\\u` are planned whatever the
        scan says), and the `\\u` search reads the decoded texts, which hold one exactly where the document does:
        neither decoding pass takes a backslash that a `u` follows, and the second leaves one backslash of each pair in
        front of it (test_seventh_speed_step holds this to the search of the documents as written). Returned with the
        pieces planned before and which of them may match; None without google-re2 (the separate passes)."""
        planned = len(self._pieces)
        found = self._redactor.scan_finding_unicode_escapes(
            self._with_pieces(_decoded_for_scan(escaped), planned), len(escaped)
        )
        if found is None:
            return None
        matched, unicode_rows = found
        pieces_may_match: pa.Array | None = None
        if SHARED_SCAN and planned:
            pieces_may_match = matched.slice(len(escaped))
            matched = matched.slice(0, len(escaped))
        positions = set(unicode_rows)
        positions.update(pc.indices_nonzero(matched).to_pylist())
        return {self._escaped[position] for position in positions}, planned, pieces_may_match

    def _plan_flagged(self, flagged: set[int], planned: int, pieces_may_match: pa.Array | None) -> pa.Array | None:
        for document in self._escaped:  # in the order they were added, as one pass over all of them gave
            if document not in flagged:
                continue
            text = self._documents[document][0]
            if text.count('"') > 2 * MAX_LITERALS_PER_DOCUMENT:  # bounded work: not split, replaced whole
                self._over_planned.add(document)
                continue
            self._owner = document
            self._documents[document] = (text, self._plan_spliced(text, 1) if SPLICED else self._plan_json(text, 1))
        if pieces_may_match is None:
            return None
        return pa.concat_arrays([pieces_may_match, pa.array([True] * (len(self._pieces) - planned), pa.bool_())])

    def over_budget(self, document: int) -> bool:
        """True when the document held more candidate matches than the budget and was replaced whole."""
        return document in self._over

    def original(self, document: int) -> str:
        return self._documents[document][0]

    def result(self, document: int) -> tuple[str, set[str]]:
        """The document's redacted text and the rules that hit it."""
        assert self._redacted is not None, "redact() first"
        if document in self._over:
            return OVER_BUDGET_MARKER, {OVER_BUDGET}
        text, plan = self._documents[document]
        rules = self._document_rules.get(document)
        if plan is None or rules is None:
            return text, set()
        self._gap_changed = isinstance(plan, int)  # a document redacted as one text: where its matches were is unknown
        rendered = self._render_spliced(plan) if isinstance(plan, _Spliced) else self._render(plan)
        if self._gap_changed and document in self._json:
            rendered = numbers_as_strings(text, rendered)
        return rendered, set(rules)

    def _piece(self, text: str) -> int:
        self._pieces.append(text)
        self._owners.append(self._owner)
        return len(self._pieces) - 1

    def _plan_json(self, text: str, depth: int) -> _Node:
        node = _Node()
        parts = node.parts
        pieces, owners, owner = self._pieces, self._owners, self._owner  # _piece, inline: a call per literal costs
        names_secrets = self._names_secrets
        # One split in C: the gaps and each literal's body and closing quote, [gap, body, close, gap, ..., gap].
        min_gap = self._min_gap
        tokens = _LITERAL.split(text)
        self._gap(node, tokens[0])
        for index in range(1, len(tokens), 3):
            body = tokens[index]
            if len(body) < min_gap:  # a key or a short value: decodes to fewer characters than any match has
                parts.append('"' + body + tokens[index + 1])  # the literal as written
            else:
                value = decode_literal(body)
                if depth < MAX_DEPTH and "\\" in value and '"' in value:  # holds_escaped_json(value)
                    planned: _Node | int = self._plan_json(value, depth + 1)
                else:
                    planned = len(pieces)
                    named = names_secrets and len(value) >= NAMED_SECRET_CHARS  # (no call per literal otherwise)
                    pieces.append(self._named_value(tokens, index, value) if named else value)
                    owners.append(owner)
                parts.append(_Literal(body, planned, bool(tokens[index + 1])))
            gap = tokens[index + 2]
            if len(gap) >= min_gap:  # text between literals, redacted as it is
                parts.append(len(pieces))
                pieces.append(gap)
                owners.append(owner)
            elif gap:
                parts.append(gap)
        return node

    def _plan_spliced(self, text: str, depth: int) -> _Spliced:
        """`_plan_json`'s pieces, each kept with its span of the text instead of every part of the text."""
        node = _Spliced(text)
        spans = node.spans
        pieces, owners, owner = self._pieces, self._owners, self._owner
        names_secrets = self._names_secrets
        # A short text in which no rule matches (MATCHLESS: a key, `: 512, `) is kept as written too, as a piece of it
        # would be: nothing in it is replaced.
        matchless = self._redactor.matchless if MATCHLESS else _unknown
        min_gap = self._min_gap
        tokens = _LITERAL.split(text)  # [gap, body, close, gap, ..., gap]; each literal's opening quote is left out
        at = len(tokens[0])
        if at >= min_gap and not matchless(tokens[0]):
            spans.append((0, at, len(pieces), False))
            pieces.append(tokens[0])
            owners.append(owner)
        for index in range(1, len(tokens), 3):
            body = tokens[index]
            start = at + 1  # past the opening quote
            at = start + len(body)
            # Shorter than min_gap: a key or a short value, kept as written (see _plan_json); a body without a
            # backslash is its value.
            if len(body) >= min_gap and not ("\\" not in body and matchless(body)):
                value = decode_literal(body)
                if depth < MAX_DEPTH and "\\" in value and '"' in value:  # holds_escaped_json(value)
                    planned: _Spliced | int = self._plan_spliced(value, depth + 1)
                else:
                    planned = len(pieces)
                    named = names_secrets and len(value) >= NAMED_SECRET_CHARS  # (no call per literal otherwise)
                    pieces.append(self._named_value(tokens, index, value) if named else value)
                    owners.append(owner)
                spans.append((start, at, planned, True))
            at += len(tokens[index + 1])  # the closing quote, when there is one
            gap = tokens[index + 2]
            if len(gap) >= min_gap and not matchless(gap):
                spans.append((at, at + len(gap), len(pieces), False))
                pieces.append(gap)
                owners.append(owner)
            at += len(gap)
        return node

    def _named_value(self, tokens: list[str], index: int, value: str) -> str:
        """The piece of the literal `tokens[index]` (decoded: `value`, at least NAMED_SECRET_CHARS long, the rule on):
        after NAMED_SECRET_PREFIX when the literal is the value of a key that names a secret access key (the piece is
        remembered, to take the prefix off after), else the value."""
        if not (
            index >= 4
            and tokens[index - 2]  # the key's literal is closed
            and _KEY_VALUE_GAP.fullmatch(tokens[index - 1]) is not None
            and NAMED_SECRET_KEY.search(decode_literal(tokens[index - 3])) is not None
        ):
            return value
        self._prefixed.append(len(self._pieces))
        return NAMED_SECRET_PREFIX + value

    def _spliced_changed(self, node: _Spliced) -> bool:
        hits = self._hits
        return any(
            (value in hits) if isinstance(value, int) else self._spliced_changed(value) for _, _, value, _ in node.spans
        )

    def _render_spliced(self, node: _Spliced) -> str:
        assert self._redacted is not None
        redacted, hits, text = self._redacted, self._hits, node.text
        out: list[str] = []
        last = 0
        for start, end, value, literal in node.spans:
            if isinstance(value, int):
                if value not in hits:
                    continue
                rendered = redacted[value]
                if not literal:
                    self._gap_changed = True
            elif self._spliced_changed(value):
                rendered = self._render_spliced(value)
            else:
                continue
            out.append(text[last:start])
            out.append(encode_literal(rendered) if literal else rendered)
            last = end
        out.append(text[last:])
        return "".join(out)

    def _gap(self, node: _Node, gap: str) -> None:
        if gap:
            node.parts.append(self._piece(gap) if len(gap) >= self._min_gap else gap)

    def _changed(self, plan: _Node | int) -> bool:
        if isinstance(plan, int):
            return plan in self._hits
        return any(
            self._changed(part) if isinstance(part, int) else self._changed(part.value)
            for part in plan.parts
            if not isinstance(part, str)
        )

    def _render(self, plan: _Node | int) -> str:
        assert self._redacted is not None
        redacted, hits = self._redacted, self._hits
        if isinstance(plan, int):
            return redacted[plan]
        out: list[str] = []
        append = out.append  # a part costs a few attribute reads and calls less this way: rendering is per literal
        for part in plan.parts:
            if isinstance(part, _Literal):
                value = part.value
                append('"')
                if (value in hits) if isinstance(value, int) else self._changed(value):
                    append(encode_literal(self._render(value)))
                else:
                    append(part.body)
                if part.closed:
                    append('"')
            elif isinstance(part, str):
                append(part)
            else:
                if part in hits:
                    self._gap_changed = True
                append(redacted[part])
        return "".join(out)


def _unknown(text: str) -> bool | None:
    return None


def _decoded_for_scan(texts: pa.Array) -> pa.Array:
    """The texts with the two-character escapes decoded (a line break and its kind as a space) for the scan."""
    decoded = pc.replace_substring_regex(texts, r"\\[nrtbf]", " ")
    return pc.replace_substring_regex(decoded, r'\\(["\\\\/])', r"\1")


def _arrow_texts(texts: list[str]) -> pa.Array | None:
    """The texts as an Arrow column; None when one holds what UTF-8 cannot (a lone surrogate)."""
    try:
        return pa.array(texts, pa.string())
    except (UnicodeError, pa.ArrowException):
        return None


def redact_document(redactor: Redactor, text: str, *, as_json: bool) -> str:
    """One document on its own (the quarantine's raw lines)."""
    batch = DocumentBatch(redactor)
    document = batch.add(text, as_json=as_json)
    batch.redact()
    return batch.result(document)[0]
