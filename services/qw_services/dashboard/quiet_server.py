"""uvicorn's server ticking once a second, not ten times: an idle dashboard wakes only for its own work."""

from __future__ import annotations

import asyncio

import uvicorn

TICK_SECONDS = 1.0  # also how long a SIGTERM may wait to be noticed


class QuietServer(uvicorn.Server):
    async def main_loop(self) -> None:
        # uvicorn renews its Date header and checks for exit on every tenth 0.1 s tick; here every tick is a tenth.
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000
            await asyncio.sleep(TICK_SECONDS)
