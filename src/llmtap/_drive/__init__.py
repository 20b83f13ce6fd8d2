"""One driver of the official SDKs, for the tests, the demo, the probe, the soak and the benchmarks.

* :mod:`._base`: what every adapter is (:class:`Config`, :class:`Sdk`: make a client for a base URL;
  create, stream, close a stream) and the helpers the adapters share;
* one adapter per SDK, a module per SDK family: :mod:`._anthropic` (anthropic, Bedrock, Vertex),
  :mod:`._openai` (Chat Completions, Responses, Groq), :mod:`._gemini`, :mod:`._mistral`, :mod:`._cohere`,
  :mod:`._botocore` (boto3 and aiobotocore: Converse, InvokeModel), :mod:`._ollama`, :mod:`._litellm`;
* :mod:`._sdks`: every adapter by name (:data:`SDKS`) and :func:`adapter`, which makes one;
* :mod:`._actions`: what an app does with a call (read to the end, close early, drop, cancel, ...),
  written once for every adapter, sync and async;
* :mod:`._cases`: the table of scenario actions and the outcomes llmtap must record for them;
* :mod:`._served`: for tests, a model name per call and the simulator's records of that call.

The SDKs are imported only when an adapter is made.
"""

from ._actions import ACTIONS, Action, Result, arun, drive, run
from ._base import Config, Mode, OnResponse, Sdk
from ._cases import BOTOCORE, CASES, HELD, Case, Raised, case, cases
from ._sdks import SDKS, adapter
from ._served import fresh_model, served_for

__all__ = [
    "ACTIONS",
    "BOTOCORE",
    "CASES",
    "HELD",
    "SDKS",
    "Action",
    "Case",
    "Config",
    "Mode",
    "OnResponse",
    "Raised",
    "Result",
    "Sdk",
    "adapter",
    "arun",
    "case",
    "cases",
    "drive",
    "fresh_model",
    "run",
    "served_for",
]
