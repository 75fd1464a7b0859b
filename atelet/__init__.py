"""atelet: the ate node agent.

A gRPC server (see ``atelet/proto/atelet.proto``) that owns this node's workers — each a network
namespace with its own IP that runs at most one gVisor sandbox — and runs, checkpoints, restores
and terminates actors' sandboxes on them, with a ``file://`` snapshot store.

Start at ``atelet.node`` (``Node``): its docstring lists the module of each part.
"""
