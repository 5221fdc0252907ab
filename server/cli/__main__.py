"""`python -m server.cli ...`: the same as the `braid` command."""

import sys

from server.cli.main import main

sys.exit(main())
