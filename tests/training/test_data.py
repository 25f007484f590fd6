"""Dataset readers on hand-written fixtures, plus checks on the real data (marked ``data``)."""

import csv
import gzip
import io
import itertools
import shutil
from pathlib import Path

import pytest

from training import data
from training.data import LabeledText, Pair, load_split

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data"
REPO = Path(__file__).resolve().parents[2]


def gzip_copy(src: Path, dst: Path) -> None:
    dst.write_bytes(gzip.compress(src.read_bytes()))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """The fixtures laid out like the real data dir (the .gz files made here)."""
    root = tmp_path / "data"
    shutil.copytree(FIXTURES, root)
    gzip_copy(root / "imdb" / "train.tsv", root / "imdb" / "train.tsv.gz")
    gzip_copy(root / "nsmc" / "unlabeled.txt", root / "nsmc" / "unlabeled.txt.gz")
    (root / "imdb" / "train.tsv").unlink()
    (root / "nsmc" / "unlabeled.txt").unlink()
    return root


def pandas_to_csv(doc: str) -> str:
    """The field as csv QUOTE_MINIMAL with a tab delimiter writes it (what pandas.to_csv does)."""
    buf = io.StringIO()
    csv.writer(buf, delimiter="\t", lineterminator="\n").writerow(["1", doc, "0"])
    return buf.getvalue().split("\t")[1]


# --- resolve_data_dir --------------------------------------------------------------------------


def test_resolve_data_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
    assert data.resolve_data_dir() == REPO.parent / "shared" / "data"
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path / "env"))
    assert data.resolve_data_dir() == tmp_path / "env"
    assert data.resolve_data_dir(tmp_path / "flag") == tmp_path / "flag"
    assert data.resolve_data_dir(str(tmp_path / "flag")) == tmp_path / "flag"


# --- NSMC ----------------------------------------------------------------------------------------

TRICKY = [
    'a"b',
    '"a"',
    '"좋아요"',
    '"자식 잃은 부모한테.. 남은 인생 같은건 없어.."',
    '"',
    '""',
    '"""',
    'a"',
    '"a',
    '""a""',
    'a""b',
    ' "x" y "z" ',
    "plain",
    "",
]


def test_nsmc_unquote_roundtrip_tricky() -> None:
    for text in TRICKY:
        stored = pandas_to_csv(pandas_to_csv(text))
        assert data.unquote_nsmc(stored) == text, (text, stored)


def test_nsmc_unquote_roundtrip_exhaustive() -> None:
    # every string up to length 6 over {", a, space}: leading/trailing quotes, odd and even runs
    for n in range(7):
        for chars in itertools.product('"a ', repeat=n):
            text = "".join(chars)
            assert data.unquote_nsmc(pandas_to_csv(pandas_to_csv(text))) == text, text


def test_nsmc_unquote_keeps_fields_not_quoted_twice() -> None:
    # one level only, or not valid doubled-quote CSV: not produced by the official build, keep as stored
    for stored in ['"좋아요"', '"a""b"', '"a"b"', 'a"b', '""']:
        assert data.unquote_nsmc(stored) == stored


def test_read_nsmc_file_roundtrip(tmp_path: Path) -> None:
    texts = [*TRICKY, "평범한 리뷰"]
    path = tmp_path / "r.tsv"
    lines = ["id\tdocument\tlabel"] + [
        f"{i}\t{pandas_to_csv(pandas_to_csv(t))}\t{i % 2}" for i, t in enumerate(texts)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert data.read_nsmc(path) == [LabeledText(t, i % 2) for i, t in enumerate(texts)]


def test_read_nsmc_fixture_quirks() -> None:
    rows = data.read_nsmc(FIXTURES / "nsmc" / "ratings_train.tsv")
    assert len(rows) == 12
    assert rows[1] == LabeledText('a"b', 1)
    assert rows[2] == LabeledText('"좋아요"', 1)
    assert rows[3] == LabeledText("", 0)
    assert rows[4].text == 'TV드라마로나 찍어오면 "딱"인 영화.'
    kept = data.read_nsmc(FIXTURES / "nsmc" / "ratings_train.tsv", skip_empty=True)
    assert len(kept) == 11
    assert all(r.text for r in kept)


@pytest.mark.parametrize(
    ("line", "message"),
    [("3\tok\t2", "label must be 0 or 1"), ("3\tok", "expected 3"), ("3\to\tk\t1", "expected 3")],
)
def test_read_nsmc_malformed_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text(f"id\tdocument\tlabel\n1\tfine\t1\n{line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"bad\.tsv:3: {message}"):
        data.read_nsmc(path)


def test_read_nsmc_bad_header(tmp_path: Path) -> None:
    path = tmp_path / "h.tsv"
    path.write_text("document\tlabel\nfine\t1\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"h\.tsv:1: expected header"):
        data.read_nsmc(path)


# --- IMDb ----------------------------------------------------------------------------------------

IMDB_TRAIN = [
    LabeledText("A fine film. Highly recommended.", 1),
    LabeledText("Dull. Avoid it.", 0),
    LabeledText("Line one line two line three.", 1),
    LabeledText('Not worth the ticket "price".', 0),
]


def test_read_imdb_plain_and_gz(tmp_path: Path) -> None:
    plain = FIXTURES / "imdb" / "train.tsv"
    gz = tmp_path / "train.tsv.gz"
    gzip_copy(plain, gz)
    assert data.read_imdb(plain) == IMDB_TRAIN
    assert data.read_imdb(gz) == IMDB_TRAIN


def test_read_imdb_bad_label(tmp_path: Path) -> None:
    path = tmp_path / "imdb.tsv.gz"
    path.write_bytes(gzip.compress(b"text\tlabel\ngood\t1\nbad\tpos\n"))
    with pytest.raises(ValueError, match=r"imdb\.tsv\.gz:3: label"):
        data.read_imdb(path)


# --- plain lines, Tatoeba, manythings, parallel ---------------------------------------------------


def test_read_text_lines_plain_and_gz(tmp_path: Path) -> None:
    expected = ["전체관람가는 아닌것 같아요", "디렉터스컷으로봐서 거의 3시간짜리인데 참 흡인력있다"]
    gz = tmp_path / "u.txt.gz"
    gzip_copy(FIXTURES / "nsmc" / "unlabeled.txt", gz)
    assert data.read_text_lines(FIXTURES / "nsmc" / "unlabeled.txt") == expected
    assert data.read_text_lines(gz) == expected


def test_read_tsv_pairs_both_directions() -> None:
    path = FIXTURES / "tatoeba" / "fra-eng" / "train.tsv"
    assert data.read_tsv_pairs(path, "en", "fr")[:2] == [Pair("Go.", "Va !"), Pair("Hi.", "Salut !")]
    assert data.read_tsv_pairs(path, "fr", "en")[:2] == [Pair("Va !", "Go."), Pair("Salut !", "Hi.")]
    assert data.read_tsv_pairs(path, "fr", "en")[2].src == "Cours\u202f!"  # typographic space kept


def test_read_tsv_pairs_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not name the languages"):
        data.read_tsv_pairs(FIXTURES / "tatoeba" / "fra-eng" / "train.tsv", "es", "en")
    path = tmp_path / "p.tsv"
    path.write_text("en\tfr\nGo.\tVa !\nHi.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"p\.tsv:3: expected 2"):
        data.read_tsv_pairs(path, "en", "fr")


@pytest.mark.parametrize("name", ["fra.txt", "fra3.txt"])
def test_read_manythings_two_and_three_columns(name: str) -> None:
    path = FIXTURES / "manythings" / name
    assert data.read_manythings(path, "en", "fr", "fr") == [Pair("Go.", "Va !"), Pair("Hi.", "Salut !")]
    assert data.read_manythings(path, "fr", "en", "fr") == [Pair("Va !", "Go."), Pair("Salut !", "Hi.")]


def test_read_manythings_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="src/tgt"):
        data.read_manythings(FIXTURES / "manythings" / "fra.txt", "es", "en", "fr")
    path = tmp_path / "fra.txt"
    path.write_text("Go.\tVa !\nHi.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"fra\.txt:2: expected 2 or 3"):
        data.read_manythings(path, "en", "fr", "fr")


def test_read_parallel(tmp_path: Path) -> None:
    de, en = FIXTURES / "multi30k" / "train.de", FIXTURES / "multi30k" / "train.en"
    pairs = data.read_parallel(de, en)
    assert len(pairs) == 3
    assert pairs[2] == Pair(
        "Ein kleines Mädchen klettert in ein Spielhaus aus Holz.",
        "A little girl climbing into a wooden playhouse.",
    )
    gz = tmp_path / "train.en.gz"
    gzip_copy(en, gz)
    assert data.read_parallel(de, gz) == pairs


def test_read_parallel_mismatch_names_both_files(tmp_path: Path) -> None:
    short = tmp_path / "short.en"
    short.write_text("one line\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train\.de has 3 lines, .*short\.en has 1"):
        data.read_parallel(FIXTURES / "multi30k" / "train.de", short)


def test_missing_file_mentions_data_dir(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.tsv.*--data-dir.*TRAINING_DATA_DIR"):
        data.read_nsmc(tmp_path / "nope.tsv")
    with pytest.raises(FileNotFoundError, match="ratings_test.tsv"):
        load_split("nsmc", "test", tmp_path)


# --- load_split ----------------------------------------------------------------------------------


def test_holdout_deterministic_and_disjoint() -> None:
    rows = list(range(1000))
    train, valid = data.holdout(rows, "train"), data.holdout(rows, "valid")
    assert len(valid) == 50
    assert len(train) == 950
    assert sorted(train + valid) == rows
    assert valid == sorted(valid)  # file order kept
    assert valid != rows[:50]  # shuffled, not the head of the file
    assert data.holdout(rows, "valid") == valid


def test_load_split_nsmc(data_dir: Path) -> None:
    train, valid = load_split("nsmc", "train", data_dir), load_split("nsmc", "valid", data_dir)
    assert len(valid) == 1
    assert len(train) == 10
    assert not set(train) & set(valid)
    assert all(r.text for r in train + valid)  # empties skipped in train/valid
    test = load_split("nsmc", "test", data_dir)
    assert [r.text for r in test][1:3] == ["", '"자식 잃은 부모한테.. 남은 인생 같은건 없어.."']
    assert load_split("nsmc-unlabeled", "train", data_dir)[0] == "전체관람가는 아닌것 같아요"


def test_load_split_imdb(data_dir: Path) -> None:
    train, valid = load_split("imdb", "train", data_dir), load_split("imdb", "valid", data_dir)
    assert sorted(train + valid, key=IMDB_TRAIN.index) == IMDB_TRAIN
    assert len(valid) == 1
    assert load_split("imdb", "test", data_dir)[0] == LabeledText("Great acting. Great story.", 1)


def test_load_split_translation(data_dir: Path) -> None:
    assert load_split("tatoeba-fr-en", "valid", data_dir) == [Pair("Qui ?", "Who?")]
    assert load_split("tatoeba-en-fr", "valid", data_dir) == [Pair("Who?", "Qui ?")]
    assert load_split("tatoeba-es-en", "test", data_dir) == [Pair("¿Quién?", "Who?")]
    assert load_split("tatoeba-en-es", "train", data_dir)[1] == Pair("Hi.", "Hola.")
    assert len(load_split("tatoeba-fr-en", "train", data_dir)) == 3
    de_en = load_split("multi30k-de-en", "test", data_dir)
    assert de_en == [
        Pair(
            "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
            "A man in an orange hat starring at something.",
        )
    ]
    assert load_split("multi30k-en-de", "test", data_dir) == [Pair(de_en[0].tgt, de_en[0].src)]


def test_load_split_uses_env_data_dir(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(data.DATA_DIR_ENV, str(data_dir))
    assert len(load_split("multi30k-de-en", "train")) == 3


def test_imdb_text_is_the_train_split_unlabeled(data_dir: Path) -> None:
    # masked-LM text for sentiment-en: exactly the train reviews, so valid and test stay unseen
    assert load_split("imdb-text", "train", data_dir) == [
        x.text for x in load_split("imdb", "train", data_dir)
    ]
    valid = {x.text for x in load_split("imdb", "valid", data_dir)}
    assert valid
    assert not valid & set(load_split("imdb-text", "train", data_dir))


def test_load_split_rejects_unknown_names(data_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown dataset 'sst2'.*nsmc, nsmc-unlabeled, imdb"):
        load_split("sst2", "train", data_dir)
    with pytest.raises(ValueError, match=r"unknown split 'dev'.*train, valid, test"):
        load_split("imdb", "dev", data_dir)
    with pytest.raises(ValueError, match=r"unknown split 'test'.*choose one of train$"):
        load_split("nsmc-unlabeled", "test", data_dir)
    assert set(data.DATASETS) >= {"nsmc", "imdb", "tatoeba-en-es", "multi30k-en-de"}


# --- the real data (skipped when ../shared/data is absent) ---------------------------------------


@pytest.fixture(scope="module")
def real_dir() -> Path:
    return data.resolve_data_dir()


QUOTES_ONLY_REVIEW = "\"\"\"\"''''\"'"  # ratings_train.tsv line 114566, stored with 2 quoting levels


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


@pytest.mark.data
def test_real_nsmc(real_dir: Path) -> None:
    for name, n, empty, n_quoted in [
        ("ratings_train.tsv", 150_000, 5, 623),
        ("ratings_test.tsv", 50_000, 3, 233),
    ]:
        path = need(real_dir / "nsmc" / name)
        rows = data.read_nsmc(path)
        stored = [line.split("\t")[1] for line in path.read_bytes().decode().split("\n")[1:-1]]
        assert len(rows) == len(stored) == n
        assert sum(not r.text for r in rows) == empty
        quoted = [(r.text, doc) for r, doc in zip(rows, stored, strict=True) if '"' in doc]
        assert len(quoted) == n_quoted
        # exact inverse: writing the decoded text twice with QUOTE_MINIMAL gives back the stored field
        assert all(pandas_to_csv(pandas_to_csv(text)) == doc for text, doc in quoted)
        assert all(r.text == doc for r, doc in zip(rows, stored, strict=True) if '"' not in doc)
        # no quoting left over; the one exception is a train review made only of quote marks
        leftover = [r.text for r in rows if r.text.startswith('"""')]
        assert leftover == ([QUOTES_ONLY_REVIEW] if name == "ratings_train.tsv" else [])
    train, valid = load_split("nsmc", "train", real_dir), load_split("nsmc", "valid", real_dir)
    assert len(train) + len(valid) == 150_000 - 5
    assert len(valid) == round(149_995 * 0.05)
    assert sum(r.label for r in data.read_nsmc(real_dir / "nsmc" / "ratings_train.tsv")) == 74_827


@pytest.mark.data
def test_real_translation(real_dir: Path) -> None:
    need(real_dir / "tatoeba" / "fra-eng")
    sizes = [len(load_split("tatoeba-fr-en", s, real_dir)) for s in ("train", "valid", "test")]
    assert sizes == [159_130, 2_000, 3_000]
    sizes = [len(load_split("tatoeba-en-es", s, real_dir)) for s in ("train", "valid", "test")]
    assert sizes == [110_964, 2_000, 3_000]
    need(real_dir / "multi30k")
    sizes = [len(load_split("multi30k-de-en", s, real_dir)) for s in ("train", "valid", "test")]
    assert sizes == [29_000, 1_014, 1_000]


@pytest.mark.data
def test_real_imdb(real_dir: Path) -> None:
    need(real_dir / "imdb" / "train.tsv.gz")
    train = data.read_imdb(real_dir / "imdb" / "train.tsv.gz")
    test = load_split("imdb", "test", real_dir)
    assert (len(train), len(test)) == (25_000, 20_000)
    assert sum(r.label for r in train) == 12_500
    assert not any("<br" in r.text.lower() for r in train + test)
