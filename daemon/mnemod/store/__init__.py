"""One namespace's store, shared by the library and the daemon: the engine, its change log
and checkpoint, the files derived from it, and the in-memory lookups resolve and dedup use.

Imports neither `redisio` nor `runtime`: the daemon builds on it, not the other way round.
"""
