"""Where llmtap attaches to the HTTP clients the SDKs use (httpx transports, aiohttp sessions)."""

__all__: list[str] = []
