# Makefile: builds build/cdc; `make check` installs what is missing and runs every test.
# Quiet unless V=1. SANITIZE=address,undefined builds (and tests) everything with sanitizers, in
# build/sanitize/ so that normal and sanitized objects never mix.

PREFIX ?= /usr/local
CC ?= cc
V ?= 0
Q := $(if $(filter 1,$(V)),,@)
PYTHON := /usr/bin/python3

PKGS := libpq rdkafka libprotobuf-c libevent yaml-0.1 libmicrohttpd json-c libsystemd libnats openssl libcurl
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

VERSION := $(shell cat VERSION)
CFLAGS ?= -O2 -g
override CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-missing-field-initializers \
	  -I. -Ibuild/gen -DCDC_VERSION='"$(VERSION)"' $(PKG_CFLAGS)
LDLIBS += $(PKG_LIBS) -lm
# The daemon allocates with jemalloc: librdkafka makes several small allocations per message, freed
# on its own threads, which glibc's malloc serialises. Sanitizer builds and the unit tests keep
# libc's allocator, so ASan and valgrind see every allocation.
ALLOC_LIBS := $(shell pkg-config --libs jemalloc 2>/dev/null)
B := build
ifneq ($(SANITIZE),)
ALLOC_LIBS :=
B := build/sanitize
# -fno-sanitize-recover: a UBSan finding aborts, so the test that caused it fails (by default it
# only prints, in a cdc stderr file no one reads). It also spares gcc the recovery paths that made
# its flow warnings (-Wnonnull, -Wformat-overflow) misfire in status.c and status_cmd.c.
override CFLAGS += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
override LDFLAGS += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all
endif

PROTOS := proto/cdc/v1/event.proto proto/cdc/v1/subscriber.proto
PROTO_C := $(PROTOS:proto/%.proto=build/gen/%.pb-c.c)
PROTO_H := $(PROTO_C:.c=.h)

# The sinks: what they share (sinks/*.c) and every module's folder (sinks/NAME/, listed in
# sinks/modules.c): a new sink's sources need no line here.
SINK_SRCS := $(sort $(wildcard sinks/*.c sinks/*/*.c))
# The library: everything but main, shared by the daemon, unit tests and fuzzers.
LIB_SRCS := \
	decoder/base/util.c decoder/base/buf.c decoder/base/worker.c decoder/base/ring.c decoder/base/fsutil.c decoder/base/arena.c decoder/base/hist.c \
	decoder/base/log.c decoder/base/json.c decoder/base/net.c decoder/base/prom.c decoder/base/tls.c \
	decoder/pgoutput.c decoder/pgtypes.c decoder/txn.c decoder/event.c decoder/ddl.c decoder/schema.c \
	$(SINK_SRCS) \
	cdc/match/match.c cdc/match/predicate.c cdc/match/rules.c \
	cdc/source/pgconn.c cdc/source/fixes.c cdc/source/failover.c cdc/source/ddl_trigger.c cdc/source/source.c cdc/source/state.c \
	cdc/source/catalog.c cdc/pipeline/progress.c cdc/pipeline/schema_track.c cdc/pipeline/pipeline.c \
	cdc/config/tree.c cdc/config/values.c cdc/config/types.c cdc/config/keys.c cdc/config/print.c \
	cdc/config/overlay.c cdc/config/reference.c cdc/config/secret.c \
	cdc/daemon/sinks_setup.c cdc/daemon/setup.c cdc/daemon/sidecar.c cdc/daemon/reload.c cdc/daemon/figures.c cdc/daemon/daemon.c \
	cdc/daemon/backfills.c cdc/daemon/signals.c cdc/daemon/notify.c \
	cdc/daemon/resync.c \
	cdc/status/status.c cdc/status/report.c \
	cdc/cli/cli.c cdc/cli/tail.c cdc/cli/status_cmd.c cdc/cli/doctor_cmd.c \
	cdc/doctor/doctor.c cdc/doctor/database.c cdc/doctor/failover_checks.c cdc/doctor/local.c cdc/doctor/unit.c \
	cdc/doctor/access.c
MAIN_SRCS := cdc/main.c
UNIT_TESTS := pgoutput pgtypes schema txn event config predicate rules frame spool status report log source net json pipeline \
	ring kafka_eo failover debezium avro kafka_render catalog publication nats
FUZZERS := pgoutput config predicate frame http redact put ddl debezium pbwire avro
# Backfills (cdc/backfill/): snapshots read by block ranges, each a COPY between watermarks, while the stream flows.
LIB_SRCS += cdc/backfill/window.c cdc/backfill/copy.c cdc/backfill/read_sets.c cdc/backfill/sql.c cdc/backfill/backfill.c cdc/backfill/state_file.c \
	cdc/backfill/stream.c cdc/backfill/backfill_progress.c cdc/backfill/reader.c \
	cdc/backfill/request.c cdc/backfill/signal.c cdc/cli/backfill_cmd.c
UNIT_TESTS += backfill_window backfill_sql backfill signal
FUZZERS += backfill signal copy

LIB_OBJS := $(PROTO_C:build/%.c=$(B)/obj/%.o) $(LIB_SRCS:%.c=$(B)/obj/%.o)
FUZZ_REPLAYS := $(FUZZERS:%=$(B)/tests/fuzz/replay_%)

DEPS := $(LIB_OBJS:.o=.d) $(MAIN_SRCS:%.c=$(B)/obj/%.d) $(UNIT_TESTS:%=$(B)/obj/tests/unit/test_%.d) \
	$(FUZZERS:%=$(B)/obj/tests/fuzz/fuzz_%.d) $(B)/obj/tests/fuzz/replay.d

# Keep generated protobuf C and test objects (make would delete them as intermediates).
.SECONDARY:
.PHONY: all deps docs check check-docs check-format check-unit check-fuzz-corpus check-integration check-matrix check-monitoring monitoring-rule check-clients check-fault check-model probe-kafka-txn torture torture-backfill torture-model demo bench soak fuzz valgrind install man deb check-package clean format
all: $(B)/cdc

build/gen/%.pb-c.c build/gen/%.pb-c.h: proto/%.proto
	@mkdir -p build/gen
	@$(if $(Q),echo "  PROTOC  $<")
	$(Q)protoc-c --c_out=build/gen -Iproto $<

$(B)/obj/gen/%.o: build/gen/%.c $(PROTO_H)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(B)/obj/%.o: %.c $(PROTO_H)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(B)/libcdc.a: $(LIB_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^

$(B)/cdc: $(B)/obj/cdc/main.o $(B)/libcdc.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(ALLOC_LIBS)

$(B)/tests/unit/test_%: $(B)/obj/tests/unit/test_%.o $(B)/libcdc.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Installs the Debian packages that building and testing need, when any is missing.
deps:
	$(Q)deploy/deps.sh build test package

# Every program runs, then the first failure's exit status (make check's summary counts them all).
check-unit: $(UNIT_TESTS:%=$(B)/tests/unit/test_%)
	$(Q)rc=0; for t in $^; do $$t || rc=1; done; exit $$rc

# The fuzz harnesses linked with tests/fuzz/replay.c's main() instead of libFuzzer (any compiler):
# each replays its kept corpus, so an input that once found a bug fails `make check` if it returns.
$(B)/tests/fuzz/replay_%: $(B)/obj/tests/fuzz/fuzz_%.o $(B)/obj/tests/fuzz/replay.o $(B)/libcdc.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# fuzz_avro checks cdc's Avro against Apache Avro's C library (libavro-dev): only it links the library.
$(B)/tests/fuzz/replay_avro build/fuzz/avro: LDLIBS += -lavro

check-fuzz-corpus: $(FUZZ_REPLAYS)
	$(Q)rc=0; for f in $(FUZZERS); do $(B)/tests/fuzz/replay_$$f tests/fuzz/corpus/$$f || rc=1; done; exit $$rc

# The unit tests and the corpus replays under valgrind's memcheck: an invalid access, a use of
# uninitialised memory or a leak fails. Not with SANITIZE (the two do not mix).
VALGRIND := valgrind -q --error-exitcode=1 --leak-check=full
valgrind: deps
	$(if $(SANITIZE),$(error make valgrind does not mix with SANITIZE))
	$(Q)$(MAKE) --no-print-directory -s $(UNIT_TESTS:%=$(B)/tests/unit/test_%) $(FUZZ_REPLAYS)
	$(Q)for t in $(UNIT_TESTS); do $(VALGRIND) $(B)/tests/unit/test_$$t || exit 1; done
	$(Q)for f in $(FUZZERS); do $(VALGRIND) $(B)/tests/fuzz/replay_$$f tests/fuzz/corpus/$$f || exit 1; done

# A librdkafka mock cluster as a process of its own: the Kafka broker of the integration tests.
$(B)/tests/kafka_mock: tests/kafka/mock_cluster.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(LDLIBS)

# What the mock supports of Kafka transactions (issue 17). Not part of make check: it exits 1 while
# the mock lacks what the exactly-once verification needs (aborted records, LSO, fencing).
probe-kafka-txn: $(B)/tests/kafka_mock
	$(Q)KAFKA_MOCK_BIN=$(abspath $(B)/tests/kafka_mock) $(PYTHON) tests/kafka/probe_transactions.py

# PostgreSQL versions. tests/pg.py runs Debian's 15 and the others from the pinned npm packages
# of tests/postgresql/ (npm ci, once per lock, into /var/tmp/cdc-test-postgresql). The whole
# integration suite, the clients, the package, the fault harness and the socket model run on PG_VERSION (the
# newest of PG_VERSIONS unless given); the tests marked matrix run on every one of PG_VERSIONS
# (check-matrix; make check runs them on the others, PG_VERSION's run being part of the suite's).
PG_VERSIONS ?= 14 15 16 17 18
PG_VERSION ?= $(lastword $(sort $(PG_VERSIONS)))
TEST_ENV = CDC_BIN=$(abspath $(B)/cdc) KAFKA_MOCK_BIN=$(abspath $(B)/tests/kafka_mock)

check-integration: $(B)/cdc $(B)/tests/kafka_mock
	$(Q)$(TEST_ENV) CDC_PG_VERSION=$(PG_VERSION) $(PYTHON) -m pytest -q tests/integration

# make check runs the suite in two halves side by side, every other test each (its tests mostly
# wait on servers, not on the CPU): check-integration-half-1 and -2.
check-integration-half-%: $(B)/cdc $(B)/tests/kafka_mock
	$(Q)$(TEST_ENV) CDC_SHARD=$*/2 CDC_PG_VERSION=$(PG_VERSION) $(PYTHON) -m pytest -q tests/integration

check-matrix: $(PG_VERSIONS:%=check-matrix-%)
check-matrix-%: $(B)/cdc $(B)/tests/kafka_mock
	$(Q)$(TEST_ENV) CDC_PG_VERSION=$* $(PYTHON) -m pytest -q -m matrix tests/integration

# deploy/monitoring/: the alert rules are valid and their unit tests (at the shipped durations) pass;
# tests/integration/test_monitoring.py runs them and the dashboard's queries in a real Prometheus.
# The Kubernetes component's PrometheusRule is the rule file's groups under spec: make
# monitoring-rule writes it, check-monitoring fails when it differs.
PROMETHEUS_RULE = deploy/kubernetes/components/monitoring/prometheusrule.yaml
prometheus_rule = { printf '%s\n' \
	'\# Written by make monitoring-rule from deploy/monitoring/cdc-alerts.yml (make check fails when' \
	'\# they differ): edit that file, then run make monitoring-rule.' \
	'apiVersion: monitoring.coreos.com/v1' 'kind: PrometheusRule' 'metadata:' '  name: cdc-alerts' \
	'  labels:' '    app.kubernetes.io/name: cdc' '    app.kubernetes.io/component: monitoring' 'spec:'; \
	sed -n '/^groups:/,$${s/^./  &/;p}' deploy/monitoring/cdc-alerts.yml; }

check-monitoring:
	$(Q)promtool check rules deploy/monitoring/cdc-alerts.yml
	$(Q)promtool test rules deploy/monitoring/cdc-alerts.test.yml
	$(Q)$(prometheus_rule) | diff -u $(PROMETHEUS_RULE) - || \
		{ echo "$(PROMETHEUS_RULE) differs from deploy/monitoring/cdc-alerts.yml: run make monitoring-rule" >&2; exit 1; }

monitoring-rule:
	$(Q)$(prometheus_rule) > $(PROMETHEUS_RULE)

# The client libraries of proto/clients/ (Python; TypeScript after npm ci of its lock and its build)
# and their example workers, against a real PostgreSQL and cdc; and each installed from its package
# (a wheel and pip into a new virtualenv, npm pack's tarball into a new npm project).
check-clients: $(B)/cdc
	$(Q)CDC_BIN=$(abspath $(B)/cdc) CDC_PG_VERSION=$(PG_VERSION) $(PYTHON) -m pytest -q tests/clients

# Fault injection (tests/fault/harness.py): load on PostgreSQL while cdc, the server, the walsender,
# Kafka's brokers and the socket consumers fail; exits non-zero on any loss, leaked aborted change,
# per-key order violation or slot that passed an undelivered change; then again with
# kafka.exactly_once, where Kafka must never send again a change it held and no socket change may
# be spooled at two offsets (tests/fault/exactly_once.py). check-fault is the short run (about
# three minutes) of make check; `make torture SEED=42 DURATION=600` the long one. Without SEED a
# random seed is used and printed. FAULT_ARGS: on PostgreSQL 17 and later both run a primary and
# standby with a failover slot, so each run has at least one promotion under load (--standby;
# pg_promote); before 17 there are no failover slots (cdc refuses source.failover), so one server.
FAULT_DURATION ?= 80
FAULT_EO_DURATION ?= 50
FAULT_ARGS ?= $(if $(filter 14 15 16,$(PG_VERSION)),,--standby)
DURATION ?= 600
# A lighter load for the long run: the harness keeps every event it received until the end.
TORTURE_ARGS ?= --pause 0.08
FAULT_ENV = $(TEST_ENV) CDC_PG_VERSION=$(PG_VERSION)
HARNESS = $(FAULT_ENV) $(PYTHON) tests/fault/harness.py --pg-version $(PG_VERSION) $(if $(SEED),--seed $(SEED))
check-fault: $(B)/cdc $(B)/tests/kafka_mock
	$(Q)$(FAULT_ENV) $(PYTHON) -m pytest -q tests/fault/test_verify.py tests/fault/test_checkers.py tests/fault/test_kafka_order.py
	$(Q)$(HARNESS) --duration $(FAULT_DURATION) $(FAULT_ARGS)
	$(Q)$(HARNESS) --duration $(FAULT_EO_DURATION) --exactly-once $(FAULT_ARGS)

torture: deps
	$(Q)$(MAKE) --no-print-directory all $(B)/tests/kafka_mock
	$(Q)$(HARNESS) --duration $(DURATION) $(FAULT_ARGS) $(TORTURE_ARGS)
	$(Q)$(HARNESS) --duration $(DURATION) --exactly-once $(FAULT_ARGS) $(TORTURE_ARGS)
	$(Q)$(MAKE) --no-print-directory torture-backfill torture-model

# The backfill-under-load test (three subscriptions: stdout, Kafka, socket; cdc killed with -9
# twice while they run; chunks on four connections; a plain and a partitioned table) at
# BACKFILL_ROWS rows instead of make check's 3,000.
BACKFILL_ROWS ?= 100000
torture-backfill: $(B)/cdc $(B)/tests/kafka_mock
	$(Q)$(FAULT_ENV) CDC_BACKFILL_ROWS=$(BACKFILL_ROWS) $(PYTHON) -m pytest -q -s \
		tests/integration/test_backfill.py -k test_backfill_under_load_with_kills

# The subscriber socket's state-machine test (tests/model/socket_model.py) against the sanitizer
# build: clients subscribe, ack rightly and wrongly, send garbage and leave while rows are written;
# every frame is checked against a model of what each consumer holds. check-model is the bounded run
# of make check (MODEL_STEPS steps, about a minute); torture-model the long one by DURATION. SEED
# replays a run (the seed is printed first and on failure).
MODEL_STEPS ?= 700
SAN := build/sanitize
check-model:
	$(Q)$(MAKE) --no-print-directory SANITIZE=address,undefined all
	$(Q)CDC_BIN=$(abspath $(SAN)/cdc) CDC_PG_VERSION=$(PG_VERSION) CDC_MODEL_STEPS=$(MODEL_STEPS) \
		$(if $(SEED),CDC_MODEL_SEED=$(SEED)) $(PYTHON) -m pytest -q tests/model

torture-model: deps
	$(Q)$(MAKE) --no-print-directory SANITIZE=address,undefined all
	$(Q)CDC_BIN=$(abspath $(SAN)/cdc) CDC_PG_VERSION=$(PG_VERSION) $(PYTHON) tests/model/socket_model.py \
		--duration $(DURATION) $(if $(SEED),--seed $(SEED))

# The C sources as the checked-in .clang-format has them: a difference fails (`make format` fixes it).
C_SOURCES = $(shell git ls-files '*.c' '*.h' 2>/dev/null)
check-format:
	$(Q)clang-format --dry-run -Werror $(C_SOURCES)

# The documentation: every relative link and anchor of the Markdown resolves, nothing points outside
# the repository.
# docs/configuration.md is written by cdc from its key table: make docs writes it, check-docs fails
# when the committed file differs. names.py --check fails on an extern function without its
# folder's prefix, a one-letter parameter in a header or a file name used twice (docs/architecture.md,
# "Names"); it reads the objects the build made.
check-docs: $(B)/cdc
	$(Q)$(B)/cdc config-reference | diff -u docs/configuration.md - || \
		{ echo "docs/configuration.md differs from the key table: run make docs" >&2; exit 1; }
	$(Q)$(PYTHON) tests/docs/check_links.py
	$(Q)$(PYTHON) tests/docs/example_defaults.py
	$(Q)$(PYTHON) tests/docs/names.py --check

docs: $(B)/cdc
	$(Q)$(B)/cdc config-reference > docs/configuration.md

# Every part, each after the others' failures too, then a summary: each part's counts (the
# integration suite on PG_VERSION, the matrix on each other version of PG_VERSIONS) and a last line
# saying all passed or what failed (tests/check.py).
check: deps
	+$(Q)$(PYTHON) tests/check.py --pg-version $(PG_VERSION) --pg-versions "$(PG_VERSIONS)"

# The first run compiles cdc on every core: about 20 s on 2 cores, 36 s one file at a time.
demo: deps
	$(Q)$(MAKE) --no-print-directory -j$(shell nproc) all
	$(Q)$(PYTHON) tests/demo.py

# make bench: 19 minutes on 2 busy cores (load 9-15), less on quiet ones; build/bench/results.md and PNGs. Quicker or partial:
# make bench BENCH_ARGS="--scale 0.1 --only growth" (sections: drain latency backfill trigger
# subscriptions consumers tables; peers = drain,trigger; growth = subscriptions,consumers,tables).
# The scale section is not in all: make bench BENCH_ARGS="--only scale" backfills a 10 GB table
# (--scale-rows 50000000; --scale-rows 2000000 for a short run).
# Debian's PostgreSQL 15 (the server with wal2json, a peer in the tables) unless PG_VERSION is
# given: PG_VERSION=18 make bench.
# make bench BENCH_BASE=<git rev> also builds that revision's cdc (build/bench-base/<rev>/, once) and
# runs it beside the new one: every drain and latency run, before and after in one run.
BENCH_BASE_BIN = build/bench-base/$(BENCH_BASE)/build/cdc
bench:
	$(Q)deploy/deps.sh build bench
	$(Q)$(MAKE) --no-print-directory all build/tests/kafka_mock
	$(Q)$(if $(BENCH_BASE),test -x $(BENCH_BASE_BIN) || { rm -rf build/bench-base/$(BENCH_BASE) && \
	  mkdir -p build/bench-base/$(BENCH_BASE) && git archive $(BENCH_BASE) | tar -x -C build/bench-base/$(BENCH_BASE) && \
	  $(MAKE) --no-print-directory -C build/bench-base/$(BENCH_BASE) all; })
	$(Q)$(PYTHON) tests/bench/bench.py $(if $(filter-out file,$(origin PG_VERSION)),--pg-version $(PG_VERSION)) \
	  $(if $(BENCH_BASE),--baseline $(BENCH_BASE_BIN)) $(BENCH_ARGS)

# make soak DURATION=1800: a steady 2,000 transactions/s into stdout, Kafka (at least once and exactly
# once) and a shared socket subscription for DURATION seconds, a backfill and a restart on the way;
# RSS, descriptors, spool, slot lag and p99 sampled every 10 s into build/soak/ (soak.md, soak.png).
soak:
	$(Q)deploy/deps.sh build bench
	$(Q)$(MAKE) --no-print-directory all build/tests/kafka_mock
	$(Q)$(PYTHON) tests/bench/soak.py --duration $(DURATION) $(SOAK_ARGS)

# libFuzzer harnesses (clang): make fuzz FUZZ_SECONDS=60
FUZZ_SECONDS ?= 30
FUZZ_CFLAGS := $(filter-out -fsanitize=%,$(CFLAGS)) -fsanitize=fuzzer,address,undefined
build/fuzz/%: tests/fuzz/fuzz_%.c $(LIB_SRCS) $(PROTO_C)
	@mkdir -p build/fuzz
	$(Q)clang $(FUZZ_CFLAGS) -o $@ $^ $(LDLIBS)
fuzz: deps $(FUZZERS:%=build/fuzz/%)
	$(Q)for f in $(FUZZERS); do mkdir -p build/fuzz/corpus-$$f && \
		build/fuzz/$$f -max_total_time=$(FUZZ_SECONDS) build/fuzz/corpus-$$f tests/fuzz/corpus/$$f || exit 1; done

# The man pages cdc(1) and cdc.yaml(5), from docs/man/*.md (docs/man/mdman.py; cdc.yaml(5) shows
# what the built cdc's check-config prints).
MAN_PAGES := build/man/cdc.1 build/man/cdc.yaml.5
man: $(MAN_PAGES)
build/man/%: docs/man/%.md docs/man/mdman.py VERSION $(B)/cdc
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  MAN     $@")
	$(Q)$(PYTHON) docs/man/mdman.py --version $(VERSION) --cdc $(B)/cdc $< > $@.tmp && mv $@.tmp $@

install: $(B)/cdc $(MAN_PAGES)
	install -D -m 0755 $(B)/cdc $(DESTDIR)$(PREFIX)/bin/cdc
	install -D -m 0644 build/man/cdc.1 $(DESTDIR)$(PREFIX)/share/man/man1/cdc.1
	install -D -m 0644 build/man/cdc.yaml.5 $(DESTDIR)$(PREFIX)/share/man/man5/cdc.yaml.5

# make deb: build/deb/cdc_VERSION_ARCH.deb, built by dpkg-buildpackage from a copy of the tree
# (the files git knows, as they are in the work tree) with deploy/debian/ as its debian/, then
# checked by lintian (a warning fails; deploy/debian/cdc.lintian-overrides explains what remains).
DEB_ARCH = $(shell dpkg-architecture -qDEB_HOST_ARCH)
DEB = build/deb/cdc_$(VERSION)_$(DEB_ARCH).deb
DEB_TREE := build/deb/cdc-$(VERSION)
deb:
	$(Q)deploy/deps.sh build package
	$(Q)v=$$(dpkg-parsechangelog -l deploy/debian/changelog -S Version); [ "$$v" = "$(VERSION)" ] || \
		{ echo "deploy/debian/changelog is at $$v, VERSION at $(VERSION): add an entry (dch -c deploy/debian/changelog -v $(VERSION))" >&2; exit 1; }
	$(Q)rm -rf build/deb && mkdir -p $(DEB_TREE)
	$(Q)git ls-files -co --exclude-standard | while IFS= read -r f; do [ -e "$$f" ] && printf '%s\0' "$$f"; done | \
		tar --null -T - -cf - | tar -xf - -C $(DEB_TREE)
	$(Q)cp -r deploy/debian $(DEB_TREE)/debian
	$(Q)cd $(DEB_TREE) && DEB_BUILD_OPTIONS="parallel=$$(nproc) $$DEB_BUILD_OPTIONS" \
		dpkg-buildpackage -us -uc -b > ../build.log 2>&1 || { tail -40 ../build.log >&2; exit 1; }
	$(Q)lintian --fail-on error,warning --display-info build/deb/cdc_$(VERSION)_$(DEB_ARCH).changes
	@echo "  DEB     $(DEB)"

# The package as a user meets it (tests/package/test_deb.py): unpacked into a throwaway root (dpkg
# -x: nothing is installed on this machine), its cdc run, its units verified, its man pages read.
check-package: deb $(B)/cdc
	$(Q)CDC_DEB=$(abspath $(DEB)) CDC_BIN=$(abspath $(B)/cdc) CDC_PG_VERSION=$(PG_VERSION) $(PYTHON) -m pytest -q tests/package

format:
	clang-format -i $(C_SOURCES)

clean:
	rm -rf build

-include $(DEPS)
