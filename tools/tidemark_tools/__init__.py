"""tidemark's tools, a distribution of their own (``tidemark-tools``, which the library's
``demo`` extra installs; never in the library's wheel): the ``tidemark`` command
(:mod:`.cli`), the demos (:mod:`.demo`, :mod:`.demo_streaming`), the stream generators
(:mod:`.datagen`, :mod:`.dirty`), the accuracy, soak and crash-restart harnesses
(:mod:`.accuracy`, :mod:`.soak`, :mod:`.crashtest`), the local SparkSession the tests,
demos and benches use (:mod:`.session`), and, from a checkout of the repository, the
Maven-resolved jars of Spark's Kafka connector, Delta Lake and Kafka (:mod:`.jars`) and
a local Kafka broker (:mod:`.kafka`).

The library (``tidemark``, ``tidemark.spark``) imports nothing from here.
"""
