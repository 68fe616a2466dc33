"""The ``templiqx`` command line, as the reference's ``templiqx-cli``: stdout is the envelope;
exit 0 when it is ok, 2 when not and for usage errors, 1 when the command itself fails (one
stderr line). Each command imports what it uses when it runs (``--help`` loads no pydantic)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ._errors import PortError
from ._version import __version__

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from ._compiler import EvalCase
    from ._contracts import Diagnostic, OperationEnvelope, RenderRequest

#: Commands other packages add: ``NAME = "module:function"``, ``function(argv) -> int``.
COMMANDS_GROUP = "templiqx.commands"
_CORE_COMMANDS = ("compile", "execute", "check", "eval", "fingerprint", "runtimes", "mcp")
_SELF_CHECK_FLAGS = ("-h", "--help", "--json", "--capability")  # any other: the eval runner's


class UsageError(Exception):
    """A bad invocation: exit 2, as argparse (and the reference's clap)."""


class CommandError(Exception):
    """The command itself failed (unreadable input, unknown runtime): exit 1."""


_CONTRACT = "contract YAML (templiqx/v1alpha1), or langfuse:NAME[@LABEL|#VERSION]"
_JSON = "print compact JSON (one line)"


def build_parser(plugins: dict[str, EntryPoint] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="templiqx",
        description="Compile and execute prompt contracts; stdout is the OperationEnvelope JSON.",
        epilog="exit status: 0 envelope ok, 2 envelope not ok or usage error, "
        "1 the command itself failed",
    )
    parser.add_argument("--version", action="version", version=f"templiqx {__version__}")
    parser.add_argument("--json", action="store_true", help=_JSON)
    commands = parser.add_subparsers(dest="command", required=True)
    # Arguments several commands share, as parent parsers.
    json_flag, values, capability, runtime = (
        argparse.ArgumentParser(add_help=False) for _ in range(4)
    )
    json_flag.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=_JSON)
    values.add_argument("contract", type=Path, help=_CONTRACT)
    values.add_argument("--inputs", type=Path, help="JSON/YAML object of contract inputs")
    values.add_argument("--context", type=Path, help="JSON/YAML object of contract context")
    values.add_argument("--eval", dest="eval_id", metavar="ID", help="the inputs of eval ID")
    targets = "target capability, repeatable (default: the contract's)"
    capability.add_argument("--capability", action="append", metavar="NAME", help=targets)
    runtime.add_argument("--runtime", help="scripted, langfuse, or see: templiqx runtimes")
    runtime.add_argument("--replay", type=Path, metavar="CASSETTE", help="vcrpy, offline")

    def command(name: str, text: str, *parents: argparse.ArgumentParser) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=text, description=text, parents=[json_flag, *parents])

    command("compile", "compile a contract; print the envelope", values, capability)
    execute = command("execute", "compile and run a contract", values, capability, runtime)
    execute.add_argument("--stream", action="store_true", help="each event as NDJSON, live")
    execute.add_argument("--repair", type=int, metavar="N", help="try up to N times in all")
    execute.add_argument("--fixture-output", type=Path, metavar="FILE", help="scripted output")
    check = command("check", "check a contract and its eval fixtures, without inputs")
    check.add_argument("contract", type=Path, help=_CONTRACT)
    check.add_argument("--strict-schema", action="store_true", help="no strict form: an error")
    evals = command("eval", "run the eval fixtures (--runtime NAME: on a model)", capability)
    evals.add_argument("contract", type=Path)
    command("fingerprint", "canonical-JSON SHA-256 of a file").add_argument("file", type=Path)
    command("runtimes", "list the installed runtimes")
    command("mcp", "serve compile/execute over MCP on stdio (extra: mcp)", runtime)
    for name in plugins or {}:
        if name not in commands.choices:  # its own help is its own, loaded when it runs
            commands.add_parser(name, help=f"see templiqx {name} --help ({COMMANDS_GROUP})")
    return parser


@contextlib.contextmanager
def _failing(what: str) -> Iterator[None]:
    """A typed error inside is the command's failure (exit 1), prefixed with ``what``."""
    try:
        yield
    except PortError as error:
        raise CommandError(f"{what}: {error}") from None


def _read_document(path: Path, what: str, *, json: bool = False) -> Any:
    """The document, or with ``json`` only if it holds JSON values (as a model answers)."""
    from ._loading import load_document

    with _failing(what):
        document = load_document(path)
    if not json:
        return document
    from pydantic import JsonValue, TypeAdapter

    try:
        return TypeAdapter(JsonValue).validate_python(document)
    except ValueError as error:
        raise CommandError(f"{what}: not a JSON value ({type(error).__name__})") from None


def _eval_case(args: argparse.Namespace) -> EvalCase:
    from ._compiler import EvalCase, read_contract

    contract = read_contract(args.contract)[0]
    if contract is None:  # no eval to read: compiling the contract says why (exit 2)
        return EvalCase.model_construct(id=args.eval_id, fake_output=None)
    case = next((c for c in contract.evals if c.id == args.eval_id), None)
    if case is None:
        raise CommandError(f"--eval: contract has no eval {args.eval_id!r}")
    return case


def _render_request(args: argparse.Namespace) -> RenderRequest:
    from ._contracts import RenderRequest

    if args.eval_id is not None:
        case = _eval_case(args)
        return RenderRequest(inputs=case.inputs, context=case.context)
    values = {}
    for flag, path in (("--inputs", args.inputs), ("--context", args.context)):
        values[flag] = {} if path is None else _read_document(path, flag, json=True)
        if not isinstance(values[flag], dict):
            raise CommandError(f"{flag}: expected a JSON/YAML object")
    return RenderRequest(inputs=values["--inputs"], context=values["--context"])


def _diagnostic_line(diagnostic: Diagnostic) -> str:
    """``CODE file:line:column pointer: message``."""
    span = diagnostic.span
    where = (diagnostic.file or "") + (f":{span.line}:{span.column}" if span else "")
    pointer = diagnostic.json_pointer  # said once: a message may start with it
    pointer = None if diagnostic.message.startswith(f"{pointer}: ") else pointer
    place = " ".join(filter(None, [diagnostic.code, where, pointer]))
    return f"{place}: {diagnostic.message}"


def _print(text: str, out: TextIO) -> None:
    try:
        print(text, file=out, flush=True)
    except OSError as error:  # a closed pipe (``| head``), a full disk
        raise CommandError(f"cannot write the output ({type(error).__name__})") from None


def _execute(args: argparse.Namespace, out: TextIO, err: TextIO) -> OperationEnvelope[Any]:
    from ._application import execute_contract
    from ._runtimes import RuntimeOptions, load_runtime

    if args.runtime is None and args.fixture_output is None and args.eval_id is None:
        raise UsageError("execute: give --runtime NAME, or --fixture-output FILE / --eval ID")
    request, fixture = _render_request(args), None
    if args.fixture_output is not None:
        fixture = _read_document(args.fixture_output, "--fixture-output", json=True)
    elif args.eval_id is not None:
        fixture = _eval_case(args).fake_output  # what the eval expects the model to say

    def trace_url(url: str) -> None:
        err.write(f"trace: {url}\n")

    options = RuntimeOptions(replay=args.replay, env=dict(os.environ), on_trace_url=trace_url)
    with load_runtime(args.runtime or "scripted", options) as runtime:
        return execute_contract(
            args.contract,
            request,
            runtime=runtime,
            capabilities=args.capability,
            fixture_output=fixture,
            stream=args.stream,
            on_event=(lambda event: _print(event.model_dump_json(), out)) if args.stream else None,
            repair=args.repair,
        )


def _envelope(args: argparse.Namespace, out: TextIO, err: TextIO) -> OperationEnvelope[Any]:
    """The command's envelope; ``fingerprint`` and ``runtimes`` load no compiler."""
    from ._contracts import OperationEnvelope

    if args.command == "fingerprint":
        from ._canonical import fingerprint

        value = fingerprint(_read_document(args.file, "fingerprint"))
        return OperationEnvelope[str](operation="fingerprint", ok=True, result=value)
    if args.command == "runtimes":
        from ._runtimes import available_runtimes

        return OperationEnvelope(operation="runtimes", ok=True, result=available_runtimes())
    from ._application import check_envelope, compile_envelope, eval_envelope

    if args.command == "compile":
        request = _render_request(args)
        return compile_envelope(args.contract, request, capabilities=args.capability)
    if args.command == "check":
        envelope = check_envelope(args.contract, strict_schema=args.strict_schema)
        for warning in [d for d in envelope.diagnostics if d.severity == "warning"]:
            err.write(f"templiqx: warning: {_diagnostic_line(warning)}\n")
        return envelope
    if args.command == "eval":
        return eval_envelope(args.contract, capabilities=args.capability)
    return _execute(args, out, err)


def _plugins() -> dict[str, EntryPoint]:
    from importlib.metadata import entry_points

    return {entry.name: entry for entry in entry_points(group=COMMANDS_GROUP)}


def _run_plugin(entry: EntryPoint, argv: list[str]) -> int:
    """Call a command entry point, ``fn(argv) -> int``; its SystemExit (argparse, sys.exit)
    is the process's."""
    try:
        command = entry.load()
    except ImportError as error:
        raise CommandError(f"{entry.name}: cannot load {entry.value} ({error})") from None
    return int(command(argv))


def main(argv: Sequence[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    # Library warnings (e.g. "tracing disabled") reach the user as one plain line each.
    logging.basicConfig(level=logging.WARNING, format="templiqx: %(message)s", stream=err)
    try:
        # A command entry point runs a name no core command has, and ``eval`` with a flag the
        # self-check lacks (``eval --runtime NAME ...``); a core command reads no entry points.
        at = next((i for i, arg in enumerate(argv) if not arg.startswith("-")), len(argv))
        name, rest = (argv[at] if at < len(argv) else ""), argv[at + 1 :]
        runner = name == "eval" and any(
            arg.startswith("-") and arg.split("=")[0] not in _SELF_CHECK_FLAGS for arg in rest
        )
        plugin = _plugins().get(name) if name and (name not in _CORE_COMMANDS or runner) else None
        if plugin is not None:
            return _run_plugin(plugin, rest)
        if runner:
            raise UsageError("eval: the eval runner comes with templiqx-langfuse")
        listed = _plugins() if argv[:1] in ([], ["-h"], ["--help"]) else None  # in the help
        args = build_parser(listed).parse_args(argv)
        if args.command == "mcp":
            try:
                from ._mcp import serve  # the optional extra, imported only when asked for
                from ._runtimes import RuntimeOptions
            except ImportError as error:
                extra = "pip install 'templiqx-langfuse[mcp]'"
                raise CommandError(f"the MCP server needs {extra} ({error})") from None
            options = RuntimeOptions(replay=args.replay, env=dict(os.environ))
            serve(options, runtime_name=args.runtime or "scripted")
            return 0
        envelope = _envelope(args, out, err)
        # Printed as the reference's ``print``; its ``ok`` decides the exit code.
        compact = args.json or getattr(args, "stream", False)
        _print(envelope.model_dump_json(indent=None if compact else 2), out)
        if envelope.ok:
            return 0
        for diagnostic in [d for d in envelope.diagnostics if d.severity != "warning"]:
            err.write(f"templiqx: {envelope.operation} failed: {_diagnostic_line(diagnostic)}\n")
        return 2
    except (UsageError, CommandError) as error:
        err.write(f"templiqx: {error}\n")
        return 2 if isinstance(error, UsageError) else 1
    except KeyboardInterrupt:
        err.write("templiqx: interrupted\n")
        return 130
    except PortError as error:
        err.write(f"templiqx: {error.code}: {error}\n")
        return 1
    except Exception as error:
        if os.environ.get("TEMPLIQX_DEBUG") == "1":
            raise
        # Exception text can carry request data; name the type only.
        err.write(f"templiqx: internal error ({type(error).__name__}); TEMPLIQX_DEBUG=1 shows it\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
