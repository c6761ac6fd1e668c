"""A small tmpfs a test can fill to the last byte and free again: the disk under a Postgres tablespace."""

from __future__ import annotations

import os
import pwd
import subprocess
import tempfile
from pathlib import Path

SKIP_REASON = "mounting a small tmpfs needs root"
BALLAST = "ballast"


class SmallDisk:
    """A tmpfs of `size_mb`, owned by `owner` (the user Postgres runs as), with a ballast file to fill it."""

    def __init__(self, size_mb: int, owner: str) -> None:
        self.mount = Path(tempfile.mkdtemp(prefix="qw-small-disk-"))
        user = pwd.getpwnam(owner)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,uid={user.pw_uid},gid={user.pw_gid},mode=0700", "tmpfs", str(self.mount)],
                       check=True, capture_output=True, timeout=30)
        self.path = self.mount / "space"
        self.path.mkdir()
        os.chown(self.path, user.pw_uid, user.pw_gid)

    def fill(self) -> int:
        """Write the ballast until the disk refuses another byte; how many bytes it took."""
        written = 0
        chunk = b"\0" * (1 << 20)
        with open(self.mount / BALLAST, "ab", buffering=0) as ballast:
            for size in (1 << 20, 1 << 12, 1):  # big steps, then the last pages one byte at a time
                try:
                    while True:
                        written += ballast.write(chunk[:size])
                except OSError:
                    continue
        return written

    def free(self) -> None:
        (self.mount / BALLAST).unlink(missing_ok=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.mount)], check=False, capture_output=True, timeout=30)
        try:
            self.mount.rmdir()
        except OSError:
            pass
