"""A real Apache Kafka broker on 127.0.0.1, for the tests, the benchmarks and a local
try-out: one node in KRaft mode (broker and controller in one JVM, no ZooKeeper, no
Docker), from the jars ``make jars`` resolves (:mod:`tidemark_tools.jars`).

In Python::

    with Broker.start(workdir) as broker:
        broker.create_topic("events", partitions=8)
        ...  # broker.bootstrap: "127.0.0.1:<port>"

From a shell (``make kafka``)::

    python -m tidemark_tools.kafka serve --dir target/kafka

serves until interrupted, printing the bootstrap address; ``--info FILE`` writes it
as JSON once the broker answers, and ``--owner PID`` stops the broker when that
process ends (how the test session shares one broker between its pytest workers).

The admin calls and the producer use ``confluent-kafka`` (librdkafka).
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tidemark_tools.jars import jar_dir
from tidemark_tools.serving import LocalServer, free_port, java, poll_ready, port_open, serve

__all__ = ["Broker", "murmur2", "partition_for", "read_topic"]

# One node, every internal topic with one replica, no waiting for consumer groups to
# settle; logs kept as long as the broker lives.
_CONFIG = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={logs}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.retention.hours=-1
"""
# A broker for tests: a small heap, one GC thread.
_JVM = ["-Xms128m", "-Xmx768m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]


def read_topic(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    """``topic`` as Spark's Kafka source reads it from its first record: a streaming
    DataFrame of the raw records (``key``, ``value``, ``partition``, ``offset``, ...);
    ``options``: more of the source's (``maxOffsetsPerTrigger``, ``kafka.*``). A small
    read does not wait for the consumer's ``fetch.max.wait.ms`` (500 ms by default)."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.fetch.max.wait.ms", "10")
        .options(**options)
        .load()
    )


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (the Java client's, and librdkafka's ``murmur2``
    partitioner's, hash of a record key), as a signed 32-bit int."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = length & ~3
    rem = length % 4
    if rem == 3:
        h ^= data[tail + 2] << 16
    if rem >= 2:
        h ^= data[tail + 1] << 8
    if rem >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record with this key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class Broker(LocalServer):
    """One running broker; :meth:`start` starts it, :meth:`stop` (or leaving the
    ``with`` block) stops it and removes nothing (its logs stay in ``workdir``).
    :meth:`connect` reaches a broker another process started."""

    def __init__(
        self,
        bootstrap: str,
        process: subprocess.Popen[bytes] | None = None,
        workdir: Path | None = None,
    ):
        super().__init__(process)
        self.bootstrap = bootstrap
        self._producer: Any = None
        self._workdir = workdir

    # -- life cycle -------------------------------------------------------------------

    @classmethod
    def start(cls, workdir: str | os.PathLike[str], timeout: float = 90.0) -> Broker:
        """Formats a fresh log directory in ``workdir`` and starts the broker; returns
        once it answers (raises ``RuntimeError`` with its log's tail where it does not
        within ``timeout`` seconds)."""
        work = Path(workdir)
        shutil.rmtree(work / "logs", ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        port, controller = free_port(), free_port()
        config = work / "server.properties"
        config.write_text(_CONFIG.format(port=port, controller=controller, logs=work / "logs"))
        classpath = str(jar_dir("kafka") / "*")
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        env = {**os.environ, "JAVA_TOOL_OPTIONS": ""}
        # One token each: an id starting with "-" (1 in 32) would read as an option.
        storage = ["kafka.tools.StorageTool", "format", f"--cluster-id={cluster}"]
        storage.append(f"--config={config}")
        with open(work / "broker.log", "ab") as log:
            subprocess.run(
                [java(), *_JVM, "-cp", classpath, *storage],
                stdout=log,
                stderr=log,
                env=env,
                check=True,
            )
        broker = cls(f"127.0.0.1:{port}", None, work)
        broker._launch(timeout)
        return broker

    def _launch(self, timeout: float) -> None:
        """Runs the broker of ``server.properties`` in the work directory; returns once
        it answers."""
        assert self._workdir is not None and self._process is None
        config = self._workdir / "server.properties"
        classpath = str(jar_dir("kafka") / "*")
        env = {**os.environ, "JAVA_TOOL_OPTIONS": ""}
        with open(self._workdir / "broker.log", "ab") as log:  # the broker keeps its own copy
            self._process = subprocess.Popen(
                [java(), *_JVM, "-cp", classpath, "kafka.Kafka", str(config)],
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        try:
            self._wait_ready(timeout, self._workdir / "broker.log")
        except BaseException:
            self.stop()
            raise

    def start_again(self, timeout: float = 90.0) -> None:
        """Starts a broker this handle started and :meth:`stop` stopped, on the same
        address and log directory: its topics and records as they were."""
        if self._workdir is None:
            raise RuntimeError("only a broker this handle started can start again")
        if self.alive():
            raise RuntimeError(f"the broker at {self.bootstrap} is running")
        self._process = None
        self._producer = None
        self._launch(timeout)

    @classmethod
    def connect(cls, bootstrap: str) -> Broker:
        """A handle on a broker already running at ``bootstrap``."""
        return cls(bootstrap)

    def _wait_ready(self, timeout: float, log: Path) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        # The port first (a client would log every refused connection), then the broker.
        poll_ready(
            self._process,
            lambda: port_open(self.bootstrap),
            "the Kafka broker",
            timeout,
            log,
        )
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        left = max(1.0, deadline - time.monotonic())
        ask = lambda: admin.list_topics(timeout=2)  # noqa: E731
        poll_ready(self._process, ask, "the Kafka broker", left, log)

    def info(self) -> dict[str, Any]:
        """What another process needs to :meth:`connect`."""
        return {"bootstrap": self.bootstrap}

    # -- topics and records -----------------------------------------------------------

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(
        self, name: str, partitions: int, config: dict[str, str] | None = None
    ) -> None:
        """Creates ``name`` with ``partitions`` partitions (one replica) and the topic
        ``config`` given (e.g. ``{"max.message.bytes": ...}``)."""
        from confluent_kafka.cimpl import NewTopic

        admin = self.admin()  # alive until the answer: a collected client cancels it
        topic = NewTopic(name, partitions, 1, config=config or {})
        admin.create_topics([topic])[name].result(timeout=30)
        self._wait_partitions(name, partitions)

    def delete_topic(self, name: str) -> None:
        """Deletes ``name`` and waits until the broker no longer lists it."""
        admin = self.admin()
        admin.delete_topics([name])[name].result(timeout=30)
        for _ in range(300):
            if name not in admin.list_topics(timeout=5).topics:
                return
            time.sleep(0.1)
        raise RuntimeError(f"topic {name} is still listed after its deletion")

    def add_partitions(self, name: str, total: int) -> None:
        """Grows ``name`` to ``total`` partitions."""
        from confluent_kafka.cimpl import NewPartitions

        admin = self.admin()
        admin.create_partitions([NewPartitions(name, total)])[name].result(timeout=30)
        self._wait_partitions(name, total)
        if self._producer is not None:
            # Its metadata knows the old partitions only: the next produce makes another.
            self._producer.flush(30)
            self._producer = None

    def _wait_partitions(self, name: str, n: int) -> None:
        admin = self.admin()
        for _ in range(300):
            topic = admin.list_topics(name, timeout=5).topics.get(name)
            if (
                topic is not None
                and topic.error is None
                and len(topic.partitions) == n
                and all(p.leader >= 0 for p in topic.partitions.values())
            ):
                return
            time.sleep(0.1)
        raise RuntimeError(f"topic {name} did not reach {n} partitions with leaders")

    def producer(self, **config: Any) -> Any:
        """A ``confluent_kafka.Producer``: keys hashed to partitions as Java's client
        does (murmur2), every record acknowledged before ``flush`` returns."""
        from confluent_kafka import Producer

        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "partitioner": "murmur2_random",
                "linger.ms": 5,
                "acks": "all",
                "enable.idempotence": True,
                **config,
            }
        )

    def produce(
        self,
        topic: str,
        records: Iterable[tuple[bytes | None, bytes | None, int | None]],
        partition: int | None = None,
    ) -> list[tuple[int, int]]:
        """Writes ``(key, value, timestamp_ms)`` records (``partition``: all to that
        partition; else by key) and waits for every acknowledgement; returns each
        record's ``(partition, offset)``, in the order given."""
        if self._producer is None:  # one per handle: a new one registers with the broker
            self._producer = self.producer()
        producer = self._producer
        placed: list[tuple[int, int]] = []
        errors: list[str] = []

        def delivered(i: int) -> Any:
            def report(err: Any, msg: Any) -> None:
                if err is not None:
                    errors.append(str(err))
                else:
                    placed[i] = (msg.partition(), msg.offset())

            return report

        for key, value, ts in records:
            kwargs: dict[str, Any] = {"key": key, "value": value}
            if ts is not None:
                kwargs["timestamp"] = ts
            if partition is not None:
                kwargs["partition"] = partition
            kwargs["on_delivery"] = delivered(len(placed))
            placed.append((-1, -1))
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
            if len(placed) % 10_000 == 0:
                producer.poll(0)
        left = producer.flush(60)
        if left or errors:
            raise RuntimeError(f"{left} records not delivered; errors: {errors[:3]}")
        return placed

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Each partition's end offset (the next record's offset)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "tidemark-admin"})
        try:
            parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in sorted(parts)
            }
        finally:
            consumer.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidemark_tools.kafka")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run one broker on 127.0.0.1 until interrupted")
    s.add_argument("--dir", type=Path, default=Path("target/kafka"))
    s.add_argument("--info", type=Path, help="write the bootstrap address here (JSON)")
    s.add_argument("--owner", type=int, help="stop when this process ends")
    args = parser.parse_args(argv)
    return serve(lambda: Broker.start(args.dir), args.info, args.owner, "the Kafka broker")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
