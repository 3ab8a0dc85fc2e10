"""``python -m clavis_monitor``: the same as ``clavis-monitor``."""

import sys

from clavis_monitor.cli import main

sys.exit(main())
