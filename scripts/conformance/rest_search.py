"""Is REST's retrieval deterministic? Its `draftretriever` (shipped as a wheel in FasterDecoding/REST), run unchanged.

    python scripts/conformance/rest_search.py --out RESULT.json [--processes 6]

Runs in a venv of its own with the repository's wheel (scripts/conformance/rest.sh makes it; Python 3.9, as the
wheel is built), never with specbench. A datastore is written as REST's datastore/get_datastore_chat.py writes one
(draftretriever.Writer, one add_entry per text, finalize) from seeded texts of a small vocabulary (many repeats, so
many continuations share a count), then the same queries are searched as REST's generate_candidates_and_draft_buffer
searches them (the text's last 16 tokens down to 2, the first span that finds anything; choices 64, REST's default
--num-draft) in several fresh processes. Each query's result (the retrieved paths and the draft tree's buffers) is
compared across the processes: the script writes, per query, how many distinct results the processes returned, and
how many distinct draft trees (the set of token paths drafted, whatever their order).
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

VOCAB, TEXTS, LENGTH, QUERIES, CHOICES = 12, 200, 120, 60, 64


def corpus(seed: int) -> tuple[list[list[int]], list[list[int]]]:
    rng = random.Random(seed)
    texts = [[rng.randrange(VOCAB) for _ in range(LENGTH)] for _ in range(TEXTS)]
    queries = [[rng.randrange(VOCAB) for _ in range(24)] for _ in range(QUERIES)]
    return texts, queries


def search_all(index: str, queries: list[list[int]]) -> list:
    """REST's search loop (rest/model/utils.py generate_candidates_and_draft_buffer): spans 16 down to 2."""
    import draftretriever
    reader = draftretriever.Reader(index_file_path=index)
    out = []
    for query in queries:
        found = None
        for span in range(16, 1, -1):
            result = reader.search(query[-span:], choices=CHOICES)
            if len(result[0]):
                found = [span, *result]
                break
        out.append(found)
    return out


def tree_nodes(found) -> list:
    """The token paths the draft tree holds (every prefix of each retrieved path, -2 padding dropped), sorted."""
    if found is None:
        return []
    paths = found[1]
    nodes = {tuple(p[:i]) for p in paths for i in range(1, len([t for t in p if t != -2]) + 1)}
    return sorted(nodes)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--processes", type=int, default=6)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--child", nargs=2, metavar=("INDEX", "QUERIES"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(search_all(args.child[0], json.loads(Path(args.child[1]).read_text()))))
        return
    import draftretriever
    texts, queries = corpus(args.seed)
    work = Path(tempfile.mkdtemp(prefix="rest-search-"))
    index = str(work / "datastore.idx")
    writer = draftretriever.Writer(index_file_path=index, max_chunk_len=512 * 1024 * 1024, vocab_size=VOCAB)
    for text in texts:
        writer.add_entry(text)
    writer.finalize()
    (work / "queries.json").write_text(json.dumps(queries))
    runs = [json.loads(subprocess.run([sys.executable, __file__, "--child", index, str(work / "queries.json")],
                                      check=True, capture_output=True, text=True).stdout)
            for _ in range(args.processes)]
    distinct = [len({json.dumps(run[q]) for run in runs}) for q in range(len(queries))]
    # what the draft tree holds, whatever the order: the set of token paths (every prefix of a retrieved path)
    drafted = [len({json.dumps(tree_nodes(run[q])) for run in runs}) for q in range(len(queries))]
    result = {"reference": {"repository": "github.com/FasterDecoding/REST", "wheel":
                            "DraftRetriever/wheels/draftretriever-0.1.0-cp39-cp39-manylinux_2_34_x86_64.whl"},
              "python": sys.version.split()[0], "vocab": VOCAB, "texts": TEXTS, "text_length": LENGTH,
              "choices": CHOICES, "processes": args.processes, "queries": len(queries),
              "distinct_results_per_query": distinct,
              "queries_with_one_result": sum(d == 1 for d in distinct),
              "distinct_drafted_trees_per_query": drafted,
              "queries_with_one_drafted_tree": sum(d == 1 for d in drafted)}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['queries_with_one_result']} of {len(queries)} queries returned the same result in all "
          f"{args.processes} processes (distinct results per query: {sorted(distinct)}); "
          f"{result['queries_with_one_drafted_tree']} the same drafted tree as a set of token paths (distinct: "
          f"{sorted(drafted)})")


if __name__ == "__main__":
    main()
