"""A stand-in model server for the capture sidecar's tests and benchmark.

Run as `python standin_server.py PORT`. It answers like an OpenAI-style server (small JSON and
server-sent events with a delay between events) plus the odd cases a proxy must survive:
echo of everything it received, binary and gzip bodies, any status code, and responses that
break mid-body.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import sys

from aiohttp import web

COMPLETION_BODY = json.dumps(
    {
        "id": "cmpl-standin",
        "object": "text_completion",
        "model": "standin",
        "choices": [{"index": 0, "text": "Paris is the capital of France.", "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20},
    }
).encode()
BINARY_BODY = bytes(range(256)) * 64  # every byte value, 16 KiB
GZIP_BODY = gzip.compress(b'{"compressed": true}' * 100)


def sse_event(index: int) -> bytes:
    payload = {"id": "cmpl-standin", "choices": [{"index": 0, "delta": {"content": f"token{index} "}}]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


async def completions(request: web.BaseRequest) -> web.StreamResponse:
    """`?delay_ms=D`: answer after D milliseconds, like a model generating."""
    await request.read()
    delay_ms = request.query.get("delay_ms")
    if delay_ms:
        await asyncio.sleep(float(delay_ms) / 1000)
    return web.Response(body=COMPLETION_BODY, content_type="application/json")


async def stream(request: web.BaseRequest) -> web.StreamResponse:
    """`?events=N&delay_ms=D`: N events, D milliseconds apart, then `data: [DONE]`; `&usage=1`: an OpenAI usage
    event before it; `&end_delay_ms=E`: the end of the body (the last chunk) E milliseconds after `[DONE]`."""
    await request.read()
    events = int(request.query.get("events", "5"))
    delay = float(request.query.get("delay_ms", "0")) / 1000
    end_delay = float(request.query.get("end_delay_ms", "0")) / 1000
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for index in range(events):
        if index and delay:
            await asyncio.sleep(delay)
        await response.write(sse_event(index))
    if request.query.get("usage"):
        usage = {"id": "cmpl-standin", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": events}}
        await response.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    if end_delay:
        await asyncio.sleep(end_delay)
    await response.write_eof()
    return response


# Gated streams: each event after the first waits until the test, having received the one before through the
# sidecar, opens the gate (GET /gate/NAME). A sidecar that held events back would never deliver the first one, and
# the test's read would end at its safety timeout: the order of events proves streaming, not a stopwatch.
GATES: dict[str, asyncio.Queue[None]] = {}


def gate(name: str) -> asyncio.Queue[None]:
    return GATES.setdefault(name, asyncio.Queue())


async def gated_stream(request: web.BaseRequest) -> web.StreamResponse:
    """`?events=N&gate=NAME`: N events, each after the first sent only once `/gate/NAME` was called, then
    `data: [DONE]`."""
    await request.read()
    events = int(request.query.get("events", "3"))
    opened = gate(request.query["gate"])
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for index in range(events):
        if index:
            await opened.get()
        await response.write(sse_event(index))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def open_gate(request: web.BaseRequest) -> web.StreamResponse:
    gate(request.path.rsplit("/", 1)[1]).put_nowait(None)
    return web.Response(text="opened")


async def replay(request: web.BaseRequest) -> web.StreamResponse:
    """A recorded stream, as given: header `X-Replay` carries the event-stream body (BASE64) and
    `X-Chunk-Bytes` how many bytes each write holds, so events split across chunks as on a real wire.
    Headers, not the body: the capture keeps the body, and the replay instructions are no prompt."""
    await request.read()
    data, size = base64.b64decode(request.headers["X-Replay"]), int(request.headers.get("X-Chunk-Bytes", "64"))
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for start in range(0, len(data), size):
        await response.write(data[start : start + size])
        await asyncio.sleep(0)
    await response.write_eof()
    return response


async def echo(request: web.BaseRequest) -> web.StreamResponse:
    """The body back verbatim; what arrived is described in X-Seen-* headers."""
    body = await request.read()
    status = int(request.query.get("status", "200"))
    seen_headers = [[name, value] for name, value in request.headers.items()]
    headers = {
        "X-Seen-Method": request.method,
        "X-Seen-Path": request.raw_path,
        "X-Seen-Headers": json.dumps(seen_headers),
    }
    response = web.Response(status=status, body=body, headers=headers)
    if "Content-Type" in request.headers:
        response.headers["Content-Type"] = request.headers["Content-Type"]
    response.headers.add("Set-Cookie", "a=1; Path=/")
    response.headers.add("Set-Cookie", "b=2; Path=/")
    return response


async def large(request: web.BaseRequest) -> web.StreamResponse:
    """`?bytes=N`: N bytes of JSON-safe text, streamed in 16 KiB writes without a length."""
    await request.read()
    remaining = int(request.query.get("bytes", "100000"))
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    while remaining > 0:
        piece = min(remaining, 16384)
        await response.write(b"x" * piece)
        remaining -= piece
    await response.write_eof()
    return response


async def break_midstream(request: web.BaseRequest) -> web.StreamResponse:
    """A chunked stream whose connection drops after two events."""
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(sse_event(0))
    await response.write(sse_event(1))
    await asyncio.sleep(0.05)
    return hang_up(request)


def hang_up(request: web.BaseRequest) -> web.StreamResponse:
    """Close the connection without finishing the response (the peer may have closed it already).

    The returned response is never sent: aiohttp skips writing to a closed connection.
    """
    if request.transport is not None:
        request.transport.close()
    return web.Response()


async def break_length(request: web.BaseRequest) -> web.StreamResponse:
    """Promises 100000 bytes, sends 10, hangs up."""
    await request.read()
    assert request.transport is not None
    request.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
    request.transport.write(b'{"partial"')
    await asyncio.sleep(0.05)
    return hang_up(request)


async def break_chunking(request: web.BaseRequest) -> web.StreamResponse:
    """Invalid chunked framing after a valid first chunk: a chunk size that is not hexadecimal."""
    await request.read()
    assert request.transport is not None
    request.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
    request.transport.write(b"5\r\nhello\r\n")
    await asyncio.sleep(0.05)
    if request.transport is not None:
        request.transport.write(b"ZZ\r\nnot a chunk\r\n")
    await asyncio.sleep(0.05)
    return hang_up(request)


async def sink(request: web.BaseRequest) -> web.StreamResponse:
    """Any size of body (request.read() stops at 1 MiB): answers its length, digest and framing."""
    digest = hashlib.sha256()
    size = 0
    while chunk := await request.content.readany():
        digest.update(chunk)
        size += len(chunk)
    seen = {
        "bytes": size,
        "sha256": digest.hexdigest(),
        "content_length": request.headers.get("Content-Length"),
        "transfer_encoding": request.headers.get("Transfer-Encoding"),
    }
    return web.Response(text=json.dumps(seen), content_type="application/json")


async def health(_: web.BaseRequest) -> web.StreamResponse:
    return web.Response(text="standin healthy")


# A model server that wants its API key even on its health path (none of vLLM, TGI, SGLang does).
STANDIN_API_KEY = "standin-api-key-0123456789"


async def authenticated_health(request: web.BaseRequest) -> web.StreamResponse:
    if request.headers.get("Authorization") != f"Bearer {STANDIN_API_KEY}":
        return web.Response(status=401, text="unauthorized")
    return web.Response(text="standin healthy")


async def model_metrics(_: web.BaseRequest) -> web.StreamResponse:
    return web.Response(text="standin_requests_total 1\n", content_type="text/plain")


async def gzipped(_: web.BaseRequest) -> web.StreamResponse:
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    return web.Response(body=GZIP_BODY, headers=headers)


async def binary(_: web.BaseRequest) -> web.StreamResponse:
    return web.Response(body=BINARY_BODY, content_type="application/octet-stream")


# A vLLM-like OpenAI server under /vllm: counts tokens as vLLM's Prometheus counters do (vllm:prompt_tokens_total,
# vllm:generation_tokens_total), honours stream_options.include_usage like vLLM (one usage-only event with
# "choices": [] before [DONE]; no "usage" key in the other events), and writes deterministic bytes, so a stream with
# the usage event removed equals the stream of the same request without include_usage.
VLLM_COUNTERS = {"prompt": 0, "generation": 0, "requests": 0}
VLLM_DEFAULT_MAX_TOKENS = 16


def vllm_prompt_tokens(request: dict[str, object]) -> int:
    """The stand-in's tokenizer: one token per whitespace-separated word of the prompt or messages, plus 3 per
    message (a chat template's framing)."""
    messages = request.get("messages")
    if isinstance(messages, list):
        return sum(
            3 + len(str(message.get("content", "")).split()) for message in messages if isinstance(message, dict)
        )
    return len(str(request.get("prompt", "")).split()) or 1


def _vllm_json(payload: dict[str, object]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


async def vllm_generate(request: web.BaseRequest) -> web.StreamResponse:
    """`/vllm/v1/chat/completions` and `/vllm/v1/completions`: `max_tokens` (default 16) tokens, one per event
    when streamed; `?delay_ms=D` between events (and before a non-streamed answer)."""
    body = json.loads(await request.read())
    chat = request.path.endswith("/chat/completions")
    prompt = vllm_prompt_tokens(body)
    completion = int(body.get("max_tokens") or VLLM_DEFAULT_MAX_TOKENS)
    delay = float(request.query.get("delay_ms", "0")) / 1000
    VLLM_COUNTERS["prompt"] += prompt
    VLLM_COUNTERS["generation"] += completion
    VLLM_COUNTERS["requests"] += 1
    usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
    head: dict[str, object] = {
        "id": "cmpl-standin",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": 1,
        "model": "standin",
    }
    if not body.get("stream"):
        if delay:
            await asyncio.sleep(delay)
        text = " ".join(f"tok{index}" for index in range(completion))
        choice = {"index": 0, "message": {"role": "assistant", "content": text}} if chat else {"index": 0, "text": text}
        answer = {
            **head,
            "object": "chat.completion" if chat else "text_completion",
            "choices": [{**choice, "finish_reason": "length"}],
            "usage": usage,
        }
        return web.Response(body=_vllm_json(answer), content_type="application/json")
    if request.query.get("framing") == "length":  # the whole stream at once, with a Content-Length
        events = []
        for index in range(completion):
            choice = {"index": 0, "delta": {"content": f"tok{index} "}}
            events.append(b"data: " + _vllm_json({**head, "choices": [choice]}) + b"\n\n")
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            events.append(b"data: " + _vllm_json({**head, "choices": [], "usage": usage}) + b"\n\n")
        events.append(b"data: [DONE]\n\n")
        return web.Response(body=b"".join(events), headers={"Content-Type": "text/event-stream"})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await response.prepare(request)
    for index in range(completion):
        if index and delay:
            await asyncio.sleep(delay)
        choice = {"index": 0, "delta": {"content": f"tok{index} "}} if chat else {"index": 0, "text": f"tok{index} "}
        last = index == completion - 1
        event = {**head, "choices": [{**choice, "finish_reason": "length" if last else None}]}
        await response.write(b"data: " + _vllm_json(event) + b"\n\n")
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        await response.write(b"data: " + _vllm_json({**head, "choices": [], "usage": usage}) + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def vllm_metrics(_: web.BaseRequest) -> web.StreamResponse:
    text = (
        "# TYPE vllm:prompt_tokens_total counter\n"
        f'vllm:prompt_tokens_total{{model_name="standin"}} {VLLM_COUNTERS["prompt"]}.0\n'
        "# TYPE vllm:generation_tokens_total counter\n"
        f'vllm:generation_tokens_total{{model_name="standin"}} {VLLM_COUNTERS["generation"]}.0\n'
        f'vllm:request_success_total{{model_name="standin"}} {VLLM_COUNTERS["requests"]}.0\n'
    )
    return web.Response(text=text, content_type="text/plain")


ROUTES = {
    "/vllm/v1/chat/completions": vllm_generate,
    "/vllm/v1/completions": vllm_generate,
    "/vllm/metrics": vllm_metrics,
    "/v1/completions": completions,
    "/v1/stream": stream,
    "/v1/gated-stream": gated_stream,
    "/v1/chat/completions": replay,
    "/large": large,
    "/broken/midstream": break_midstream,
    "/broken/length": break_length,
    "/broken/chunking": break_chunking,
    "/sink": sink,
    "/health": health,
    "/health/authenticated": authenticated_health,
    "/metrics": model_metrics,
    "/gzip": gzipped,
    "/binary": binary,
}


async def dispatch(request: web.BaseRequest) -> web.StreamResponse:
    if request.path.startswith("/status/"):
        await request.read()
        status = int(request.path.rsplit("/", 1)[1])
        if status == 204:
            return web.Response(status=status)
        headers = {"Location": "/elsewhere"} if 300 <= status < 400 else None
        return web.Response(status=status, text="as requested", headers=headers)
    if request.path.startswith("/gate/"):
        return await open_gate(request)
    handler = ROUTES.get(request.path, echo)
    return await handler(request)


async def serve(port: int) -> None:
    runner = web.ServerRunner(web.Server(dispatch, access_log=None))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
    print(f"standin listening on {port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.run(serve(int(sys.argv[1])))
    except ImportError:
        asyncio.run(serve(int(sys.argv[1])))
