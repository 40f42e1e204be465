"""`python -m simroute ...` is the `simroute` command (useful from a source checkout or a worktree)."""

import sys

from simroute.cli.main import main

sys.exit(main())
