"""An aiohttp app served on 127.0.0.1 for the length of a block (tests talk to loopback only)."""
from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from aiohttp import web


@asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 at a free port; yields its base URL (``http://127.0.0.1:PORT``)."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    finally:
        await runner.cleanup()
