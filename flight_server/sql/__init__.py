"""Arrow Flight SQL on Quiver's Flight port: every dataset a SQL table (DataFusion runs the
SQL, reading through Quiver's scans). `flight_server.sql.front` is the entry point the
server calls; the other modules each hold one part of the protocol."""
