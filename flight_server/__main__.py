"""`python -m flight_server`: the `quiver` command line."""

from quiver.flight_server.cli import main

raise SystemExit(main())
