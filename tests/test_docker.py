"""Docker cannot run on the build machines: check that the image and compose files agree with the package."""

import re
import tomllib

import yaml
from packaging.requirements import Requirement

from .conftest import REPO

DOCKERFILE = (REPO / "docker/Dockerfile").read_text()
COMPOSE = yaml.safe_load((REPO / "docker/compose.yaml").read_text())
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def instructions(keyword: str) -> list[str]:
    """Arguments of every `keyword` instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.startswith(keyword + " ")]


def build_arg(name: str) -> str:
    return next(a.split("=", 1)[1] for a in instructions("ARG") if a.startswith(name + "="))


def test_entry_point_is_the_packages_console_script():
    assert instructions("ENTRYPOINT") == ['["ega"]']
    assert PYPROJECT["project"]["scripts"]["ega"] == "ega_lightning.commands:main"


def test_install_step_installs_this_package_with_what_its_build_needs():
    copies = " ".join(instructions("COPY"))
    assert "pyproject.toml" in copies and PYPROJECT["project"]["readme"] in copies
    for package in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]:
        assert package.rstrip("*") in copies
    (install,) = [r for r in instructions("RUN") if "/opt/ega-lightning" in r and "pip install" in r]
    assert install.split()[-1] == "/opt/ega-lightning"  # the copied project, not a PyPI name


def test_pinned_torch_and_lightning_satisfy_pyproject():
    requirements = {Requirement(r).name: Requirement(r) for r in PYPROJECT["project"]["dependencies"]}
    for name, arg in (("torch", "TORCH_VERSION"), ("lightning", "LIGHTNING_VERSION")):
        pinned = build_arg(arg)
        assert re.fullmatch(r"\d+\.\d+\.\d+", pinned), f"{arg} must pin an exact version"
        assert requirements[name].specifier.contains(pinned), (name, pinned, requirements[name])
    runs = " ".join(instructions("RUN"))
    assert '"torch==${TORCH_VERSION}"' in runs and '"lightning==${LIGHTNING_VERSION}"' in runs
    assert instructions("FROM")[0].startswith("nvidia/cuda:") and "runtime" in instructions("FROM")[0]


def test_runs_as_a_non_root_user_after_installing():
    users = instructions("USER")
    assert users and users[-1] not in ("root", "0")
    assert DOCKERFILE.rindex("pip install") < DOCKERFILE.rindex("USER ")


def test_compose_tensorboard_reads_the_training_runs_volume():
    train, board = COMPOSE["services"]["train"], COMPOSE["services"]["tensorboard"]
    logdir = board["entrypoint"][board["entrypoint"].index("--logdir") + 1]
    runs_volume = next(v.split(":")[0] for v in train["volumes"] if v.split(":")[1] == "/workspace/lightning_logs")
    assert any(v.split(":")[:2] == [runs_volume, logdir] for v in board["volumes"])
    assert runs_volume in COMPOSE["volumes"] and board["image"] == train["image"]
    configs = [train["command"][i + 1] for i, a in enumerate(train["command"]) if a == "-c"]
    assert configs and all((REPO / c).is_file() for c in configs)  # the image's WORKDIR holds configs/
