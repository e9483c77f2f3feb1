"""`aiayn bench` writes where it is told: the results into `--out`, which has no default, and a page only where
`--docs` says, so a run from any folder leaves nothing else behind; `--report-only` needs the page; the page
names the command that regenerates it; a case runs at toy size, and a wrong name is refused with a suggestion.
No time is asserted."""

import importlib.util
import os

import pytest

from aiayn.cli import main

hf = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs the hf extra (transformers)")


def files_under(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)


def test_out_has_no_default_and_report_only_needs_a_page(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["bench", "vit-forward", "--quick"])
    assert e.value.code == 2 and "the following arguments are required: --out" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["bench", "--report-only", "--out", "results"])
    assert e.value.code == 2 and "give --docs" in capsys.readouterr().err
    assert files_under(tmp_path) == []  # refused before anything was written


def test_report_only_writes_the_page_asked_for_and_it_names_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--report-only", "--out", "results", "--docs", "site/bench.md"]) == 0
    assert files_under(tmp_path) == ["site/bench.md"]  # no docs/ nor benchmarks/ of the folder it ran in
    page = (tmp_path / "site" / "bench.md").read_text()
    assert "`aiayn bench --out ../results --docs bench.md`, run from\nthe page's folder" in page  # no repository here
    assert "No results yet" in page
    assert str(tmp_path) not in page


@hf
def test_a_case_runs_into_out_alone_and_a_wrong_name_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "vit-forward", "--quick", "--rounds", "1", "--threads", "1", "--out", "results"]) == 0
    assert files_under(tmp_path) == ["results/vit-forward.json"]  # no page without --docs
    assert main(["bench", "--report-only", "--out", "results", "--docs", "benchmarks.md"]) == 0
    assert "`vit-forward` (quick)" in (tmp_path / "benchmarks.md").read_text()
    assert main(["bench", "vit-foward", "--quick", "--out", "results"]) == 2
    assert "did you mean 'vit-forward'" in capsys.readouterr().err


def test_list_names_every_case_and_compile_picks_the_compiled_variants(tmp_path, monkeypatch, capsys):
    from aiayn.benchmark import run

    assert main(["bench", "--out", str(tmp_path), "--list"]) == 0
    assert capsys.readouterr().out.split() == run.NAMES
    asked = []
    monkeypatch.setattr("aiayn.benchmark.run_bench", lambda cases, **_: asked.append(cases))
    main(["bench", "--out", str(tmp_path), "--compile", "decode-beam-ct2", "gpt2-generate-compiled"])
    main(["bench", "--out", str(tmp_path), "--compile"])
    assert asked == [["decode-beam-ct2-compiled", "gpt2-generate-compiled"],
                     [n for n in run.NAMES if n.endswith("-compiled")]] and len(asked[1]) >= 9
    with pytest.raises(SystemExit) as e:
        main(["bench", "--out", str(tmp_path), "--compile", "train-small"])
    assert e.value.code == 2 and "no compiled variant of train-small" in capsys.readouterr().err
    assert files_under(tmp_path) == []
