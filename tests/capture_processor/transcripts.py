"""Streamed responses byte for byte as vLLM, SGLang and TGI write them, and the secrets planted in them.

The chunk shapes follow what each server emits on its OpenAI-compatible routes (field order and
spacing included): vLLM's `chat.completion.chunk` with `logprobs`/`stop_reason` and a final
`choices: []` usage chunk (stream_options.include_usage), SGLang's with `matched_stop` and
`usage: null` on every chunk, TGI's Messages API with `system_fingerprint`, `data:` without a space,
and its 2.x single-object `tool_calls`; TGI's native `generate_stream` events too. The planted
values are well-formed fakes (AWS's documented example keys, test card numbers, reserved phone
ranges); nothing here is a live credential.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

# Each planted value, the rule that must catch it, and where it sits. A test fails when any of
# these strings is found in any curated column (also after JSON-decoding the column).
SECRETS = {
    "email": "alice.smith@example.com",
    "phone": "+44 20 7946 0958",
    "access_token": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "hf_token": "hf_abcdefghijklmnopqrstuvwxyz0123456789",
    "openai_key": "sk-proj-abcdefghijklmnopqrstuvwx",
    "github_token": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "slack_token": "xoxb-1234567890-abcdefghijkl",
    "bearer": "BEARER abcdefgh12345678ijklmnop",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "payment_card": "4111 1111 1111 1111",
    "us_ssn": "123-45-6789",
    "iban": "GB82 WEST 1234 5698 7654 32",
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n"
    "KUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQ\n-----END RSA PRIVATE KEY-----",
}
# Fragments a leak would leave even when the whole value is gone (the middle of each value).
FRAGMENTS = {
    "email": "smith@example",
    "access_token": "IOSFODNN7",
    "aws_secret_key": "K7MDENG/bPxRfiCY",
    "hf_token": "klmnopqrstuvwxyz0123",
    "private_key": "MIIBOgIBAAJBAKj34",
    "payment_card": "1111 1111 1111",
    "iban": "WEST 1234 5698",
}


def split(text: str, parts: int) -> list[str]:
    """`text` cut into `parts` pieces of near-equal length (a value spread over several deltas)."""
    size = max(1, -(-len(text) // parts))
    return [text[index : index + size] for index in range(0, len(text), size)]


def sse(events: Sequence[object], *, space: bool = True, done: bool = True, crlf: bool = False) -> str:
    prefix = "data: " if space else "data:"
    end = "\r\n" if crlf else "\n"
    body = "".join(f"{prefix}{event if isinstance(event, str) else _compact(event)}{end}{end}" for event in events)
    return body + (f"{prefix}[DONE]{end}{end}" if done else "")


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def usage_chunk(head: dict, prompt: int, completion: int, *, total_last: bool = False) -> dict:
    """The last chunk of a stream with stream_options.include_usage: no choices, the usage. vLLM and
    SGLang write total_tokens second, TGI last."""
    if total_last:
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    else:
        usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
    return head | {"choices": [], "usage": usage}


def vllm_chat(
    deltas: Sequence[str],
    *,
    model: str = "meta-llama/Llama-3.1-8B-Instruct",
    tool_args: Sequence[str] = (),
    usage: tuple[int, int] = (25, 40),
) -> str:
    head = {
        "id": "chatcmpl-8f2c4be1a7d04c5e9b1f",
        "object": "chat.completion.chunk",
        "created": 1764497700,
        "model": model,
    }

    def chunk(delta: dict, finish: str | None = None) -> dict:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        if finish is not None:
            choice["stop_reason"] = None
        return head | {"choices": [choice]}

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": delta}) for delta in deltas]
    if tool_args:
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "id": "chatcmpl-tool-5b1e0c",
                            "type": "function",
                            "index": 0,
                            "function": {"name": "send_email"},
                        }
                    ]
                }
            )
        )
        events += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}) for piece in tool_args]
    events.append(chunk({"content": ""}, "tool_calls" if tool_args else "stop"))
    events.append(usage_chunk(head, *usage))
    return sse(events)


def vllm_completion(deltas: Sequence[str], *, model: str = "Qwen/Qwen2.5-7B") -> str:
    head = {"id": "cmpl-3c9a77f0e5b24f4f", "object": "text_completion", "created": 1764497701, "model": model}
    events = [
        head | {"choices": [{"index": 0, "text": delta, "logprobs": None, "finish_reason": None, "stop_reason": None}]}
        for delta in deltas
    ]
    events.append(
        head | {"choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length", "stop_reason": None}]}
    )
    events.append(usage_chunk(head, 7, len(deltas)))
    return sse(events)


def sglang_chat(
    deltas: Sequence[str], *, model: str = "Qwen/Qwen2.5-7B-Instruct", reasoning: Sequence[str] = ()
) -> str:
    head = {"id": "a1b2c3d4e5f64718", "object": "chat.completion.chunk", "created": 1764497702, "model": model}

    def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> dict:
        full = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None} | delta
        choice = {"index": 0, "delta": full, "logprobs": None, "finish_reason": finish, "matched_stop": None}
        if finish is not None:
            choice["matched_stop"] = 151645
        return head | {"choices": [choice], "usage": usage}

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"reasoning_content": piece}) for piece in reasoning]
    events += [chunk({"content": delta}) for delta in deltas]
    events.append(chunk({}, "stop"))
    events.append(usage_chunk(head, 31, len(deltas)))
    return sse(events)


def tgi_chat(deltas: Sequence[str], *, tool_args: Sequence[str] = ()) -> str:
    head = {
        "object": "chat.completion.chunk",
        "id": "",
        "created": 1764497703,
        "model": "tgi",
        "system_fingerprint": "3.0.1-sha-bb9095a",
    }

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return head | {
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            "usage": None,
        }

    events = [chunk({"role": "assistant", "content": delta}) for delta in deltas]
    # TGI 2.x streams tool calls as one object (not a list), the name in the first delta only.
    events += [
        chunk(
            {
                "role": "assistant",
                "tool_calls": {
                    "index": 0,
                    "id": "",
                    "type": "function",
                    "function": {"name": "send_email" if index == 0 else None, "arguments": piece},
                },
            }
        )
        for index, piece in enumerate(tool_args)
    ]
    events.append(chunk({"role": "assistant", "content": ""}, "stop"))
    events.append(usage_chunk(head, 12, len(deltas), total_last=True))
    return sse(events, space=False)


def tgi_generate_stream(tokens: Sequence[str]) -> str:
    events = []
    for index, text in enumerate(tokens, start=1):
        last = index == len(tokens)
        events.append(
            {
                "index": index,
                "token": {"id": 1000 + index, "text": text, "logprob": -0.25, "special": False},
                "generated_text": "".join(tokens) if last else None,
                "details": {"finish_reason": "eos_token", "generated_tokens": len(tokens), "seed": None}
                if last
                else None,
            }
        )
    return sse(events, space=False, done=False)


def chat_request(
    content: str,
    *,
    model: str = "meta-llama/Llama-3.1-8B-Instruct",
    stream: bool = True,
    tool_arguments: str | None = None,
) -> str:
    messages: list[dict] = [
        {"role": "system", "content": "You are a helpful assistant.\nAnswer briefly."},
        {"role": "user", "content": content},
    ]
    if tool_arguments is not None:
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": tool_arguments}}
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": "call_1", "content": "done"})
    body: dict = {"model": model, "messages": messages, "stream": stream, "max_tokens": 256}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body, indent=None)


def sidecar_record(
    event_id: str,
    inference_time: str,
    caller_id: str,
    prompt: str,
    answer_deltas: Sequence[str],
    *,
    usage: tuple[int, int] = (25, 40),
    duration_ms: float = 850.0,
) -> str:
    """One capture line as the capture sidecar writes it for a streamed vLLM chat (docs/capture-sidecar.md): the
    request as JSON, the SSE response as BASE64, the sidecar's eventMetadata fields."""
    import base64

    response = vllm_chat(answer_deltas, usage=usage)
    capture = {
        "endpointInput": {"observedContentType": "application/json", "mode": "INPUT",
                          "data": chat_request(prompt), "encoding": "JSON"},
        "endpointOutput": {"observedContentType": "text/event-stream", "mode": "OUTPUT",
                           "data": base64.b64encode(response.encode()).decode(), "encoding": "BASE64"},
    }
    metadata = {"eventId": event_id, "inferenceId": event_id, "inferenceTime": inference_time, "callerId": caller_id,
                "requestPath": "/v1/chat/completions", "responseStatus": 200, "durationMs": duration_ms,
                "timeToFirstChunkMs": duration_ms / 10, "partial": False}
    return json.dumps({"captureData": capture, "eventMetadata": metadata, "eventVersion": "0"}, separators=(",", ":"))
