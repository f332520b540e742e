"""`python -m flight_server`: the `quiver` command line."""

from flight_server.cli import main

raise SystemExit(main())
