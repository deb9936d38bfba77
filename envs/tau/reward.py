"""The τ reward: 1 iff the final database hash equals the gold replay's and every output was said."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from userrl.envs.tau.database import EpisodeDB


def missing_outputs(outputs: Sequence[str], responds: Sequence[str]) -> list[str]:
    """Required outputs that no agent message contains (commas removed from the message only)."""
    said = [message.lower().replace(",", "") for message in responds]
    return [o for o in outputs if not any(o.lower() in message for message in said)]


@dataclass(frozen=True)
class TauOutcome:
    """Both checks of one episode and the resulting reward."""

    reward: float
    db_match: bool
    outputs_match: bool
    missing_outputs: tuple[str, ...]
    agent_hash: str
    gold_hash: str

    def as_info(self) -> dict[str, Any]:
        """The info fields of a terminal step."""
        return {
            "db_match": self.db_match,
            "outputs_match": self.outputs_match,
            "missing_outputs": list(self.missing_outputs),
            "agent_hash": self.agent_hash,
            "gold_hash": self.gold_hash,
        }


def evaluate(db: EpisodeDB, gold_hash: str, outputs: Sequence[str], responds: Sequence[str]) -> TauOutcome:
    """Compute the τ reward of an episode's database and its respond messages."""
    agent_hash = db.state_hash()
    missing = missing_outputs(outputs, responds)
    db_match, outputs_match = agent_hash == gold_hash, not missing
    return TauOutcome(
        reward=1.0 if db_match and outputs_match else 0.0,
        db_match=db_match,
        outputs_match=outputs_match,
        missing_outputs=tuple(missing),
        agent_hash=agent_hash,
        gold_hash=gold_hash,
    )
