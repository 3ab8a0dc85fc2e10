"""Where the testbed keeps things.

Runtime state lives under /run/clavis-testbed (removed by `down`); slow-to-build
artefacts (CRIU, the container root filesystem) live in a cache outside the clone
that survives `down` and is rebuilt when absent.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent  # deploy/testbed
REPO = HERE.parent.parent
RUN = Path(os.environ.get("CLAVIS_TESTBED_RUN", "/run/clavis-testbed"))
CACHE = Path(os.environ.get("CLAVIS_CACHE", "/var/cache/clavis"))

STATE = RUN / "state.json"
# written by `down` before it stops anything: no container starts after it (a node Slurm
# resumes, a host its BMC powers on), so none is left running behind the teardown
GOING_DOWN = RUN / "going-down"
ENV_FILE = RUN / "env"
ETC = RUN / "etc"  # shared read-only config, bind-mounted at the same path in containers
SHARED = RUN / "shared"  # shared read-write scratch, same path in containers and the host
LOG = RUN / "log"
LXC = RUN / "lxc"  # our own lxcpath: nothing is written to /var/lib/lxc
CONTAINERS = RUN / "containers"
BMC = RUN / "bmc"
CKPT = RUN / "checkpoints"
MUNGE_SOCKET = RUN / "munge" / "munge.socket"
SLURM_CONF = ETC / "slurm.conf"
CRIU_CONF = ETC / "criu-dump.conf"
CRIU_RESTORE_CONF = ETC / "criu-restore.conf"
# select_clavis.so, when built, is copied here (inside ETC: the nodes see it too, and
# every Slurm command loads all select plugins of PluginDir); its configuration file
# sits beside slurm.conf, where the plugin looks for it
PLUGINS = ETC / "plugins"
SELECT_CONF = ETC / "select_clavis.conf"
# the advice file select/clavis reads (clavisd's advice.path on the testbed)
ADVICE = RUN / "clavis" / "advice.json"
# the solver's cluster document for this topology (cluster.py), written at up
CLUSTER = RUN / "clavis" / "cluster.json"

ROOTFS_VERSION = 1
ROOTFS = CACHE / f"rootfs-{ROOTFS_VERSION}"
CRIU_VERSION = "4.2.1"
CRIU_DIR = CACHE / f"criu-{CRIU_VERSION}"
