"""The store: reading capture files (and, later, loading them into DuckDB).

:func:`agentscope.store.tracedir.scan` reads and validates a trace directory in pure Python;
the DuckDB loader of the analyze issue will sit beside it behind one small interface.
"""
