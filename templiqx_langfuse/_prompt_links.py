"""Which Langfuse prompt version a contract was fetched from, kept beside the contract.

The link never enters the compiled interaction (its request fingerprint, receipts and eval
baselines stay those of the file): the tracing looks it up by the interaction's contract
id and version, which ``publish_contract`` keeps one-to-one with a prompt's contents.
"""

from __future__ import annotations

_LINKS: dict[tuple[str, str], tuple[str, int]] = {}


def link_prompt(contract_id: str, contract_version: str, name: str, version: int) -> None:
    """Generations of this contract from now on link to prompt ``name`` version ``version``."""
    _LINKS[contract_id, contract_version] = (name, version)


def linked_prompt(contract_id: str, contract_version: str) -> tuple[str, int] | None:
    """``(name, version)`` of the prompt the contract was last fetched from, if any."""
    return _LINKS.get((contract_id, contract_version))
