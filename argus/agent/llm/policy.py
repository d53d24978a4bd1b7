"""The LLM policy (in-context RL): each proposal sends the prompt (task, feedback, retrieved cards,
trajectory table, experience rows) to the configured provider and turns the reply into a
candidate: the incumbent's schedule with the card's assignments and the model's parameters
applied, or the model's own DSL source for a source edit.

The loop never stops because of the model: a provider failure (after its bounded retries), a
malformed or invalid reply, or a duplicate proposal is recorded as an event, the reason is shown
to the model in the next prompt, and the offline bandit proposes this step instead (the step's
planner then reads "llm->bandit"). The bandit observes every step, so it is always ready.
"""

from __future__ import annotations

from typing import Any, Callable

from argus.agent.bandit import BanditPlanner
from argus.agent.candidate import Candidate, Step
from argus.agent.knowledge import Card, load_cards, retrieve
from argus.agent.llm.prompt import SYSTEM, ReplyError, build_prompt, parse_reply
from argus.agent.llm.providers import ProviderError
from argus.agent.planner import PlanState, Proposal


class LLMPlanner:
    def __init__(self, provider, fallback: BanditPlanner, *,
                 experience: Callable[[], list[dict[str, Any]]] | None = None,
                 cards: tuple[Card, ...] | None = None, max_cards: int = 10):
        self.name = "llm"
        self.provider = provider
        self.fallback = fallback
        self.experience = experience or (lambda: [])
        self.all_cards = cards if cards is not None else load_cards()
        self.max_cards = max_cards
        self.notes: list[str] = []
        self.prompts: list[str] = []      # the last few prompts (reports, tests)

    def cards_for(self, state: PlanState) -> list[Card]:
        """Applicable cards: schedule cards first (the actions the kernel supports), then the
        best source cards, up to max_cards."""
        hits = retrieve(state.task.features(), cards=self.all_cards)
        schedule = [c for c in hits if c.kind == "schedule"]
        source = [c for c in hits if c.kind == "source"]
        return (schedule + source)[:max(self.max_cards, len(schedule))]

    def propose(self, state: PlanState, seed: int) -> Proposal | None:
        cards = self.cards_for(state)
        by_id = {c.id: c for c in cards}
        prompt = build_prompt(state, cards, self.experience(), self.notes)
        self.prompts = (self.prompts + [prompt])[-4:]
        events: list[str] = []
        try:
            text = self.provider.complete(SYSTEM, prompt)
            events += getattr(self.provider, "events", [])
            choice = parse_reply(text, state, by_id)
        except ProviderError as exc:
            events += getattr(self.provider, "events", [])
            events.append(f"llm: {exc.kind}: {str(exc)[:200]}")
            if exc.kind == "config":
                raise
            self.notes.append(f"your previous request failed ({exc.kind}); keep replies short")
            return self._fallback(state, seed, events)
        except ReplyError as exc:
            events.append(f"llm: unusable reply: {exc}")
            self.notes.append(str(exc))
            return self._fallback(state, seed, events)
        card = by_id[choice.card]
        params = dict(state.incumbent_params)
        for k, v in card.edit.assignments.items():
            if k in params:
                params[k] = v
        params.update(choice.params)
        params = state.family.normalize(state.task, params)
        cand = Candidate.of(params, choice.source, card.id)
        if cand.key in state.tried:
            events.append("llm: proposed a candidate that was already tried")
            self.notes.append(f"{choice.card} with {choice.params} was already tried; propose "
                              "something new")
            return self._fallback(state, seed, events)
        if choice.source is None and card.kind == "source":
            events.append(f"llm: source card {card.id} without source; running its schedule "
                          "parameters only")
        return Proposal(cand, card.id, self.name, choice.rationale, tuple(events))

    def _fallback(self, state: PlanState, seed: int, events: list[str]) -> Proposal | None:
        prop = self.fallback.propose(state, seed)
        if prop is None:
            return None
        return Proposal(prop.candidate, prop.card, "llm->bandit", prop.rationale,
                        tuple(events) + prop.events, prop.pruned)

    def observe(self, step: Step, state: PlanState) -> None:
        self.fallback.observe(step, state)
