"""PII and secret redaction for captured prompts, responses and request URLs.

Two stages, so that the common case (nothing to redact) stays at RE2 speed:

1. **Find** (vectorised): every text of a chunk is one row of an Arrow array, and one
   `pyarrow.compute` pass with all rules combined (RE2: a DFA, linear time, ~650 MB/s here) finds
   the few rows that need work; a pass per rule then counts candidates in those rows only.
2. **Confirm and replace** (Python, matched rows only): each candidate goes through its rule's
   validator where it has one (Luhn for card numbers, ISO 13616 mod-97 for IBANs, the SSA's
   never-issued ranges for SSNs, octet ranges for IP addresses, E.164 length for phone numbers,
   character mix for AWS secret keys) and only confirmed values are replaced and counted.

Texts reach the redactor decoded (see `capture_core.payloads`): JSON string values after
unescaping, a stream reassembled, BASE64 decoded with its charset, URLs percent-decoded. A
pattern matches `"` or `\\` only in its boundary groups `before` and `after`, which are written
back, and no marker contains either, so redacting the raw text of a JSON document that has no
escapes at all gives valid JSON.

Matched values are never logged; only counts per rule are reported.
"""

from __future__ import annotations

import ipaddress
import re
import threading
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

try:  # google-re2: RE2 itself, compiled once per Redactor (see "Issue 27, fifth step" in docs/capture-processor.md)
    import re2 as _google_re2  # type: ignore[import-untyped]  # no type information
except ImportError:  # pragma: no cover - the layer ships it; without it every rule pass is an Arrow call
    _google_re2 = None

Validator = Callable[[re.Match[str]], bool]


@dataclass(frozen=True)
class RedactionRule:
    name: str
    pattern: str  # RE2 syntax that Python's `re` (ASCII mode) reads the same way
    # The match is replaced by keep_before + "[REDACTED:name]" + keep_after, where keep_* are the
    # texts of the named groups `before` and `after` (boundary characters RE2 cannot look around).
    validate: Validator | None = None
    default: bool = True
    # No match of the pattern is shorter (test_redaction_passes reads it from Python's own parse of the pattern):
    # the budget's length bound (Redactor._over_budget) rests on it.
    least_chars: int = 1
    # Every match holds at least one of these texts (test_compiled_rules proves it from Python's parse of the pattern):
    # a candidate without any of them is not searched for this rule (REQUIRED_TEXTS). Empty: no such texts.
    needs: tuple[str, ...] = ()

    @property
    def marker(self) -> str:
        return f"[REDACTED:{self.name}]"


def _digits(text: str) -> str:
    return "".join(filter(str.isdigit, text))  # the characters str.isdigit keeps, filtered in C


def _luhn(digits: str) -> bool:
    total = 0
    for position, character in enumerate(reversed(digits)):
        value = ord(character) - 48
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


# Issuer prefixes in use (ISO/IEC 7812 BIN ranges of the card schemes): 1 UATP; 2 Mastercard 2-series
# and Mir; 3 Amex, Diners, JCB; 4 Visa; 5 Mastercard, Maestro; 6 Discover, UnionPay, Maestro, RuPay;
# 81-82 UnionPay and RuPay; 9792 Troy.
_CARD_PREFIXES = ("1", "2", "3", "4", "5", "6", "81", "82", "9792")
# Maestro (and only Maestro) issues numbers of 12 digits.
_MAESTRO_PREFIXES = ("5018", "5020", "5038", "5893", "6304", "6759", "6761", "6762", "6763")


def _valid_card(match: re.Match[str]) -> bool:
    digits = _digits(match["value"])
    if not (12 <= len(digits) <= 19 and digits.startswith(_CARD_PREFIXES) and _luhn(digits)):
        return False
    if len(digits) == 12:
        return digits.startswith(_MAESTRO_PREFIXES)
    if digits[0] == "1":
        return len(digits) == 15  # UATP numbers are 15 digits
    return True


def _valid_ssn(match: re.Match[str]) -> bool:
    area, group, serial = match["area"], match["group"], match["serial"]
    return area not in ("000", "666") and not area.startswith("9") and group != "00" and serial != "0000"


# ISO 13616 lengths of the countries that issue IBANs (SWIFT's IBAN registry).
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29,
    "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip


def _valid_iban(match: re.Match[str]) -> bool:
    iban = match["value"].replace(" ", "").upper()
    if _IBAN_LENGTHS.get(iban[:2]) != len(iban):
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(character, 36)) for character in rearranged)) % 97 == 1


def _valid_ip(match: re.Match[str]) -> bool:
    try:
        ipaddress.ip_address(match["value"])
    except ValueError:
        return False
    return True


def _valid_phone(match: re.Match[str]) -> bool:
    return 8 <= len(_digits(match["value"])) <= 15  # E.164: at most 15 digits


def _valid_aws_secret(match: re.Match[str]) -> bool:
    if match["named"] is not None:
        return True  # named as a secret access key: no need to judge its shape
    value = match["value"]
    # A bare 40-character run: base64 with upper and lower case and digits (a hex digest is not).
    return (
        any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
        and not re.fullmatch(r"[0-9a-fA-F]{40}", value)
    )


# In decoded text a user's own escape sequences still stand between words: a prompt about code says
# "key:\\nAKIA..." with a real backslash and n. Each rule takes such a pair as a boundary too (in
# the group `before`, written back), or the `n` would join the value and hide it.

_EMAIL = (
    r"(?P<before>\\[nrt])?[A-Za-z0-9._%+-]+@"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}\b"
)

# Numbers written as phone numbers (separators or a leading +), not bare digit runs: ids,
# timestamps and CSV feature rows must survive ("better a false negative than a false positive").
_PHONE = (
    r"(?P<before>^|[^\w+.-]|\\[nrt])(?P<value>"
    r"\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){2,4}"  # +44 20 7946 0958
    r"|\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}"  # (415) 555-0100
    r"|\d{3}[.-]\d{3}[.-]\d{4}"  # 415-555-0100
    r"|\d{3} \d{3} \d{4}"  # 415 555 0100
    r")\b"
)

_ACCESS_TOKEN = (
    r"(?:(?P<before>\\[nrt])|\b)(?:"
    r"(?i:bearer)\s+[A-Za-z0-9._~+/-]{8,}=*"  # Authorization header values, any case
    r"|(?i:basic)\s+[A-Za-z0-9+/]{12,}={0,2}"  # HTTP basic credentials
    r"|(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"  # AWS access key ids (long-term and temporary)
    r"|hf_[A-Za-z0-9]{30,}\b"  # Hugging Face tokens
    r"|sk-[A-Za-z0-9_-]{20,}"  # OpenAI-style API keys, including sk-proj-...
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe secret and restricted keys
    r"|gh[pousr]_[A-Za-z0-9]{36,}"  # GitHub tokens (classic personal, OAuth, user, server, refresh)
    r"|github_pat_[A-Za-z0-9_]{40,}"  # GitHub fine-grained personal access tokens
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab personal access tokens
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|hooks\.slack\.com/services/[A-Za-z0-9/]{20,}"  # Slack incoming webhooks
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWTs
    r")"
)

# A secret access key named as such (`aws_secret_access_key = ...`, `"SecretAccessKey": "..."`),
# or a bare 40-character base64 run that has the shape of one (see _valid_aws_secret).
# The names of a secret access key, and what may follow a name before its value (documents.py reads them too: a JSON
# document planned literal by literal has the name in one literal and the value in the next).
SECRET_KEY_NAMES = r"(?i:aws_?secret_?access_?key|secret_?access_?key|aws_?secret_?key)"
SECRET_KEY_NAME_TAIL = r"['\s:=]{0,6}"
_AWS_SECRET_KEY = (
    rf"(?P<before>(?P<named>{SECRET_KEY_NAMES}"
    rf"{SECRET_KEY_NAME_TAIL}(?:[\x22]\s*[:=]\s*[\x22]?)?['\s]{{0,2}})"
    r"|^|[^A-Za-z0-9/+=]|\\[nrt])(?P<value>[A-Za-z0-9/+]{40})(?P<after>$|[^A-Za-z0-9/+=])"
)

# A text that ends naming a secret access key (a JSON key, a query parameter's name): the value after it is redacted
# after NAMED_SECRET_PREFIX, the named form's shortest spelling, where the text is cut between name and value
# (documents.py, alb_format.py). The prefix holds no match of any rule and is a boundary to every other rule as a
# text's start is, so only the named form reads it; it is taken off after.
NAMED_SECRET_KEY = re.compile(rf"{SECRET_KEY_NAMES}{SECRET_KEY_NAME_TAIL}\Z", re.ASCII)
NAMED_SECRET_PREFIX = "aws_secret_access_key="

# PEM private keys (PKCS#1, PKCS#8, EC, OpenSSH, encrypted); the body up to the END line, or to the
# end of the text when the payload was cut before it.
# A body pasted inside a JSON string (a service-account file: `"private_key": "-----BEGIN...\\n..."`) has its
# line breaks as escapes, `\\n` (or `\\\\n` a level deeper): they belong to the body too.
_PEM_BODY = r"(?:[A-Za-z0-9+/=\s:,-]|\\+[nrt])"
_PRIVATE_KEY = (
    r"-----BEGIN[A-Z ]{0,30}PRIVATE KEY(?: BLOCK)?-----"
    rf"(?:{_PEM_BODY}*?-----END[A-Z ]{{0,30}}PRIVATE KEY(?: BLOCK)?-----|{_PEM_BODY}*)"
)

# Card numbers as people write them: one run of digits, or groups (4-4-4-4, 4-4-4-4-3, 4-4-4-1..4, Amex's
# 4-6-5, Diners' 4-6-4) split by a space (two in a column paste, or a no-break, figure or narrow no-break
# space), a dash or a dot. Groups keep version strings and dotted ids from joining up. Luhn and the issuer
# prefix decide.
_CARD_SEPARATOR = "(?:[ .\u00a0\u2007\u202f-] ?)"
_PAYMENT_CARD = (
    r"(?P<before>^|[^0-9.-]|(?:^|[^0-9])[.]|\\[nrt])(?P<value>"
    r"\d{12,19}"
    rf"|\d{{4}}(?:{_CARD_SEPARATOR}\d{{4}}){{2,3}}(?:{_CARD_SEPARATOR}\d{{1,4}})?"
    rf"|\d{{4}}{_CARD_SEPARATOR}\d{{6}}{_CARD_SEPARATOR}\d{{4,5}}"
    r")(?P<after>$|[^0-9.-]|[.](?:$|[^0-9]))"
)

_US_SSN = r"(?P<before>^|[^0-9-]|\\[nrt])(?P<area>\d{3})-(?P<group>\d{2})-(?P<serial>\d{4})(?P<after>$|[^0-9-])"

# In either case (a form field, a lowercased log line): the registry's length and mod-97 decide.
_IBAN = (
    r"(?:(?P<before>\\[nrt])|\b)"
    r"(?P<value>[A-Za-z]{2}\d{2}(?: ?[A-Za-z0-9]{4}){2,7}(?: ?[A-Za-z0-9]{1,4})?)\b"
)

_IP_ADDRESS = (
    r"(?P<before>^|[^0-9A-Za-z.:]|\\[nrt])(?P<value>"
    r"(?:\d{1,3}\.){3}\d{1,3}"  # IPv4
    r"|(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}"  # IPv6, full form
    r"|(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){0,5})?"  # IPv6 with ::
    r")(?P<after>$|[^0-9A-Za-z.:])"
)

RULES: dict[str, RedactionRule] = {
    rule.name: rule
    for rule in (
        RedactionRule("email", _EMAIL, least_chars=6, needs=("@",)),
        RedactionRule("phone", _PHONE, _valid_phone, least_chars=7),
        RedactionRule("access_token", _ACCESS_TOKEN, least_chars=15),
        RedactionRule("aws_secret_key", _AWS_SECRET_KEY, _valid_aws_secret, least_chars=40),
        RedactionRule("private_key", _PRIVATE_KEY, least_chars=26, needs=("-----BEGIN",)),
        RedactionRule("payment_card", _PAYMENT_CARD, _valid_card, least_chars=12),
        RedactionRule("us_ssn", _US_SSN, _valid_ssn, least_chars=11),
        RedactionRule("iban", _IBAN, _valid_iban, least_chars=12),
        # Off by default: client addresses are often wanted (abuse, geography) and are in the ALB
        # table anyway; turn it on where prompts must not carry them.
        RedactionRule("ip_address", _IP_ADDRESS, _valid_ip, default=False, least_chars=3),
    )
}
DEFAULT_RULES = tuple(name for name, rule in RULES.items() if rule.default)

_GROUP_NAME = re.compile(r"\(\?P<(\w+)>")


def _python_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.ASCII)


def _re2(pattern: str) -> str:
    """RE2 spells named groups (?P<name>...) too, but the combined pass needs none of them."""
    return _GROUP_NAME.sub("(?:", pattern)


class Redactor:
    """Applies the configured rules in order and counts replacements per rule."""

    def __init__(self, rule_names: Sequence[str]) -> None:
        # In RULES' order whatever the order asked (REDACT): where two values touch (`1::4111 1111 1111 1111`), the
        # first rule's match decides what the next can see, so an order of one's own changed the output (the IPv6
        # address first left twelve of the card's digits).
        self.rules = tuple(rule for name, rule in RULES.items() if name in rule_names)
        self.counts: dict[str, int] = dict.fromkeys(rule_names, 0)
        self._counts_lock = threading.Lock()  # chunks are redacted on several threads
        self._re2 = tuple(_re2(rule.pattern) for rule in self.rules)
        self._python = tuple(_python_regex(rule.pattern) for rule in self.rules)
        # The rules compiled once (bytes patterns, UTF-8, as pyarrow compiles them on every call), for COMPILED_RULES.
        self._compiled: tuple[Any, ...] | None = (
            tuple(_google_re2.compile(pattern.encode()) for pattern in self._re2) if _google_re2 is not None else None
        )
        self.any_rule = "|".join(f"(?:{pattern})" for pattern in self._re2)
        self._any = _google_re2.compile(self.any_rule.encode()) if _google_re2 is not None and self.rules else None
        self.least_chars = min((rule.least_chars for rule in self.rules), default=1)  # of any match of any rule
        self.over_budget = 0  # documents replaced whole: more candidates than MAX_CANDIDATES_PER_DOCUMENT
        # Short texts (keys, gaps between literals) and whether the combined pattern finds nothing in them, remembered
        # (a document's keys repeat in every document of its kind): see `matchless`.
        self._matchless: dict[str, bool] = {}

    def scan(self, texts: pa.Array) -> pa.Array:
        """For each row of `texts` (strings), whether any rule's pattern matches in it (False for a null): what
        `pc.fill_null(pc.match_substring_regex(texts, self.any_rule), False)` gives. With COMPILED_RULES one search of
        the combined pattern, compiled once, over the rows joined by Arrow (_JOINT between rows)."""
        if not (COMPILED_RULES and self._any is not None):
            return pc.fill_null(pc.match_substring_regex(texts, self.any_rule), False)
        return self._rows_matching_any(len(texts), *_joined_rows(texts))

    def _rows_matching_any(self, count: int, buffer: Any, starts: list[int]) -> pa.Array:
        assert self._any is not None
        rows = {bisect_right(starts, begin + _HALF_JOINT) - 1 for begin, _ in _spans(self._any, buffer)}
        return pa.array(_mask(count, list(rows)), pa.bool_())

    def scan_finding_unicode_escapes(self, texts: pa.Array, first: int) -> tuple[pa.Array, list[int]] | None:
        """`scan(texts)`, and which of the first `first` rows hold a `\\u` (what `rows_holding_unicode_escape` gives for
        them), both over one join of the rows by Arrow (UNICODE_IN_SCAN): no second join, no filter of the rows. None
        without google-re2 (the caller takes the separate passes)."""
        if not (COMPILED_RULES and self._any is not None and _UNICODE_ESCAPE is not None):
            return None
        buffer, starts = _joined_rows(texts)
        unicode_rows = _rows_holding_match(_UNICODE_ESCAPE, buffer, starts, first)
        return self._rows_matching_any(len(texts), buffer, starts), unicode_rows

    def matchless(self, text: str) -> bool | None:
        """True when no rule matches anywhere in `text` (the combined pattern finds nothing there, so no rule changes
        it, and none after), for a text of at most MATCHLESS_CHARS characters, remembered for the next one alike (up
        to MATCHLESS_ENTRIES texts); None when not known this way (a longer text, or no google-re2)."""
        known = self._matchless.get(text)
        if known is not None or self._any is None or len(text) > MATCHLESS_CHARS:
            return known
        try:
            data = text.encode()
        except UnicodeEncodeError:  # a lone surrogate: not judged here
            return None
        start: int = self._any._regexp.Match(_UNANCHORED, data, 0, len(data))[0][0]
        known = start < 0
        if len(self._matchless) < MATCHLESS_ENTRIES:
            self._matchless[text] = known
        return known

    def count_over_budget(self, documents: int) -> None:
        with self._counts_lock:
            self.over_budget += documents

    def redact(self, texts: pa.Array) -> pa.Array:
        """`texts` with every confirmed match replaced; rows without a match are not copied."""
        if not self.rules or len(texts) == 0:
            return texts
        redacted, _ = self.redact_column(texts)
        return redacted

    def redact_column(self, texts: pa.Array) -> tuple[pa.Array, dict[int, set[str]]]:
        """`texts` redacted, and for each row where something was replaced, the rules that hit. A row over the
        budget (more than MAX_CANDIDATES_PER_DOCUMENT candidates) is replaced whole by OVER_BUDGET_MARKER."""
        redacted, hits, _ = self.redact_owned(texts)
        return redacted, hits

    def redact_owned(
        self, texts: pa.Array, owners: Sequence[int] | None = None, may_match: pa.Array | None = None
    ) -> tuple[pa.Array, dict[int, set[str]], set[int]]:
        """`redact_column` where rows belong to documents (`owners[row]`, by default each row its own): the
        budget counts a document's candidates over all its rows. Returns the owners over the budget too; their
        rows that may match are replaced whole by OVER_BUDGET_MARKER, never read value by value (bounded work per
        record). `may_match`: the rows that may hold a match, when the caller's own scan knows them (a superset of
        those that do: each rule is matched again row by row), else one scan here finds them."""
        hits: dict[int, set[str]] = {}
        if not self.rules or len(texts) == 0:
            return texts, hits, set()
        # A match pass, not a count (a count finds where each match ends: about twice the time); the counts of the
        # budget are taken only where the lengths say it may be exceeded (_over_budget).
        if may_match is None:
            may_match = self.scan(texts)
        needs_work = pc.fill_null(may_match, False)
        if not pc.any(needs_work).as_py():
            return texts, hits, set()
        row_ids = pc.indices_nonzero(needs_work).to_pylist()
        over = self._over_budget(texts, needs_work, row_ids, owners)
        if over:
            over_rows = [row for row in row_ids if (owners[row] if owners is not None else row) in over]
            whole = pa.array(_mask(len(texts), over_rows), pa.bool_())
            texts = pc.replace_with_mask(texts, whole, pa.array([OVER_BUDGET_MARKER] * len(over_rows), pa.string()))
            needs_work = pc.and_(needs_work, pc.invert(whole))
            self.count_over_budget(len(over))
            if not pc.any(needs_work).as_py():
                return texts, hits, over
            row_ids = pc.indices_nonzero(needs_work).to_pylist()
        return (*self._redacted_rows(texts, needs_work, row_ids, hits), over)

    def _over_budget(
        self, texts: pa.Array, needs_work: pa.Array, row_ids: list[int], owners: Sequence[int] | None
    ) -> set[int]:
        """The owners with more than MAX_CANDIDATES_PER_DOCUMENT candidates. Matches do not overlap and none is
        shorter than `least_chars` characters (as many bytes at least), so a document whose matched rows hold at
        most least_chars * MAX_CANDIDATES_PER_DOCUMENT bytes cannot exceed the budget: only the others are
        counted, with the combined pattern, as the whole column used to be."""
        bound = self.least_chars * MAX_CANDIDATES_PER_DOCUMENT if BUDGET_BY_LENGTH else -1
        if BUDGET_BY_TOTAL and (pc.sum(pc.binary_length(texts)).as_py() or 0) <= bound:
            return set()  # all the rows together hold no more bytes than the bound: no document can exceed it
        lengths = pc.binary_length(pc.filter(texts, needs_work))
        if BUDGET_BY_ARROW:  # the bytes per owner summed by Arrow, not a Python step per row
            rows_owners = pa.array(row_ids if owners is None else [owners[row] for row in row_ids], pa.int64())
            sums = pa.table({"owner": rows_owners, "length": lengths}).group_by("owner").aggregate([("length", "sum")])
            suspects = set(pc.filter(sums["owner"], pc.greater(sums["length_sum"], bound)).to_pylist())
        else:
            per_owner: dict[int, int] = {}
            for row, length in zip(row_ids, lengths.to_pylist(), strict=True):
                owner = owners[row] if owners is not None else row
                per_owner[owner] = per_owner.get(owner, 0) + length
            suspects = {owner for owner, length in per_owner.items() if length > bound}
        if not suspects:
            return set()
        rows = [row for row in row_ids if (owners[row] if owners is not None else row) in suspects]
        counts = pc.count_substring_regex(pc.take(texts, pa.array(rows, pa.int64())), self.any_rule).to_pylist()
        return _over_budget(rows, counts, owners)

    def _redacted_rows(
        self, texts: pa.Array, needs_work: pa.Array, row_ids: list[int], hits: dict[int, set[str]]
    ) -> tuple[pa.Array, dict[int, set[str]]]:
        candidates = pc.filter(texts, needs_work)
        if COMPILED_RULES and self._compiled is not None:
            compiled_rows = self._redacted_compiled(candidates.to_pylist(), row_ids, hits)
            if compiled_rows is None:
                return texts, hits
            return pc.replace_with_mask(texts, needs_work, pa.array(compiled_rows, pa.string())), hits
        escaped = pc.any(pc.match_substring_regex(candidates, _SENTINELS)).as_py()
        if escaped:
            candidates = pa.array([_escape_sentinels(text) for text in candidates.to_pylist()], pa.string())
        rows: list[str] | None = None  # the candidates as Python strings, once something changes
        found: dict[str, int] = {}
        for rule, re2, python in zip(self.rules, self._re2, self._python, strict=True):
            positions = pc.indices_nonzero(pc.match_substring_regex(candidates, re2))
            for _ in range(MAX_PASSES):  # a boundary character two values share is taken by the first
                if len(positions) == 0:
                    break
                marked = pc.replace_substring_regex(pc.take(candidates, positions), re2, _MARK).to_pylist()
                changed = []
                for position, text in zip(positions.to_pylist(), marked, strict=True):
                    redacted, replaced = _confirmed(python, rule, text)
                    if replaced:
                        rows = rows if rows is not None else candidates.to_pylist()
                        rows[position] = redacted
                        changed.append(position)
                        found[rule.name] = found.get(rule.name, 0) + replaced
                        hits.setdefault(row_ids[position], set()).add(rule.name)
                if not changed:
                    break
                candidates = pa.array(rows, pa.string())
                positions = pa.array(changed, pa.int64())  # only where a neighbour may now be free
        if rows is None:
            return texts, hits
        if escaped:
            candidates = pa.array([_restore_sentinels(text) for text in rows], pa.string())
        with self._counts_lock:
            for name, count in found.items():
                self.counts[name] += count
        return pc.replace_with_mask(texts, needs_work, candidates), hits

    def _redacted_compiled(self, rows: list[str], row_ids: list[int], hits: dict[int, set[str]]) -> list[str] | None:
        """`_redacted_rows` with the rules compiled once: each rule's pass is one search of the candidates joined by a
        separator no rule crosses (`_marked`), not an Arrow call that compiles the rule again. None: nothing
        replaced."""
        assert self._compiled is not None
        joined = "".join(rows)
        escaped = any(sentinel in joined for sentinel in _SENTINEL_ESCAPES)
        if escaped:
            rows = [_escape_sentinels(text) for text in rows]
        encoded = [text.encode() for text in rows]
        found: dict[str, int] = {}
        holding: dict[tuple[str, ...], list[int]] = {}  # the candidates that hold one of a rule's needs
        # The candidates joined for a rule's search, kept for the next rule that searches the same ones (SHARED_JOIN)
        # until a rule changes one of them.
        prepared: dict[tuple[str, ...], _Joined] = {}
        for rule, compiled, python in zip(self.rules, self._compiled, self._python, strict=True):
            positions: Sequence[int] = range(len(rows))
            needs = rule.needs if REQUIRED_TEXTS else ()
            if needs:  # the candidates as they are now: an earlier rule may have changed some
                if needs not in holding:
                    holding[needs] = _holding(rows, needs)
                positions = holding[needs]
            if SHARED_JOIN and needs not in prepared:
                prepared[needs] = _join(encoded, positions)
            for _ in range(MAX_PASSES):  # a boundary character two values share is taken by the first
                changed = []
                # The first pass searches the candidates `prepared` holds; after a change it is empty.
                for position, text in _marked(compiled, encoded, positions, prepared.get(needs)):
                    redacted, replaced = _confirmed(python, rule, text)
                    if replaced:
                        rows[position] = redacted
                        encoded[position] = redacted.encode()
                        changed.append(position)
                        found[rule.name] = found.get(rule.name, 0) + replaced
                        hits.setdefault(row_ids[position], set()).add(rule.name)
                if not changed:
                    break
                holding.clear()
                prepared.clear()
                positions = changed  # only where a neighbour may now be free
        if not found:
            return None
        with self._counts_lock:
            for name, count in found.items():
                self.counts[name] += count
        return [_restore_sentinels(text) for text in rows] if escaped else rows

    def redact_texts(self, texts: list[str]) -> tuple[list[str], dict[int, set[str]]]:
        """The same for a Python list (the pieces of decoded documents)."""
        if not self.rules or not texts:
            return texts, {}
        column = pa.array(texts, pa.string())
        redacted, hits = self.redact_column(column)
        return (texts if redacted is column else redacted.to_pylist()), hits

    def redact_text(self, text: str) -> str:
        return self.redact_texts([text])[0][0]


# RE2 finds and marks every candidate in one linear pass (a private-use pair around `\\0`, the whole
# match); Python only re-reads each marked candidate on its own. Python's backtracking engine never
# scans the whole text: on a megabyte of word characters the email pattern alone is quadratic there.
_OPEN, _CLOSE = "\ue000", "\ue001"
_MARK = _OPEN + "\\0" + _CLOSE
_SENTINELS = "[\ue000-\ue002]"
MAX_PASSES = 3
# The speed switch of the rules compiled once (google-re2; off in the differential test's plain path: an Arrow match
# pass and replace pass per rule, each compiling the rule again).
COMPILED_RULES = True
# The speed switch of searching a rule only in the candidates that hold one of its `needs` (off in the plain path).
REQUIRED_TEXTS = True
# The speed switch of one join of the candidates for the rules that search the same ones, until one changes a candidate
# (off in the plain path: a join per rule and pass).
SHARED_JOIN = True
# The texts `Redactor.matchless` judges and remembers: at most this long, and this many per Redactor (a conversion).
MATCHLESS_CHARS = 32
MATCHLESS_ENTRIES = 4096
# Between two candidates in the text one compiled rule searches: two private-use characters (U+E006). No rule matches
# one inside a value; wherever a rule has `^` or `$`, a negated class that takes one such character is the alternative,
# and `\b` holds beside one as at the text's ends: a match at the start or end of a candidate takes one of the two
# where the candidate alone gives `^` or `$`, never both, so a match never reaches into a neighbour, and the search
# after a match restarts where the next candidate alone would start (test_compiled_rules holds every rule to Arrow's
# own passes on fuzzed rows).
_JOINT_TEXT = "\ue006\ue006"
_JOINT = _JOINT_TEXT.encode()
_HALF_JOINT = len(_JOINT) // 2
_OPEN_BYTES, _CLOSE_BYTES = _OPEN.encode(), _CLOSE.encode()
_UNANCHORED = _google_re2._Anchor.UNANCHORED if _google_re2 is not None else None


def _holding(rows: list[str], needs: tuple[str, ...]) -> list[int]:
    """The rows that hold one of `needs`, found in the rows joined: after a hit the search goes on at the next row's
    start, so it costs a search per need and a step per row that holds one, not a call per row."""
    joined = "".join(rows)
    starts = list(accumulate(map(len, rows), initial=0))  # in C, no generator
    found: set[int] = set()
    for need in needs:
        at = joined.find(need)
        while at >= 0:
            row = bisect_right(starts, at) - 1
            found.add(row)
            at = joined.find(need, starts[row + 1])
    return sorted(found)


_UNICODE_ESCAPE = _google_re2.compile(rb"\\u") if _google_re2 is not None else None


def rows_holding_unicode_escape(texts: pa.Array) -> list[int] | None:
    """The rows of `texts` (strings, no nulls) that hold a `\\u`, in order: one RE2 search over the rows joined by
    Arrow per such row (after a hit the search goes on at the next row), not a call per row. None without google-re2.
    A `\\u` never spans two rows: the joint holds no backslash."""
    if _UNICODE_ESCAPE is None:
        return None
    buffer, starts = _joined_rows(texts)
    return _rows_holding_match(_UNICODE_ESCAPE, buffer, starts, len(texts))


def _joined_rows(texts: pa.Array) -> tuple[Any, list[int]]:
    """The rows (strings; a null as empty) joined by Arrow with _JOINT between them, as a buffer RE2 reads without a
    copy, and where each row starts in it."""
    filled = pc.fill_null(texts, "")
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(filled)], pa.int32()), filled), _JOINT_TEXT)
    lengths = pc.binary_length(filled).to_pylist()
    starts = list(accumulate(map(add, lengths, repeat(len(_JOINT))), initial=0))  # in C, no generator
    return joined[0].as_buffer(), starts


def _rows_holding_match(compiled: Any, buffer: Any, starts: list[int], first: int) -> list[int]:
    """Which of the first `first` rows joined in `buffer` (each starting at `starts[row]`, _JOINT between them) hold a
    match of `compiled`, a pattern that never matches across the joint: a search per such row, in order."""
    match = compiled._regexp.Match
    rows: list[int] = []
    position = 0
    end = max(starts[first] - len(_JOINT), 0) if first < len(starts) - 1 else len(buffer)
    while position < end:
        begin = match(_UNANCHORED, buffer, position, end)[0][0]
        if begin < 0:
            break
        row = bisect_right(starts, begin) - 1
        rows.append(row)
        position = starts[row + 1]
    return rows


def _spans(compiled: Any, text: Any) -> list[tuple[int, int]]:
    """`[match.span() for match in compiled.finditer(text)]` for a pattern without capture groups over bytes (or a
    buffer), in half the time: RE2's own Match called in a loop (the binding's internal `_regexp`; google-re2 is pinned,
    and test_compiled_rules holds this to finditer), without a Match object per match. No rule matches the empty text,
    but a step past an empty match keeps the loop finite."""
    match = compiled._regexp.Match
    spans: list[tuple[int, int]] = []
    position, end = 0, len(text)
    while position <= end:
        span = match(_UNANCHORED, text, position, end)[0]
        if span[0] < 0:
            break
        spans.append(span)
        position = span[1] if span[1] > span[0] else span[1] + 1
    return spans


@dataclass(frozen=True, slots=True)
class _Joined:
    """Candidates joined by _JOINT for one search, and where each starts in the joined text."""

    parts: list[bytes]
    joined: bytes
    starts: list[int]


def _join(encoded: list[bytes], positions: Sequence[int]) -> _Joined:
    parts = [encoded[position] for position in positions]
    starts = list(accumulate(map(add, map(len, parts), repeat(len(_JOINT))), initial=0))  # in C, no generator
    return _Joined(parts, _JOINT.join(parts), starts)


def _marked(
    compiled: Any, encoded: list[bytes], positions: Sequence[int], shared: _Joined | None = None
) -> list[tuple[int, str]]:
    """Each of the candidates at `positions` (UTF-8) where `compiled` matches, as `replace_substring_regex(..., _MARK)`
    marks it: one search over them joined by _JOINT, each match cut back to its candidate (a boundary character that is
    part of the joint is the `^` or `$` the candidate alone would match). `shared`: `_join(encoded, positions)` made
    for an earlier rule, the candidates unchanged since."""
    prepared = shared if shared is not None else _join(encoded, positions)
    parts, joined, starts = prepared.parts, prepared.joined, prepared.starts
    out: list[tuple[int, str]] = []
    current = -1
    pieces: list[bytes] = []
    last = 0
    part = b""
    for begin, end in _spans(compiled, joined):
        index = bisect_right(starts, begin + _HALF_JOINT) - 1  # a match that starts in the joint takes its second half
        if index != current:
            if current >= 0:
                pieces.append(part[last:])
                out.append((positions[current], b"".join(pieces).decode()))
            current, part, pieces, last = index, parts[index], [], 0
        base = starts[index]
        begin, end = max(begin - base, 0), min(end - base, len(part))
        pieces += (part[last:begin], _OPEN_BYTES, part[begin:end], _CLOSE_BYTES)
        last = end
    if current >= 0:
        pieces.append(part[last:])
        out.append((positions[current], b"".join(pieces).decode()))
    return out


# A text that holds the sentinels itself (private-use characters, rare but legal) has them escaped while it is
# marked, each as a pair that starts with U+E002, and restored after: no rule matches a private-use character,
# and each is a boundary to all of them, so a pair stands where one character stood.
_ESCAPE_MARK = "\ue002"
_SENTINEL_ESCAPES = {"\ue000": "\ue002\ue003", "\ue001": "\ue002\ue004", "\ue002": "\ue002\ue005"}
_SENTINEL_ESCAPE = re.compile("[\ue000-\ue002]")
_SENTINEL_RESTORE = re.compile("\ue002([\ue003-\ue005])")
_SENTINEL_ORIGINAL = {"\ue003": "\ue000", "\ue004": "\ue001", "\ue005": "\ue002"}


def _escape_sentinels(text: str) -> str:
    return _SENTINEL_ESCAPE.sub(lambda match: _SENTINEL_ESCAPES[match[0]], text)


def _restore_sentinels(text: str) -> str:
    return _SENTINEL_RESTORE.sub(lambda match: _SENTINEL_ORIGINAL[match[1]], text) if _ESCAPE_MARK in text else text


# Bounded work per record: a document with more candidate matches than this (all rules together) is not read
# value by value; it is replaced whole by OVER_BUDGET_MARKER and its row flagged. 60 MiB of e-mail addresses
# used to cost 2.4 GiB and 18 s; a real prompt or answer has a handful, a long CSV paste a few thousand.
MAX_CANDIDATES_PER_DOCUMENT = 50_000
# The speed switch of that length bound (off in the differential test's plain path: every matched row is counted).
BUDGET_BY_LENGTH = True
# The speed switch of summing those lengths per document with Arrow (off in the plain path: a Python step per row).
BUDGET_BY_ARROW = True
# The speed switch of that bound checked first on all the rows together (one Arrow sum; a chunk's rows seldom hold more
# than the bound's bytes): no sum per document when the total is within it (off in the plain path).
BUDGET_BY_TOTAL = True
OVER_BUDGET = "too_many_matches"
OVER_BUDGET_MARKER = f"[REDACTED:{OVER_BUDGET}]"


def _mask(length: int, rows: Sequence[int]) -> list[bool]:
    mask = [False] * length
    for row in rows:
        mask[row] = True
    return mask


def _over_budget(row_ids: list[int], counts: list[int], owners: Sequence[int] | None) -> set[int]:
    per_owner: dict[int, int] = {}
    for row, count in zip(row_ids, counts, strict=True):
        owner = owners[row] if owners is not None else row
        per_owner[owner] = per_owner.get(owner, 0) + count
    return {owner for owner, count in per_owner.items() if count > MAX_CANDIDATES_PER_DOCUMENT}


def _confirmed(pattern: re.Pattern[str], rule: RedactionRule, marked: str) -> tuple[str, int]:
    """The text with each marked candidate replaced when it is confirmed, or restored when not."""
    head, *candidates = marked.split(_OPEN)
    out = [head]
    replaced = 0
    for candidate in candidates:
        value, _, rest = candidate.partition(_CLOSE)
        match = pattern.fullmatch(value)
        if match is None or (rule.validate is not None and not rule.validate(match)):
            out.append(value)
        else:
            groups = match.groupdict()
            out.append((groups.get("before") or "") + rule.marker + (groups.get("after") or ""))
            replaced += 1
        out.append(rest)
    return "".join(out), replaced
