"""PII and secret redaction for captured prompts, responses and request URLs.

Redaction is the slowest stage of the pipeline (capture-formats.md §5: a naive Python email
regex runs at 3-4 MB/s). It therefore runs on whole Arrow columns with pyarrow.compute, whose
regex kernels use RE2 (a DFA, linear time, about 650 MB/s here): one pass with all rules
combined finds the few rows that need work, and only those rows are counted and rewritten.
RE2 has no look-around, so boundaries are matched as a captured character and written back.
Matched values are never logged; only counts per rule are reported.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class RedactionRule:
    name: str
    pattern: str  # RE2 syntax
    replacement: str


_EMAIL = r"[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}\b"

# Numbers written as phone numbers (separators or a leading +), not bare digit runs: ids,
# timestamps and CSV feature rows must survive ("better a false negative than a false positive").
# Group 1 is the character before the number (or the start of text), which is written back.
_PHONE = (
    r"(^|[^\w+.-])(?:"
    r"\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){2,4}"  # +44 20 7946 0958
    r"|\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}"  # (415) 555-0100
    r"|\d{3}[.-]\d{3}[.-]\d{4}"  # 415-555-0100
    r"|\d{3} \d{3} \d{4}"  # 415 555 0100
    r")\b"
)

_ACCESS_TOKEN = (
    r"(?:"
    r"\b[Bb]earer\s+[A-Za-z0-9._~+/-]{8,}=*"  # Authorization header values
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids (long-term and temporary)
    r"|\bhf_[A-Za-z0-9]{30,}\b"  # Hugging Face tokens
    r"|\bsk-[A-Za-z0-9_-]{20,}"  # OpenAI-style API keys, including sk-proj-...
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWTs
    r")"
)

RULES: dict[str, RedactionRule] = {
    rule.name: rule
    for rule in (
        RedactionRule("email", _EMAIL, "[REDACTED:email]"),
        RedactionRule("phone", _PHONE, r"\1[REDACTED:phone]"),
        RedactionRule("access_token", _ACCESS_TOKEN, "[REDACTED:access_token]"),
    )
}


class Redactor:
    """Applies the configured rules in order and counts replacements per rule."""

    def __init__(self, rule_names: tuple[str, ...]) -> None:
        self.rules = tuple(RULES[name] for name in rule_names)
        self.counts: dict[str, int] = dict.fromkeys(rule_names, 0)
        self._counts_lock = threading.Lock()  # chunks are redacted on several threads
        self._any_rule = "|".join(f"(?:{rule.pattern})" for rule in self.rules)

    def redact(self, texts: pa.Array) -> pa.Array:
        """`texts` with every match replaced; rows without a match are not copied."""
        if not self.rules or len(texts) == 0:
            return texts
        needs_work = pc.fill_null(pc.match_substring_regex(texts, self._any_rule), False)
        if not pc.any(needs_work).as_py():
            return texts
        rows = pc.filter(texts, needs_work)
        for rule in self.rules:
            matches = pc.count_substring_regex(rows, rule.pattern)
            found = pc.sum(matches).as_py() or 0
            if found:
                with self._counts_lock:
                    self.counts[rule.name] += found
                # Rewriting is slower than matching (RE2 must find submatch bounds): only rows with a match.
                has_match = pc.fill_null(pc.greater(matches, 0), False)
                rewritten = pc.replace_substring_regex(pc.filter(rows, has_match), rule.pattern, rule.replacement)
                rows = pc.replace_with_mask(rows, has_match, rewritten)
        return pc.replace_with_mask(texts, needs_work, rows)

    def redact_text(self, text: str) -> str:
        return self.redact(pa.array([text], pa.string()))[0].as_py()
