"""Our EAGLE-3 checkpoints against the official EAGLE code's head, both ways, on a small random target.

    python scripts/check_eagle3_official.py --official PATH [--official-python PYTHON]

PATH holds the official eagle/model/{cnets,configs,utils_c,choices,utils}.py from the EAGLE repository
(SafeAILab/EAGLE, the EAGLE-3 line) with empty eagle/__init__.py and eagle/model/__init__.py. The official code
runs under transformers 4.x (it reads config.rope_scaling["type"]), so it runs in its own interpreter, PYTHON (for
example a venv with --system-site-packages and transformers==4.46.3; default: this one). The script
1. saves a head of ours (a reduced draft vocabulary, so d2t/t2d matter) and has the official side load it into
   cnets.Model as EaModel(use_eagle3=True) does (EConfig.from_pretrained, load_state_dict(strict=False), the
   embedding from the target), reporting the keys either side leaves out;
2. has the official side save a randomly initialised official Model in the official layout, and loads it with
   our load_head;
and compares each pair on the same fused target features: hidden states, draft logits, draft argmax mapped to
target ids through d2t, and t2d. Exits 1 on a mismatch.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
VOCAB, HIDDEN, LAYERS, DRAFT_VOCAB = 64, 32, 6, 20


def outputs(hidden: torch.Tensor, logits: torch.Tensor, d2t: torch.Tensor, t2d: torch.Tensor) -> dict:
    draft = logits.argmax(-1)
    return {"hidden": hidden, "logits": logits, "target_ids": draft + d2t[draft], "t2d": t2d}


def official_side(work: Path, official: Path) -> None:
    """Runs under the official code's interpreter: no specbench import here."""
    from safetensors.torch import load_file, save_file

    sys.path.insert(0, str(official.resolve()))
    from eagle.model.cnets import Model
    from eagle.model.configs import EConfig

    inputs = torch.load(work / "inputs.pt")

    def run(model) -> dict:
        with torch.no_grad():
            hidden = model(inputs["fused"], input_ids=inputs["tokens"])
            return outputs(hidden, model.lm_head(model.norm(hidden)), model.d2t, model.t2d)

    config = EConfig.from_pretrained(str(work / "ours"))
    model = Model(config, load_emb=False).eval()
    state = load_file(str(work / "ours" / "model.safetensors"))
    state["embed_tokens.weight"] = inputs["embedding"]  # EaModel takes it from the target (load_emb=True)
    missing, unexpected = model.load_state_dict(state, strict=False)
    torch.save({**run(model), "missing": list(missing), "unexpected": list(unexpected)}, work / "official_on_ours.pt")
    torch.manual_seed(2)
    model = Model(config, load_emb=False).eval()
    model.embed_tokens.weight.data.copy_(inputs["embedding"])
    chosen = torch.sort(torch.randperm(VOCAB, generator=torch.Generator().manual_seed(3))[:DRAFT_VOCAB]).values
    model.d2t.copy_(chosen - torch.arange(DRAFT_VOCAB))
    model.t2d.zero_()
    model.t2d[chosen] = True
    (work / "official").mkdir()
    (work / "official" / "config.json").write_text((work / "ours" / "config.json").read_text())
    save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "embed_tokens.weight"},
              str(work / "official" / "model.safetensors"))
    torch.save(run(model), work / "official_out.pt")


def differences(a: dict, b: dict) -> dict[str, float]:
    return {"hidden max abs diff": float((a["hidden"] - b["hidden"]).abs().max()),
            "logits max abs diff": float((a["logits"] - b["logits"]).abs().max()),
            "target ids equal": bool(torch.equal(a["target_ids"], b["target_ids"])),
            "t2d equal": bool(torch.equal(a["t2d"], b["t2d"]))}


def agree(d: dict) -> bool:
    return d["hidden max abs diff"] < 1e-4 and d["target ids equal"] and d["t2d equal"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--official", type=Path, required=True)
    parser.add_argument("--official-python", default=sys.executable)
    parser.add_argument("--official-side", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.official_side:
        official_side(args.official_side, args.official)
        return 0
    sys.path.insert(0, str(REPO))
    from specbench.methods.eagle3.checkpoint import head_config, load_head, save_head
    from specbench.methods.eagle3.head import Eagle3Head, fused_layers
    from specbench.methods.eagle3.training import set_draft_vocabulary
    from tests.conftest import tiny_llama

    target = tiny_llama(VOCAB, seed=1, layers=LAYERS, hidden=HIDDEN)
    embedding = target.get_input_embeddings().weight.detach()
    tokens = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        states = target(tokens, output_hidden_states=True).hidden_states
    fused = torch.cat([states[i] for i in fused_layers(LAYERS)], dim=-1)

    def run(head: Eagle3Head) -> dict:
        with torch.no_grad():
            hidden = head(tokens, fused, torch.arange(tokens.shape[1])[None], None)
            return outputs(hidden, head.logits(hidden), head.d2t, head.t2d)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        torch.save({"tokens": tokens, "fused": fused, "embedding": embedding}, work / "inputs.pt")
        torch.manual_seed(1)
        head = Eagle3Head(head_config(target.config, DRAFT_VOCAB))
        head.embed_tokens.weight.data.copy_(embedding)
        set_draft_vocabulary(head, torch.randperm(VOCAB, generator=torch.Generator().manual_seed(4))[:DRAFT_VOCAB])
        save_head(head, work / "ours", dtype=torch.float32)
        ours = run(head.eval())
        subprocess.run([args.official_python, __file__, "--official", str(args.official), "--official-side",
                        str(work)], check=True)
        theirs = torch.load(work / "official_on_ours.pt")
        first = differences(ours, theirs)
        print(f"ours loaded by the official Model: missing keys {theirs['missing']}, unexpected keys "
              f"{theirs['unexpected']}; {json.dumps(first)}")
        loaded = load_head(work / "official", embedding).eval()
        second = differences(run(loaded), torch.load(work / "official_out.pt"))
        print(f"an official Model's checkpoint loaded by ours: {json.dumps(second)}")
    ok = agree(first) and agree(second) and not theirs["missing"] and not theirs["unexpected"]
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
