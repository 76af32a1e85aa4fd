"""The store: trace directories loaded into DuckDB, and the SQL over them.

* :mod:`.schema`: the tables' columns, the SQL files (``store/sql/``) and the typed results
  of the analysis' queries; every other module of the store imports from it.
* :mod:`.loading`: loading a directory incrementally (our span and sample files through
  DuckDB's JSON reader; OTLP/JSON through :mod:`.otlp_arrow` with pyarrow, else :mod:`.otlp`);
* :mod:`.duckdb_store`: :class:`~.duckdb_store.Store`, the one place that runs SQL: loading,
  the analysis' input and saved results, the spans and counters reports read;
* :mod:`.tracedir`: a pure-Python reader that validates every line (``agentscope check``).

Nothing outside the store holds a DuckDB connection: the analysis and the reports call the
store's methods (through :mod:`agentscope.analysis`).
"""
