"""Pure, typed, deterministic state machines: no sockets, no Redis, no clock, no asyncio.

Nothing in this package may import from korvet.protocol, korvet.storage or korvet.server.
"""
