"""TensorBoard as a researcher reads it: a real `tensorboard` server over a fit, its `ega validate` and `ega test`,
a FoX run and a run stopped before its end, asked through its own HTTP data routes under both of its loaders."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from .helpers import SHORT, TINY, run_ega

pytestmark = pytest.mark.slow
FIT = [*TINY, "--trainer.max_steps=20", "--trainer.val_check_interval=10", "--trainer.enable_progress_bar=false"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Board:
    """A `tensorboard` process on 127.0.0.1 and a free port; every request and the start are bounded."""

    def __init__(self, logdir: Path, *flags: str) -> None:
        program = shutil.which("tensorboard", path=os.path.dirname(sys.executable)) or shutil.which("tensorboard")
        assert program, "the installed tensorboard package's program is not on PATH"
        self.port = _free_port()
        cmd = [program, "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(self.port), *flags]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.get("data/runs"):
                    return
            except (urllib.error.URLError, ConnectionError):
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"tensorboard exited: {self.proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.5)
        self.stop()
        raise AssertionError("tensorboard did not answer within 60 s")

    def get(self, route: str, **query: str) -> object:
        url = f"http://127.0.0.1:{self.port}/{route}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        with urllib.request.urlopen(url, timeout=20) as response:
            return json.loads(response.read())

    def post(self, route: str, body: dict) -> object:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/{route}", data=json.dumps(body).encode(), method="POST"
        )
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=20) as response:
            return json.loads(response.read())

    def steps(self, run: str, tag: str) -> list[int]:
        return [int(p[1]) for p in self.get("data/plugin/scalars/scalars", run=run, tag=tag)]

    def wait_for(self, run: str, tag: str, n: int) -> list[int]:
        """The steps of ``tag`` once at least ``n`` are loaded (the loader reads in the background)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                steps = self.steps(run, tag)
            except urllib.error.HTTPError:
                steps = []
            if len(steps) >= n or time.monotonic() > deadline:
                return steps
            time.sleep(1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory, data_dir) -> Path:
    """Three runs: EGA-1 fit + validate + test of its best checkpoint, FoX, and EGA-1 stopped by SIGTERM."""
    cwd = tmp_path_factory.mktemp("board")
    env = {"EGA_DATA_DIR": str(data_dir)}
    for args in (["fit", *FIT, "--run_name=ega1"], ["fit", *FIT, "--model.gate=fox", "--run_name=fox"]):
        result = run_ega(args, cwd, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
    best = "lightning_logs/ega1/checkpoints/best.ckpt"
    for command in ("validate", "test"):
        result = run_ega([command, "--ckpt_path", best, "--data.max_eval_windows=4"], cwd, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"lightning_logs/ega1/{command}" in result.stdout  # its headline says where it logged
    # a fit stopped by SIGTERM once it has trained a few steps: not a success
    slow = [*TINY, *SHORT[2:], "--trainer.max_steps=5000", "--trainer.val_check_interval=10"]
    slow += ["--checkpoint_every_n_steps=5", "--run_name=killed"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ega_lightning.cli", "fit", *slow],
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not list((cwd / "lightning_logs/killed").glob("checkpoints/last.ckpt")) and time.monotonic() < deadline:
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return cwd / "lightning_logs"


@pytest.mark.parametrize("loader", ["default", "--load_fast=false"])
def test_tensorboard_shows_every_validation_beside_its_evaluations_and_compares_gates(logdir, loader):
    board = Board(logdir, *([] if loader == "default" else [loader]))
    try:
        runs = board.get("data/runs")
        assert {"ega1", "ega1/validate", "ega1/test", "fox", "killed"} <= set(runs)
        # the training run keeps every validation at its own step; the evaluations sit at the checkpoint's
        train = board.wait_for("ega1", "val/loss", 2)
        assert train == [9, 19]
        assert board.wait_for("ega1/validate", "val/loss", 1) == [19]  # best.ckpt: the step-20 validation
        assert board.wait_for("ega1/test", "test/loss", 1) == [19]
        tags = board.get("data/plugin/scalars/tags")
        assert "epoch" not in tags["ega1"] and "epoch" not in tags["fox"]
        forget = {t for t in tags["fox"] if t.startswith("gate/forget/")}
        assert forget and not forget & set(tags["ega1"])  # FoX's own diagnostics, which EGA-1 lacks
        assert "gate/normal_tail/layer_0/head_0" in tags["ega1"]  # 1 - Phi(tau) beside the keys above tau
        # HPARAMS: the gate among the columns, gap and tau among the metrics; a stopped run is no success
        experiment = board.post("data/plugin/hparams/experiment", {"experimentName": ""})
        columns = [h["name"] for h in experiment["hparamInfos"]]
        assert columns[:3] == ["corpus", "gate", "output_gate"] and "_instantiator" not in " ".join(columns)
        metrics = {m["name"]["tag"] for m in experiment["metricInfos"]}
        assert {"val/loss", "gap", "gate/tau_mean", "test/loss"} <= metrics
        groups = board.post(
            "data/plugin/hparams/session_groups",
            {
                "experimentName": "",
                "allowedStatuses": [f"STATUS_{s}" for s in ("UNKNOWN", "SUCCESS", "FAILURE", "RUNNING")],
                "colParams": [],
                "startIndex": 0,
                "sliceSize": 100,
            },
        )
        status = {g["name"]: g["sessions"][0]["status"] for g in groups["sessionGroups"]}
        assert status["ega1"] == "STATUS_SUCCESS" and status["fox"] == "STATUS_SUCCESS"
        assert status["killed"] != "STATUS_SUCCESS"
        gates = {g["name"]: g["hparams"]["gate"] for g in groups["sessionGroups"]}
        assert gates["fox"] == "fox" and gates["ega1"] == "linear"
        params = {g["name"]: g["hparams"] for g in groups["sessionGroups"]}
        assert params["ega1"]["gate.tau_init"] == 0.0 and params["ega1"]["gate.learn_tau"] is True
        assert "gate.tau_init" not in params["fox"]  # no tau for a gate without one
        # the Custom Scalars layout and the text summary
        layout = board.get("data/plugin/custom_scalars/layout")
        titles = {c["title"] for c in layout["category"]}
        assert {"loss", "layer 0"} <= titles
        text = board.get("data/plugin/text/tags")
        assert "summary/text_summary" in text["ega1"] and "summary/text_summary" in text["ega1/validate"]
    finally:
        board.stop()
