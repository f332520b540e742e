"""Quiver's Arrow Flight server over the `format` engine.

`config.ServerConfig` (flags and `QUIVER_*` variables) → `server.build_server(config)` →
`server.QuiverFlightServer`, whose RPCs call the transport-free `service.DatasetService`.
`names` validates dataset names, `tickets` signs tickets and staged fragments, `errors`
maps every failure to a Flight error with a JSON code, `cli` is the `quiver` command.
"""
