"""The LLM planner: providers (OpenAI-compatible and Anthropic SDKs), the in-context-RL prompt and
reply parser, and the policy that falls back to the offline bandit when a reply is unusable."""

from argus.agent.llm.policy import LLMPlanner
from argus.agent.llm.providers import LLMConfig, ProviderError, make_provider

__all__ = ["LLMConfig", "LLMPlanner", "ProviderError", "make_provider"]
