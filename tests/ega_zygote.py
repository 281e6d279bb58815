"""`ega` in a fresh process that has not paid for its imports: a zygote imports torch, Lightning and the CLI once,
then forks one child per command, which runs `python -m ega_lightning.cli <args>` as that command line would (its
own cwd, environment, stdin from /dev/null, stdout and stderr into files, atexit handlers run, its exit status the
process's). A user-error test runs ~100 commands that each stop in the argument checks: forking them from the
zygote saves each one the ~3 s of imports a new interpreter spends, and keeps a process per command, so no
command's state reaches another's or the test's.

Only for commands that stop before training and that set no environment variable read at import time (torch's and
OpenMP's): `run_ega` (a new interpreter) stays the path of every other test, and of everything DDP re-executes.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Runs in the zygote: the imports, then one fork per request line on stdin; each child's pid, then its status, on
# the zygote's stdout (a JSON line each). A zygote with a thread besides its own would fork a child whose locks that
# thread may hold: it refuses to start.
ZYGOTE = r"""
import atexit, importlib.util, json, os, runpy, sys, threading, traceback
import torch, lightning.pytorch, jsonargparse  # what every `ega fit` imports before it parses a flag
import ega_lightning.commands.lightning_cli  # not ega_lightning.cli itself: each child runs it as __main__
CLI = importlib.util.find_spec("ega_lightning.cli").origin
if threading.active_count() != 1:
    sys.exit(f"the zygote has {threading.active_count()} threads after its imports: a fork would copy their locks")
replies = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY),
                                    (2, request["stderr"], os.O_WRONLY)):
                os.dup2(os.open(path, flags), fd)
            sys.stdin = open(0, closefd=False)
            sys.argv = [CLI, *request["args"]]
            try:
                runpy.run_module("ega_lightning.cli", run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as stop:  # as the interpreter ends on it: an int is the status, else printed, 1
                if stop.code is None or isinstance(stop.code, int):
                    code = stop.code or 0
                else:
                    print(stop.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
            atexit._run_exitfuncs()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    replies.write(json.dumps({"pid": pid}) + "\n")
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
    replies.flush()
"""

_zygote: subprocess.Popen[str] | None = None


def _started() -> subprocess.Popen[str]:
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        _zygote = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO
        )
        atexit.register(_zygote.kill)
    return _zygote


def _reply(zygote: subprocess.Popen[str], timeout: float) -> dict[str, int]:
    assert zygote.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(zygote.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise TimeoutError
    line = zygote.stdout.readline()
    if not line:
        raise RuntimeError(f"the ega zygote ended (status {zygote.wait()})")
    return json.loads(line)


def run_ega_forked(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`run_ega`'s result (status, stdout, stderr) for ``ega <args>`` in ``cwd``, forked from the zygote."""
    zygote = _started()
    assert zygote.stdin is not None
    with tempfile.TemporaryDirectory() as scratch:
        out, err = Path(scratch) / "stdout", Path(scratch) / "stderr"
        out.touch()
        err.touch()
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        request = {"args": args, "cwd": str(cwd), "env": full_env, "stdout": str(out), "stderr": str(err)}
        zygote.stdin.write(json.dumps(request) + "\n")
        zygote.stdin.flush()
        pid = _reply(zygote, 60)["pid"]
        try:
            status = _reply(zygote, timeout)["status"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            _reply(zygote, 60)
            raise subprocess.TimeoutExpired(args, timeout, out.read_text(), err.read_text()) from None
        return subprocess.CompletedProcess(args, status, out.read_text(), err.read_text())
