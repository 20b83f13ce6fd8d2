"""Observation: what one attempt's bytes say, and the record it becomes. No I/O, no exporter."""

__all__: list[str] = []
