"""Parallel corpora read into lists of (source, target) sentence pairs.

    read_parallel   two aligned files, line i of one translating line i of the other (plain or .gz)
    read_tsv        one file of TAB-separated columns, such as Tatoeba's cmn.txt (English, Chinese, credit)
    multi30k        Multi30k task 1 (Elliott et al., 2016), German-English image captions, as The
                    Annotated Transformer trains on it; downloaded and checked by sha256 when missing

Lines are read as UTF-8 bytes split at ``\\n`` only (a ``\\r`` before it is dropped too); nothing else is
stripped or normalised. Every error names the file and, where one line is at fault, its 1-based number.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import urllib.request
from pathlib import Path

from aiayn.io import atomic_write

Pair = tuple[str, str]

# github.com/multi30k/dataset at a pinned commit, data/task1/raw/; sums from ../shared/data/multi30k/SOURCE.txt.
# The files are for non-commercial research and teaching and may not be redistributed: download, never copy.
MULTI30K_COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
MULTI30K_URL = f"https://raw.githubusercontent.com/multi30k/dataset/{MULTI30K_COMMIT}/data/task1/raw/"
MULTI30K_SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
}
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr")
MULTI30K_LANGS = ("de", "en")


def read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a UTF-8 text file, gzip-compressed if its name ends in ``.gz``, without their newlines."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    lines = []
    try:
        with opener(path, "rb") as f:
            for n, raw in enumerate(f, start=1):
                raw = raw[:-1] if raw.endswith(b"\n") else raw
                raw = raw[:-1] if raw.endswith(b"\r") else raw
                try:
                    lines.append(raw.decode("utf-8-sig" if n == 1 else "utf-8"))
                except UnicodeDecodeError as e:
                    raise ValueError(f"{path}, line {n}: not UTF-8 (byte {e.start}: {e.reason})") from e
    except gzip.BadGzipFile as e:
        raise ValueError(f"{path} ends in .gz but is not gzip: {e}") from e
    return lines


def read_parallel(src_path: str | os.PathLike, tgt_path: str | os.PathLike) -> list[Pair]:
    """(source, target) pairs from two aligned files, line by line.

    Args:
        src_path: source sentences, one per line (plain or ``.gz``).
        tgt_path: their translations, line for line.

    Returns:
        One pair per line. A line empty on both sides gives ``("", "")``.

    Raises:
        ValueError: the files differ in line count, a line is empty on one side only (the files have
            probably slipped out of step there), or a line is not UTF-8.
    """
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise ValueError(
            f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: the files are not aligned"
        )
    for n, (s, t) in enumerate(zip(src, tgt), start=1):
        if bool(s) != bool(t):
            empty, other = (src_path, tgt_path) if not s else (tgt_path, src_path)
            raise ValueError(f"{empty}, line {n} is empty but line {n} of {other} is not: the files are not aligned")
    return list(zip(src, tgt))


def read_tsv(path: str | os.PathLike, src_col: int = 0, tgt_col: int = 1) -> list[Pair]:
    """(source, target) pairs from columns of a TAB-separated file (plain or ``.gz``); empty lines are skipped.

    For Tatoeba's ``cmn.txt`` (English, Chinese, attribution) the defaults give English -> Chinese;
    ``src_col=1, tgt_col=0`` give Chinese -> English.

    Raises:
        ValueError: a line has too few columns, an empty source or target, or is not UTF-8.
    """
    if src_col < 0 or tgt_col < 0:
        raise ValueError(f"src_col={src_col}, tgt_col={tgt_col}: columns are counted from 0")
    need = max(src_col, tgt_col) + 1
    pairs = []
    for n, line in enumerate(read_lines(path), start=1):
        if not line:
            continue
        cols = line.split("\t")
        if len(cols) < need:
            raise ValueError(f"{path}, line {n}: {len(cols)} TAB-separated columns, need at least {need}: {line!r}")
        s, t = cols[src_col], cols[tgt_col]
        if not s or not t:
            col = src_col if not s else tgt_col
            raise ValueError(f"{path}, line {n}: column {col} is empty: {line!r}")
        pairs.append((s, t))
    return pairs


def sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fetch(url: str) -> bytes:
    """The bytes at ``url`` (the only place this module touches the network; tests replace it)."""
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read()


def download_multi30k(data_dir: str | os.PathLike, names: list[str]) -> None:
    """Download Multi30k files ``names`` (e.g. ``"train.de.gz"``) into ``data_dir``, checking their sha256.

    Raises:
        FileNotFoundError: they cannot be downloaded; the message says which are missing, where they
            were expected and how to get them.
        ValueError: a download's sha256 is not the published one (nothing is written).
    """
    data_dir = Path(data_dir)
    for k, name in enumerate(names):
        try:
            data = _fetch(MULTI30K_URL + name)
        except OSError as e:  # URLError, timeouts, refused connections
            reason = f"downloading {name} failed: {e}"
            raise FileNotFoundError(_missing_message(data_dir, names[k:], reason)) from e
        got = hashlib.sha256(data).hexdigest()
        if got != MULTI30K_SHA256[name]:
            raise ValueError(
                f"downloaded {MULTI30K_URL + name} has sha256 {got}, expected {MULTI30K_SHA256[name]}; not saved"
            )

        def write(tmp: str, data: bytes = data) -> None:  # data bound now, not when called (bugbear B023)
            Path(tmp).write_bytes(data)

        atomic_write(data_dir / name, write)


def _missing_message(data_dir: Path, names: list[str], reason: str) -> str:
    return (
        f"Multi30k files missing from {data_dir}: {', '.join(names)} ({reason}). "
        f"Download them into that folder from {MULTI30K_URL}<name> "
        f"(or `git clone https://github.com/multi30k/dataset` and copy data/task1/raw/<name>); "
        f"their sha256 sums are in aiayn.data.corpus.MULTI30K_SHA256."
    )


def multi30k(
    data_dir: str | os.PathLike, split: str, src_lang: str = "de", tgt_lang: str = "en", download: bool = True
) -> list[Pair]:
    """Multi30k task 1 (raw, untokenised) pairs of one split: train 29,000, val 1,014, test_2016_flickr 1,000.

    Reads ``{split}.{lang}.gz`` from ``data_dir``, downloading the files it lacks when ``download``,
    and checks every file's sha256 against the published one.

    Args:
        data_dir: folder of the ``.gz`` files (created if a download needs it).
        split: ``"train"``, ``"val"`` or ``"test_2016_flickr"``.
        src_lang: ``"de"`` or ``"en"``.
        tgt_lang: the other one.
        download: fetch missing files; if False, missing files are an error.

    Returns:
        (source, target) sentence pairs, in file order.

    Raises:
        ValueError: an unknown split or language, or a file whose sha256 differs (a damaged or edited copy).
        FileNotFoundError: files are missing and cannot be downloaded; the message says how to get them.
    """
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"split={split!r}: expected one of {MULTI30K_SPLITS}")
    for field, lang in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        if lang not in MULTI30K_LANGS:
            raise ValueError(f"{field}={lang!r}: expected one of {MULTI30K_LANGS}")
    data_dir = Path(data_dir)
    names = [f"{split}.{src_lang}.gz", f"{split}.{tgt_lang}.gz"]
    missing = [n for n in dict.fromkeys(names) if not (data_dir / n).is_file()]
    if missing and not download:
        raise FileNotFoundError(_missing_message(data_dir, missing, reason="download=False"))
    if missing:
        download_multi30k(data_dir, missing)
    for name in names:
        got = sha256(data_dir / name)
        if got != MULTI30K_SHA256[name]:
            raise ValueError(
                f"{data_dir / name} has sha256 {got}, expected {MULTI30K_SHA256[name]}: the file is damaged or "
                f"not the published one; delete it to download it again"
            )
    return read_parallel(data_dir / names[0], data_dir / names[1])


def read_corpus(data: str | list[str], data_dir: str | os.PathLike | None = None, split: str = "train",
                src_lang: str = "de", tgt_lang: str = "en") -> list[Pair]:
    """Pairs of ``"multi30k"`` (its ``split`` from ``data_dir``), a TSV file, or two aligned files."""
    paths = [data] if isinstance(data, str) else list(data)
    if paths == ["multi30k"]:
        if data_dir is None:
            raise ValueError("data='multi30k' needs data_dir, the folder with its six .gz files")
        return multi30k(data_dir, split, src_lang, tgt_lang)
    if len(paths) == 1:
        return read_tsv(paths[0])
    if len(paths) == 2:
        return read_parallel(*paths)
    raise ValueError(f"data must be 'multi30k', one TSV file or two aligned files, got {len(paths)} paths")


def held_out_split(pairs: list[Pair], n_test: int, seed: int) -> tuple[list[Pair], list[Pair]]:
    """``(train, held_out)``: the last ``n_test`` pairs after a seeded shuffle are held out."""
    import random

    if n_test < 1:  # pairs[:-0] would train on nothing and hold out everything
        raise ValueError(f"n_test={n_test} must be at least 1")
    pairs = list(pairs)
    random.Random(seed).shuffle(pairs)
    if len(pairs) <= n_test:
        raise ValueError(f"data holds {len(pairs)} pairs, not more than the {n_test} to hold out (n_test)")
    return pairs[:-n_test], pairs[-n_test:]


def read_text(path: str | os.PathLike) -> str:
    """The whole text of a UTF-8 file; an empty or undecodable file is an error that names it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no text file at {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text (byte {e.start}): {e.reason}") from e
    if not text.strip():
        raise ValueError(f"{path} holds no text")
    return text
