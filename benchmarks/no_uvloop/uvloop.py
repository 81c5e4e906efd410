"""Stands in for uvloop when a benchmark runs the dispatcher on asyncio's own event loop."""

raise ImportError("uvloop is hidden by benchmarks/no_uvloop")
