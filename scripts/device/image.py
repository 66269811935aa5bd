"""The device machine's Python as the CPU rehearsal (rehearse.sh) stands it in: a virtual environment holding only
the packages of this environment that the device image has too (its list: the device tool's KINDS.md, read
2026-11-17), so a package the device scripts need but the carried wheels lack fails here as it would there.
Left out on purpose, since the carried wheels must bring them: transformers (the image has 5.17, specbench needs
5.24), pytest and what it alone needs (carried so the CUDA tests run whatever the image holds); and everything the
image lacks (gguf, pydivsufsort, datasets, ray, specbench itself, ...). Each package is linked, not copied.

    python scripts/device/image.py FOLDER    ->    FOLDER/bin/python3
"""
from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

IMAGE = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs certifi
charset-normalizer click cloudpickle colorama contourpy cycler filelock fonttools frozenlist fsspec h11 hf-xet httpcore
httpx huggingface-hub idna jinja2 joblib kiwisolver markdown-it-py markupsafe matplotlib mdurl mpmath msgpack
multidict networkx numpy packaging pandas pillow pip propcache protobuf psutil pygments pyparsing python-dateutil
pyyaml regex requests rich safetensors scipy setuptools shellingham six sympy tabulate threadpoolctl tokenizers torch
tqdm typer typing-extensions urllib3 wheel xxhash yarl zipp""".split()
CARRIED = {"transformers", "pytest", "pluggy", "iniconfig"}  # brought by .dev2's wheels (prepare.sh)


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_closure(site: Path) -> set[str]:
    """IMAGE less CARRIED, with what those need as this environment has it (a newer release's needs stand in for
    the image's own; the carried packages' needs are not added)."""
    installed = {normalized(d.metadata["Name"]): d for d in metadata.distributions(path=[str(site)])}
    todo, found = [normalized(n) for n in IMAGE if normalized(n) not in CARRIED], set()
    while todo:
        name = todo.pop()
        if name in found or name not in installed:
            continue
        found.add(name)
        for line in installed[name].requires or []:
            if "extra ==" not in line:
                requirement = Requirement(line)
                if requirement.marker is None or requirement.marker.evaluate():
                    todo.append(normalized(requirement.name))
    return found - CARRIED


def build(folder: Path) -> Path:
    """The environment at `folder` (made anew); returns its python3."""
    subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(folder)], check=True)
    site = Path(subprocess.run([str(folder / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    here = Path(sysconfig.get_path("purelib"))
    wanted = image_closure(here)
    for dist in metadata.distributions(path=[str(here)]):
        if normalized(dist.metadata["Name"]) not in wanted:
            continue
        for top in sorted({Path(str(f)).parts[0] for f in dist.files or []}):
            source = here / top
            if top != ".." and not top.endswith(".pth") and source.exists() and not (site / top).exists():
                (site / top).symlink_to(source)
    return folder / "bin" / "python3"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/device/image.py FOLDER")
    print(build(Path(sys.argv[1])))
