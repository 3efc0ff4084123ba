"""`python -m capture_sidecar`: validate settings, then serve until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from .settings import SettingsError, load_settings

EXIT_BAD_SETTINGS = 2


def main() -> int:
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("botocore").setLevel(logging.WARNING)  # it logs every credential lookup at INFO
    try:
        settings = load_settings(os.environ)
    except SettingsError as error:
        print(error, file=sys.stderr)
        return EXIT_BAD_SETTINGS

    from .service import serve  # after validation: a bad config fails fast, before heavy imports

    try:
        import uvloop
    except ImportError:  # optional: the standard loop works, only slower
        return asyncio.run(serve(settings))
    return uvloop.run(serve(settings))


if __name__ == "__main__":
    # os._exit skips joining a worker thread stuck in an S3 call after the grace period ended;
    # everything that could be flushed has been by then.
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
