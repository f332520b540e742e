"""The wire contract between Quiver's Flight server and its clients.

`wire.errors`: the error codes the server puts in `extra_info` and one exception class per
code, raised by the server and rebuilt by clients. `wire.requests`: the JSON shapes of read
and put descriptors and of every action's body. Both sides import these modules; nothing
here imports the server, the engine or a client.
"""
