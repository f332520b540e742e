"""The wire contract between Quiver's Flight server and its clients.

`wire.errors`: the error codes the server sends and one exception class per code, raised by
the server and rebuilt by clients; `wire.status`: the gRPC status of each code and the
details every error carries (a google.rpc.Status). `wire.requests`: the JSON shapes of read
and put descriptors and of every action's body. Both sides import these modules; nothing
here imports the server, the engine or a client.
"""
