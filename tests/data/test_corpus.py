import gzip
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from aiayn.data import corpus
from aiayn.data.corpus import MULTI30K_SHA256, MULTI30K_URL, multi30k, read_parallel, read_tsv, sha256
from shared import DATA

M30K = DATA / "multi30k"
CMN = DATA / "tatoeba-cmn-eng" / "cmn.txt"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a test tried to use the network")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def first_line(path: Path) -> str:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.readline().rstrip("\n")


# --- Multi30k --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("split, n", [("train", 29_000), ("val", 1_014), ("test_2016_flickr", 1_000)])
def test_multi30k_counts_and_first_pair(split, n):
    need(M30K)
    pairs = multi30k(M30K, split, download=False)
    assert len(pairs) == n
    assert pairs[0] == (first_line(M30K / f"{split}.de.gz"), first_line(M30K / f"{split}.en.gz"))
    assert all(de and en for de, en in pairs)
    assert multi30k(M30K, split, src_lang="en", tgt_lang="de", download=False)[0] == pairs[0][::-1]


def test_multi30k_first_train_pair_by_hand():
    need(M30K)
    de, en = multi30k(M30K, "train", download=False)[0]
    assert de.startswith("Zwei junge weiße Männer") and en.startswith("Two young, White males")


def test_sha256_table_matches_source_txt_and_the_shared_files():
    source = need(M30K / "SOURCE.txt").read_text(encoding="utf-8")
    listed = dict(reversed(line.split()) for line in source.splitlines() if line.endswith(".gz"))
    assert listed == MULTI30K_SHA256
    for name, digest in MULTI30K_SHA256.items():
        assert sha256(M30K / name) == digest


def copy_val(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for lang in ("de", "en"):
        shutil.copyfile(M30K / f"val.{lang}.gz", dest / f"val.{lang}.gz")


def test_multi30k_refuses_a_tampered_copy(tmp_path):
    need(M30K)
    copy_val(tmp_path)  # tmp_path is outside the project: nothing of Multi30k enters the repository
    assert multi30k(tmp_path, "val", download=False) == multi30k(M30K, "val", download=False)
    lines = gzip.decompress((tmp_path / "val.en.gz").read_bytes()).decode("utf-8").split("\n")
    edited = lines[5].replace(" a ", " the ", 1)
    assert edited != lines[5]
    lines[5] = edited
    (tmp_path / "val.en.gz").write_bytes(gzip.compress("\n".join(lines).encode("utf-8")))
    with pytest.raises(ValueError, match=r"val\.en\.gz has sha256 .* expected 14f7d25d"):
        multi30k(tmp_path, "val")


@pytest.fixture
def fake_fetch(monkeypatch):
    """Replace the download with the shared files, recording what was asked for."""
    need(M30K)
    asked = []

    def fetch(url):
        asked.append(url)
        return (M30K / url.rsplit("/", 1)[1]).read_bytes()

    monkeypatch.setattr(corpus, "_fetch", fetch)
    return asked


def test_multi30k_downloads_missing_files_once(tmp_path, fake_fetch):
    folder = tmp_path / "new" / "multi30k"
    pairs = multi30k(folder, "val")
    assert fake_fetch == [MULTI30K_URL + "val.de.gz", MULTI30K_URL + "val.en.gz"]
    assert fake_fetch[0].startswith("https://raw.githubusercontent.com/multi30k/dataset/")
    assert sorted(p.name for p in folder.iterdir()) == ["val.de.gz", "val.en.gz"]
    assert pairs == multi30k(M30K, "val", download=False)
    multi30k(folder, "val")
    assert len(fake_fetch) == 2  # present files are not fetched again


def test_multi30k_refuses_a_tampered_download(tmp_path, monkeypatch):
    need(M30K)
    monkeypatch.setattr(corpus, "_fetch", lambda url: (M30K / "val.de.gz").read_bytes() + b"\0")
    with pytest.raises(ValueError, match=r"val\.de\.gz has sha256 .* expected f0cba2f9.*not saved"):
        multi30k(tmp_path, "val")
    assert list(tmp_path.iterdir()) == []


def test_multi30k_without_network_says_what_is_missing_and_how_to_get_it(tmp_path, monkeypatch):
    def offline(url):
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setattr(corpus, "_fetch", offline)
    with pytest.raises(FileNotFoundError) as err:
        multi30k(tmp_path, "test_2016_flickr")
    message = str(err.value)
    for part in ("test_2016_flickr.de.gz", "test_2016_flickr.en.gz", str(tmp_path), MULTI30K_URL, "name resolution"):
        assert part in message
    with pytest.raises(FileNotFoundError, match="download=False"):
        multi30k(tmp_path, "val", download=False)


def test_multi30k_checks_its_arguments(tmp_path):
    with pytest.raises(ValueError, match="split='test'"):
        multi30k(tmp_path, "test")
    with pytest.raises(ValueError, match="tgt_lang='fr'"):
        multi30k(tmp_path, "val", tgt_lang="fr")


# --- read_parallel ---------------------------------------------------------------------------------------


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def test_read_parallel_plain_and_gz_read_the_same(tmp_path):
    src = "  Ein Mann\tfährt.  \n\nZwei 我们\n".encode()
    tgt = b"  A man\trides.  \r\n\r\nTwo\n"
    want = [("  Ein Mann\tfährt.  ", "  A man\trides.  "), ("", ""), ("Zwei 我们", "Two")]
    assert read_parallel(write(tmp_path / "a.de", src), write(tmp_path / "a.en", tgt)) == want
    assert read_parallel(write(tmp_path / "b.de.gz", src), write(tmp_path / "b.en.gz", tgt)) == want
    assert read_parallel(tmp_path / "a.de", tmp_path / "b.en.gz") == want
    # the last line needs no newline
    no_final_newline = read_parallel(write(tmp_path / "c.de", b"x\ny"), write(tmp_path / "c.en", b"u\nv\n"))
    assert no_final_newline == [("x", "u"), ("y", "v")]


def test_read_parallel_counts_differ(tmp_path):
    src, tgt = write(tmp_path / "s.txt", b"a\nb\nc\n"), write(tmp_path / "t.txt.gz", b"a\nb\n")
    with pytest.raises(ValueError, match=r"s\.txt has 3 lines but .*t\.txt\.gz has 2"):
        read_parallel(src, tgt)


def test_read_parallel_one_sided_empty_line(tmp_path):
    src, tgt = write(tmp_path / "s.txt", b"a\n\nc\n"), write(tmp_path / "t.txt", b"a\nb\nc\n")
    with pytest.raises(ValueError, match=r"s\.txt, line 2 is empty"):
        read_parallel(src, tgt)
    with pytest.raises(ValueError, match=r"s\.txt, line 2 is empty"):
        read_parallel(tgt, src)


def test_read_parallel_undecodable_bytes(tmp_path):
    src = write(tmp_path / "s.txt.gz", "ok\nf\xe4hrt\n".encode("latin-1"))
    tgt = write(tmp_path / "t.txt", b"ok\nrides\n")
    with pytest.raises(ValueError, match=r"s\.txt\.gz, line 2: not UTF-8"):
        read_parallel(src, tgt)
    not_gzip = tmp_path / "plain.gz"
    not_gzip.write_bytes(b"ok\nrides\n")
    with pytest.raises(ValueError, match=r"plain\.gz ends in \.gz but is not gzip"):
        read_parallel(tgt, not_gzip)


# --- read_tsv --------------------------------------------------------------------------------------------


def test_read_tsv_tatoeba():
    lines = need(CMN).read_text(encoding="utf-8").split("\n")[:-1]
    pairs = read_tsv(CMN)
    assert len(pairs) == len(lines) == 28_447
    assert pairs[0] == ("Hi.", "嗨。")
    assert pairs[-1] == tuple(lines[-1].split("\t")[:2])
    assert read_tsv(CMN, src_col=1, tgt_col=0)[1] == ("你好。", "Hi.")
    assert sum("\u200b" in en + zh for en, zh in pairs) == 5  # kept byte for byte (SOURCE.txt counts 5)


def test_read_tsv_plain_and_gz_and_malformed(tmp_path):
    text = "Hi.\t你好。\tCC-BY\n\nRun!\t跑！\tCC-BY\n".encode()
    want = [("Hi.", "你好。"), ("Run!", "跑！")]
    assert read_tsv(write(tmp_path / "p.txt", text)) == want
    assert read_tsv(write(tmp_path / "p.txt.gz", text)) == want
    bad = write(tmp_path / "bad.txt", "Hi.\t你好。\nYes.\t是。\nNo. 不。\n".encode())
    with pytest.raises(ValueError, match=r"bad\.txt, line 3: 1 TAB-separated columns, need at least 2"):
        read_tsv(bad)
    with pytest.raises(ValueError, match=r"bad\.txt, line 1: 2 TAB-separated columns, need at least 3"):
        read_tsv(bad, tgt_col=2)
    empty = write(tmp_path / "empty.txt", b"Hi.\t\tCC\n")
    with pytest.raises(ValueError, match=r"empty\.txt, line 1: column 1 is empty"):
        read_tsv(empty)
