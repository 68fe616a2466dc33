"""``templiqx publish CONTRACT [--label L]... [--message TEXT]`` (``templiqx.commands``)."""

from __future__ import annotations

import argparse
import sys

from templiqx_core import PortError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def publish_command(argv: list[str]) -> int:
    """Publish a contract as a version of the Langfuse chat prompt named after its id
    (``LANGFUSE_*`` variables); one line on stdout saying what happened."""
    about = "publish a contract as a version of the Langfuse chat prompt named after its id"
    parser = argparse.ArgumentParser(prog="templiqx publish", description=about)
    parser.add_argument("contract", help="contract YAML (templiqx/v1alpha1)")
    parser.add_argument("--label", action="append", default=[], help="label the version gets")
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
        return EXIT_FAILED
    if done.created:
        print(f"published langfuse:{done.name}#{done.version} (digest {done.digest[:12]})")
    else:
        print(
            f"unchanged: langfuse:{done.name}#{done.version} already holds this contract "
            f"(digest {done.digest[:12]}); no version created"
        )
    return EXIT_OK
