# process-orders: every target does its own set-up on a fresh machine.
#   make run     the function on every sample event, embedded defaults (in-memory store, simulated payments)
#   make test    the whole test suite (installs and starts what the tests need)

SHELL := /bin/bash
CARGO ?= cargo
# Python tools (cargo-lambda, moto, ...) live in a venv outside the clone so CI runs reuse it.
VENV ?= $(HOME)/.cache/process-orders/venv
PY_STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
# Powertools for AWS Lambda (Python) with what its idempotency needs, for make bench-cpu, in a
# venv of its own so its boto3 never moves moto's.
BENCH_VENV ?= $(HOME)/.cache/process-orders/bench-venv
BENCH_VENV_STAMP := $(BENCH_VENV)/.installed
# Template checks and deployment tools (cfn-lint, checkov, SAM CLI) in a venv of their own.
IAC_VENV ?= $(HOME)/.cache/process-orders/iac-venv
IAC_STAMP := $(IAC_VENV)/.installed
EVENT ?= events/standard.json
HOST_TRIPLE := $(shell rustc -vV | sed -n 's/^host: //p')

# Provenance: the deployed bootstrap embeds its dependency list (cargo-auditable, as the rustc
# wrapper that `cargo auditable build` sets, so cargo-lambda and `sam build` embed it too), and a
# CycloneDX SBOM recovered from that list is written beside it (auditable2cdx). docs/security.md.
CARGO_BIN_DIR := $(or $(CARGO_HOME),$(HOME)/.cargo)/bin
AUDITABLE_BIN := $(CARGO_BIN_DIR)/cargo-auditable
SBOM_BIN := $(CARGO_BIN_DIR)/auditable2cdx
AUDITABLE := RUSTC_WORKSPACE_WRAPPER="$(AUDITABLE_BIN)" CARGO_AUDITABLE_ORIG_ARGS='{"offline":false,"locked":false,"frozen":false,"config":[]}'

.PHONY: run run-dynamodb demo ops-demo test check adopter planted-bugs redis-server chaos sim mutants mutants-sim bench bench-otel bench-cpu lint package semver msrv deny fuzz invoke check-template build build-lambda check-lambda worker-image check-worker-image deploy clean-venv

run:
	@$(CARGO) build --quiet --bin process-orders
	@for event in events/*.json; do \
		echo "== $$event"; \
		RUST_LOG=$${RUST_LOG:-warn} $(CARGO) run --quiet --bin process-orders -- --event "$$event" || exit 1; \
	done

# The one-shot mode twice on a local DynamoDB-compatible server (moto), with the table created
# from template.yaml's key schema: the second run ACKs every duplicate without charging.
run-dynamodb: $(PY_STAMP)
	@$(CARGO) build --quiet --bin process-orders
	@PATH="$(VENV)/bin:$$PATH" BIN="$${CARGO_TARGET_DIR:-target}/debug/process-orders" scripts/run-dynamodb.sh

# The whole system locally (moto + the local event source mapping): DEMO_ARGS="--orders 1000".
demo: $(PY_STAMP)
	@$(CARGO) build --quiet -p local-esm
	@PATH="$(VENV)/bin:$$PATH" BIN="$${CARGO_TARGET_DIR:-target}/debug/local-esm" scripts/demo.sh $(DEMO_ARGS)

# The simulator's planted bugs live in tools/sim/planted.patch, never in the crates that ship:
# scripts/planted_tree.py applies it to a copy of the repository (PLANTED_TREE, kept between runs
# under the target folder), whose lambda-kit compiles the bugs in under $(SIM_MUTATIONS). Only
# the planted-bug tests and `make sim MUTATION=...` run there; nothing is built from it for use.
SIM_MUTATIONS := PROCESS_ORDERS_SIM_MUTATIONS=1
TARGET_DIR = $${CARGO_TARGET_DIR:-$(CURDIR)/target}
PLANTED = tree=$$(python3 scripts/planted_tree.py) && cd "$$tree" && CARGO_TARGET_DIR=$(TARGET_DIR) $(SIM_MUTATIONS)

test: $(PY_STAMP) redis-server
	PATH="$(VENV)/bin:$$PATH" $(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc
	# The S3 claim check is an optional feature: its unit and moto tests built with it on.
	$(CARGO) test -p claim-check -p process-orders --features claim-check/s3,process-orders/s3-claim-check --lib
	PATH="$(VENV)/bin:$$PATH" $(CARGO) test -p orders-ops --features s3-claim-check --test it
	$(MAKE) --no-print-directory planted-bugs
	$(MAKE) --no-print-directory adopter

# The inner loop: format, lint, and every crate's unit tests (the code's own #[cfg(test)]
# modules, which start no server), without the integration tests, the doctests or the other
# feature sets `make test` builds.
check:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) test --workspace --lib --bins

# The simulator's planted-bug tests (ignored in this tree, which has no bug), in the planted
# tree: each planted bug must be caught within a bounded number of seeds.
planted-bugs:
	@names=$$($(CARGO) test --quiet -p sim --test it -- --list --ignored --format terse | sed -n 's/: test$$//p'); \
	[ -n "$$names" ] || { echo "planted-bugs: no ignored test in this tree's simulator"; exit 1; }; \
	$(PLANTED) $(CARGO) test -p sim --test it -- --exact $$names the_planted_bug_tests_run_exactly_when_the_bugs_are_compiled_in

# A team's own crate outside the workspace (tests/adopter), with the features a user picks, not
# the workspace's union: its tests, and the build without a feature it needs failing with the
# feature's name.
adopter:
	scripts/adopter.sh

# The Redis store's tests (idempotency, feature testkit-redis) start a redis-server of their own
# and fail without one: install Debian's when it is missing.
redis-server:
	@command -v redis-server >/dev/null || { (apt-get update -q && apt-get install -y -q redis-server) || (sudo apt-get update -q && sudo apt-get install -y -q redis-server); }

# An on-call session on a local server: orders-ops depth, inspect and redrive.
ops-demo: $(PY_STAMP)
	@$(CARGO) build --quiet -p local-esm -p orders-ops
	@PATH="$(VENV)/bin:$$PATH" ESM="$${CARGO_TARGET_DIR:-target}/debug/local-esm" OPS="$${CARGO_TARGET_DIR:-target}/debug/orders-ops" scripts/ops-session.sh

# The chaos run at any size: ORDERS orders per queue kind (default 10,000) through moto (its SQS
# serialized by scripts/moto_locked.py), the local event source mapping, the function, dynoxide
# and the failing payment provider; a progress line every 10 s and a table at the end.
ORDERS ?= 10000
chaos: $(PY_STAMP)
	PATH="$(VENV)/bin:$$PATH" CHAOS_ORDERS=$(ORDERS) $(CARGO) test -p local-esm --test it chaos -- --nocapture

# Benchmarks (no pass/fail on time), each printing a table docs/performance.md quotes:
#   (a) per-record CPU vs deserializing into SqsEvent (criterion), (b) init vs hello-world and
#   (c) peak RSS of the release binaries over a local Runtime API, (d) concurrency speedup,
#   (e) DynamoDB requests per record on each path (against dynoxide).
#   (f) tail latency against dynoxide and the provider stub, (g) the same batch through
#   Powertools for AWS Lambda (Python), (h) the response's time after a blackholed SQS.
#   The function is measured as deployed: a release build, PIE (docs/security.md).
bench: $(BENCH_STAMP)
	$(CARGO) build --release -p process-orders --example hello --bin process-orders
	BENCH_BIN_DIR=$${CARGO_TARGET_DIR:-target}/release BENCH_FUNCTION=$${CARGO_TARGET_DIR:-target}/release/process-orders \
		BENCH_PYTHON=$(VENV)/bin/python $(CARGO) bench -p process-orders --bench records --bench system --bench tail
	$(CARGO) test -p process-orders --test it store::each_path_costs_its_budget_of_requests -- --nocapture

# Traces' cold start (docs/performance.md, "Traces: the exporter"): the function with its own
# exporter against OpenTelemetry's SDK exporter (`opentelemetry-otlp`) in a hello-world
# (benches/otel-sdk, a crate outside the workspace), each against the bare hello-world, spans
# sent to a local OTLP receiver. Binaries copied aside: cargo bench rebuilds the release folder.
BENCH_OTEL_DIR = $${CARGO_TARGET_DIR:-target}/bench-otel
bench-otel:
	$(CARGO) build --release --manifest-path benches/otel-sdk/Cargo.toml
	$(CARGO) build --release -p process-orders --example hello --bin process-orders
	mkdir -p $(BENCH_OTEL_DIR)/examples
	cp $${CARGO_TARGET_DIR:-target}/release/hello-otel $${CARGO_TARGET_DIR:-target}/release/process-orders $(BENCH_OTEL_DIR)/
	cp $${CARGO_TARGET_DIR:-target}/release/examples/hello $(BENCH_OTEL_DIR)/examples/
	BENCH_BIN_DIR=$(BENCH_OTEL_DIR) BENCH_FUNCTION=$(BENCH_OTEL_DIR)/process-orders \
		BENCH_OTEL_HELLO=$(BENCH_OTEL_DIR)/hello-otel $(CARGO) bench -p process-orders --bench system

# CPU per order on the shipped path (docs/performance.md): the release bootstrap as shipped, over
# the local Runtime API, with each store client (DYNAMODB_CLIENT=direct, sdk), events of 10 new
# orders through moto and through a stand-in answering as DynamoDB does (a counting proxy in front
# of each) and the payment stub; the same orders through Powertools for AWS Lambda (Python) beside
# it; the tables written to docs/results/bench-cpu.md, which the page links; allocations
# from a second build with a counting allocator (--features count-allocations, never shipped).
# Both bootstraps are copied aside first: cargo bench builds the binaries into the same release
# folder with the bench profile. One table; nothing passes or fails on time.
BENCH_CPU_DIR = $${CARGO_TARGET_DIR:-target}/bench-cpu
bench-cpu: $(PY_STAMP) $(BENCH_VENV_STAMP)
	mkdir -p $(BENCH_CPU_DIR)
	$(CARGO) build --release --bin process-orders --features count-allocations
	cp $${CARGO_TARGET_DIR:-target}/release/process-orders $(BENCH_CPU_DIR)/process-orders-counting
	$(CARGO) build --release --bin process-orders
	cp $${CARGO_TARGET_DIR:-target}/release/process-orders $(BENCH_CPU_DIR)/process-orders
	PATH="$(VENV)/bin:$$PATH" BENCH_FUNCTION=$(BENCH_CPU_DIR)/process-orders \
		BENCH_COUNTING_FUNCTION=$(BENCH_CPU_DIR)/process-orders-counting \
		BENCH_CPU_REPORT=$(CURDIR)/docs/results/bench-cpu.md \
		BENCH_PYTHON=$(BENCH_VENV)/bin/python $(CARGO) bench -p process-orders --bench cpu

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	@# Every feature.
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --all-features --quiet

# The deterministic simulation at scale (tools/sim): ORDERS orders over SEEDS seeds from
# FIRST_SEED, PROFILE standard, fifo, fifo-batch, brownout, store-brownout, skewed, lowered, archived,
# worker, money or mixed (the first six in turn),
# MUTATION a planted bug
# to watch being caught (that run is built in the planted tree, the rest in this one); a summary
# table at the end; a broken invariant prints the command that replays it and the story of its
# order, and exits 1. docs/simulation.md.
SEEDS ?= 100
FIRST_SEED ?= 1
PROFILE ?= mixed
MUTATION ?=
# memory, or dynamodb: the shipped DynamoDB store (its own client) on dynoxide's engine; empty,
# the profile's own (memory; dynamodb for store-brownout).
STORE ?=
# off: the DynamoDB store's client without its retry quota, to measure what the quota saves.
RETRY_QUOTA ?= on
# How the simulated provider words its answers: draft, stripe, adyen, bare, or mixed (by seed).
PROVIDER ?= draft
# Seeds run at once, a thread each (empty: the machine's cores); the table is the same for any.
JOBS ?=
# ORDERS as given (`make sim ORDERS=...`), else a million (the chaos run's default is not ours).
SIM_ORDERS = $(if $(filter command line environment,$(origin ORDERS)),$(ORDERS),1000000)
sim:
	$(if $(MUTATION),$(PLANTED)) ORDERS=$(SIM_ORDERS) SEEDS=$(SEEDS) FIRST_SEED=$(FIRST_SEED) PROFILE=$(PROFILE) MUTATION=$(MUTATION) STORE=$(STORE) RETRY_QUOTA=$(RETRY_QUOTA) PROVIDER=$(PROVIDER) JOBS=$(JOBS) $(CARGO) run --quiet --release -p sim

# Mutants nobody chose (docs/design.md): cargo-mutants over the money and delivery paths
# (.cargo/mutants.toml), each crate's mutants tested by its own tests, the tests that use it from
# outside (MUTANTS_ALSO_<crate>: sqs-batch's SQS adapters are tested against moto by local-esm)
# and the simulator's fixed seeds, SIM_TEST_SEEDS of each. Not in `make test`: every mutant is a
# build and a test run, and there are hundreds. MUTANTS_ARGS passes more (e.g. --file
# crates/sqs-batch/src/backoff.rs, --shard 1/4, --in-place). Each crate's results in
# mutants.out-CRATE/; exit 2 if any was missed.
MUTANTS_VERSION = 27.0.0
MUTANTS_CRATES ?= idempotency sqs-batch process-orders
MUTANTS_ALSO_sqs-batch = local-esm
MUTANTS_ARGS ?=
SIM_TEST_SEEDS ?= 3
# A target folder of its own: cargo names a workspace member's artifacts by its path inside the
# workspace, so a mutant built in cargo-mutants' copy, newer than the files here, looks fresh to
# a later `cargo test` in this tree sharing the folder, which then runs the mutant.
MUTANTS_TARGET_DIR ?= $(HOME)/.cache/process-orders/mutants-target
mutants: $(PY_STAMP) redis-server
	@cargo mutants --version 2>/dev/null | grep -qF "$(MUTANTS_VERSION)" || $(CARGO) install --locked cargo-mutants --version $(MUTANTS_VERSION)
	@status=0; $(foreach crate,$(MUTANTS_CRATES),\
	  PATH="$(VENV)/bin:$$PATH" SIM_TEST_SEEDS=$(SIM_TEST_SEEDS) \
	    CARGO_TARGET_DIR=$(MUTANTS_TARGET_DIR) cargo mutants --no-shuffle \
	    --package $(crate) --test-package $(crate) \
	    $(addprefix --test-package ,$(MUTANTS_ALSO_$(crate))) --test-package sim \
	    --output mutants.out-$(crate) $(MUTANTS_ARGS) || status=$$?;) exit $$status

# Mutants the simulator kills alone (issue 52; docs/simulation.md, "Mutants the simulator kills
# alone"): the money, store, give-up and backoff files, one cargo-mutants run a file (its own
# results in mutants.out-sim/FILE/), each mutant tested by the simulator's fixed seeds and
# nothing else: no crate's own tests, no planted bugs; the in-memory store's seeds, or the
# DynamoDB store's for its own file.
# Capped at MUTANTS_SIM_SEEDS seeds a profile (3, the first of each: the fewest at which every
# fixed run still reaches the faults it asserts it reaches; the ten runs take about 25 s here, a
# mutant about a minute with its build). MUTANTS_SIM_FILES narrows it.
# Not in `make test`; exit 2 if any mutant was missed.
MUTANTS_SIM_FILES ?= src/money.rs src/order.rs src/handler.rs \
	crates/idempotency/src/lib.rs crates/idempotency/src/store.rs crates/idempotency/src/guard.rs \
	crates/idempotency/src/once.rs crates/idempotency/src/memory.rs crates/idempotency/src/dynamodb.rs \
	crates/idempotency/src/dynamodb/item.rs \
	crates/sqs-batch/src/processor/mod.rs crates/sqs-batch/src/backoff.rs crates/sqs-batch/src/recovery.rs
MUTANTS_SIM_SEEDS ?= 3
# cargo-mutants 27 runs its unmutated baseline on the mutated package's tests, not on
# --test-package's (sqs-batch has no `it` test, so its baseline failed), so the baseline is
# skipped (the fixed seeds pass unmutated in `make test`) and the test timeout is set here: a
# run that takes about 25 s gets 240.
MUTANTS_SIM_TIMEOUT ?= 240
# The fixed-seed tests of tools/sim/tests/it (libtest filters: a test runs if any matches).
MUTANTS_SIM_TESTS = seeds_charge brownout_seeds a_lowered_receive copies_sent_again worker_seeds \
	seeds_with_a money_at --skip dynamodb_store
# The DynamoDB store's mutants meet the fixed seeds that run it (through the SDK, on dynoxide's
# engine), and only those.
MUTANTS_SIM_DYNAMODB_TESTS = seeds_on_the_dynamodb_store
# idempotency's lib.rs and store.rs hold what both stores use (the lease policy, the claim's
# decision) and what only the DynamoDB store does (a fingerprint's and a lease token's stored
# text): both stores' seeds.
MUTANTS_SIM_BOTH_TESTS = seeds_charge brownout_seeds a_lowered_receive copies_sent_again worker_seeds \
	seeds_with_a money_at seeds_on_the_dynamodb_store
mutants-sim:
	@cargo mutants --version 2>/dev/null | grep -qF "$(MUTANTS_VERSION)" || $(CARGO) install --locked cargo-mutants --version $(MUTANTS_VERSION)
	@mkdir -p mutants.out-sim; status=0; for file in $(MUTANTS_SIM_FILES); do \
	  case $$file in crates/*) crate=$$(echo $$file | cut -d/ -f2);; *) crate=process-orders;; esac; \
	  case $$file in *dynamodb.rs) tests="$(MUTANTS_SIM_DYNAMODB_TESTS)";; */idempotency/src/lib.rs|*/idempotency/src/store.rs) tests="$(MUTANTS_SIM_BOTH_TESTS)";; *) tests="$(MUTANTS_SIM_TESTS)";; esac; \
	  SIM_TEST_SEEDS=$(MUTANTS_SIM_SEEDS) CARGO_TARGET_DIR=$(MUTANTS_TARGET_DIR) \
	    cargo mutants --no-config --no-shuffle --all-features --package $$crate --test-package sim \
	    --baseline skip \
	    --timeout $(MUTANTS_SIM_TIMEOUT) \
	    --file $$file --exclude-re '<impl (std::)?(fmt::)?Debug for' --output mutants.out-sim/$$(echo $$file | tr / _) $(MUTANTS_ARGS) \
	    -- --test it -- $$tests || status=$$?; \
	done; exit $$status

# The libraries as crates.io would take them (nothing is published): `cargo publish --dry-run`
# for each, in publish order (cargo orders them, and verifies each against the ones before it
# through a local registry), each packaged crate built alone with default features, the upload
# stopped at the last step. Then their docs as docs.rs builds them: with default features, and
# with each crate's docs.rs feature set, warnings refused.
LIBRARY_CRATES = lambda-kit sqs-batch idempotency claim-check
# Cargo extracts a crate of that local registry once per name and version and never again (its
# registry/src folder has no content hash), so on a machine that ran this before, a library that
# changed without a version bump was verified against the earlier run's copy of the ones before
# it. Their extracted copies go first: the folders of unnamed sources ("-HASH"), never a named
# registry's such as crates.io's. Their builds go too: a registry crate's files carry the
# tarball's fixed mtime, older than any earlier build of the same name and version, so cargo
# would take that build as fresh (seen: idempotency verified against a lambda-kit built before a
# change it uses). Every fingerprint of the library crates goes, the workspace's own included
# (a clean clone rebuilds those anyway: its files are all new).
CARGO_HOME_DIR = $(or $(CARGO_HOME),$(HOME)/.cargo)
package:
	@find $(CARGO_HOME_DIR)/registry/src $(CARGO_HOME_DIR)/registry/cache -mindepth 1 -maxdepth 1 -name '-*' -exec rm -rf {} + 2>/dev/null || true
	@for crate in $(LIBRARY_CRATES); do rm -rf "$${CARGO_TARGET_DIR:-target}/debug/.fingerprint/$$crate-"*; done
	$(CARGO) publish --dry-run --allow-dirty $(addprefix -p ,$(LIBRARY_CRATES))
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --quiet $(addprefix -p ,$(LIBRARY_CRATES))
	@for crate in $(LIBRARY_CRATES); do \
		features=$$(sed -n '/^\[package.metadata.docs.rs\]/,/^\[/s/^features = \[\(.*\)\]/\1/p' crates/$$crate/Cargo.toml | tr -d '" '); \
		echo "docs of $$crate with features [$$features]"; \
		RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --quiet -p $$crate --features "$$features" || exit 1; \
	done

# The libraries' public API against their 0.1.0 baseline (cargo-semver-checks): the commit
# whose API 0.1.0 is, SEMVER_BASELINE. A change that needs a new major (or, before 1.0, minor)
# version fails here; make it on purpose: bump the crate's version (0.2.0 is that bump, so its
# breaking changes pass, listed in docs/CHANGELOG.md) and move the baseline to the commit that
# publishes it. Default features, as a dependent gets them. A clone without the
# baseline's commit (a shallow one) cannot compare and says so instead of failing.
SEMVER_VERSION := 0.51.0
SEMVER_BASELINE ?= 2ec45d6f97d92aa22a2fe302d9eb778129c90072
semver:
	@cargo semver-checks --version 2>/dev/null | grep -qF "$(SEMVER_VERSION)" || $(CARGO) install --locked cargo-semver-checks --version $(SEMVER_VERSION)
	@if git cat-file -e "$(SEMVER_BASELINE)^{commit}" 2>/dev/null; then \
		cargo semver-checks --baseline-rev $(SEMVER_BASELINE) $(addprefix -p ,$(LIBRARY_CRATES)); \
	else \
		echo "semver: the baseline $(SEMVER_BASELINE) is not in this clone (shallow?); not compared"; \
	fi

# The libraries' MSRV: `rust-version` in Cargo.toml, promised for default features, checked with
# that very toolchain (rustup installs it; its own target directory, beside the usual one).
MSRV := $(shell sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
msrv:
	rustup toolchain install $(MSRV) --profile minimal --no-self-update
	CARGO_TARGET_DIR="$${CARGO_TARGET_DIR:-target}-msrv" cargo +$(MSRV) check --lib $(addprefix -p ,$(LIBRARY_CRATES))

# Supply chain: licenses, bans (no OpenSSL) and sources, per deny.toml. Offline.
deny:
	@command -v cargo-deny >/dev/null || $(CARGO) install cargo-deny --locked
	$(CARGO) deny check licenses bans sources

# The fuzzers, FUZZ_SECONDS each (default 600). Not part of CI.
fuzz:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	scripts/fuzz.sh

# The real binary over the Lambda Runtime API, through cargo-lambda's emulator. The emulator
# compiles the function on the first invocation, which can eat that invocation's deadline, so a
# warm-up invocation of the empty event goes first.
invoke: $(PY_STAMP)
	@PATH="$(VENV)/bin:$$PATH" scripts/watch-invoke.sh $(EVENT)

# cfn-lint, checkov and SAM's own linter on template.yaml (all offline).
check-template: $(IAC_STAMP)
	$(IAC_VENV)/bin/cfn-lint template.yaml worker.yaml
	$(IAC_VENV)/bin/checkov --quiet --compact --skip-download -f template.yaml -f worker.yaml
	SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=us-east-1 $(IAC_VENV)/bin/sam validate --lint -t template.yaml

# The deployable arm64 bootstrap (zip in target/lambda/process-orders/).
build-lambda: $(PY_STAMP) $(AUDITABLE_BIN) $(SBOM_BIN)
	rustup target add aarch64-unknown-linux-gnu >/dev/null
	PATH="$(VENV)/bin:$$PATH" $(AUDITABLE) cargo lambda build --release --arm64 --bin process-orders --output-format zip
	@ls -l $${CARGO_TARGET_DIR:-target}/lambda/process-orders/bootstrap.zip
	$(SBOM_BIN) $${CARGO_TARGET_DIR:-target}/aarch64-unknown-linux-gnu/release/process-orders \
		> $${CARGO_TARGET_DIR:-target}/lambda/process-orders/bootstrap.cdx.json
	@ls -l $${CARGO_TARGET_DIR:-target}/lambda/process-orders/bootstrap.cdx.json

$(AUDITABLE_BIN):
	$(CARGO) install cargo-auditable --locked --version 0.7.7

$(SBOM_BIN):
	$(CARGO) install auditable2cdx --locked --version 0.1.0

# The deployable bootstrap run under qemu (arm64 user emulation) on a sample event: it must
# answer what the host build answers. Installs qemu-user and arm64 glibc from Debian if missing.
check-lambda: build-lambda
	@command -v qemu-aarch64 >/dev/null && [ -d /usr/aarch64-linux-gnu/lib ] || \
		{ apt-get install -y -q qemu-user libc6-arm64-cross libgcc-s1-arm64-cross >/dev/null || \
		  sudo apt-get install -y -q qemu-user libc6-arm64-cross libgcc-s1-arm64-cross >/dev/null; }
	@set -euo pipefail; dir=$$(mktemp -d); trap 'rm -rf "$$dir"' EXIT; \
	unzip -q -o $${CARGO_TARGET_DIR:-target}/lambda/process-orders/bootstrap.zip -d "$$dir"; \
	file_type=$$(readelf -h "$$dir/bootstrap" | sed -n 's/^ *Type: *//p'); echo "bootstrap: $$file_type"; \
	case "$$file_type" in DYN*) ;; *) echo "the bootstrap must be a position-independent executable (ASLR): $$file_type"; exit 1;; esac; \
	scripts/check-provenance.sh "$$dir/bootstrap" $${CARGO_TARGET_DIR:-target}/lambda/process-orders/bootstrap.cdx.json; \
	$(CARGO) build --quiet --bin process-orders; \
	expected=$$(env -i PATH="$$PATH" METRICS_ENABLED=false $${CARGO_TARGET_DIR:-target}/debug/process-orders --event events/standard.json 2>/dev/null); \
	got=$$(env -i METRICS_ENABLED=false qemu-aarch64 -L /usr/aarch64-linux-gnu "$$dir/bootstrap" --event events/standard.json 2>/dev/null); \
	[ "$$got" = "$$expected" ] || { echo "arm64 bootstrap answered $$got, expected $$expected"; exit 1; }; \
	echo "arm64 bootstrap answers events/standard.json as the host build does"

# The worker's container image (Containerfile) for arm64 and amd64, as the manifest list
# process-orders-worker: `FROM scratch` and one static binary. WORKER_ARCHES=amd64 builds one.
WORKER_ARCHES ?= arm64 amd64
worker-image: $(PY_STAMP)
	PATH="$(VENV)/bin:$$PATH" scripts/worker-image.sh $(WORKER_ARCHES)

# The amd64 image's root file system exported and its entry point run there, against moto,
# dynoxide and the payment stub: the worker tests of tests/it/worker.rs.
check-worker-image: $(PY_STAMP)
	PATH="$(VENV)/bin:$$PATH" scripts/check-worker-image.sh

# The deployment build as SAM runs it (BuildMethod rust-cargolambda: cargo-lambda and zig from
# the venv, no Docker): .aws-sam/build/OrdersFunction/bootstrap. Non-interactive on every SAM
# release (samconfig.toml opts in to the former preview; so does the variable).
build: $(PY_STAMP) $(IAC_STAMP) $(AUDITABLE_BIN) $(SBOM_BIN)
	rustup target add aarch64-unknown-linux-gnu >/dev/null
	PATH="$(VENV)/bin:$(IAC_VENV)/bin:$$PATH" SAM_CLI_TELEMETRY=0 SAM_CLI_BETA_RUST_CARGO_LAMBDA=1 $(AUDITABLE) sam build < /dev/null
	@ls -l .aws-sam/build/OrdersFunction/bootstrap
	@mkdir -p .aws-sam/sbom
	$(SBOM_BIN) .aws-sam/build/OrdersFunction/bootstrap > .aws-sam/sbom/process-orders.cdx.json
	@scripts/check-provenance.sh .aws-sam/build/OrdersFunction/bootstrap .aws-sam/sbom/process-orders.cdx.json

# sam build && sam deploy: guided the first time (no samconfig deploy answers saved yet).
# Names the account, region and stack, and deploys only once the account is confirmed
# (DEPLOY_ACCOUNT=<account id>, or typed at the prompt). PARAMETERS="Name=value ..." overrides
# template parameters; every change of code or parameter publishes a version for the live alias
# (ConfigurationHash, scripts/configuration_hash.py).
deploy: build
	@PATH="$(IAC_VENV)/bin:$$PATH" PYTHON="$(IAC_VENV)/bin/python" PARAMETERS="$(PARAMETERS)" scripts/deploy.sh

$(IAC_STAMP): requirements-iac.txt
	python3 -m venv $(IAC_VENV)
	$(IAC_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-iac.txt
	touch $@

$(BENCH_STAMP): requirements-bench.txt $(PY_STAMP)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	touch $@

$(BENCH_VENV_STAMP): requirements-bench.txt $(PY_STAMP)
	python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	touch $@

$(PY_STAMP): requirements-dev.txt
	@# A fresh Debian has python3 without its venv module: install it (apt), then make the venv.
	python3 -m venv $(VENV) || { { (apt-get update -q && apt-get install -y -q python3-venv) || (sudo apt-get update -q && sudo apt-get install -y -q python3-venv); } && python3 -m venv $(VENV); }
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

clean-venv:
	rm -rf $(VENV) $(IAC_VENV) $(BENCH_VENV)
