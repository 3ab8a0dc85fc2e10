# testbed.mk - included by the root Makefile: install what the testbed needs and let
# `make test` run the testbed integration tests (tests/integration).
#
# testbed-install is idempotent: install.sh only calls apt-get for missing packages
# (with a policy-rc.d so no service starts), build-criu.sh only builds CRIU 4.2.1 when
# /var/cache/clavis/criu-4.2.1 is absent. A cold machine takes a few minutes.

.PHONY: testbed-install testbed-up testbed-down

# tests/integration/conftest.py runs the testbed tests only when this is set
export CLAVIS_TESTBED_TESTS := 1

testbed-install:
	bash deploy/testbed/install.sh
	bash deploy/testbed/build-criu.sh >/dev/null

testbed-up: testbed-install
	deploy/testbed/clavis-testbed up

testbed-down:
	deploy/testbed/clavis-testbed down
