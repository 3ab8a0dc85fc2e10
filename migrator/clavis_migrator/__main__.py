import sys

from clavis_migrator.cli import main

sys.exit(main())
