"""An S3 stand-in for the capture sidecar benchmark: accepts every PutObject and keeps nothing.

moto would do, but its CPU cost would land on the same 2 cores as the proxy being measured.
Run as `python sidecar_s3_sink.py PORT`; GET /stats returns {"puts": n, "bytes": n}.
"""

from __future__ import annotations

import asyncio
import json
import sys

from aiohttp import web

stats = {"puts": 0, "bytes": 0}


async def handle(request: web.BaseRequest) -> web.StreamResponse:
    if request.method == "GET" and request.path == "/stats":
        return web.Response(text=json.dumps(stats), content_type="application/json")
    body = await request.content.read()  # request.read() would stop at aiohttp's 1 MiB default
    if request.method == "PUT":
        stats["puts"] += 1
        stats["bytes"] += len(body)
    return web.Response(headers={"ETag": '"00000000000000000000000000000000"'})


async def serve(port: int) -> None:
    runner = web.ServerRunner(web.Server(handle, access_log=None))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
