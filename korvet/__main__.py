"""``python -m korvet``: the same command line as the ``korvet`` script."""

import sys

from korvet.cli import main

sys.exit(main())
