"""The redaction holes of issue 27, and their kind: each test here failed on the code before the fix.

- JSON with escapes is opened wherever it sits inside a string, not only when the string starts with `{`;
- a PEM body is redacted across escaped line breaks (`\\n` inside a JSON string);
- card numbers in the separators people use (spaces, also after a tab in a TSV paste, dashes, dots), every
  issuer range (Maestro's 12-digit `6759...`, UATP, UnionPay 81, Troy), with Luhn;
- IBANs in either case, with the mod-97 check;
- secrets inside tool-call arguments;
- flagged rows keep their private-use characters (U+E000/U+E001 used to become U+FFFD);

and the look-alikes that must survive: numbers that fail Luhn, order ids, timestamps, UUIDs, versions.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from capture_core.documents import redact_document
from capture_core.redaction import DEFAULT_RULES, Redactor
from tests.capture_processor import transcripts
from tests.capture_processor.conftest import Pipeline
from tests.capture_processor.test_llm_traffic import assert_no_secret, record, run, side
from tests.capture_processor.transcripts import SECRETS

PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
PEM = f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\nq0ZhvdXyCw+8Vm==\n-----END PRIVATE KEY-----\n"
SERVICE_ACCOUNT = {"type": "service_account", "project_id": "p", "private_key_id": "abc", "private_key": PEM}
AWS_SECRET = SECRETS["aws_secret_key"]


def redact(text: str, *, as_json: bool = False) -> str:
    return redact_document(Redactor(DEFAULT_RULES), text, as_json=as_json)


# -- JSON inside strings, PEM across escaped line breaks ---------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        "Here is my service account: " + json.dumps(SERVICE_ACCOUNT),  # JSON after prose
        "```json\n" + json.dumps(SERVICE_ACCOUNT, indent=2) + "\n```",  # a fenced paste
        json.dumps(SERVICE_ACCOUNT),  # the whole string (the one case handled before)
    ],
)
def test_a_private_key_pasted_as_json_inside_a_prompt_loses_its_body(pipeline: Pipeline, content: str) -> None:
    request = side(transcripts.chat_request(content, stream=False))

    rows = run(pipeline, record("sa", request, side('{"choices": []}')))

    assert_no_secret(rows, also=(PEM_BODY, "q0ZhvdXyCw"))
    row = rows["sa"]
    assert "private_key" in row["redaction_rules"]
    assert json.loads(row["input_text"])["messages"][1]["content"].count("[REDACTED:private_key]") == 1


@pytest.mark.parametrize("as_json", [True, False])
def test_a_pem_body_with_escaped_line_breaks_is_redacted_in_plain_text_too(as_json: bool) -> None:
    escaped = json.dumps(PEM)[1:-1]  # the body's line breaks as `\n` escapes, as a .json file holds them
    text = f'config = {{"private_key": "{escaped}", "client_email": "svc@p.iam.gserviceaccount.com"}}'

    redacted = redact(text, as_json=as_json)

    assert PEM_BODY not in redacted and "q0ZhvdXyCw" not in redacted and "END PRIVATE" not in redacted
    assert "gserviceaccount" not in redacted


def test_double_escaped_pem_lines_are_part_of_the_body() -> None:
    doubly = json.dumps(json.dumps(SERVICE_ACCOUNT))  # a file inside a string inside a string

    assert PEM_BODY not in redact(doubly) and PEM_BODY not in redact(doubly, as_json=True)


# -- secrets inside tool-call arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        json.dumps({"note": "aws_secret_access_key=" + AWS_SECRET}),
        json.dumps({"note": f'aws_secret_access_key="{AWS_SECRET}"\nregion=us-east-1'}),
        "Saving note: " + json.dumps({"note": f"aws_secret_access_key=\n{AWS_SECRET}", "to": "a\tb"}),
        json.dumps({"env": json.dumps({"note": f"AWS_SECRET_ACCESS_KEY: '{AWS_SECRET}'\n"})}),
    ],
)
def test_secrets_inside_tool_call_arguments_are_redacted_in_requests_and_responses(
    pipeline: Pipeline, arguments: str
) -> None:
    request = side(transcripts.chat_request("send it", stream=False, tool_arguments=arguments))
    response = side(
        json.dumps(
            {
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "tool_calls": [
                                {"id": "c", "type": "function", "function": {"name": "n", "arguments": arguments}}
                            ],
                        },
                        "finish_reason": "tool_calls",
                    }
                ],
            }
        )
    )

    rows = run(pipeline, record("tools", request, response))

    assert_no_secret(rows, also=(AWS_SECRET,))
    assert "aws_secret_key" in rows["tools"]["redaction_rules"]


def test_secrets_inside_streamed_tool_call_arguments_are_redacted(pipeline: Pipeline) -> None:
    arguments = "Saving: " + json.dumps({"note": f'aws_secret_access_key="{AWS_SECRET}"\n'})
    stream = transcripts.vllm_chat(["Calling."], tool_args=transcripts.split(arguments, 9))
    response = side(stream, "text/event-stream")

    rows = run(pipeline, record("stream", side(transcripts.chat_request("go", stream=True)), response))

    assert_no_secret(rows, also=(AWS_SECRET,))


# -- card numbers, IBANs -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "card"),
    [
        ("name\tcard\nAlice\t  4111 1111 1111 1111\t12/28", "4111 1111 1111 1111"),  # TSV: spaces after a tab
        ("Alice\t4111  1111  1111  1111\t12/28", "4111  1111  1111  1111"),  # a column paste's double spaces
        ("card 4111.1111.1111.1111.", "4111.1111.1111.1111"),  # dots
        ("card 5555-5555-5555-4444 exp", "5555-5555-5555-4444"),  # dashes
        ("card 4111\u00a01111\u00a01111\u00a01111", "4111\u00a01111\u00a01111\u00a01111"),  # no-break spaces
        ("amex 3782 822463 10005", "3782 822463 10005"),
        ("maestro 6759649826438453", "6759649826438453"),
        ("maestro 6759 6498 2643 8453 003", "6759 6498 2643 8453 003"),  # 19 digits
        ("maestro 6759 6498 2648", "6759 6498 2648"),  # Maestro's 12 digits
        ("maestro 5018 1234 5673", "5018 1234 5673"),
        ("uatp 123456789012347", "123456789012347"),
        ("unionpay 8100 1234 5678 9017", "8100 1234 5678 9017"),
        ("troy 9792 1234 5678 9018", "9792 1234 5678 9018"),
    ],
)
def test_card_numbers_in_the_separators_people_use(text: str, card: str) -> None:
    redactor = Redactor(DEFAULT_RULES)

    redacted = redactor.redact_text(text)

    assert card not in redacted and "[REDACTED:payment_card]" in redacted
    assert redactor.counts["payment_card"] == 1


@pytest.mark.parametrize(
    "iban", ["gb82 west 1234 5698 7654 32", "gb82west12345698765432", "De89 3704 0044 0532 0130 00"]
)
def test_ibans_in_either_case(iban: str) -> None:
    redacted = Redactor(DEFAULT_RULES).redact_text(f"pay to {iban} today")

    assert redacted == "pay to [REDACTED:iban] today"


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1112",  # fails Luhn
        "card 4111.1111.1111.1112 and 5555-5555-5555-4445",
        "order 675964982643 and 501812345674",  # 12 digits failing Luhn
        "order #123456789012 shipped",  # a 12-digit id that passes Luhn but is no Maestro number
        "ticket 8000 0000 0000 0002",  # 80: no issuer
        "build 1.2.3.4.5.6.7.8.9.0.1.2.3.4.5.6",  # a dotted version
        "release 2026.1130.1015.0000.5",
        "at 2026-11-30 10:15:00.123456 and 20261130101500123",
        "uuid 3f2504e0-4f89-11d3-9a0c-0305e82c3301",
        "sha 9b74c9897bac770ffc029102a200c5de",
        "iban gb82 west 1234 5698 7654 33 (bad check digits)",
        "the xx12 abcd efgh ijkl words",
        "de89 is not an iban",
        "phone 1 2 3 4 5 6 7 8 9 0 1 2 3",
    ],
)
def test_look_alikes_survive(text: str) -> None:
    redactor = Redactor(DEFAULT_RULES)

    assert redactor.redact_text(text) == text
    assert sum(redactor.counts.values()) == 0


# -- private-use characters in flagged rows ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "\ue000 mail a@example.com \ue001",
        "\ue001\ue000\ue002\ue003\ue005 key AKIAIOSFODNN7EXAMPLE\ue000",
        "card\ue0004111 1111 1111 1111\ue001end",
    ],
)
def test_private_use_characters_of_a_flagged_row_are_kept(text: str) -> None:
    redacted = Redactor(DEFAULT_RULES).redact_text(text)

    assert "\ufffd" not in redacted and "[REDACTED:" in redacted
    kept = [character for character in text if "\ue000" <= character <= "\uf8ff"]
    assert [character for character in redacted if "\ue000" <= character <= "\uf8ff"] == kept


def test_private_use_characters_survive_in_the_curated_row(pipeline: Pipeline) -> None:
    content = "emoji-font glyph \ue001\ue000 and mail alice.smith@example.com"
    rows = run(pipeline, record("pua", side(transcripts.chat_request(content, stream=False)), None))

    stored = json.loads(rows["pua"]["input_text"])["messages"][1]["content"]
    assert stored == "emoji-font glyph \ue001\ue000 and mail [REDACTED:email]"


# -- the shortest match of an opt-in rule inside JSON with escapes ---------------------------------------------


@pytest.mark.parametrize("spliced", [True, False])
@pytest.mark.parametrize(
    "text",
    [
        '{"a": "1::", "b": "x\\ny"}',  # a short value beside a value with an escape: the document is planned
        '{"k": "x\\ny", "v": ["1::", "10.0.0.1"]}',
        '{"k": "x\\ny", "v": "1::"}',
        '{"note": "x\\ny"} 1:: {}',  # a short gap between literals
    ],
)
def test_an_ipv6_address_of_three_characters_is_redacted_in_json_with_escapes_as_without(
    text: str, spliced: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ip_address` (opt-in) matches `1::` in 3 characters; a body or gap shorter than 6 used to be kept as written
    whatever the rules, so in a document with escapes (planned literal by literal) the address stayed, while the same
    document without escapes was redacted whole. The batch's bound is now the active rules' shortest match."""
    from capture_core import documents

    monkeypatch.setattr(documents, "SPLICED", spliced)
    rules = [*DEFAULT_RULES, "ip_address"]
    redacted = redact_document(Redactor(rules), text, as_json=True)
    assert "1::" not in redacted
    assert "10.0.0.1" not in redacted
    assert redacted.count("[REDACTED:ip_address]") == text.count("1::") + text.count("10.0.0.1")
    unescaped = text.replace("\\n", " ")  # no escapes: the document is scanned as one text
    assert redact_document(Redactor(rules), unescaped, as_json=True).count("[REDACTED:ip_address]") == redacted.count(
        "[REDACTED:ip_address]"
    )


def test_the_batch_bound_is_never_above_any_active_rules_shortest_match() -> None:
    from capture_core.documents import MIN_GAP, DocumentBatch
    from capture_core.redaction import RULES

    for name, rule in RULES.items():
        assert DocumentBatch(Redactor([name]))._min_gap <= rule.least_chars, name
    assert DocumentBatch(Redactor(DEFAULT_RULES))._min_gap == MIN_GAP  # the default rules' plans are unchanged


# -- a secret access key named by its key, in a document with an escape elsewhere ------------------------------------


@pytest.mark.parametrize("spliced", [True, False])
@pytest.mark.parametrize(
    "key", ["wJalrXUtnFEMIKMDENGbPxRfiCYEXAMPLEKEYabc", "wjalrxutnfemi/k7mdeng/bpxrficyexamplekey"]
)  # no digit (about one real key in a thousand), no upper case
@pytest.mark.parametrize("name", ["SecretAccessKey", "aws_secret_access_key", "AWS_SECRET_KEY"])
def test_a_secret_access_key_named_by_its_key_is_redacted_in_json_with_escapes_as_without(
    name: str, key: str, spliced: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redacted as one text (no escape), the named form spans the key, the quotes and the value; planned literal by
    literal (any escape elsewhere: the `\\n` of an `aws sts get-session-token` output pasted into a tool result), the
    value alone had only the bare form, which asks for upper and lower case and a digit: the key was kept."""
    from capture_core import documents

    monkeypatch.setattr(documents, "SPLICED", spliced)
    without = json.dumps({"Credentials": {"AccessKeyId": "ASIAEXAMPLE", name: key}})
    with_escape = json.dumps({"Credentials": {"AccessKeyId": "ASIAEXAMPLE", name: key}, "note": "line\nbreak"})

    for text in (without, with_escape, json.dumps({"content": with_escape})):
        redacted = redact(text, as_json=True)
        assert key not in redacted and "[REDACTED:aws_secret_key]" in redacted, text
        assert "aws_secret_access_key=" not in redacted.replace(name + '"', "")  # the planning prefix never shows
    assert json.loads(redact(with_escape, as_json=True))["Credentials"][name] == "[REDACTED:aws_secret_key]"
    # The same value under another key stays: the bare form judges it, and it has not the shape of a secret key.
    assert key in redact(json.dumps({"etag": key, "note": "line\nbreak"}), as_json=True)


def test_a_named_secret_access_key_in_a_tool_result_is_redacted_end_to_end(pipeline: Pipeline) -> None:
    key = "wJalrXUtnFEMIKMDENGbPxRfiCYEXAMPLEKEYabc"
    credentials = {"AccessKeyId": "ASIAEXAMPLE", "SecretAccessKey": key, "Note": "rotated\nyesterday"}
    output = json.dumps({"Credentials": credentials}, indent=2)  # a tool's output: JSON with an escape, in a string
    messages = [{"role": "tool", "tool_call_id": "c1", "content": output}]
    request = side(json.dumps({"model": "m", "messages": messages}))

    rows = run(pipeline, record("sts", request, side('{"choices": []}')))

    assert key not in json.dumps(rows, default=str)
    assert "aws_secret_key" in rows["sts"]["redaction_rules"]


# -- the load balancer's URLs: secrets that hold a `/`, a parameter named as a secret access key -------------------


def test_url_values_that_hold_a_slash_are_redacted_when_something_else_is_encoded(pipeline: Pipeline) -> None:
    """A URL was cut at `/` too when anything in it was encoded, so a Slack webhook or a `Bearer` token with a `/` in a
    query value was found only in a URL with nothing encoded; and a parameter named as a secret access key lost its
    name to the cut at `=` once a URL with a query was always cut (its value judged by the bare form alone)."""
    from tests.capture_processor.test_llm_traffic import ALB_KEY, alb_line

    hook = "hooks.slack.com/services/T0000000/B0000000/XXXXXXXXXXXXXXXXXXXXXXXX"
    named_only = "wJalrXUtnFEMIKMDENGbPxRfiCYEXAMPLEKEYabc"  # no digit: only its name identifies it
    lines = [
        alb_line(f"GET https://api.example.com:443/v1/chat?hook=https://{hook}&q=a%20b HTTP/1.1"),
        alb_line("GET https://api.example.com:443/v1/chat?auth=Bearer%20abc/defghijk&q=1 HTTP/1.1"),
        alb_line(f"GET https://api.example.com:443/v1/chat?aws_secret_access_key={named_only} HTTP/1.1"),
        alb_line(f"GET https://api.example.com:443/v1/chat?aws_secret_access_key={named_only}&q=a%20b HTTP/1.1"),
    ]
    pipeline.put(ALB_KEY, ("\n".join(lines) + "\n").encode())

    assert pipeline.run(ALB_KEY) == {"batchItemFailures": []}

    rows = pipeline.rows()
    text = json.dumps(rows, default=str)
    assert "XXXXXXXXXXXX" not in text and "defghijk" not in text and named_only not in text
    assert rows[0]["request_query"] == "hook=https://[REDACTED:access_token]&q=a%20b"
    assert rows[2]["request_query"] == "aws_secret_access_key=[REDACTED:aws_secret_key]"


# -- a match inside a JSON number ------------------------------------------------------------------------------


@pytest.mark.parametrize("spliced", [True, False])
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"card": 4111111111111111, "note": "x"}', {"card": "[REDACTED:payment_card]", "note": "x"}),
        ('{"card": 4111111111111111, "note": "x\\ny"}', {"card": "[REDACTED:payment_card]", "note": "x\ny"}),
        (
            '{"cards": [4111111111111111, 5500000000000004], "b": "ok\\n"}',
            {"cards": ["[REDACTED:payment_card]", "[REDACTED:payment_card]"], "b": "ok\n"},
        ),
        (
            '{"t": "pay 4111111111111111 now", "n": 4111111111111111}',
            {"t": "pay [REDACTED:payment_card] now", "n": "[REDACTED:payment_card]"},
        ),
    ],
)
def test_a_match_inside_a_json_number_leaves_valid_json(
    text: str, expected: dict[str, Any], spliced: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A card number written as a JSON number was redacted as text between string literals, its marker unquoted, so
    the document was no longer valid JSON (`"card": [REDACTED:payment_card]`); the number is now a string of its
    marker, with escapes in the document or without, by either planner."""
    from capture_core import documents

    monkeypatch.setattr(documents, "SPLICED", spliced)
    assert json.loads(text)  # valid before
    assert json.loads(redact(text, as_json=True)) == expected


def test_text_that_was_not_json_keeps_its_bytes_around_a_marker() -> None:
    prose = 'card 4111111111111111 then "quoted\\n" text'  # holds a quote and a backslash: split like JSON
    assert redact(prose, as_json=True) == 'card [REDACTED:payment_card] then "quoted\\n" text'
    assert redact(prose) == 'card [REDACTED:payment_card] then "quoted\\n" text'
