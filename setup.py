"""Which packages and data the wheel carries, found rather than listed (the metadata is in pyproject.toml):
- specbench/ and every package below it;
- methods/ as specbench.methods, with every package below it (a new trained method needs no edit here);
- tasks/ as specbench.builtin_tasks (its YAML files);
- heads/ as specbench.heads: for each method and packaged target, the drafter its DEFAULT file names
  (heads/<method>/<target>/DEFAULT holds the subfolder, "." for the folder itself; the method reads the same file).
  Older heads, ablation heads and training data (heads/data) stay in the repository, out of the wheel.
The folders methods/, tasks/ and heads/ install as subpackages of specbench, so that no folder of those names in a
user's working directory can shadow them."""
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
MAPPED = {"specbench.methods": "methods", "specbench.builtin_tasks": "tasks", "specbench.heads": "heads"}


def packages() -> list[str]:
    found = ["specbench", *(f"specbench.{p}" for p in find_packages(str(ROOT / "specbench")))]
    for package, folder in MAPPED.items():
        found += [package, *(f"{package}.{p}" for p in find_packages(str(ROOT / folder)))]
    return found


def shipped_heads() -> list[str]:
    """Package data of specbench.heads: README.md, then each DEFAULT file and the drafter it names."""
    data = ["README.md"]
    for default in sorted((ROOT / "heads").glob("*/*/DEFAULT")):
        folder = default.parent.relative_to(ROOT / "heads")
        chosen = (folder / default.read_text(encoding="utf-8").strip()).as_posix()
        data += [f"{folder.as_posix()}/DEFAULT", f"{chosen}/*.json*", f"{chosen}/*.safetensors"]
    return data


setup(
    packages=packages(),
    package_dir=MAPPED,
    package_data={"specbench.builtin_tasks": ["*.yaml"], "specbench.heads": shipped_heads(), "specbench.shapes": ["*.json"],
                  "specbench.methods.common": ["*.json"]},
)
