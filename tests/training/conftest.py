"""Synthetic datasets in the real data-dir layout, big enough to train a tokenizer and a few steps."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest

WORDS = {
    "le": "the",
    "chat": "cat",
    "chien": "dog",
    "rouge": "red",
    "noir": "black",
    "petit": "small",
    "grand": "big",
    "mange": "eats",
    "voit": "sees",
    "dort": "sleeps",
    "oiseau": "bird",
    "vert": "green",
    "maison": "house",
    "arbre": "tree",
    "pomme": "apple",
    "bleu": "blue",
    "court": "runs",
    "lit": "reads",
}
POS = ["좋아요", "최고", "재밌다", "감동", "great", "love", "wonderful", "fun"]
NEG = ["별로", "지루", "최악", "실망", "boring", "awful", "waste", "bad"]


def _sentence(rng: random.Random) -> tuple[str, str]:
    fr = [rng.choice(list(WORDS)) for _ in range(rng.randint(3, 7))]
    return " ".join(fr).capitalize() + ".", " ".join(WORDS[w] for w in fr).capitalize() + "."


def _review(rng: random.Random, label: int) -> str:
    filler = ["영화", "배우", "스토리", "movie", "actor", "plot", "the", "was", "정말", "진짜"]
    words = [rng.choice(filler) for _ in range(rng.randint(3, 8))] + [rng.choice(POS if label else NEG)]
    rng.shuffle(words)
    return " ".join(words)


def make_data_dir(root: Path, n: int = 400, seed: int = 0) -> Path:
    rng = random.Random(seed)
    tat = root / "tatoeba" / "fra-eng"
    tat.mkdir(parents=True)
    for split, k in (("train", n), ("valid", 40), ("test", 40)):
        rows = [_sentence(rng) for _ in range(k)]
        (tat / f"{split}.tsv").write_text("en\tfr\n" + "".join(f"{en}\t{fr}\n" for fr, en in rows))
    m30 = root / "multi30k"
    m30.mkdir()
    for split, k in (("train", n), ("valid", 40), ("test", 40)):
        rows = [_sentence(rng) for _ in range(k)]
        (m30 / f"{split}.de").write_text("".join(fr + "\n" for fr, _ in rows))
        (m30 / f"{split}.en").write_text("".join(en + "\n" for _, en in rows))
    nsmc = root / "nsmc"
    nsmc.mkdir()
    for split, k in (("train", n), ("test", 80)):
        lines = ["id\tdocument\tlabel"]
        for i in range(k):
            label = rng.randint(0, 1)
            lines.append(f"{i}\t{_review(rng, label)}\t{label}")
        (nsmc / f"ratings_{split}.tsv").write_text("\n".join(lines) + "\n")
    with gzip.open(nsmc / "unlabeled.txt.gz", "wt", encoding="utf-8") as f:
        f.writelines(_review(rng, rng.randint(0, 1)) + "\n" for _ in range(300))
    return root


@pytest.fixture(scope="session")
def synthetic_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_data_dir(tmp_path_factory.mktemp("data"))
