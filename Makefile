# Clavis top-level Makefile: `make demo` and `make test` are the two user commands.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

include deploy/testbed/testbed.mk

.PHONY: demo demo-parapluie test lint typecheck unit bench-solver bench-pareto bench-ingest schemas clean \
	bench-realistic bench-realistic-quick bench-fuzz bench-bound postgres-install monitor-install bench-monitor bench-testbed bench-migration bench-demo slurm-plugin \
	ui-install ui ui-test bench-ui bench-migration-faults bench-chaos bench-chaos-quick bench-power

$(STAMP): solver/requirements.lock solver/pyproject.toml contracts/pyproject.toml monitor/pyproject.toml migrator/pyproject.toml \
	    deploy/bootstrap/python.sh
	bash deploy/bootstrap/python.sh
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --require-hashes -r solver/requirements.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e contracts
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e solver
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e monitor
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e migrator
	touch $@

# The testbed scenario of issue 13, narrated (deploy/testbed/ctb/demo.py), where root and
# network namespaces are; elsewhere the Parapluie solve below. Leaves the cluster up.
demo: $(STAMP)
	@if why=$$(cd deploy/testbed && python3 -m ctb.demo --can-run); then \
	    $(MAKE) --no-print-directory testbed-install slurm-plugin && \
	    cd deploy/testbed && python3 -m ctb.demo; \
	else \
	    echo "make demo: $$why, so no testbed: solving the bundled Parapluie example instead"; \
	    $(MAKE) --no-print-directory demo-parapluie; \
	fi

demo-parapluie: $(STAMP)
	$(VENV)/bin/clavis solve --cluster examples/parapluie/cluster.yaml \
	    --workload examples/parapluie/workload.yaml \
	    --weights 0.15,1.94,0.68 --time-limit 10 --method cpsat \
	    --out $${CLAVIS_DEMO_OUT:-/tmp/clavis-demo-placement.json}

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy solver/clavis contracts/clavis_contracts bench/report.py bench/solver/solver_bench.py bench/solver/realistic_bench.py bench/solver/fuzz_bench.py bench/solver/bound_bench.py \
	    bench/pareto/pareto_bench.py \
	    bench/ingest/ingest_bench.py bench/monitor/monitor_bench.py bench/testbed/testbed_bench.py bench/ui/hover_bench.py \
	    bench/testbed/demo_bench.py \
	    bench/plugin/plugin_bench.py \
	    bench/migration/migration_bench.py bench/chaos/chaos_bench.py bench/power/power_bench.py \
	    monitor/clavis_monitor migrator/clavis_migrator
	$(VENV)/bin/mypy bench/migration/faults.py

unit: $(STAMP) testbed-install postgres-install monitor-install slurm-plugin ui
	$(VENV)/bin/pytest -q

test: lint typecheck ui-test unit

# spank_clavis.so, warnings as errors (spank.h comes with testbed-install's libslurm-dev)
slurm-plugin: testbed-install
	$(MAKE) -C slurm-plugin

# vismon-ui (docs/ui.md): Debian's chromium and the npm packages of package-lock.json
# (npm ci, cached in $${CLAVIS_CACHE:-/var/cache/clavis}/npm); `ui` builds vismon-ui/dist,
# which clavisd serves (server.ui_dir) and the end-to-end test drives; `ui-test` is the
# TypeScript's typecheck, lint and unit tests.
ui-install:
	bash deploy/bootstrap/ui.sh

ui: ui-install
	cd vismon-ui && npx --no-install vite build --logLevel warn

ui-test: ui-install
	cd vismon-ui && npx --no-install tsc --noEmit && npx --no-install eslint . && npx --no-install vitest run

# vismon's hover latency on a 2,000-schedule front in chromium (issue 16; under the lock)
bench-ui: $(STAMP) ui
	flock /tmp/clavis-bench.lock $(PY) bench/ui/hover_bench.py

# nftables and ipmitool for the monitor's tests (deploy/bootstrap/monitor.sh)
monitor-install:
	bash deploy/bootstrap/monitor.sh

# PostgreSQL server binaries for the store tests (they start a private cluster)
postgres-install:
	bash deploy/bootstrap/postgres.sh

# The main solver benchmark (issue 12): `clavis solve` on realistic snapshots, timed runs
# under the machine's benchmark lock. Full: about 20 minutes (while `plain` refuses
# 1,024 hosts and up at once; 25 if it runs); quick: about 2.
bench-realistic: $(STAMP)
	flock /tmp/clavis-bench.lock $(PY) bench/solver/realistic_bench.py

bench-realistic-quick: $(STAMP)
	flock /tmp/clavis-bench.lock $(PY) bench/solver/realistic_bench.py --quick

bench-fuzz: $(STAMP)
	flock /tmp/clavis-bench.lock $(PY) bench/solver/fuzz_bench.py

# The relaxation bounds against optima `plain` proves on 8- and 12-host snapshots: how
# far below the optimum the bound of a 1,024-host solve may sit (about 40 minutes)
bench-bound: $(STAMP)
	flock /tmp/clavis-bench.lock $(PY) bench/solver/bound_bench.py

bench-solver: $(STAMP)
	$(PY) bench/solver/solver_bench.py

bench-pareto: $(STAMP)
	$(PY) bench/pareto/pareto_bench.py

bench-ingest: $(STAMP)
	$(PY) bench/ingest/ingest_bench.py

bench-monitor: $(STAMP) monitor-install
	$(PY) bench/monitor/monitor_bench.py

# `up` from a cold and a warm cache (root; a few minutes; takes the testbed tests' lock)
bench-testbed: $(STAMP) testbed-install
	$(PY) bench/testbed/testbed_bench.py

# live migration frozen/total time vs memory, with and without pre-copy (root; about 20
# minutes, most of it 1 GiB crossing the 100 Mbit/s rack link; takes the testbed lock)
bench-migration: $(STAMP) testbed-install
	flock /tmp/clavis-bench.lock $(PY) bench/migration/migration_bench.py

# `make demo` cold and warm (root; takes the testbed tests' lock)
bench-demo: $(STAMP) testbed-install slurm-plugin
	flock /tmp/clavis-bench.lock $(PY) bench/testbed/demo_bench.py

# issue 17: energy over a scripted day of load (BMC watts integrated) with power management
# off and on, and the job start delay it adds (root; about 13 minutes: two testbed days)
bench-power: $(STAMP) testbed-install slurm-plugin
	flock /tmp/clavis-bench.lock $(PY) bench/power/power_bench.py

# issue 15's faults and hostile input against a real clavisd on loopback, a 30-minute
# clavisd outage under 64 simulated hosts and 10 kill -9 under ingest load (about 40
# minutes; quick: a 60 s outage, about 6)
bench-chaos: $(STAMP)
	flock /tmp/clavis-bench.lock $(PY) bench/chaos/chaos_bench.py

bench-chaos-quick: $(STAMP)
	flock /tmp/clavis-bench.lock $(PY) bench/chaos/chaos_bench.py --quick

# the migrator's fault matrix on the testbed, each case 10 times (about 40 minutes)
bench-migration-faults: $(STAMP) testbed-install
	$(PY) bench/migration/faults.py

schemas: $(STAMP)
	$(VENV)/bin/clavis schema --write docs/schema
	$(PY) -m clavis_contracts --write docs/schema

clean:
	rm -rf $(VENV)
