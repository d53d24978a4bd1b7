"""The LLM policy end to end: the real `openai` and `anthropic` SDKs over real HTTP against a
scripted local server, through malformed replies, rate limits, timeouts and invalid choices; the
loop must finish its budget, record every event, and put the trajectory table and the retrieved
cards into the prompts. Plus unit tests of the reply parser and the prompt."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from argus.agent.candidate import Candidate, Outcome, Step
from argus.agent.composer import compose
from argus.agent.families import get_family
from argus.agent.knowledge import load_cards
from argus.agent.llm.prompt import ReplyError, build_prompt, parse_reply
from argus.agent.loop import OptimizeConfig, optimize
from argus.agent.planner import PlanState
from tests.agent._llm_server import ScriptedLLMServer
from tests.agent._tasks import BIG_RELU_TASK

VALID_1 = ('Deeper tiles.\n```json\n{"card": "ew.tile_shape", "params": {"rows": 4, "bn": 1024},'
           ' "rationale": "more bytes in flight per thread"}\n```')
VALID_2 = ('```json\n{"card": "ew.threads_per_cta", "params": {"threads": 128, "rows": 2, '
           '"bn": 2048}, "rationale": "smaller CTAs, same work"}\n```')
SCRIPT = [
    {"text": "I would deepen the pipeline, probably."},            # no JSON -> fallback
    {"status": 429, "retry_after": 0},                              # rate limited -> retried
    {"text": VALID_1},                                              # used
    {"delay": 2.5, "text": VALID_2},                                # client timeout -> retried
    {"raw": b'{"choices": [ this is not json'},                     # malformed body -> fallback
    {"text": '{"card": "no.such.card", "params": {}}'},             # invalid -> fallback
    {"text": VALID_2},                                              # used
]


def _relu(tmp_path: Path) -> Path:
    path = tmp_path / "19_ReLU.py"
    path.write_text(BIG_RELU_TASK)
    return path


def _run(tmp_path: Path, provider: str, monkeypatch) -> tuple[ScriptedLLMServer, object]:
    with ScriptedLLMServer(SCRIPT, max_requests=30, lifetime_s=90) as server:
        base = f"{server.url}/v1" if provider == "openai" else server.url
        monkeypatch.setenv("ARGUS_LLM_PROVIDER", provider)
        monkeypatch.setenv("ARGUS_LLM_MODEL", "scripted-model")
        monkeypatch.setenv("ARGUS_LLM_BASE_URL", base)
        monkeypatch.setenv("ARGUS_LLM_TIMEOUT", "1.0")
        monkeypatch.setenv("ARGUS_LLM_RETRIES", "1")
        monkeypatch.setenv("OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY",
                           "test-key-not-secret")
        task = compose(_relu(tmp_path))
        cfg = OptimizeConfig(iterations=7, planner="llm", device="cpu", check_sets=1,
                             db=str(tmp_path / "db.sqlite"), explore="on", verbose=False,
                             timeout_s=120)
        result = optimize(task, tmp_path / "out", cfg)
    return server, result


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_llm_policy_end_to_end(tmp_path, provider, monkeypatch):
    if importlib.util.find_spec(provider) is None:
        pytest.skip(f"the {provider} SDK is not installed (pip install 'argus-gpu[llm]')")
    server, result = _run(tmp_path, provider, monkeypatch)
    steps = result.steps
    assert len(steps) == 7, [s.planner for s in steps]            # the budget was used up
    planners = [s.planner for s in steps]
    assert planners[0] == "start"
    assert planners.count("llm") == 2, planners
    assert planners.count("llm->bandit") >= 3, planners
    events = " ".join(e for s in steps for e in s.events)
    assert "rate_limit" in events
    assert "timeout" in events
    assert "unusable reply" in events and "no JSON object" in events
    assert "unknown card" in events
    assert "malformed" in events                                    # the malformed body
    llm_steps = [s for s in steps if s.planner == "llm"]
    assert llm_steps[0].candidate.params_dict["bn"] == 1024
    assert llm_steps[0].rationale == "more bytes in flight per thread"
    assert all(s.outcome.ok for s in llm_steps)
    # bounded: one request per LLM proposal plus the retries, never more than the budget
    assert 7 <= len(server.requests) <= 12
    prompts = server.prompts()
    later = prompts[-1]
    assert "## Trajectory of this run" in later and "| 0 | start | start |" in later
    assert "ew.tile_shape" in later and "## Knowledge cards" in later
    assert "no JSON object" in " ".join(prompts[1:])                # the parse error went back
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["config"]["planner"] == "llm"
    # the key never reaches the worker's environment or the outputs
    assert "test-key-not-secret" not in (tmp_path / "out" / "report.json").read_text()


def _state(task, history=(), feedback="dense"):
    family = get_family(task.family)
    start = Candidate.of(family.naive_params(task), card="start")
    state = PlanState(task, family, feedback, start, {"eager": {"ms": 1.0, "kind": "estimate"}})
    for s in history:
        state.add(s)
    return state


def test_parse_reply_rules(tmp_path):
    task = compose(_relu(tmp_path))
    state = _state(task)
    cards = {c.id: c for c in load_cards() if "elementwise" in c.families}
    ok = parse_reply(VALID_1, state, cards)
    assert ok.card == "ew.tile_shape" and ok.params == {"rows": 4, "bn": 1024}
    assert parse_reply('sure: {"card": "ew.threads_per_cta", "params": {"threads": 512}}',
                       state, cards).params == {"threads": 512}
    for bad, why in [("nothing here", "no JSON"), ('{"card": 3}', "card"),
                     ('{"card": "gemm.split_k", "params": {}}', "unknown card"),
                     ('{"card": "ew.tile_shape", "params": {"stages": 3}}', "not a schedule"),
                     ('{"card": "ew.tile_shape", "params": {"bn": 1000}}', "outside"),
                     ('{"card": "ew.tile_shape", "params": {}}\n```python\nx = 1\n```',
                      "KERNEL")]:
        with pytest.raises(ReplyError, match=why):
            parse_reply(bad, state, cards)


def test_prompt_dense_vs_binary_feedback(tmp_path):
    """The ablation switch: in binary mode the prompt carries pass/fail only."""
    task = compose(_relu(tmp_path))
    diag = {"severity": "error", "code": "smem.race", "message": "threads 5 and 69 write sC[0, 9]",
            "counterexample": {"thread_a": 5, "thread_b": 69}, "fix": "add a barrier"}
    failed = Step(1, "llm", "ew.tile_shape", Candidate.of({"rows": 2, "bn": 512, "threads": 256}),
                  Outcome("verification", "verify", message="smem.race", diagnostics=(diag,)),
                  -1.0, -1.0)
    start = Step(0, "start", "start", Candidate.of({"rows": 1, "bn": 256, "threads": 256}),
                 Outcome("ok", "measure", time_ms=0.5, time_kind="estimate"), 0.0, 0.0)
    cards = [c for c in load_cards() if "elementwise" in c.families]
    dense = build_prompt(_state(task, [start, failed], "dense"), cards, [], [])
    binary = build_prompt(_state(task, [start, failed], "binary"), cards, [], [])
    assert "thread_a=5" in dense and "smem.race" in dense and "Repair this" in dense
    assert "thread_a" not in binary and "smem.race" not in binary
    assert "step 1: failed" in binary
