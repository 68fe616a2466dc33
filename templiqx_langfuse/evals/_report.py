"""Eval results: a record per case run, a running summary, the report formats. A results file
holds one case a line, so a file cut short (Ctrl-C, a crash) still yields every finished case."""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple
from xml.sax import saxutils

import orjson
from pydantic import TypeAdapter

from templiqx_core import Contract, InvalidData

FORMAT = "templiqx.eval/v1"
_HEAD = ("contract_id", "contract_version", "run_name", "total", "passed", "failed", "errored")


@dataclass(frozen=True)
class CaseResult:
    """One case and repetition: its checks, scores, where it landed and what it cost."""

    id: str
    repeat: int
    passed: bool
    errored: bool
    assertions: tuple[dict[str, Any], ...] = ()
    scores: tuple[dict[str, Any], ...] = ()
    error: dict[str, str] | None = None
    output: Any = None
    trace_id: str | None = None
    observation_id: str | None = None
    latency_ms: float | None = None
    usage: dict[str, int] = field(default_factory=dict)
    output_fingerprint: str | None = None
    #: Tries the call made when the run repairs (``--repair``); absent otherwise.
    attempts: int | None = None

    @property
    def key(self) -> tuple[str, int]:
        return self.id, self.repeat

    @property
    def label(self) -> str:
        return self.id if self.repeat == 0 else f"{self.id}#{self.repeat}"

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["assertions"], data["scores"] = list(self.assertions), list(self.scores)
        if self.attempts is None:
            del data["attempts"]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CaseResult:
        """A ``ValueError`` for a record the reports could not show."""
        case = _CASE.validate_python({"repeat": 0, "errored": False, **data})
        if not (
            all(_has(check, _CHECK) for check in case.assertions)
            and all(_has(score, _SCORE) for score in case.scores)
            and (case.error is None or _has(case.error, _ERROR))
            and (case.latency_ms is None or math.isfinite(case.latency_ms))
        ):
            raise ValueError("a check, score, error or latency a report cannot read")
        return case

    def why(self) -> str:
        """What failed: the error, or each failed check's name and detail."""
        if self.error is not None:
            return f"{self.error['code']}: {self.error['detail']}"
        failed = [a for a in self.assertions if not a["passed"]]
        return "; ".join(f"{a['name']}: {a['detail']}" for a in failed)


_CASE = TypeAdapter(CaseResult)


# What the reports read of a case's parts (each may hold more keys).
_CHECK = {"name": str, "passed": bool, "detail": str}
_SCORE = {"name": str}
_ERROR = {"code": str, "detail": str}


def _has(part: Mapping[str, Any], keys: Mapping[str, type]) -> bool:
    return all(isinstance(part.get(key, ...), kind) for key, kind in keys.items())


@dataclass
class Summary:
    """Running counts and sums: averages without keeping the cases."""

    contract_id: str
    contract_version: str
    run_name: str
    total: int = 0
    passed: int = 0
    errored: int = 0
    run_url: str | None = None
    interrupted: bool = False
    #: Each measure's sum and count: ``latency_ms``, ``total_tokens``, ``score NAME``.
    sums: dict[str, tuple[float, int]] = field(default_factory=dict)

    def add(self, result: CaseResult) -> None:
        self.total += 1
        self.passed += result.passed
        self.errored += result.errored
        measures = [("latency_ms", result.latency_ms), ("total_tokens", result.usage.get("total"))]
        measures += [(f"score {score['name']}", score.get("value")) for score in result.scores]
        for key, value in measures:
            if isinstance(value, bool | int | float) and math.isfinite(value):
                total, count = self.sums.get(key, (0.0, 0))
                self.sums[key] = (total + float(value), count + 1)

    @property
    def failed(self) -> int:
        return self.total - self.passed - self.errored

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    def mean(self, key: str) -> float | None:
        total, count = self.sums.get(key, (0.0, 0))
        return round(total / count, 3) if count else None

    def score_means(self) -> dict[str, float]:
        means = ((key.partition(" "), total / n) for key, (total, n) in self.sums.items())
        return {name: mean for (kind, _, name), mean in means if kind == "score"}

    def gate(self, min_pass_rate: float | None) -> bool:
        """Every case passed (a CI shard may hold none), or ``min_pass_rate``."""
        if min_pass_rate is None or self.total == 0:
            return self.passed == self.total
        return self.pass_rate >= min_pass_rate

    def to_json(self) -> dict[str, Any]:
        return {
            **{key: getattr(self, key) for key in _HEAD},
            "pass_rate": round(self.pass_rate, 6),
            "averages": {
                "latency_ms": self.mean("latency_ms"),
                "total_tokens": self.mean("total_tokens"),
                "scores": {k: round(v, 6) for k, v in self.score_means().items()},
            },
            "run_url": self.run_url,
            "interrupted": self.interrupted,
        }


class EvalReport(NamedTuple):
    """What ``run_eval`` returns: the summary and the case records (the kept ones)."""

    summary: Summary
    cases: list[CaseResult]

    @property
    def passed(self) -> bool:
        return self.summary.gate(None)


def _dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


class ResultsWriter:
    """``{"format", contract, "cases": [...], "summary"}``, a case a line as they finish."""

    def __init__(self, stream: IO[str], contract_id: str, version: str) -> None:
        self._stream, self._count = stream, 0
        # The contract in the first line too: a file cut short still says whose it is.
        origin = _dumps({"contract_id": contract_id, "contract_version": version})[1:-1]
        self._put(f'{{"format": "{FORMAT}", {origin}, "cases": [\n')

    def _put(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()

    def write(self, result: CaseResult) -> None:
        """A value orjson refuses (an integer past 64 bits) goes through the stdlib, or ``repr``."""
        data = result.to_json()
        try:
            line = _dumps(data)
        except (TypeError, orjson.JSONEncodeError):
            line = json.dumps(data, allow_nan=False, default=repr, separators=(",", ":"))
        self._put(("," if self._count else "") + line + "\n")
        self._count += 1

    def close(self, summary: Summary) -> None:
        self._put('], "summary": ' + _dumps(summary.to_json()) + "}\n")


_TAIL_BYTES = 2**20  # a file's head and summary lines are far shorter (a sum per score name)
_LINE_BYTES = 16 * 2**20  # a case's line: its output comes of an answer of at most 2 MiB


def read_results(
    path: Path, contract: Contract | None = None, flag: str = "--resume"
) -> Iterator[CaseResult]:
    """A results file's finished cases, a line at a time; refused if another ``contract``'s."""
    try:
        with path.open("rb") as lines:
            head = lines.readline(_TAIL_BYTES)  # one short line: not the whole of any file
            if not head.startswith(f'{{"format": "{FORMAT}"'.encode()) or len(head) == _TAIL_BYTES:
                raise InvalidData(f"{path}: not a templiqx eval results file (--format json)")
            found = orjson.loads(head.rstrip() + b"]}")
            wanted = {} if contract is None else {"contract_id": contract.id}
            if contract is not None and flag != "--baseline":  # a baseline: another version
                wanted["contract_version"] = contract.version
            for key, value in wanted.items():
                if found.get(key, value) != value:
                    what = "version " if key == "contract_version" else ""
                    held = f"{what}{found[key]!r}, not {value!r}"
                    raise InvalidData(f"{flag}: {path} holds results of {held}")
            while line := lines.readline(_LINE_BYTES):
                if len(line) == _LINE_BYTES and not line.endswith(b"\n"):  # no case: skipped
                    while (line := lines.readline(_TAIL_BYTES)) and not line.endswith(b"\n"):
                        pass
                elif line.startswith((b'{"id"', b',{"id"')):
                    try:  # a line cut short, or a record the reports cannot read: skipped
                        case = CaseResult.from_json(orjson.loads(line.removeprefix(b",")))
                    except ValueError:
                        continue
                    yield case
    except (OSError, ValueError) as error:  # a head that is not JSON too
        raise InvalidData(f"{path}: cannot read results ({type(error).__name__})") from None


def read_summary(path: Path) -> dict[str, Any] | None:
    """A complete file's summary (None if cut short), read from its tail however large."""
    try:
        with path.open("rb") as file:
            file.seek(max(0, file.seek(0, 2) - _TAIL_BYTES))
            last = file.read().rstrip().rpartition(b"\n")[2]
        if not last.startswith(b'], "summary": '):
            return None
        summary = orjson.loads(b"{" + last[3:]).get("summary")
    except (OSError, orjson.JSONDecodeError):
        return None
    return summary if isinstance(summary, dict) else None


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def table(summary: Summary, cases: Iterable[CaseResult], *, limit: int = 200) -> str:
    """A row per case (failed first, at most ``limit``): checks, scores, latency, tokens, tries."""
    seen = itertools.count()  # zip stops at the last case: next(seen) is then how many
    read = (case for case, _ in zip(cases, seen, strict=False))
    shown = heapq.nsmallest(limit, read, key=lambda case: (case.passed, case.key))
    more = next(seen) - len(shown)
    columns = 5 + any(case.attempts is not None for case in shown)  # tries: a run with --repair
    rows = [["case", "assertions", "scores", "latency", "tokens", "tries"][:columns]]
    for case in shown:
        marks = "".join("✔" if a["passed"] else "✗" for a in case.assertions)
        names = ", ".join(str(a["name"]) for a in case.assertions if not a["passed"])
        checks = f"ERROR {case.error['code']}" if case.error else f"{marks} {names}".strip()
        values = ((s["name"], s.get("value")) for s in case.scores)
        scores = " ".join(f"{k}={_num(v) if isinstance(v, float) else v}" for k, v in values)
        tokens, tries = str(case.usage.get("total") or "-"), str(case.attempts or "-")
        rows.append([case.label, checks, scores, _ms(case.latency_ms), tokens, tries][:columns])
    widths = [min(max(len(row[i]) for row in rows), 60) for i in range(columns)]
    lines = ["  ".join(map(str.ljust, row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if more:
        lines.append(f"... {more} more case(s) in the results file")
    averages = summary.to_json()["averages"]
    extras = [f"avg latency {_ms(averages['latency_ms'])}"]
    if averages["total_tokens"] is not None:
        extras.append(f"avg tokens {averages['total_tokens']:.0f}")
    extras.extend(f"avg {k} {v:.3g}" for k, v in averages["scores"].items())
    lines += [
        "",
        f"{summary.contract_id} {summary.contract_version} · run {summary.run_name!r}: "
        f"{summary.passed}/{summary.total} passed, {summary.failed} failed, "
        f"{summary.errored} errored (pass rate {summary.pass_rate:.1%})",
        ", ".join(extras),
        *(f"✗ {case.label}: {case.why()}" for case in shown[:20] if not case.passed),
    ]
    if summary.run_url:
        lines.append(f"run: {summary.run_url}")
    return "\n".join(lines)


# Characters XML 1.0 cannot hold even escaped (a case id or a model's answer may carry
# them): each becomes U+FFFD, so the report stays a document CI can parse.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml(text: str, *, attribute: bool = True) -> str:
    clean = _NOT_XML.sub("\ufffd", text)
    return saxutils.quoteattr(clean) if attribute else saxutils.escape(clean)


def write_junit(summary: Summary, cases: Iterable[CaseResult], stream: IO[str]) -> None:
    """A ``testcase`` per case run, with its ``failure`` or ``error``, written as cases are read."""
    suite = _xml(summary.contract_id)
    counts = f'tests="{summary.total}" failures="{summary.failed}" errors="{summary.errored}"'
    stream.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    stream.write(f"<testsuites name={suite} {counts}>\n")
    seconds = summary.sums.get("latency_ms", (0.0, 0))[0] / 1000
    stream.write(f'  <testsuite name={suite} {counts} time="{seconds:.3f}">\n')
    for case in cases:
        seconds = (case.latency_ms or 0.0) / 1000
        head = f'    <testcase classname={suite} name={_xml(case.label)} time="{seconds:.3f}"'
        if case.passed:
            stream.write(head + "/>\n")
            continue
        if case.errored and case.error is not None:
            body = f"<error message={_xml(case.why())}/>"
        else:
            failed = [a for a in case.assertions if not a["passed"]]
            message = _xml("; ".join(str(a["name"]) for a in failed))
            text = _xml("\n".join(f"{a['name']}: {a['detail']}" for a in failed), attribute=False)
            body = f"<failure message={message}>{text}</failure>"
        stream.write(f"{head}>\n      {body}\n    </testcase>\n")
    stream.write("  </testsuite>\n</testsuites>\n")


def baseline_diff(
    summary: Summary, cases: Iterable[CaseResult], baseline: Iterable[CaseResult]
) -> str:
    """Per case and per score, this run against a baseline's: regressions first."""
    base, before = Summary("", "", ""), dict[tuple[str, int], bool]()
    for case in baseline:
        base.add(case)
        before[case.key] = case.passed
    mark: dict[bool | None, str] = {True: "✔", False: "✗", None: "new"}
    changed = []  # (0 a regression, 1 a fix, 2 a new case; its key; its line)
    for case in cases:
        if (old := before.get(case.key)) != case.passed:
            group = 2 if old is None else int(case.passed)
            changed.append((group, case.key, f"  {mark[old]} → {mark[case.passed]} {case.label}"))
    counts = Counter(group for group, _, _ in changed)
    lines = [
        "Evaluation diff: baseline → this run",
        f"  pass rate {base.pass_rate:.1%} → {summary.pass_rate:.1%} "
        f"({counts[0]} regression(s), {counts[1]} fix(es))",
        *(line for _, _, line in sorted(changed)),
    ]
    old_means, new_means = base.score_means(), summary.score_means()
    for name in sorted(old_means.keys() | new_means.keys()):
        was, now = old_means.get(name), new_means.get(name)
        if was is None or now is None or not math.isclose(was, now, abs_tol=1e-9):
            lines.append(f"  score {name}: {_num(was)} → {_num(now)}")
    return "\n".join(lines)
