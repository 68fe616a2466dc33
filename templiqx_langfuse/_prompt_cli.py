"""``templiqx publish CONTRACT [--label L]... [--message TEXT]`` (``templiqx.commands``)."""

from __future__ import annotations

import argparse
import sys

from templiqx_core import PortError


def publish_command(argv: list[str]) -> int:
    """Exit 0 with one line on stdout saying what happened, 1 on failure, 2 on bad usage."""
    about = "publish a contract as a version of the Langfuse chat prompt named after its id"
    keys = "Langfuse from LANGFUSE_PUBLIC_KEY, LANGFUSE_SECRET_KEY and LANGFUSE_BASE_URL"
    parser = argparse.ArgumentParser(prog="templiqx publish", description=about, epilog=keys)
    parser.add_argument("contract", help="contract YAML (templiqx/v1alpha1)")
    parser.add_argument(
        "--label", action="append", default=[], help="a label the version gets (repeatable)"
    )
    parser.add_argument("--message", help="the version's commit message")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse's own exit: --help 0, a usage error 2
        return int(stop.code or 0)
    from ._prompts import publish_contract

    try:
        done = publish_contract(args.contract, labels=args.label, message=args.message)
    except PortError as error:
        sys.stderr.write(f"templiqx: publish: {error.code}: {error}\n")
        return 1
    where, digest = f"langfuse:{done.name}#{done.version}", f"digest {done.digest[:12]}"
    if done.created:
        print(f"published {where} ({digest})")
    else:
        print(f"unchanged: {where} already holds this contract ({digest}); no version created")
    return 0
