"""The image's files against the package: scripts/docker_smoke.sh builds and runs the image (CI's docker stage);
these check, without a container engine, what the smoke cannot show quickly or on every machine."""

import errno
import os
import re
import shutil
import subprocess
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement

from ega_lightning.config_files import resolve_config
from ega_lightning.errors import CONTAINER_ENV, describe_refusal

from .helpers import REPO

DOCKERFILE = (REPO / "docker/Dockerfile").read_text()
COMPOSE = yaml.safe_load((REPO / "docker/compose.yaml").read_text())
COMPOSE_GPU = yaml.safe_load((REPO / "docker/compose.gpu.yaml").read_text())
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def instructions(keyword: str) -> list[str]:
    """Arguments of every `keyword` instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.startswith(keyword + " ")]


def build_args() -> dict[str, str | None]:
    """Every ARG with its default (None: declared without one)."""
    return {a.split("=", 1)[0]: a.split("=", 1)[1] if "=" in a else None for a in instructions("ARG")}


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
        pinned = build_args()[arg]
        assert re.fullmatch(r"\d+\.\d+\.\d+", pinned), f"{arg} must pin an exact version"
        assert requirements[name].specifier.contains(pinned), (name, pinned, requirements[name])
    runs = " ".join(instructions("RUN"))
    assert '"torch==${TORCH_VERSION}"' in runs and '"lightning==${LIGHTNING_VERSION}"' in runs


def test_the_base_is_a_build_argument_whose_default_is_the_cuda_runtime():
    # defect 1 of issue 42: `FROM nvidia/cuda:...` alone failed at step 1 wherever that registry is out of reach
    assert instructions("FROM") == ["${BASE}"]
    assert DOCKERFILE.index("ARG BASE=") < DOCKERFILE.index("FROM ${BASE}")  # an ARG before FROM reaches FROM
    assert build_args()["BASE"].startswith("nvidia/cuda:") and "runtime" in build_args()["BASE"]


def test_torch_index_is_searched_besides_pypi_and_a_wheelhouse_replaces_both():
    # defect 1: `--index-url` took every dependency of torch from the torch index as well
    (torch,) = [r for r in instructions("RUN") if '"torch==${TORCH_VERSION}"' in r]
    assert "--index-url" not in torch.replace("--extra-index-url", "")
    assert '${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"}' in torch  # TORCH_INDEX= (empty): PyPI alone
    # pip reads PIP_NO_INDEX and PIP_FIND_LINKS from the environment, which a build argument is in RUN
    assert build_args()["PIP_NO_INDEX"] is None and build_args()["PIP_FIND_LINKS"] is None
    assert DOCKERFILE.index("ARG PIP_FIND_LINKS") < DOCKERFILE.index("pip install")


def test_runs_as_a_non_root_user_after_installing():
    users = instructions("USER")
    assert users and users[-1] not in ("root", "0")
    assert DOCKERFILE.rindex("pip install") < DOCKERFILE.rindex("USER ")


def run_add_user(tmp_path, passwd: str) -> list[str]:
    """docker/add-user.sh against a passwd file, with stub user tools that log their arguments: the calls it made."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    (tmp_path / "passwd").write_text(passwd)
    stubs = {
        "getent": f'grep "^[^:]*:[^:]*:$2:" {tmp_path}/passwd',
        "id": f'[ "$1" = -gn ] && {{ grep "^$2:" {tmp_path}/passwd | cut -d: -f1; exit; }}; echo "uid=1000(ega)"',
        **{tool: f'echo "{tool} $*" >> {log}' for tool in ("useradd", "usermod", "groupmod")},
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(["sh", REPO / "docker/add-user.sh"], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return log.read_text().splitlines() if log.exists() else []


def test_the_user_step_renames_a_bases_uid_1000_user_rather_than_adding_a_second():
    # defect 2: `useradd --uid 1000` stopped the build on Ubuntu 24.04 (user `ubuntu`): "UID 1000 is not unique"
    assert any("add-user.sh" in c for c in instructions("COPY"))
    assert "useradd" not in " ".join(instructions("RUN"))  # only through the script


@pytest.mark.parametrize(
    ("passwd", "calls"),
    [
        ("root:x:0:0::/root:/bin/sh\n", ["useradd --create-home --uid 1000 --user-group --shell /bin/bash ega"]),
        (
            "root:x:0:0::/root:/bin/sh\nubuntu:x:1000:1000::/home/ubuntu:/bin/bash\n",
            ["usermod --login ega --home /home/ega --move-home ubuntu", "groupmod --new-name ega ubuntu"],
        ),
        ("ega:x:1000:1000::/home/ega:/bin/bash\n", []),
    ],
    ids=["no uid 1000", "ubuntu has uid 1000", "ega already"],
)
def test_the_user_step_with_and_without_a_uid_1000_user(tmp_path, passwd, calls):
    assert run_add_user(tmp_path, passwd) == calls


def test_matplotlib_has_a_config_dir_any_user_can_write():
    # defect 4: with --user, matplotlib warned that it cannot create /.config/matplotlib (HOME is / then)
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(instructions("ENV"))))
    assert env["MPLCONFIGDIR"].startswith("/tmp/")
    assert env["EGA_CONTAINER"]  # a refused runs folder then names docker's fixes (ega_lightning/errors.py)


@pytest.mark.parametrize("container", ["", "1"], ids=["host", "container"])
def test_a_refused_folder_of_another_owner_names_that_owner_and_the_way_out(tmp_path, monkeypatch, container):
    # defect 4: a bind-mounted runs folder not owned by the image's uid 1000 was "Permission denied" and exit 74 alone
    runs = tmp_path / "runs"
    runs.mkdir()
    owner = runs.stat()
    monkeypatch.setattr(os, "geteuid", lambda: owner.st_uid + 1)  # someone else than the folder's owner
    monkeypatch.setenv(CONTAINER_ENV, container)
    text = describe_refusal(PermissionError(errno.EACCES, "Permission denied", str(runs / "r" / "checkpoints")))
    assert text.startswith(f"the machine refused access to {runs}/r/checkpoints: Permission denied. ")
    assert f"{runs} belongs to uid {owner.st_uid} (gid {owner.st_gid}) and ega runs as uid {owner.st_uid + 1}" in text
    if container:
        assert f"named volume there instead (docker run -v ega-runs:{runs} ...)" in text
        assert f"(docker run --user {owner.st_uid}:{owner.st_gid} ...)" in text
    else:
        assert "docker" not in text and f"make it writable for uid {owner.st_uid + 1}" in text


def test_runs_results_and_corpora_are_volumes_the_user_owns():
    # defect 6: sweep records and bench tables went to /workspace/results, no volume: `docker run --rm` lost them
    (volumes,) = instructions("VOLUME")
    assert set(yaml.safe_load(volumes)) == {"/workspace/lightning_logs", "/workspace/results", "/data"}
    (workdir,) = instructions("WORKDIR")
    assert workdir == "/workspace"  # `results/` and `lightning_logs/`, the tools' defaults, are those volumes
    (own,) = [r for r in instructions("RUN") if "chown" in r]
    assert "/workspace/results" in own and "/workspace/lightning_logs" in own


# ----------------------------------------------------------------------------- the build context


def docker_ignored(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves ``path`` (relative to the context) out: a pattern matches it or a folder above it,
    the last matching pattern decides (``!`` includes again). Patterns are relative to the root, as Docker reads
    them (``/data`` and ``data`` are the same); ``*`` stays within one name, ``**`` spans folders."""
    ignored = False
    for raw in patterns:
        negate, pattern = raw.startswith("!"), raw.lstrip("!").strip("/")
        regex = "".join(
            "(.*/)?" if part == "**/" else ".*" if part == "**" else "[^/]*" if part == "*" else re.escape(part)
            for part in re.findall(r"\*\*/|\*\*|\*|[^*]+", pattern)
        )
        parts = path.split("/")
        if any(re.fullmatch(regex, "/".join(parts[: i + 1])) for i in range(len(parts))):
            ignored = not negate
    return ignored


def test_dockerignore_leaves_out_what_is_large_or_local_and_keeps_what_the_image_copies():
    # defect 5: without one, the context was 20 MB (.git, results/, lightning_logs/, data/, venvs); root data/ only
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    local = ".git/HEAD data/ptb/ptb.train.txt results/runs/r.json lightning_logs/r/x ega_lightning/lightning_logs/r/x"
    for path in f"{local} .venv-ci/bin/python venv/bin/python wheels/torch.whl".split():
        assert docker_ignored(path, patterns), path
    copied = [p for p in (REPO / "ega_lightning").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    copied = [str(p.relative_to(REPO)) for p in copied] + ["pyproject.toml", "README.md", "docker/add-user.sh"]
    assert any(p.startswith("ega_lightning/data/") for p in copied)  # the package, not the corpora
    assert [p for p in copied if docker_ignored(p, patterns)] == []


def test_the_dockerignore_matcher_reads_patterns_as_docker_does():
    assert docker_ignored("data/x", ["data"]) and not docker_ignored("pkg/data/x", ["data"])
    assert docker_ignored("pkg/data/x", ["**/data"]) and docker_ignored("a.ckpt", ["*.ckpt"])
    assert not docker_ignored("a/b.ckpt", ["*.ckpt"]) and not docker_ignored("keep.ckpt", ["*.ckpt", "!keep.ckpt"])


# ----------------------------------------------------------------------------- compose


def interpolation_defaults(value: str) -> str:
    """The value of ``${NAME:-default}`` / ``${NAME-default}`` with NAME unset: what compose passes by default."""
    return re.sub(r"\$\{\w+:?-([^}]*)\}", r"\1", value)


def test_compose_passes_every_build_argument_with_the_dockerfiles_defaults():
    # defect 3: `build:` passed no arguments, so compose could only build the CUDA image
    args = COMPOSE["services"]["train"]["build"]["args"]
    assert set(args) == set(build_args())
    for name, value in args.items():
        assert re.fullmatch(r"\$\{EGA_" + name + r":?-[^}]*\}", value), (name, value)  # EGA_<NAME> sets it
        assert interpolation_defaults(value) == (build_args()[name] or ""), name
    # EGA_TORCH_INDEX= (set, empty) must mean no torch index: `-`, which only an unset variable replaces
    assert args["TORCH_INDEX"].startswith("${EGA_TORCH_INDEX-")


def test_compose_starts_without_a_gpu_and_the_gpu_override_reserves_them():
    # defect 3: the reservation stopped `up` on a machine without the NVIDIA driver, and no override removes it in v1
    for service in COMPOSE["services"].values():
        assert not {"deploy", "runtime", "devices"} & set(service)
    (device,) = COMPOSE_GPU["services"]["train"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert set(COMPOSE_GPU["services"]) == {"train"}
    assert "docker/compose.gpu.yaml" in (REPO / "docs/scale-out.md").read_text()  # the docs name the override


def test_tensorboard_starts_alone():
    # defect 3: `depends_on: [train]` made `up tensorboard` start a 5,000-step paper-size training
    assert "depends_on" not in COMPOSE["services"]["tensorboard"]


def test_compose_tensorboard_reads_the_training_runs_volume():
    train, board = COMPOSE["services"]["train"], COMPOSE["services"]["tensorboard"]
    logdir = board["entrypoint"][board["entrypoint"].index("--logdir") + 1]
    runs_volume = next(v.split(":")[0] for v in train["volumes"] if v.split(":")[1] == "/workspace/lightning_logs")
    assert any(v.split(":")[:2] == [runs_volume, logdir] for v in board["volumes"])
    assert runs_volume in COMPOSE["volumes"] and board["image"] == train["image"]
    assert any(v.split(":")[1] == "/workspace/results" for v in train["volumes"])


def test_compose_train_configs_resolve_from_the_package_in_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the image's WORKDIR holds no configs/: -c finds the packaged files
    command = COMPOSE["services"]["train"]["command"]
    configs = [command[i + 1] for i, a in enumerate(command) if a == "-c"]
    assert configs and all((REPO / "ega_lightning" / c).samefile(resolve_config(c)) for c in configs)


# keys both compose v1 (1.29, Debian's docker-compose) and v2 read, and neither rejects or ignores
COMPOSE_KEYS = {
    "top": {"services", "volumes"},
    "service": {"build", "image", "command", "entrypoint", "volumes", "ports", "shm_size", "deploy"},
    "build": {"context", "dockerfile", "args"},
}


def test_compose_files_use_only_keys_compose_v1_and_v2_both_read():
    for doc in (COMPOSE, COMPOSE_GPU):
        assert set(doc) <= COMPOSE_KEYS["top"]  # no `version:` (v2 warns) and no `name:` (v1 rejects)
        for service in doc["services"].values():
            assert set(service) <= COMPOSE_KEYS["service"]
            assert set(service.get("build", {})) <= COMPOSE_KEYS["build"]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="Debian's docker-compose (v1) is not installed")
@pytest.mark.parametrize("files", [["compose.yaml"], ["compose.yaml", "compose.gpu.yaml"]], ids=["cpu", "gpu"])
def test_docker_compose_v1_accepts_the_files(files):
    flags = [arg for f in files for arg in ("-f", str(REPO / "docker" / f))]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EGA_")}
    result = subprocess.run(["docker-compose", *flags, "config"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0 and "WARNING" not in result.stderr, result.stderr
    config = yaml.safe_load(result.stdout)
    assert config["services"]["train"]["build"]["args"]["BASE"] == build_args()["BASE"]
    assert ("deploy" in config["services"]["train"]) == ("compose.gpu.yaml" in files)
