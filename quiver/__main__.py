"""`python -m quiver`: the `quiver` command."""

import sys

from quiver.cli import main

sys.exit(main())
