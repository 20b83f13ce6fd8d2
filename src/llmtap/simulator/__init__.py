"""An embedded, fault-injecting simulator of the Anthropic Messages API (also as Claude on AWS Bedrock,
AWS event-stream framed, and on Vertex AI), OpenAI Chat Completions + Responses, Gemini, Groq, Mistral,
Cohere Chat v2 and ollama's native API, for tests, demos and checking your own alerting.

    from llmtap.simulator import Scenario, Simulator

    with Simulator() as sim:
        client = anthropic.Anthropic(base_url=sim.base_url, api_key="test")
        client.messages.create(..., extra_headers=Scenario(fail=2, retry_after=0.01).headers())
        sim.wait_served(3)  # -> [Served(retry_count=0, status=529, ...), ..., Served(status=200)]

Stdlib only. See :class:`Scenario` for the knobs and the ``x-llmtap-sim`` header format.
"""

from ._scenario import SCENARIO_HEADER, Scenario, ScenarioError, delta_text
from ._server import Served, Simulator, serve_forever

__all__ = [
    "SCENARIO_HEADER",
    "Scenario",
    "ScenarioError",
    "Served",
    "Simulator",
    "delta_text",
    "serve_forever",
]
