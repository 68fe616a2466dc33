"""The ``templiqx`` command line (SPEC §8.4).

stdout carries JSON only (the envelope; with ``--stream``, NDJSON events then the
envelope); stderr carries one line per error. Exit codes: 0 ok, 1 the envelope is not ok,
2 usage or input error. No traceback reaches the user unless ``TEMPLIQX_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from ._application import compile_envelope, execute_contract, run_evals
from ._canonical import fingerprint
from ._compiler import read_contract
from ._compiler.parse import reading_each_file_once
from ._contracts import Diagnostic, OperationEnvelope, RenderRequest, StreamEvent
from ._errors import InvalidData, PortError
from ._loading import load_document, validate_model
from ._runtimes import RuntimeOptions, available_runtimes, load_runtime
from ._version import __version__

__all__ = ["main"]

EXIT_OK, EXIT_NOT_OK, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad invocation or unreadable input: exit 2 with one line on stderr."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise UsageError(message)


def _add_request_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("contract", type=Path, help="contract YAML (templiqx/v1alpha1)")
    parser.add_argument("--inputs", type=Path, help="JSON/YAML object of contract inputs")
    parser.add_argument("--context", type=Path, help="JSON/YAML object of contract context")
    parser.add_argument(
        "--request",
        type=Path,
        help="JSON/YAML render request {inputs, context} (instead of the two)",
    )
    parser.add_argument(
        "--eval",
        dest="eval_id",
        metavar="ID",
        help="take inputs and context from the contract's eval fixture ID",
    )
    parser.add_argument(
        "--capability",
        action="append",
        default=None,
        metavar="NAME",
        help="target capability (repeatable); default: what the contract "
        "declares (compile) or what the runtime offers (execute)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="templiqx", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"templiqx {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    compile_cmd = commands.add_parser("compile", help="compile a contract; print the envelope")
    _add_request_args(compile_cmd)

    execute = commands.add_parser("execute", help="compile and execute a contract on a runtime")
    _add_request_args(execute)
    execute.add_argument(
        "--runtime",
        default="scripted",
        help="runtime entry point: scripted, langfuse, or a host's own (default: scripted)",
    )
    execute.add_argument(
        "--stream",
        action="store_true",
        help="print each stream event as NDJSON as it arrives, then the envelope",
    )
    execute.add_argument(
        "--replay",
        type=Path,
        metavar="CASSETTE",
        help="replay the runtime's HTTP calls from a vcrpy cassette (offline)",
    )
    execute.add_argument(
        "--scenario",
        type=Path,
        metavar="MANIFEST",
        help="scripted runtime: a templiqx.mock/v1alpha1 manifest to play",
    )
    execute.add_argument(
        "--fixture-output",
        type=Path,
        metavar="FILE",
        help="JSON/YAML output the scripted runtime returns",
    )

    evals = commands.add_parser("eval", help="run a contract's eval fixtures (scripted runtime)")
    evals.add_argument("contract", type=Path)

    fp = commands.add_parser("fingerprint", help="print the fingerprint of a JSON/YAML file")
    fp.add_argument("file", type=Path)

    mcp = commands.add_parser("mcp", help="serve compile/execute over MCP on stdio (extra: mcp)")
    mcp.add_argument("--runtime", default="scripted", help="runtime for execute_contract")
    mcp.add_argument(
        "--replay",
        type=Path,
        metavar="CASSETTE",
        help="replay each execute_contract call from this cassette",
    )
    mcp.add_argument(
        "--scenario",
        type=Path,
        metavar="MANIFEST",
        help="scripted runtime: a templiqx.mock/v1alpha1 manifest to play",
    )

    commands.add_parser("runtimes", help="list the installed runtimes")
    return parser


def _read_json_arg(path: Path | None, what: str) -> Any:
    if path is None:
        return None
    try:
        return load_document(path)
    except PortError as error:
        raise UsageError(f"{what}: {error}") from None


def _render_request(args: argparse.Namespace) -> RenderRequest:
    if args.eval_id is not None:
        contract, diagnostics = read_contract(args.contract)
        if contract is None:
            raise UsageError(_diagnostic_line(diagnostics[0]))
        case = next((c for c in contract.evals if c.id == args.eval_id), None)
        if case is None:
            known = ", ".join(c.id for c in contract.evals) or "none"
            raise UsageError(f"--eval: contract has no eval {args.eval_id!r} (has: {known})")
        return RenderRequest(inputs=case.inputs, context=case.context)
    if args.request is not None:
        data = _read_json_arg(args.request, "--request")
        try:
            return validate_model(RenderRequest, data, name=str(args.request))
        except InvalidData as error:
            raise UsageError(f"--request: {error}") from None
    inputs = _read_json_arg(args.inputs, "--inputs") or {}
    context = _read_json_arg(args.context, "--context") or {}
    for flag, value in (("--inputs", inputs), ("--context", context)):
        if not isinstance(value, dict):
            raise UsageError(f"{flag}: expected a JSON/YAML object")
    return RenderRequest(inputs=inputs, context=context)


def _runtime_options(args: argparse.Namespace) -> RuntimeOptions:
    for flag, path in (("--replay", args.replay), ("--scenario", args.scenario)):
        if path is not None and not path.is_file():
            raise UsageError(f"{flag}: {path}: no such file")
    return RuntimeOptions(replay=args.replay, scenario=args.scenario, env=dict(os.environ))


def _diagnostic_line(diagnostic: Diagnostic) -> str:
    where = diagnostic.file or ""
    if diagnostic.span is not None:
        where += f":{diagnostic.span.line}:{diagnostic.span.column}"
    if diagnostic.json_pointer:
        where += f" {diagnostic.json_pointer}"
    message = diagnostic.message
    if message.startswith(f"{diagnostic.code}: "):
        message = message[len(diagnostic.code) + 2 :]
    return f"{diagnostic.code} {where.strip()}: {message}".replace(" :", ":")


def _emit(envelope: OperationEnvelope[Any], out: TextIO, err: TextIO, *, compact: bool) -> int:
    out.write(envelope.model_dump_json(indent=None if compact else 2) + "\n")
    out.flush()
    if envelope.ok:
        return EXIT_OK
    for diagnostic in envelope.diagnostics:
        err.write(f"templiqx: {envelope.operation} failed: {_diagnostic_line(diagnostic)}\n")
    return EXIT_NOT_OK


def _require_contract(path: Path) -> None:
    if not path.is_file():
        raise UsageError(f"{path}: no such contract file")


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.command == "runtimes":
        out.write("\n".join(available_runtimes()) + "\n")
        return EXIT_OK
    if args.command == "mcp":
        try:
            from ._mcp import serve  # the optional extra, imported only when asked for
        except ImportError as error:
            raise UsageError(str(error)) from None
        serve(_runtime_options(args), runtime_name=args.runtime)
        return EXIT_OK
    if args.command == "fingerprint":
        out.write(fingerprint(_read_json_arg(args.file, "fingerprint")) + "\n")
        return EXIT_OK
    _require_contract(args.contract)
    if args.command == "eval":
        results, diagnostics = run_evals(args.contract)
        if diagnostics:
            raise UsageError(_diagnostic_line(diagnostics[0]))
        for result in results:
            status = "pass" if result.passed else "fail"
            codes = ",".join(d.code for d in result.envelope.diagnostics)
            output_fp = result.envelope.fingerprints.get("output", "-")
            suffix = f" {codes}" if codes else ""
            out.write(f"{status} {result.eval_id} output={output_fp}{suffix}\n")
        failed = sum(not r.passed for r in results)
        err.write(f"templiqx: {len(results) - failed} passed, {failed} failed\n")
        return EXIT_NOT_OK if failed else EXIT_OK
    request = _render_request(args)
    if args.command == "compile":
        contract, _ = read_contract(args.contract)
        caps = (
            args.capability
            if args.capability is not None
            else (
                contract.capabilities + [e.capability for e in contract.extensions.values()]
                if contract is not None
                else []
            )
        )
        return _emit(
            compile_envelope(args.contract, request, capabilities=caps), out, err, compact=False
        )
    runtime = load_runtime(args.runtime, _runtime_options(args))
    try:
        caps = (
            args.capability if args.capability is not None else (runtime.descriptor().capabilities)
        )
        fixture = _read_json_arg(args.fixture_output, "--fixture-output")

        def print_event(event: StreamEvent) -> None:
            out.write(event.model_dump_json() + "\n")
            out.flush()

        envelope = execute_contract(
            args.contract,
            request,
            runtime=runtime,
            capabilities=caps,
            fixture_output=fixture,
            stream=args.stream,
            on_event=print_event if args.stream else None,
        )
    finally:
        runtime.close()
        trace_url = getattr(runtime, "last_trace_url", None)  # traced runtimes only
        url = trace_url() if callable(trace_url) else None
        if isinstance(url, str):
            err.write(f"trace: {url}\n")
    return _emit(envelope, out, err, compact=args.stream)


def main(argv: Sequence[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    # Library warnings (e.g. "tracing disabled") reach the user as one plain line each.
    logging.basicConfig(level=logging.WARNING, format="templiqx: %(message)s", stream=err)
    try:
        args = build_parser().parse_args(argv)
        with reading_each_file_once():
            return _run(args, out, err)
    except UsageError as error:
        err.write(f"templiqx: {error}\n")
        return EXIT_USAGE
    except PortError as error:
        err.write(f"templiqx: {error.code}: {error}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        err.write("templiqx: interrupted\n")
        return 130
    except Exception as error:
        if os.environ.get("TEMPLIQX_DEBUG") == "1":
            raise
        # Exception text can carry request data; name the type only.
        err.write(
            f"templiqx: internal error ({type(error).__name__}); "
            "rerun with TEMPLIQX_DEBUG=1 for details\n"
        )
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
