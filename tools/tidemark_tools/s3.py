"""A real S3-compatible server on 127.0.0.1, for the tests that keep state (and tables)
on an object store: s3proxy (``org.gaul:s3proxy``, an S3 API server over Apache
jclouds' storage providers), from the jars ``make jars`` resolves
(:mod:`tidemark_tools.jars`). No Docker, no cloud account. Its objects live in its
memory (jclouds' ``transient`` provider: a key ending in ``/`` is an object of its own,
as on S3, which Hadoop's S3A connector needs); ``TIDEMARK_S3_PROVIDER=filesystem-nio2``
keeps them in ``workdir/data`` instead.

In Python::

    with S3Server.start(workdir) as s3:
        s3.create_bucket("state")
        location = s3.uri("state", "query-1")   # s3://...?endpoint_override=...
        fs = s3.filesystem()                    # a pyarrow S3FileSystem on it

From a shell::

    python -m tidemark_tools.s3 serve --dir target/s3

serves until interrupted, printing the endpoint; ``--info FILE`` and ``--owner PID`` as
for the Kafka broker (:mod:`tidemark_tools.serving`).

s3proxy, like many S3-compatible servers, does not check the request checksums AWS
SDKs send by default since 2025: a client must send them only where required
(``AWS_REQUEST_CHECKSUM_CALCULATION=when_required``, see :data:`CLIENT_ENV`), as it would
for MinIO's older releases or Ceph.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from tidemark_tools.jars import jar_dir
from tidemark_tools.serving import LocalServer, free_port, java, poll_ready, port_open, serve

__all__ = ["CLIENT_ENV", "S3Server"]

ACCESS_KEY = "tidemark"
SECRET_KEY = "tidemark-secret"  # a local server's: not a secret

#: The environment an S3 client of this server needs (AWS SDKs' checksum defaults).
CLIENT_ENV = {
    "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
    "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
}

_CONFIG = """\
s3proxy.endpoint=http://127.0.0.1:{port}
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity={key}
s3proxy.credential={secret}
jclouds.provider={provider}
jclouds.identity={key}
jclouds.credential={secret}
jclouds.filesystem.basedir={data}
"""
PROVIDER = os.environ.get("TIDEMARK_S3_PROVIDER", "transient")
_LOGBACK = """\
<configuration>
  <appender name="out" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{20} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="out"/></root>
</configuration>
"""
_JVM = ["-Xms64m", "-Xmx1g", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


class S3Server(LocalServer):
    """One running s3proxy; :meth:`start` starts it, :meth:`stop` (or leaving the
    ``with`` block) stops it; its objects stay under ``workdir/data``.
    :meth:`connect` reaches one another process started."""

    def __init__(self, endpoint: str, process: subprocess.Popen[bytes] | None = None):
        #: ``host:port``.
        super().__init__(process)
        self.endpoint = endpoint

    @classmethod
    def start(cls, workdir: str | os.PathLike[str], timeout: float = 60.0) -> S3Server:
        """Starts a server (its configuration and log in ``workdir``); returns once it
        answers (raises ``RuntimeError`` with its log's tail where it does not within
        ``timeout`` seconds)."""
        import shutil

        work = Path(workdir)
        shutil.rmtree(work / "data", ignore_errors=True)
        (work / "data").mkdir(parents=True)
        port = free_port()
        conf = work / "s3proxy.conf"
        conf.write_text(
            _CONFIG.format(
                port=port, key=ACCESS_KEY, secret=SECRET_KEY, data=work / "data", provider=PROVIDER
            )
        )
        (work / "logback.xml").write_text(_LOGBACK)
        classpath = str(jar_dir("s3proxy") / "*")
        jvm = [*_JVM, f"-Dlogback.configurationFile={work / 'logback.xml'}"]
        main = ["org.gaul.s3proxy.Main", "--properties", str(conf)]
        log_path = work / "s3proxy.log"
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [java(), *jvm, "-cp", classpath, *main],
                stdout=log,
                stderr=log,
                env={k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"},
                start_new_session=True,
            )
        server = cls(f"127.0.0.1:{port}", process)
        try:
            # The port first (the S3 client retries a refused connection for seconds).
            poll_ready(process, lambda: port_open(server.endpoint), "s3proxy", timeout, log_path)
            fs = server.filesystem()
            poll_ready(process, lambda: fs.get_file_info("tidemark-probe"), "s3proxy", 10, log_path)
        except BaseException:
            server.stop()
            raise
        return server

    @classmethod
    def connect(cls, endpoint: str) -> S3Server:
        """A handle on a server already running at ``endpoint``."""
        return cls(endpoint)

    def info(self) -> dict[str, Any]:
        """What another process needs to :meth:`connect`."""
        return {"endpoint": self.endpoint}

    # -- clients ----------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        """pyarrow ``S3FileSystem`` options for this server."""
        return {
            "access_key": ACCESS_KEY,
            "secret_key": SECRET_KEY,
            "endpoint_override": self.endpoint,
            "scheme": "http",
            "region": "us-east-1",
        }

    def filesystem(self) -> Any:
        """A pyarrow ``S3FileSystem`` on this server (see :data:`CLIENT_ENV`)."""
        import pyarrow.fs as pafs

        os.environ.update({k: os.environ.get(k, v) for k, v in CLIENT_ENV.items()})
        return pafs.S3FileSystem(**self.options(), allow_bucket_creation=True)

    def create_bucket(self, name: str) -> None:
        self.filesystem().create_dir(name)

    def uri(self, bucket: str, path: str = "") -> str:
        """``s3://`` URI of ``bucket/path`` that carries the endpoint and credentials
        (pyarrow's ``FileSystem.from_uri`` form): what a ``state_location`` names."""
        query = urlencode(
            {"endpoint_override": self.endpoint, "scheme": "http", "region": "us-east-1"}
        )
        who = f"{quote(ACCESS_KEY, safe='')}:{quote(SECRET_KEY, safe='')}"
        key = f"/{path.strip('/')}" if path.strip("/") else ""
        return f"s3://{who}@{bucket}{key}?{query}"

    def hadoop_conf(self) -> dict[str, str]:
        """Hadoop's S3A settings for this server (``fs.s3a.*``): a running session takes
        them with ``spark.conf.set`` (its reads and writes, Delta's, and a streaming
        query's checkpoint see them), a new one with the ``spark.hadoop.`` prefix."""
        return {
            "fs.s3a.endpoint": f"http://{self.endpoint}",
            "fs.s3a.endpoint.region": "us-east-1",
            "fs.s3a.access.key": ACCESS_KEY,
            "fs.s3a.secret.key": SECRET_KEY,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.checksum.validation": "false",
        }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidemark_tools.s3")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run one s3proxy on 127.0.0.1 until interrupted")
    s.add_argument("--dir", type=Path, default=Path("target/s3"))
    s.add_argument("--info", type=Path, help="write the endpoint here (JSON)")
    s.add_argument("--owner", type=int, help="stop when this process ends")
    args = parser.parse_args(argv)
    return serve(lambda: S3Server.start(args.dir), args.info, args.owner, "s3proxy")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
