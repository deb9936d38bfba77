"""Tools present in both domains: calculate, think, transfer_to_human_agents (docs/spec/TAU_TOOLS.md §2), and
get_user_details with the record lookup the domains' read-only tools share."""

from __future__ import annotations

from userrl.envs.tau.database import EpisodeDB
from userrl.envs.tau.tools.base import Param, Tool, dumps
from userrl.envs.tau.tools.calculator import calculate_expression

TRANSFER_RESULT = "Transfer successful"


def record_json(db: EpisodeDB, table: str, key: str, missing: str) -> str:
    """The record `key` of `table` as JSON, or "Error: <missing> not found" without one."""
    if db.contains(table, key):
        return dumps(db.get(table, key))
    return f"Error: {missing} not found"


def get_user_details(db: EpisodeDB, user_id: str) -> str:
    """The user record as JSON."""
    return record_json(db, "users", user_id, "user")


def calculate(db: EpisodeDB, expression: str) -> str:
    """Evaluate an arithmetic expression; the result is rounded to 2 decimals."""
    return calculate_expression(expression)


def think(db: EpisodeDB, thought: str) -> str:
    """Record a thought; nothing changes and the observation is empty."""
    return ""


def transfer_to_human_agents(db: EpisodeDB, summary: str) -> str:
    """Hand the customer over to a human agent; the episode ends after this call."""
    return TRANSFER_RESULT


def shared_tools(domain_word: str) -> list[Tool]:
    """The three shared tools, with descriptions worded for the domain ("order", "reservation")."""
    return [
        Tool(
            "calculate",
            calculate,
            "Compute the value of an arithmetic expression, for example a refund total or a price "
            "difference. The result is rounded to two decimals.",
            (
                Param(
                    "expression",
                    "string",
                    "The expression, using numbers, + - * /, parentheses and spaces, such as '2 * (3 + 4)'.",
                ),
            ),
        ),
        Tool(
            "think",
            think,
            "Write down private reasoning or a plan. It reads and changes nothing and returns nothing; use it "
            "for longer reasoning, for example when comparing several options.",
            (Param("thought", "string", "The reasoning to record."),),
        ),
        Tool(
            "transfer_to_human_agents",
            transfer_to_human_agents,
            f"Hand the customer over to a human agent, with a summary of the issue. Use it only when the "
            f"customer explicitly asks for a human, or when the {domain_word} request cannot be handled "
            f"with the other tools. The conversation ends after this call.",
            (Param("summary", "string", "A short summary of the customer's issue."),),
            terminal=True,
        ),
    ]
