"""libpq's TCP deadlines, so a connection across a dropped network fails in seconds, not the kernel's minutes."""

from __future__ import annotations

import math
import os
from typing import Any

from psycopg.conninfo import conninfo_to_dict


def network_timeouts(url: str, seconds: float) -> dict[str, Any]:
    """Connection keywords bounding a connect, unacknowledged data and a silent peer to about `seconds`; none the DSN sets.

    Without them a partitioned host's statement waits out the kernel's retransmissions and a
    connect its SYN retries (minutes); with them either fails and is retried. 0: none.
    """
    if seconds <= 0:
        return {}
    given = conninfo_to_dict(url)
    if os.environ.get("PGCONNECT_TIMEOUT"):  # libpq's own variable, which a keyword would override
        given["connect_timeout"] = os.environ["PGCONNECT_TIMEOUT"]
    wanted = {
        "connect_timeout": max(2, math.ceil(seconds)),
        "tcp_user_timeout": int(seconds * 1000),
        "keepalives": 1,
        "keepalives_idle": max(1, math.ceil(seconds / 2)),
        "keepalives_interval": max(1, math.ceil(seconds / 6)),
        "keepalives_count": 3,
    }
    return {key: value for key, value in wanted.items() if key not in given}
