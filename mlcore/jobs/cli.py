"""``moelab``: the job-kind contract on the command line.

moelab kinds [--json]
moelab run KIND --set NAME=VALUE ... --input NAME=PATH ... --out DIR
moelab submit KIND --set ... --input ... --server URL --token T [--team SLUG] [--no-follow] [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import mimetypes
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlcore.jobs import provenance, runner
from mlcore.jobs.context import DirectoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import UnknownKind, all_kinds, get_kind
from mlcore.jobs.spec import JobError, ValidationError

TERMINAL = {"succeeded", "failed", "cancelled"}


def _pairs(items: Sequence[str], flag: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"moelab: {flag} expects NAME=VALUE, got {item!r}")
        pairs.append((name.strip(), value.strip().strip('"')))
    return pairs


def _files(items: Sequence[str]) -> dict[str, list[Path]]:
    files: dict[str, list[Path]] = {}
    for name, value in _pairs(items, "--input"):
        path = Path(value).expanduser()
        if not path.is_file():
            raise SystemExit(f"moelab: --input {name}: {path} is not a file")
        files.setdefault(name, []).append(path)
    return files


def cmd_kinds(args: argparse.Namespace) -> int:
    kinds = all_kinds()
    if args.json:
        print(json.dumps([k.spec.describe() for k in kinds], indent=1))
        return 0
    for kind in kinds:
        spec = kind.spec
        print(f"{spec.name}  (queue {spec.queue}, v{spec.version})  {spec.title}")
        print(f"    {spec.summary}")
        for p in spec.params:
            desc = p.describe()
            extra = {k: v for k, v in desc.items() if k in ("options", "min", "max", "accepts", "formats") and v}
            bounds = " ".join(f"{k}={v}" for k, v in extra.items())
            print(f"    --{'input' if p.type == 'file' else 'set'} {p.name}  [{p.type}] default={p.default!r} {bounds}")
    return 0


class _Bar:
    """A one-line progress bar on stderr, redrawn when the fraction or stage changes."""

    def __init__(self) -> None:
        self.last = ""

    def draw(self, fraction: float, stage: str) -> None:
        filled = int(fraction * 30)
        line = f"\r[{'#' * filled}{'.' * (30 - filled)}] {fraction * 100:5.1f}% {stage[:60]:<60}"
        if line != self.last and sys.stderr.isatty():
            sys.stderr.write(line)
            sys.stderr.flush()
        self.last = line


class _CliContext(DirectoryContext):
    def __init__(self, out: Path, *, device: str) -> None:
        super().__init__(out, device=device, echo=True)
        self.bar = _Bar()

    def _on_progress(self) -> None:
        super()._on_progress()
        self.bar.draw(self.fraction, self.stage)


def _default_device() -> str:
    if os.environ.get("MOELAB_DEVICE"):
        return os.environ["MOELAB_DEVICE"]
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cmd_run(args: argparse.Namespace) -> int:
    kind = get_kind(args.kind)
    out = Path(args.out)
    ctx = _CliContext(out, device=args.device or _default_device())
    try:
        params, inputs = runner.prepare(
            kind, dict(_pairs(args.set, "--set")), _files(args.input), resolver=LocalResolver(), workdir=ctx.workdir
        )
    except ValidationError as exc:
        ctx.close()
        for name, message in exc.errors:
            print(f"moelab: {name}: {message}", file=sys.stderr)
        return 2
    except JobError as exc:
        ctx.close()
        print(f"moelab: {exc}", file=sys.stderr)
        return 2
    record = {"kind": kind.name, "version": kind.spec.version, "params": params}
    record["provenance"] = provenance.collect(seed=runner.seed_of(kind, params), device=ctx.device_name, inputs=inputs)
    (out / "job.json").write_text(json.dumps(record, indent=1, default=str))
    outcome = runner.execute(kind, params, inputs, ctx)
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    # On the user's own machine the exception itself is theirs to read (there are no staff to ask);
    # the platform shows only the reference.
    error = f"Internal error: {outcome.detail}" if outcome.reference else outcome.error
    (out / "outcome.json").write_text(json.dumps({"status": outcome.status, "error": error}, indent=1))
    if outcome.status != "succeeded":
        if outcome.traceback and args.verbose:
            print(outcome.traceback, file=sys.stderr)
        hint = " (run with -v for the traceback)" if outcome.reference and not args.verbose else ""
        print(f"moelab: {outcome.status}: {error}{hint}", file=sys.stderr)
        return 1
    print(f"moelab: done; results in {out}")
    return 0


def _multipart(fields: dict[str, str], files: dict[str, list[Path]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    body = bytearray()
    for name, value in fields.items():
        body += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
    for name, paths in files.items():
        for path in paths:
            media = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            body += (
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{path.name}"\r\n'
                f"Content-Type: {media}\r\n\r\n"
            ).encode()
            body += path.read_bytes() + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return bytes(body), f"multipart/form-data; boundary={boundary}"


def _api(server: str, token: str, method: str, path: str, body: bytes | None = None, ctype: str = "") -> Any:
    request = urllib.request.Request(server.rstrip("/") + path, data=body, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if ctype:
        request.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        failed = SystemExit if exc.code < 500 else _Unreachable  # a 5xx: the server or its proxy is down
        raise failed(f"moelab: {method} {path} failed with HTTP {exc.code}{_detail(exc.read())}") from None
    except urllib.error.URLError as exc:
        raise _Unreachable(f"moelab: cannot reach {server}: {exc.reason}") from None
    except (TimeoutError, ConnectionError) as exc:
        raise _Unreachable(f"moelab: cannot reach {server}: {exc}") from None


class _Unreachable(SystemExit):
    """The server did not answer: fatal while submitting, ridden out while following."""


def _detail(body: bytes) -> str:
    """The API's ``{"detail": ...}`` as text. Any other body (a proxy's or a server's error page)
    is not shown: it is not meant for users and may hold what they should not see."""
    try:
        detail = json.loads(body)["detail"]
    except (ValueError, TypeError, KeyError):
        return ""
    if isinstance(detail, list):
        items = [item for item in detail if isinstance(item, dict)]
        detail = "; ".join(f"{item.get('field', '__all__')}: {item.get('message', '')}" for item in items)
    return f": {str(detail)[:2000]}"


def cmd_submit(args: argparse.Namespace) -> int:
    get_kind(args.kind)  # fail on a typo before talking to the server
    token = args.token or os.environ.get("MOELAB_TOKEN", "")
    if not token:
        raise SystemExit("moelab: pass --token or set MOELAB_TOKEN")
    fields = {"kind": args.kind, "params": json.dumps(dict(_pairs(args.set, "--set")))}
    if args.team:
        fields["team"] = args.team
    body, ctype = _multipart(fields, _files(args.input))
    job = _api(args.server, token, "POST", "/api/v1/jobs", body, ctype)
    print(f"moelab: submitted job {job['id']} ({job.get('url', '')})")
    if args.no_follow:
        return 0
    try:
        job = _follow(args.server, token, job, args.timeout)
    except (_StillRunning, KeyboardInterrupt) as exc:
        # Following is only watching: the job runs on the server whatever happens here.
        why = str(exc) or "stopped following"
        print(f"\nmoelab: {why}; job {job['id']} goes on at {job.get('url', args.server)}", file=sys.stderr)
        return STILL_RUNNING
    print(f"\nmoelab: job {job['id']} {job['status']}" + (f": {job['error']}" if job.get("error") else ""))
    return 0 if job["status"] == "succeeded" else 1


#: ``moelab submit``'s exit status when it stops following a job that has not ended.
STILL_RUNNING = 3
#: How long following rides out an unreachable server (a restart, a dropped connection) before it gives up.
UNREACHABLE_GRACE_S = 300.0


class _StillRunning(Exception):
    """Following stopped before the job ended (the reason is the message)."""


def _follow(server: str, token: str, job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Poll the job until it ends, drawing its progress. Raises :class:`_StillRunning` after
    ``timeout`` seconds (0: no limit) or when the server stays unreachable for
    :data:`UNREACHABLE_GRACE_S`."""
    bar = _Bar()
    start = time.monotonic()
    unreachable_since: float | None = None
    while job["status"] not in TERMINAL:
        if timeout and time.monotonic() - start >= timeout:
            raise _StillRunning(f"stopped following after --timeout {timeout:g} s")
        time.sleep(1)
        try:
            job = _api(server, token, "GET", f"/api/v1/jobs/{job['id']}")
        except _Unreachable as exc:
            unreachable_since = unreachable_since or time.monotonic()
            if time.monotonic() - unreachable_since >= UNREACHABLE_GRACE_S:
                why = str(exc).removeprefix("moelab: ")
                raise _StillRunning(f"{why}, for {UNREACHABLE_GRACE_S:g} s: stopped following") from None
            continue
        unreachable_since = None
        bar.draw(job.get("progress", 0.0), job.get("stage", ""))
    return job


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="moelab", description="Run MoE Lab job kinds.")
    sub = parser.add_subparsers(dest="command", required=True)
    kinds = sub.add_parser("kinds", help="list job kinds and their parameters")
    kinds.add_argument("--json", action="store_true")
    kinds.set_defaults(func=cmd_kinds)
    for name, func in (("run", cmd_run), ("submit", cmd_submit)):
        p = sub.add_parser(name, help=f"{name} a job")
        p.add_argument("kind")
        p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
        p.add_argument("--input", action="append", default=[], metavar="NAME=PATH")
        p.set_defaults(func=func)
        if name == "run":
            p.add_argument("--out", required=True, help="output directory")
            p.add_argument("--device", default="", help="torch device (default: cuda if available)")
            p.add_argument("-v", "--verbose", action="store_true", help="print tracebacks")
        else:
            p.add_argument("--server", required=True)
            p.add_argument("--token", default="")
            p.add_argument("--team", default="", help="team slug (default: your first team)")
            p.add_argument("--no-follow", action="store_true")
            p.add_argument(
                "--timeout",
                type=float,
                default=0.0,
                help="stop following after this many seconds (the job goes on; exit status 3); 0: follow to the end",
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UnknownKind as exc:
        print(f"moelab: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
