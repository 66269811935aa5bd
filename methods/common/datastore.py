"""The retrieval datastore shared by the methods that draft from a corpus (rest, samd): a token corpus of training
replies with its suffix array (pydivsufsort), per target.

What goes in: this target's tokenization of the training prompts' reference replies (../shared/data/train) and of
the self-distilled replies shipped in heads/data/<target>/ when there are any, one document each, separated so that
no match runs across two. `python -m specbench datastore build` makes it; a method builds it on first use when it
is missing (open_datastore). It lives beside the cost store: ~/.cache/specbench/datastores/, or
$SPECBENCH_CACHE/datastores/.
"""
from __future__ import annotations

import bisect
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from tqdm import tqdm

from specbench.cache import cache_root
from specbench.decode.target import load_tokenizer
from specbench.errors import SpecbenchError
from specbench.methods.common.options import DEFAULT_DATA
from specbench.shipped import shipped_drafters

SEPARATOR = -1  # between documents: no match runs across two of them
FORMAT = "specbench-datastore-1"


@dataclass(frozen=True)
class Range:
    lo: int  # suffix array rows [lo, hi) all start with the same `depth` tokens
    hi: int
    depth: int


class Datastore:
    def __init__(self, corpus: np.ndarray, suffixes: np.ndarray) -> None:
        self.corpus, self.suffixes = corpus, suffixes

    @staticmethod
    def of(documents: list[np.ndarray]) -> "Datastore":
        """The corpus (documents joined by SEPARATOR) and its suffix array."""
        from pydivsufsort import divsufsort

        pieces = [piece for doc in documents for piece in (np.asarray(doc, dtype=np.int32),
                                                           np.array([SEPARATOR], dtype=np.int32))]
        corpus = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
        return Datastore(corpus, divsufsort(corpus).astype(np.int64) if len(corpus) else np.zeros(0, np.int64))

    def _prefix(self, row: int, n: int) -> list[int]:
        start = int(self.suffixes[row])
        return self.corpus[start : start + n].tolist()

    def find(self, pattern: list[int]) -> Range:
        """The suffix array rows whose suffixes start with pattern (lo == hi: none): binary searches over the rows'
        n-token prefixes, which the suffix array keeps sorted."""
        n, rows = len(pattern), range(len(self.suffixes))
        first = bisect.bisect_left(rows, pattern, key=lambda row: self._prefix(row, n))
        return Range(first, bisect.bisect_right(rows, pattern, lo=first, key=lambda row: self._prefix(row, n)), n)

    def children(self, node: Range) -> list[tuple[int, int, Range]]:
        """The tokens that follow the node's occurrences, with their counts and sub-ranges."""
        positions = self.suffixes[node.lo : node.hi] + node.depth
        inside = positions < len(self.corpus)
        following = np.full(len(positions), SEPARATOR, dtype=self.corpus.dtype)
        following[inside] = self.corpus[positions[inside]]
        tokens, first, counts = np.unique(following, return_index=True, return_counts=True)  # sorted rows: contiguous
        return [(int(t), int(c), Range(node.lo + int(f), node.lo + int(f) + int(c), node.depth + 1))
                for t, f, c in zip(tokens, first, counts) if t != SEPARATOR]


def datastore_folder(target: str) -> Path:
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in target)[-60:]
    digest = hashlib.sha1(target.encode()).hexdigest()[:8]
    return cache_root() / "datastores" / f"{slug}-{digest}"


def reference_replies(data: Path) -> list[str]:
    if not data.is_file():
        raise SpecbenchError(f"datastore: no training prompts at {data} (pass --data FILE)")
    replies = []
    with data.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            try:
                replies.extend(r for r in json.loads(line).get("reference") or [] if r)
            except (json.JSONDecodeError, AttributeError):
                raise SpecbenchError(f"{data}:{number}: not a JSON object with a reference list") from None
    return replies


def distilled_replies(target: str) -> list[np.ndarray]:
    """The reply tokens of the self-distilled conversations shipped for this target (heads/data/<target>/*/)."""
    replies = []
    for chunk in sorted((shipped_drafters("data") / target).glob("*/chunk_*.npz")):
        with np.load(chunk) as data:
            tokens, reply, offsets = data["tokens"], data["reply"].astype(bool), data["offsets"]
        for a, b in zip(offsets[:-1], offsets[1:]):
            replies.append(tokens[a:b][reply[a:b]].astype(np.int32))
    return replies


def build_datastore(target: str, data: Path = DEFAULT_DATA, progress: bool = True) -> Path:
    """Tokenize the sources, build the suffix array, write corpus.npy, suffixes.npy and manifest.json."""
    tokenizer = load_tokenizer(target)
    if data == DEFAULT_DATA and not data.is_file():  # outside this repository's machines: the shipped replies alone
        tqdm.write(f"datastore: no training prompts at {data}: built from the self-distilled replies shipped for "
                   f"{target} alone (data=FILE, or datastore build --data FILE, adds a file's reference replies)")
        texts = []
    else:
        texts = reference_replies(data)
    documents = []
    batch = 512
    for start in tqdm(range(0, len(texts), batch), desc="datastore: tokenizing replies", unit="batch",
                      disable=not progress):
        for ids in tokenizer(texts[start : start + batch], add_special_tokens=False)["input_ids"]:
            documents.append(np.asarray(ids, dtype=np.int32))
    distilled = distilled_replies(target)
    if not documents and not distilled:
        raise SpecbenchError(f"datastore: nothing to build from for {target}: no training prompts at {data} and no "
                             "self-distilled replies ship for it (pass --data FILE, JSONL with a reference list)")
    store = Datastore.of([*documents, *distilled])
    folder = datastore_folder(target)
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in (("corpus", store.corpus), ("suffixes", store.suffixes)):
        partial = folder / f".{name}.partial.npy"
        np.save(partial, array)
        os.replace(partial, folder / f"{name}.npy")
    manifest = {"format": FORMAT, "target": target, "sources": {str(data.resolve()): len(documents),
                "heads/data self-distilled replies": len(distilled)}, "tokens": int(len(store.corpus))}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return folder


def load_datastore(folder: Path) -> Datastore:
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        if manifest.get("format") != FORMAT:
            raise ValueError(f"format {manifest.get('format')!r}")
        return Datastore(np.load(folder / "corpus.npy"), np.load(folder / "suffixes.npy"))
    except (OSError, ValueError) as exc:
        raise SpecbenchError(f"datastore {folder}: unreadable ({exc}); rebuild it with python -m specbench "
                             "datastore build") from None


def open_datastore(target: str, options: Mapping[str, Any]) -> Datastore:
    """The datastore a method's options name (datastore=DIR), else this target's, built now if missing (from
    data=FILE, default DEFAULT_DATA)."""
    chosen = options.get("datastore")
    folder = Path(chosen) if chosen else datastore_folder(target)
    if not chosen and not (folder / "manifest.json").is_file():
        tqdm.write(f"building the retrieval datastore for {target} in {folder} (once)")
        build_datastore(target, Path(options.get("data") or DEFAULT_DATA))
    return load_datastore(folder)
