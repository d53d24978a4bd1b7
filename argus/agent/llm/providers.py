"""LLM providers behind one call, `complete(system, user) -> text`: any OpenAI-compatible chat
endpoint (OpenAI, vLLM, SGLang, Ollama, OpenRouter, ...) through the `openai` SDK, and
Anthropic's Messages API through the `anthropic` SDK. Both are optional extras
(`pip install argus-gpu[llm]`).

Configuration comes from the environment, never from files in the repository:
  ARGUS_LLM_PROVIDER   openai | anthropic (default: anthropic if ANTHROPIC_API_KEY is set and
                       OPENAI_API_KEY is not, else openai)
  ARGUS_LLM_MODEL      model name (required)
  ARGUS_LLM_BASE_URL   endpoint (OpenAI-compatible servers: e.g. http://localhost:8000/v1)
  ARGUS_LLM_TIMEOUT    seconds per request (default 120)
  ARGUS_LLM_RETRIES    retries after a rate limit, timeout or server error (default 3)
  OPENAI_API_KEY / ANTHROPIC_API_KEY   the keys (a local endpoint may need none)

Failures are bounded and typed: the SDKs' own retries are off and this module retries rate
limits (honouring Retry-After up to MAX_WAIT_S), timeouts and 5xx errors with exponential
backoff, `retries` times at most, then raises `ProviderError` with a `kind` (rate_limit,
timeout, connection, status, malformed, empty, config). Every retry is recorded in `events`,
which the loop writes into the trajectory.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

MAX_WAIT_S = 30.0
KINDS = ("rate_limit", "timeout", "connection", "status", "malformed", "empty", "config")


class ProviderError(Exception):
    """An LLM request that failed for good (after bounded retries)."""

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(message)


@dataclass(frozen=True)
class LLMConfig:
    provider: str
    model: str
    base_url: str | None = None
    api_key: str | None = None
    timeout_s: float = 120.0
    retries: int = 3
    max_tokens: int = 2048
    temperature: float = 0.2
    backoff_s: float = 1.0

    @staticmethod
    def from_env(provider: str | None = None, model: str | None = None,
                 base_url: str | None = None, **overrides) -> "LLMConfig":
        env = os.environ
        provider = provider or env.get("ARGUS_LLM_PROVIDER") or (
            "anthropic" if env.get("ANTHROPIC_API_KEY") and not env.get("OPENAI_API_KEY")
            else "openai")
        if provider not in ("openai", "anthropic"):
            raise ProviderError("config", f"ARGUS_LLM_PROVIDER={provider!r}: use openai (any "
                                          "OpenAI-compatible endpoint) or anthropic")
        model = model or env.get("ARGUS_LLM_MODEL")
        if not model:
            raise ProviderError("config", "no model: set ARGUS_LLM_MODEL (or pass --llm-model)")
        base_url = base_url or env.get("ARGUS_LLM_BASE_URL") or None
        key_var = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
        api_key = env.get(key_var)
        if not api_key:
            if base_url:
                api_key = "EMPTY"   # local OpenAI-compatible servers accept any key
            else:
                raise ProviderError("config", f"no API key: set {key_var} in the environment "
                                              "(or ARGUS_LLM_BASE_URL for a local endpoint)")
        kw = dict(timeout_s=float(env.get("ARGUS_LLM_TIMEOUT", 120)),
                  retries=int(env.get("ARGUS_LLM_RETRIES", 3)))
        kw.update(overrides)
        return LLMConfig(provider, model, base_url, api_key, **kw)


@dataclass
class _Base:
    config: LLMConfig
    events: list[str] = field(default_factory=list)
    requests: int = 0

    def complete(self, system: str, user: str) -> str:
        """One completion, with bounded retries; the text of the reply."""
        self.events = []
        attempt = 0
        while True:
            self.requests += 1
            try:
                text = self._call(system, user)
            except ProviderError as exc:
                if exc.kind in ("rate_limit", "timeout", "connection", "server") and \
                        attempt < self.config.retries:
                    wait = self._wait(exc, attempt)
                    self.events.append(f"{self.config.provider}: {exc.kind} "
                                       f"({str(exc)[:120]}); retry {attempt + 1} in {wait:.1f} s")
                    time.sleep(wait)
                    attempt += 1
                    continue
                if exc.kind == "server":
                    raise ProviderError("status", str(exc)) from None
                raise
            if not text or not text.strip():
                raise ProviderError("empty", f"{self.config.provider} returned an empty reply")
            return text

    def _wait(self, exc: ProviderError, attempt: int) -> float:
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            return min(MAX_WAIT_S, max(0.0, retry_after))
        return min(MAX_WAIT_S, self.config.backoff_s * (2 ** attempt))

    def _call(self, system: str, user: str) -> str:
        raise NotImplementedError


def _retry_after(exc) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    try:
        value = headers.get("retry-after")
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _translate(sdk, exc: Exception, provider: str) -> ProviderError:
    """Map an SDK exception to a typed ProviderError."""
    if isinstance(exc, sdk.RateLimitError):
        err = ProviderError("rate_limit", f"{provider}: rate limited (HTTP 429)")
        err.retry_after = _retry_after(exc)  # type: ignore[attr-defined]
        return err
    if isinstance(exc, sdk.APITimeoutError):
        return ProviderError("timeout", f"{provider}: no reply within the timeout")
    if isinstance(exc, sdk.APIConnectionError):
        return ProviderError("connection", f"{provider}: cannot connect ({exc})")
    if isinstance(exc, getattr(sdk, "APIResponseValidationError", ())):
        return ProviderError("malformed", f"{provider}: the response does not match the API "
                                          f"schema ({str(exc)[:200]})")
    if isinstance(exc, sdk.APIStatusError):
        status = getattr(exc, "status_code", 0) or 0
        kind = "server" if status >= 500 else "status"
        return ProviderError(kind, f"{provider}: HTTP {status}: {str(exc)[:300]}")
    return ProviderError("status", f"{provider}: {type(exc).__name__}: {str(exc)[:300]}")


@dataclass
class OpenAIProvider(_Base):
    """Chat Completions on any OpenAI-compatible endpoint."""

    _client: object = None

    def __post_init__(self) -> None:
        try:
            import openai
        except ImportError:
            raise ProviderError("config", "the openai SDK is not installed: pip install "
                                          "'argus-gpu[llm]' (or pip install openai)") from None
        self._sdk = openai
        self._client = openai.OpenAI(api_key=self.config.api_key, base_url=self.config.base_url,
                                     timeout=self.config.timeout_s, max_retries=0)

    def _call(self, system: str, user: str) -> str:
        create = self._client.chat.completions.create  # type: ignore[attr-defined]
        extra = _accepted(create, max_tokens=self.config.max_tokens,
                          temperature=self.config.temperature)
        try:
            reply = create(model=self.config.model, **extra,
                           messages=[{"role": "system", "content": system},
                                     {"role": "user", "content": user}])
        except self._sdk.OpenAIError as exc:
            raise _translate(self._sdk, exc, "openai") from None
        except ValueError as exc:   # the SDK could not decode the body
            raise ProviderError("malformed", f"openai: unreadable response ({type(exc).__name__}:"
                                             f" {str(exc)[:200]})") from None
        choices = getattr(reply, "choices", None) or []
        if not choices or choices[0].message is None:
            raise ProviderError("empty", "openai: the reply has no choices")
        return choices[0].message.content or ""


@dataclass
class AnthropicProvider(_Base):
    """Anthropic's Messages API."""

    _client: object = None

    def __post_init__(self) -> None:
        try:
            import anthropic
        except ImportError:
            raise ProviderError("config", "the anthropic SDK is not installed: pip install "
                                          "'argus-gpu[llm]' (or pip install anthropic)") from None
        self._sdk = anthropic
        kwargs = dict(api_key=self.config.api_key, timeout=self.config.timeout_s, max_retries=0)
        if self.config.base_url:
            kwargs["base_url"] = self.config.base_url
        self._client = anthropic.Anthropic(**kwargs)

    def _call(self, system: str, user: str) -> str:
        create = self._client.messages.create  # type: ignore[attr-defined]
        extra = _accepted(create, temperature=self.config.temperature)
        try:
            reply = create(model=self.config.model, max_tokens=self.config.max_tokens,
                           system=system, messages=[{"role": "user", "content": user}], **extra)
        except self._sdk.AnthropicError as exc:
            raise _translate(self._sdk, exc, "anthropic") from None
        except ValueError as exc:   # the SDK could not decode the body
            raise ProviderError("malformed", f"anthropic: unreadable response "
                                             f"({type(exc).__name__}: {str(exc)[:200]})") from None
        parts = [getattr(b, "text", "") for b in (getattr(reply, "content", None) or [])
                 if getattr(b, "type", "") == "text"]
        return "".join(parts)


def _accepted(fn, **optional) -> dict:
    """The optional keyword arguments this SDK version's `create` accepts (SDKs add and drop
    parameters across versions: anthropic 2.x has no `temperature`)."""
    import inspect

    try:
        names = set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}
    return {k: v for k, v in optional.items() if k in names}


def make_provider(config: LLMConfig):
    if config.provider == "openai":
        return OpenAIProvider(config)
    if config.provider == "anthropic":
        return AnthropicProvider(config)
    raise ProviderError("config", f"unknown provider {config.provider!r}")
