"""Every adapter by name (:data:`SDKS`), and :func:`adapter`, which makes one from a :class:`._base.Config`.

The adapters live one module per SDK family (:mod:`._anthropic`, :mod:`._openai`, ...); this module only
names them: a new SDK is one module and one entry here.
"""

from __future__ import annotations

from ._anthropic import AnthropicSdk, BedrockSdk, VertexSdk
from ._base import Config, Sdk
from ._botocore import AioBotocoreConverseSdk, AioBotocoreInvokeSdk, Boto3ConverseSdk, Boto3InvokeSdk
from ._cohere import CohereSdk
from ._gemini import GeminiSdk
from ._litellm import LiteLLMSdk
from ._mistral import MistralSdk
from ._ollama import OllamaSdk
from ._openai import GroqSdk, OpenAIChatSdk, OpenAIResponsesSdk

__all__ = ["SDKS", "adapter"]

#: every adapter by name
SDKS: dict[str, type[Sdk]] = {
    cls.name: cls
    for cls in (
        AnthropicSdk, BedrockSdk, VertexSdk, OpenAIChatSdk, OpenAIResponsesSdk, GeminiSdk, GroqSdk, MistralSdk,
        CohereSdk, Boto3ConverseSdk, Boto3InvokeSdk, AioBotocoreConverseSdk, AioBotocoreInvokeSdk, LiteLLMSdk,
        OllamaSdk,
    )
}  # fmt: skip


def adapter(sdk: str | type[Sdk], config: Config) -> Sdk:
    """A client of the SDK ``sdk`` (a key of :data:`SDKS`, or an adapter class) made from ``config``."""
    return (SDKS[sdk] if isinstance(sdk, str) else sdk)(config)
