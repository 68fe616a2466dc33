"""Which Langfuse prompt version a contract was last fetched from, by contract id and version
(``publish_contract`` keeps them one-to-one): the tracing links generations to it without it
entering the compiled interaction, whose fingerprints stay the file's."""

from __future__ import annotations

_LINKS: dict[tuple[str, str], tuple[str, int]] = {}


def link_prompt(contract_id: str, contract_version: str, name: str, version: int) -> None:
    _LINKS[contract_id, contract_version] = (name, version)


def linked_prompt(contract_id: str, contract_version: str) -> tuple[str, int] | None:
    return _LINKS.get((contract_id, contract_version))
