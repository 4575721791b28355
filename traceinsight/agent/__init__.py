"""traceinsight for agents: the deterministic analysis behind a small, typed, paged tool surface.

``tools.Session`` holds the logic (roots, the analysis store, one method per tool) and needs no MCP SDK, so it is
tested and usable on its own; ``server`` exposes those methods over MCP (stdio) with the official ``mcp`` SDK,
installed by the ``traceinsight[mcp]`` extra. Results are slices of the JSON report (docs/json-report.md), so an
agent reads the same numbers ``traceinsight analyze --format json`` writes.
"""
