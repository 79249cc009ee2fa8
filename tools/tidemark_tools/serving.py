"""What the local servers of the tests (the Kafka broker, the S3-compatible server) share:
a free port, the JVM to run, waiting until one answers, stopping it, and serving one
until its owner ends (how a test session shares one server between its pytest workers).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

__all__ = [
    "LocalServer",
    "free_port",
    "java",
    "poll_ready",
    "port_open",
    "serve",
    "stop_process",
    "tail",
]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def java() -> str:
    """The ``java`` to run (``JAVA_HOME``'s, else the PATH's)."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else shutil.which("java")
    if found is None:
        raise FileNotFoundError("java is not on the PATH (nor JAVA_HOME set)")
    return str(found)


def tail(log: Path, n: int = 3000) -> str:
    """The last ``n`` characters of ``log``."""
    try:
        return log.read_text(errors="replace")[-n:]
    except OSError:
        return f"(no log at {log})"


def poll_ready(
    process: subprocess.Popen[bytes] | None,
    attempt: Callable[[], object],
    what: str,
    timeout: float,
    log: Path,
) -> None:
    """Calls ``attempt`` until it raises nothing; raises ``RuntimeError`` with the
    server's log where ``process`` exits or ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited: {tail(log)}")
        try:
            attempt()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not answer: {tail(log)}") from None
            time.sleep(0.2)


def stop_process(p: subprocess.Popen[bytes] | None, grace: float = 20.0) -> None:
    """Stops a server started in its own session: SIGTERM, SIGKILL after ``grace`` s."""
    if p is None or p.poll() is not None:
        return
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def port_open(address: str) -> None:
    """Connects to ``host:port`` and hangs up (raises where nothing listens)."""
    host, port = address.rsplit(":", 1)
    socket.create_connection((host, int(port)), timeout=1).close()


_S = TypeVar("_S", bound="LocalServer")


class LocalServer:
    """A server process this handle started (``process``), or one another process
    started (``None``): whether it is alive, stopping it, and ``with`` that stops it."""

    def __init__(self, process: subprocess.Popen[bytes] | None) -> None:
        self._process = process

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """Stops a server this handle started (SIGTERM, then SIGKILL after 20 s)."""
        p, self._process = self._process, None
        stop_process(p)

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class Server(Protocol):
    def info(self) -> dict[str, Any]: ...
    def alive(self) -> bool: ...
    def stop(self) -> None: ...


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(start: Callable[[], Server], info: Path | None, owner: int | None, what: str) -> int:
    """Runs the server ``start`` starts until SIGTERM/SIGINT or until ``owner`` ends;
    ``info`` gets its :meth:`Server.info` and this process's pid as JSON once it
    answers."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    server = start()
    try:
        doc = {**server.info(), "pid": os.getpid()}
        if info is not None:
            tmp = info.with_suffix(".tmp")
            tmp.write_text(json.dumps(doc))
            tmp.replace(info)
        print(f"{what} serving: {doc}", flush=True)
        while not stop and (owner is None or _alive(owner)):
            if not server.alive():
                print(f"{what} exited", file=sys.stderr)
                return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
