"""REST: the suffix array finds every occurrence of a pattern and counts its continuations exactly, drafts are the
most frequent continuations as a tree, T=0 output is vanilla's with drafts accepted several tokens deep, and the
datastore builds from a prompts file (CLI) into the cache folder, where the method finds it."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from specbench.cli import main
from specbench.decode.draft import ROOT
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.errors import SpecbenchError
from specbench.methods.common.datastore import Datastore, datastore_folder, load_datastore
from specbench.methods.rest.drafter import RestDrafter
from specbench.methods.vanilla.drafter import VanillaDrafter
from tests.conftest import tiny_llama
from tests.identity import assert_vanilla_tokens_with_deep_accepts

VOCAB = 40


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=4, layers=1, hidden=16, logit_scale=8.0)


def test_suffix_array_ranges_and_continuation_counts_match_brute_force():
    rng = np.random.default_rng(0)
    documents = [rng.integers(0, 4, size=n) for n in (30, 17, 25)]
    store = Datastore.of(documents)
    for pattern in ([1], [2, 3], [0, 1, 2], [3, 3, 3, 3, 3, 3]):
        n = len(pattern)
        found = store.find(pattern)
        starts = sorted(int(store.suffixes[r]) for r in range(found.lo, found.hi))
        brute = [i for doc_start, doc in zip(np.cumsum([0] + [len(d) + 1 for d in documents]), documents)
                 for i in range(doc_start, doc_start + len(doc) - n + 1)
                 if doc[i - doc_start : i - doc_start + n].tolist() == pattern]
        assert starts == brute, pattern
        counts = {token: count for token, count, _ in store.children(found)}
        following = Counter(int(store.corpus[i + n]) for i in brute if store.corpus[i + n] >= 0)
        assert counts == dict(following), pattern


def test_draft_is_the_most_frequent_continuations():
    store = Datastore.of([np.array(d) for d in ([5, 6, 1, 2, 3], [5, 6, 1, 2, 3], [5, 6, 1, 4], [5, 6, 7])])
    drafter = RestDrafter(store, max_ngram=4, min_ngram=2, depth=3, max_tokens=4)

    class Ctx:
        token_ids = [9, 5, 6]

    draft = drafter.propose(Ctx())
    # after 5 6: 1 (3 of 4), then 2 (2 of 3) -> 3, and 7 (1 of 4) or 1-4 (1 of 4): the first pushed goes first
    assert draft.tokens[:3] == [1, 2, 3] and draft.parents[:3] == [ROOT, 0, 1] and len(draft) == 4
    with pytest.raises(SpecbenchError, match="min_ngram"):
        RestDrafter(store, max_ngram=1, min_ngram=2)


def test_t0_identical_to_vanilla_with_deep_accepts(target):
    # A datastore of other texts the target wrote (other prompts): what it says recurs across texts.
    others = [generate(target, [p], VanillaDrafter(), Sampling(), 48, set()).token_ids for p in range(VOCAB)]
    assert_vanilla_tokens_with_deep_accepts(target, RestDrafter(Datastore.of([np.array(o) for o in others])))


def test_datastore_builds_from_a_prompts_file(tiny_target_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "prompts.jsonl"
    rows = [{"turns": ["q"], "reference": ["the quick brown fox jumps over the lazy dog"]},
            {"turns": ["q"], "reference": ["the quick brown fox, and what is the answer?"]}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["datastore", "build", "--target", str(tiny_target_dir), "--data", str(data)]) == 0
    folder = datastore_folder(str(tiny_target_dir))
    assert str(folder) in capsys.readouterr().out
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["tokens"] > 10 and list(manifest["sources"].values())[0] == 2
    store = load_datastore(folder)
    assert store.find(store.corpus[:3].tolist()).hi - store.find(store.corpus[:3].tolist()).lo == 2  # "the quick"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("[1, 2]\n")
    assert main(["datastore", "build", "--target", str(tiny_target_dir), "--data", str(bad)]) == 2
    assert "not a JSON object" in capsys.readouterr().err


def test_without_the_training_prompts_a_target_with_no_shipped_replies_gets_one_line(tiny_target_dir, tmp_path,
                                                                                      monkeypatch, capsys):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # no ../shared here: as on a user's machine
    assert main(["datastore", "build", "--target", str(tiny_target_dir)]) == 2
    err = capsys.readouterr().err
    assert "no training prompts at ../shared/data/train/prompts.jsonl" in err and "nothing to build from" in err
