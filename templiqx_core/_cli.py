"""The ``templiqx`` command line, behaving as the Rust reference CLI (``templiqx-cli``):
stdout is the ``OperationEnvelope``; exit 0 when it is ok, 2 when not and for usage errors,
1 when the command itself fails (one stderr line). Each command imports what it uses when
it runs: ``--help`` loads no pydantic model, and runtimes and the MCP extra load on demand.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from ._errors import PortError
from ._version import REFERENCE_VERSION, __version__

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from ._compiler import EvalCase
    from ._contracts import Diagnostic, OperationEnvelope, RenderRequest
    from ._runtimes import RuntimeOptions
    from ._scenarios import Scenario

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_NOT_OK = 0, 1, 2
EXIT_USAGE = 2  # as clap: a usage error shares the not-ok code
#: Commands other packages add: ``NAME = "module:function"``, ``function(argv) -> int``.
COMMANDS_GROUP = "templiqx.commands"
_CORE_EVAL = ("--help", "--json", "--capability")  # the flags the self-check knows
_CORE_COMMANDS = ("compile", "execute", "check", "eval", "fingerprint", "runtimes", "mcp")


class UsageError(Exception):
    """A bad invocation: exit 2."""


class CommandError(Exception):
    """The command itself failed (unreadable input, unknown runtime): exit 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise UsageError(message)


def _attempts(text: str) -> int:
    """A count of tries: an integer from 1 to the most a repair makes (argparse reports
    anything else)."""
    from ._repair import MAX_ATTEMPTS  # only once --repair is given: start-up stays lean

    if not re.fullmatch(r"-?[0-9]+", text):  # int() also reads "1_0" and other digits
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    if value > MAX_ATTEMPTS:
        raise argparse.ArgumentTypeError(f"at most {MAX_ATTEMPTS}")
    return value


_JSON = "print compact JSON (one line)"
_CAPABILITY = "target capability (repeatable); default: what the contract declares"
_CONTRACT = "contract YAML (templiqx/v1alpha1), or langfuse:NAME[@LABEL] (templiqx-langfuse)"


def build_parser(plugins: dict[str, EntryPoint] | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="templiqx",
        description="Compile and execute prompt contracts; stdout is the OperationEnvelope JSON.",
        epilog="exit status: 0 envelope ok, 2 envelope not ok or usage error, "
        "1 the command itself failed",
    )
    version = (
        f"templiqx {__version__} (compiles as templiqx-core/{REFERENCE_VERSION}, the reference)"
    )
    parser.add_argument("--version", action="version", version=version)
    parser.add_argument("--json", action="store_true", help=_JSON)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        # Accepted after the command too, as clap.
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=_JSON)
        return sub

    compile_ = command("compile", "compile a contract; print the envelope")
    execute = command("execute", "compile and execute a contract on a runtime")
    for sub in (compile_, execute):
        sub.add_argument("contract", type=Path, help=_CONTRACT)
        sub.add_argument("--inputs", type=Path, help="JSON/YAML object of contract inputs")
        sub.add_argument("--context", type=Path, help="JSON/YAML object of contract context")
        values = "JSON/YAML render request {inputs, context} (instead of the two)"
        sub.add_argument("--request", "--values", type=Path, help=values)
        fixture = "inputs and context of the contract's eval ID (scripted: its fake_output too)"
        sub.add_argument("--eval", dest="eval_id", metavar="ID", help=fixture)
        sub.add_argument("--capability", action="append", metavar="NAME", help=_CAPABILITY)
    stream = "print each stream event as NDJSON as it arrives, then the envelope"
    execute.add_argument("--stream", action="store_true", help=stream)
    repair = (
        "try up to N times in all (default 1), each invalid answer sent back with its failed rules"
    )
    execute.add_argument("--repair", type=_attempts, metavar="N", help=repair)
    fixture = "JSON/YAML output the scripted runtime returns"
    execute.add_argument("--fixture-output", type=Path, metavar="FILE", help=fixture)

    check = command(
        "check",
        "check a contract without inputs: schemas, references, components, extensions "
        "and its eval fixtures (inputs, context, fake_output)",
    )
    check.add_argument("contract", type=Path, help=_CONTRACT)
    strict = "an output schema with no strict structured-outputs form is an error, not a warning"
    check.add_argument("--strict-schema", action="store_true", help=strict)
    evals = command(
        "eval",
        "self-check a contract's eval fixtures on the scripted runtime; --runtime NAME "
        "runs its cases against a model (the eval runner's flags: eval --runtime NAME --help)",
    )
    evals.add_argument("contract", type=Path, nargs="+", help="contract YAML")
    evals.add_argument("--capability", action="append", metavar="NAME", help=_CAPABILITY)
    fingerprint = command("fingerprint", "canonical-JSON SHA-256 of a JSON/YAML document")
    fingerprint.add_argument("file", type=Path, help="JSON or YAML document")
    command("runtimes", "list the installed runtimes")
    mcp = command("mcp", "serve compile/execute over MCP on stdio (extra: mcp)")
    runtime = "runtime entry point: scripted, langfuse, or a host's own (see: templiqx runtimes)"
    for sub, default in ((execute, None), (mcp, "scripted")):
        sub.add_argument("--runtime", default=default, help=runtime)
        replay = "replay the runtime's HTTP calls from a vcrpy cassette (offline, untraced)"
        sub.add_argument("--replay", type=Path, metavar="CASSETTE", help=replay)
        scenario = "scripted runtime: a templiqx.mock/v1alpha1 manifest to play"
        sub.add_argument("--scenario", type=Path, metavar="MANIFEST", help=scenario)
    for name, entry in (plugins or {}).items():
        if name not in commands.choices:
            # Its own help is its own (loading it here would slow every --help).
            by = f" from {entry.dist.name}" if entry.dist is not None else ""
            commands.add_parser(name, help=f"see templiqx {name} --help ({COMMANDS_GROUP}{by})")
    return parser


@contextlib.contextmanager
def _failing(what: str) -> Iterator[None]:
    """A typed error inside is the command's failure (exit 1), prefixed with ``what``."""
    try:
        yield
    except PortError as error:
        raise CommandError(f"{what}: {error}") from None


def _read_document(path: Path, what: str) -> Any:
    from ._loading import load_document

    with _failing(what):
        return load_document(path)


def _eval_case(args: argparse.Namespace) -> EvalCase:
    from ._compiler import EvalCase, read_contract

    contract = read_contract(args.contract)[0]
    if contract is None:  # no eval to read: compiling the contract says why (exit 2)
        return EvalCase.model_construct(id=args.eval_id, fake_output=None)
    case = next((c for c in contract.evals if c.id == args.eval_id), None)
    if case is None:
        known = ", ".join(c.id for c in contract.evals) or "none"
        raise CommandError(f"--eval: contract has no eval {args.eval_id!r} (has: {known})")
    return case


def _render_request(args: argparse.Namespace, scenario: Scenario | None) -> RenderRequest:
    from ._contracts import RenderRequest
    from ._loading import validate_model

    if args.eval_id is not None:
        case = _eval_case(args)
        return RenderRequest(inputs=case.inputs, context=case.context)
    if args.request is not None:
        data = _read_document(args.request, "--request")
        with _failing("--request"):
            return validate_model(RenderRequest, data, name=str(args.request))
    if scenario is not None and args.inputs is None and args.context is None:
        return scenario.render_request
    values = {}
    for flag, path in (("--inputs", args.inputs), ("--context", args.context)):
        values[flag] = {} if path is None else _read_document(path, flag)
        if not isinstance(values[flag], dict):
            raise CommandError(f"{flag}: expected a JSON/YAML object")
    try:
        return RenderRequest(inputs=values["--inputs"], context=values["--context"])
    except ValueError as error:  # pydantic: a value that is not JSON
        raise CommandError(
            f"--inputs/--context: not JSON values ({type(error).__name__})"
        ) from None


def _runtime_options(args: argparse.Namespace, **more: Any) -> RuntimeOptions:
    from ._runtimes import RuntimeOptions

    for flag, path in (("--replay", args.replay), ("--scenario", args.scenario)):
        if path is not None and not path.is_file():
            raise CommandError(f"{flag}: {path}: no such file")
    return RuntimeOptions(replay=args.replay, scenario=args.scenario, env=dict(os.environ), **more)


def _print_trace_url(url: str) -> None:
    with contextlib.suppress(AttributeError, OSError):  # no stderr, or an unwritable one
        sys.stderr.write(f"trace: {url}\n")


def _diagnostic_line(diagnostic: Diagnostic) -> str:
    """``CODE file:line:column pointer: message``."""
    where = diagnostic.file or ""
    if diagnostic.span is not None:
        where += f":{diagnostic.span.line}:{diagnostic.span.column}"
    pointer = diagnostic.json_pointer
    if pointer and not diagnostic.message.startswith(f"{pointer}: "):  # said once, not twice
        where += f" {pointer}"
    return f"{diagnostic.code} {where.strip()}: {diagnostic.message}".replace(" :", ":")


def _print(text: str, out: TextIO) -> None:
    try:
        out.write(text + "\n")
        out.flush()
    except OSError as error:  # a closed pipe (``| head``), a full disk
        raise CommandError(f"cannot write the output ({type(error).__name__})") from None


def _execute(args: argparse.Namespace, out: TextIO) -> OperationEnvelope[Any]:
    from pydantic import JsonValue, TypeAdapter

    from ._application import execute_contract
    from ._runtimes import available_runtimes, load_runtime
    from ._scenarios import load_scenario

    name = args.runtime
    if name is None:
        if args.fixture_output is None and args.scenario is None and args.eval_id is None:
            installed = ", ".join(available_runtimes()) or "none"
            raise UsageError(
                f"execute: choose a runtime with --runtime NAME (installed: {installed}), "
                "or give the scripted runtime --fixture-output FILE or --scenario MANIFEST"
            )
        name = "scripted"
    options = _runtime_options(args, on_trace_url=_print_trace_url)
    scenario = None
    if args.scenario is not None:
        with _failing("--scenario"):
            scenario = load_scenario(args.scenario)
    request = _render_request(args, scenario)
    if args.fixture_output is not None:
        fixture = _read_document(args.fixture_output, "--fixture-output")
    elif args.eval_id is not None:
        fixture = _eval_case(args).fake_output  # what the eval expects the model to say
    else:
        fixture = None if scenario is None else scenario.expected_output
    try:  # what a model answers is JSON: so is what stands in for it
        TypeAdapter(JsonValue).validate_python(fixture)
    except ValueError as error:
        flag = "--scenario" if args.fixture_output is None else "--fixture-output"
        raise CommandError(f"{flag}: not a JSON value ({type(error).__name__})") from None
    with load_runtime(str(name), options) as runtime:  # a PortError: main's one line, exit 1
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

        document = _read_document(args.file, "fingerprint")
        with _failing(f"fingerprint: {args.file}"):
            value = fingerprint(document)
        return OperationEnvelope[str](operation="fingerprint", ok=True, result=value)
    if args.command == "runtimes":
        from ._runtimes import available_runtimes

        names = available_runtimes()
        return OperationEnvelope[list[str]](operation="runtimes", ok=True, result=names)
    from ._application import check_envelope, compile_envelope, eval_envelope

    if args.command == "compile":
        request = _render_request(args, None)
        return compile_envelope(args.contract, request, capabilities=args.capability)
    if args.command == "check":
        envelope = check_envelope(args.contract, strict_schema=args.strict_schema)
        for warning in [d for d in envelope.diagnostics if d.severity == "warning"]:
            err.write(f"templiqx: warning: {_diagnostic_line(warning)}\n")
        return envelope
    if args.command == "eval":
        err.write(
            "templiqx: eval: scripted self-check of the fixtures (fake_output, no model); "
            "--runtime NAME runs the cases against a model\n"
        )
        if len(args.contract) > 1:
            raise UsageError("eval: the self-check takes one contract; --runtime NAME runs several")
        return eval_envelope(args.contract[0], capabilities=args.capability)
    return _execute(args, out)


def _plugins() -> dict[str, EntryPoint]:
    from importlib.metadata import entry_points

    return {entry.name: entry for entry in entry_points(group=COMMANDS_GROUP)}


def _plain_warnings(err: TextIO) -> None:
    """Library warnings (e.g. "tracing disabled") reach the user as one plain line each."""
    logging.basicConfig(level=logging.WARNING, format="templiqx: %(message)s", stream=err)


def _run_plugin(entry: EntryPoint, argv: list[str], err: TextIO) -> int:
    """Call a command entry point, ``fn(argv) -> int``."""
    try:
        command = entry.load()
    except ImportError as error:
        raise CommandError(f"{entry.name}: cannot load {entry.value} ({error})") from None
    _plain_warnings(err)
    try:
        return int(command(argv))
    except SystemExit as exit:  # its argparse (--help 0, a usage error 2) or sys.exit(...)
        if exit.code is None or isinstance(exit.code, int):
            return exit.code or EXIT_OK
        raise CommandError(f"{entry.name}: {exit.code}") from None


def main(argv: Sequence[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # A command entry point runs a name no core command has, or a core command's line the
        # core cannot parse (``eval --runtime NAME ...``, its --help too); a core command's own
        # line reads no entry point metadata.
        at = next((i for i, arg in enumerate(argv) if not arg.startswith("-")), len(argv))
        name, rest = (argv[at] if at < len(argv) else ""), argv[at + 1 :]
        helped = {"-h", "--help"} & set(rest)
        theirs = helped and any(a.startswith("--") and a not in _CORE_EVAL for a in rest)
        plugin = _plugins().get(name) if name and (name not in _CORE_COMMANDS or theirs) else None
        if plugin is not None:
            return _run_plugin(plugin, rest, err)
        help_asked = not argv or argv[0] in ("-h", "--help")
        parser = build_parser(_plugins() if help_asked else None)
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            plugin = _plugins().get(name)
            if plugin is None:
                hint = "; the eval runner comes with templiqx-langfuse" * (args.command == "eval")
                parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
            return _run_plugin(plugin, rest, err)
        if args.command in ("execute", "mcp"):
            _plain_warnings(err)
        if args.command == "mcp":
            try:
                from ._mcp import serve  # the optional extra, imported only when asked for
            except ImportError as error:
                raise CommandError(str(error)) from None
            serve(_runtime_options(args), runtime_name=args.runtime)
            return EXIT_OK
        envelope = _envelope(args, out, err)
        # Printed as the reference's ``print``; its ``ok`` decides the exit code.
        compact = args.json or getattr(args, "stream", False)
        _print(envelope.model_dump_json(indent=None if compact else 2), out)
        if envelope.ok:
            return EXIT_OK
        for diagnostic in [d for d in envelope.diagnostics if d.severity != "warning"]:
            err.write(f"templiqx: {envelope.operation} failed: {_diagnostic_line(diagnostic)}\n")
        return EXIT_NOT_OK
    except (UsageError, CommandError) as error:
        err.write(f"templiqx: {error}\n")
        return EXIT_USAGE if isinstance(error, UsageError) else EXIT_FAILED
    except KeyboardInterrupt:
        err.write("templiqx: interrupted\n")
        return 130
    except Exception as error:
        if isinstance(error, PortError):
            err.write(f"templiqx: {error.code}: {error}\n")
            return EXIT_FAILED
        if os.environ.get("TEMPLIQX_DEBUG") == "1":
            raise
        # Exception text can carry request data; name the type only.
        err.write(
            f"templiqx: internal error ({type(error).__name__}); "
            "rerun with TEMPLIQX_DEBUG=1 for details\n"
        )
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
