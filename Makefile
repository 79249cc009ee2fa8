# tidemark: the two commands a new user needs are `make demo` and `make test`.
# Everything else here is what those two are made of.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(BIN)):$(PATH)
# One target dir for maturin and cargo; release profile everywhere so crates build once.
export CARGO_TARGET_DIR := $(abspath target)
CARGO_PROFILE := --release

.PHONY: help demo test setup jars kafka build lint fmt docs rust-test py-test wheel wheel-build wheel-check bench bench-rust bench-py clean

help:
	@echo "make demo   - set up, build, run the main job (a local Spark pipeline)"
	@echo "make test   - set up, build, run every gate and test suite"
	@echo "make wheel  - the wheel to ship: dist/*.whl (abi3, manylinux2014, stripped)"
	@echo "make bench  - criterion and Python benchmarks"
	@echo "make fmt    - format Rust and Python"

# uv installs the Python packages (28 s against pip's 40 s from a cold cache here). While
# it downloads, cargo warms up (WARM_UP): it fetches the crates, and for `make test` it
# compiles them and the Rust tests, whose dependencies are the Python module's (see
# benches/Cargo.toml), so that maturin and `make rust-test` find them built. A failure
# there is left for the build to report.
UV := uv==0.13.8
WARM_UP := cargo fetch --quiet
test: WARM_UP := cargo test --workspace --exclude tidemark-py $(CARGO_PROFILE) --no-run --quiet
# For the tests, also the archive of Spark's classes their JVMs map
# (tidemark_tools/class_archive.py): made while cargo compiles, checked again before them.
CLASS_ARCHIVE := $(BIN)/python tools/tidemark_tools/class_archive.py target/jvm/spark.jsa
ARCHIVE := true
test: ARCHIVE := $(CLASS_ARCHIVE)

$(BIN)/.deps-stamp: requirements-dev.txt tools/pyproject.toml
	@mkdir -p target
	$(WARM_UP) >target/warm-up.log 2>&1 & warm=$$!; \
	{ test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); } && \
	$(BIN)/python -m pip install --quiet $(UV) && \
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r requirements-dev.txt && \
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e tools && \
	$(BIN)/python tools/tidemark_tools/jars.py && \
	$(ARCHIVE); \
	deps=$$?; wait $$warm; exit $$deps
	touch $@

setup: $(BIN)/.deps-stamp

# The jars of Spark's Kafka connector, Delta Lake and Kafka's broker, resolved by Maven
# into .cache/ (git-ignored) once; again only when a POM in scripts/maven/ changes.
jars: setup
	$(BIN)/python tools/tidemark_tools/jars.py

# A Kafka broker on 127.0.0.1 for the benchmarks and trying things out (Ctrl-C stops it).
kafka: build jars
	$(BIN)/python -m tidemark_tools.kafka serve --dir target/kafka

# The module is abi3 (`_native.abi3.so`); a per-version build left by an older checkout
# (`_native.cpython-*.so`) would shadow it on import.
# (BUILT=1: built already, by the make that runs this one: make test.)
# make test builds it stripped, as the wheel it checks is: `maturin build` then finds
# the crate built and only packs it, where it would compile it again.
STRIP :=
test: STRIP := --strip
build: setup
	$(if $(BUILT),@true,rm -f python/tidemark/_native.cpython-*.so)
	$(if $(BUILT),@true,$(BIN)/maturin develop --release $(STRIP) --quiet)

demo: build
	$(BIN)/tidemark demo

# The Python checks (one core) run while clippy checks the crates (its last crates, the
# workspace's own, compile one at a time); their output follows clippy's.
PY_CHECKS := $(BIN)/mypy && $(BIN)/python -m mypy.stubtest tidemark._native && \
	$(BIN)/python docs/gen_api.py --check

lint: build
	cargo fmt --all -- --check
	$(BIN)/ruff check python tools tests benches docs scripts
	$(BIN)/ruff format --check python tools tests benches docs scripts
	$(BIN)/python scripts/check_links.py
	$(BIN)/python benches/results.py --check
	{ $(PY_CHECKS); } >target/py-checks.log 2>&1 & checks=$$!; \
	cargo clippy --workspace --all-targets $(CARGO_PROFILE) -- -D warnings; clippy=$$?; \
	wait $$checks; py=$$?; cat target/py-checks.log; \
	test $$clippy = 0 && test $$py = 0

rust-test:
	cargo test --workspace --exclude tidemark-py $(CARGO_PROFILE)

# Two pytest processes (pytest-xdist), each with its own local[2] SparkSession: much of
# a Spark test is one core's work (the driver, a JVM starting), so two overlap well.
PYTEST := $(BIN)/python -m pytest -q -n 2 --dist worksteal --durations=40 \
	--doctest-modules python/tidemark tools/tidemark_tools tests
py-test: build jars
	$(CLASS_ARCHIVE)
	$(PYTEST)

# make test runs the wheel check (below) beside the gates (lint, the Rust tests), which
# are mostly compiling, and on into the Python tests, whose first seconds are JVMs
# starting: its Spark runs wait on a JVM as much as they compute. (BUILT=1: the module
# was built by this make.)
test: build jars wheel-build
	{ $(WHEEL_CHECK); } >target/wheel-check.log 2>&1 & wheel=$$!; \
	$(MAKE) --no-print-directory BUILT=1 lint rust-test && \
	$(MAKE) --no-print-directory BUILT=1 py-test; tests=$$?; \
	wait $$wheel; checked=$$?; \
	if test $$checked = 0; then tail -n 4 target/wheel-check.log; else cat target/wheel-check.log; fi; \
	test $$tests = 0 && test $$checked = 0

# The wheel a user ships: one abi3 wheel for every CPython >= 3.10, its native module
# stripped, linked by zig (`ziglang` from PyPI) against glibc 2.17's symbols so that it
# is a manylinux2014 wheel (executors need glibc 2.17, not the build machine's). It
# builds in its own target directory (another linker: every crate compiles again).
wheel: setup
	$(BIN)/python -m pip install --quiet -r requirements-wheel.txt
	rm -rf dist
	CARGO_TARGET_DIR=$(abspath target/zig) $(BIN)/maturin build --release --strip --zig \
		--compatibility manylinux2014 -o dist
	$(BIN)/uv build --quiet --wheel tools -o dist && rm -rf tools/build
	$(BIN)/python scripts/check_wheel.py dist --max-glibc 2.17

# make test's check of the packaging (abi3, stripped, the library alone in its wheel;
# installed into fresh virtual environments: a pipeline on pyarrow, and with the spark
# and demo extras at the lowest PySpark the library supports, the README's first example
# and `tidemark demo`), from the build the tests already made: no second compile.
PYSPARK_LOW := $(shell sed -n 's/.*"pyspark>=\([0-9.]*\),.*/\1/p' pyproject.toml | head -1)
WHEEL_CHECK := $(BIN)/python scripts/check_wheel.py target/wheel-check --spark $(PYSPARK_LOW)
wheel-build: build
	rm -rf target/wheel-check
	$(BIN)/maturin build --release --strip --quiet -o target/wheel-check
	$(BIN)/uv build --quiet --wheel tools -o target/wheel-check && rm -rf tools/build

wheel-check: wheel-build
	$(WHEEL_CHECK)

docs: build
	$(BIN)/python docs/gen_api.py

fmt:
	cargo fmt --all
	$(BIN)/ruff format python tools tests benches docs scripts
	$(BIN)/ruff check --fix python tools tests benches docs scripts

bench: bench-rust bench-py

bench-rust:
	cargo bench -p tidemark-benches

bench-py: build jars
	$(BIN)/python -m pytest -q benches --benchmark-only

clean:
	rm -rf target dist $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .benchmarks
