"""Wires the proxy, the metrics endpoint and the uploader together; owns start-up and shutdown."""

from __future__ import annotations

import asyncio
import gc
import logging
import resource
import signal
from concurrent.futures import ThreadPoolExecutor

import aiohttp
from aiohttp import web

from .key_reload import ApiKeysReloader
from .limits import Limiter, RedisTokenStore
from .metrics import SidecarMetrics
from .proxy import CaptureProxy, ClientConnection, MemoryBudget
from .records import ContentTypeEncodings
from .s3_writer import S3Writer, Spool
from .settings import Settings, UsageSettings
from .store_auth import ElastiCacheIamAuth, store_ca_file
from .uploader import CaptureUploader

log = logging.getLogger("capture_sidecar")

# Of the grace period, this much (at most) is kept for the final S3 flush; the rest lets
# in-flight requests, including long streams, finish.
FLUSH_RESERVE_SECONDS = 5.0
LISTEN_BACKLOG = 1024
EXIT_CANNOT_LISTEN = 1
# Beyond two per client connection (client, upstream): listeners, idle upstream connections, S3, the spool.
SPARE_FILE_DESCRIPTORS = 512


def raise_file_limit(max_connections: int) -> None:
    """Raise the soft RLIMIT_NOFILE to what MAX_CONNECTIONS needs (container runtimes may start at 1024), within
    the hard limit; say so if the hard limit is lower."""
    wanted = 2 * max_connections + SPARE_FILE_DESCRIPTORS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if new > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    if new < wanted:
        log.warning(
            "file descriptor limit %d is below the %d that MAX_CONNECTIONS=%d needs: lower MAX_CONNECTIONS",
            new,
            wanted,
            max_connections,
        )


class UpstreamHealth:
    """``GET /upstream/health``: the model server's own health check, asked on the probe's behalf.

    The chart binds the model server to 127.0.0.1 so that nothing can reach it except through this
    sidecar; kubelet probes come from the node and cannot reach a loopback address, so they ask here
    instead. 200 only when the model server answers its health path with a 2xx within the timeout;
    503 otherwise. The check goes straight to the model server, never through the proxy: it is not
    counted as a proxied request and never captured. With an API key set, the check sends it (none
    of vLLM, TGI or SGLang asks for it on /health, but a custom image may).
    """

    def __init__(self, settings: Settings) -> None:
        self.url = settings.upstream_url + settings.upstream_health_path
        self.headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self.timeout = aiohttp.ClientTimeout(total=settings.upstream_health_timeout_seconds)
        self.session: aiohttp.ClientSession | None = None

    async def handle(self, _: web.Request) -> web.Response:
        if self.session is None:
            # One small pool for the probes; no keep-alive, so a restarted model server is seen at once.
            self.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=4, force_close=True), timeout=self.timeout
            )
        try:
            async with self.session.get(self.url, headers=self.headers, allow_redirects=False) as response:
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as error:
            return web.Response(status=503, text=f"model server unreachable ({type(error).__name__})\n")
        if 200 <= status < 300:
            return web.Response(text="ok\n")
        return web.Response(status=503, text=f"model server answered {status}\n")

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


def make_limiter(usage: UsageSettings) -> Limiter | None:
    """The per-caller limiter (None without CALLER_LIMITS); shared through LIMITS_STORE_URL when set, else each
    replica enforces the limits alone."""
    if not usage.limits:
        return None
    store = None
    if usage.store_url:
        credentials = None
        if usage.store_iam_user and usage.store_iam_cache:
            credentials = ElastiCacheIamAuth(usage.store_iam_user, usage.store_iam_cache)
            try:  # the first token now, at start (botocore may call STS): not inside the first request's wait
                credentials.token()
            except Exception as error:  # (the store's first call signs again; its failure is counted there)
                log.warning("could not sign the budget store's IAM token yet (%s: %s)", type(error).__name__, error)
        store = RedisTokenStore(usage.store_url, usage.store_timeout_seconds, credentials=credentials,
                                ca_file=store_ca_file())
    if store is None:
        log.warning("CALLER_LIMITS without LIMITS_STORE_URL: each replica enforces the limits on its own")
    return Limiter(
        dict(usage.limits),
        store=store,
        key_prefix=usage.key_prefix,
        fail_mode=usage.store_failure,
        store_timeout_seconds=usage.store_timeout_seconds,
        alert_percents=usage.alert_percents,
    )


def _metrics_handler(metrics: SidecarMetrics, stopping: asyncio.Event, upstream: UpstreamHealth) -> web.Application:
    async def render_metrics(_: web.Request) -> web.Response:
        return web.Response(text=metrics.render(), content_type="text/plain", charset="utf-8")

    async def health(_: web.Request) -> web.Response:
        # 503 while draining, so a readiness probe takes the pod out of rotation.
        if stopping.is_set():
            return web.Response(status=503, text="stopping\n")
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_get("/metrics", render_metrics)
    app.router.add_get("/healthz", health)
    app.router.add_get("/upstream/health", upstream.handle)
    return app


async def serve(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT, then drain and flush within SHUTDOWN_GRACE_SECONDS."""
    loop = asyncio.get_running_loop()
    raise_file_limit(settings.max_connections)
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)

    metrics = SidecarMetrics(model_name=settings.model_name)
    budget = MemoryBudget(settings.max_inflight_body_bytes)
    metrics.inflight_body_bytes = lambda: budget.used
    executor = ThreadPoolExecutor(max_workers=settings.upload_concurrency, thread_name_prefix="s3-upload")
    writer = S3Writer(settings.capture_location, settings.kms_key_id, settings.upload_concurrency)
    spool = Spool(settings.spool_dir, settings.spool_max_bytes) if settings.spool_dir else None
    uploader = CaptureUploader(
        writer=writer,
        spool=spool,
        encodings=ContentTypeEncodings(settings.json_content_types, settings.csv_content_types),
        metrics=metrics,
        executor=executor,
        batch_size=settings.batch_size,
        flush_interval_seconds=settings.flush_interval_seconds,
        queue_max_records=settings.queue_max_records,
        queue_max_bytes=settings.queue_max_bytes,
        upload_concurrency=settings.upload_concurrency,
        release_bytes=budget.release,
    )
    limiter = make_limiter(settings.usage)
    if limiter is not None:
        metrics.limits = lambda: limiter
    proxy = CaptureProxy(settings=settings, uploader=uploader, metrics=metrics, budget=budget, limiter=limiter)

    flush_reserve = min(FLUSH_RESERVE_SECONDS, settings.shutdown_grace_seconds / 3)
    # /metrics, /healthz and /upstream/health see a request every few seconds: aiohttp is plenty there.
    upstream_health = UpstreamHealth(settings)
    metrics_runner = web.AppRunner(
        _metrics_handler(metrics, stopping, upstream_health), access_log=None, shutdown_timeout=1
    )
    await metrics_runner.setup()
    try:
        server = await loop.create_server(
            lambda: ClientConnection(proxy),
            settings.listen_host,
            settings.listen_port,
            backlog=LISTEN_BACKLOG,
            reuse_address=True,
        )
        await web.TCPSite(metrics_runner, settings.listen_host, settings.metrics_port).start()
    except OSError as error:
        log.error(
            "cannot listen on LISTEN_PORT=%d / METRICS_PORT=%d: %s", settings.listen_port, settings.metrics_port, error
        )
        await metrics_runner.cleanup()
        await upstream_health.close()
        executor.shutdown(wait=False)
        return EXIT_CANNOT_LISTEN
    sweeper = proxy.start_idle_sweeper()
    # A rotated key arrives as a new version of the mounted Secret: accepted (and a dropped one refused) without a
    # restart.
    key_reload = ApiKeysReloader(settings, proxy.set_api_keys, metrics).start() if settings.api_keys_file else None
    # JWT mode: the issuer's keys, fetched now and refreshed in the background (requests never wait on them).
    jwks_refresh = proxy.jwt.start() if proxy.jwt is not None else None
    # boto3's service model is ~90k long-lived objects; a full garbage collection scans them all
    # (~40 ms here), which showed up as p99 spikes. Frozen objects are never scanned again.
    gc.collect()
    gc.freeze()
    uploader_task = asyncio.create_task(uploader.run())
    log.info(
        "proxying :%d -> %s, capturing to s3://%s/%s, metrics on :%d",
        settings.listen_port,
        settings.upstream_url,
        settings.capture_location.bucket,
        settings.capture_location.prefix,
        settings.metrics_port,
    )

    await stopping.wait()
    deadline = loop.time() + settings.shutdown_grace_seconds
    log.info("stopping: no new connections, finishing in-flight requests")
    server.close()  # the listener: new connections are refused
    proxy.stop_accepting()  # idle keep-alive connections close now, busy ones after their response
    await proxy.wait_for_connections(settings.shutdown_grace_seconds - flush_reserve)
    sweeper.cancel()
    if key_reload is not None:
        key_reload.cancel()
    if jwks_refresh is not None:
        jwks_refresh.cancel()
    uploader_task.cancel()
    if limiter is not None:
        await limiter.give_back()  # unused day and month tokens, for the other replicas
        await limiter.close()
    log.info("flushing captured records")
    complete = await uploader.drain(deadline)
    await metrics_runner.cleanup()
    await upstream_health.close()
    executor.shutdown(wait=complete, cancel_futures=True)
    log.info(
        "stopped: %d requests proxied, %d records uploaded, %d dropped",
        metrics.requests_proxied,
        metrics.records_uploaded,
        sum(metrics.records_dropped.values()),
    )
    return 0
