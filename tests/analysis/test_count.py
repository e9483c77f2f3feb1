"""``aiayn count`` and docs/numbers.md: what they print is what the formulas and the published table say."""

import json
import runpy
from pathlib import Path

import pytest

from aiayn.analysis import counts, parameter_table
from aiayn.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_count_json_has_parameters_and_multiply_adds_by_part(capsys):
    assert main(["count", "gpt3-175b", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    params, macs = report["parameters"], report["macs"]
    assert params["total"] == sum(v for k, v in params.items() if k != "total") == 174_604_259_328
    assert macs["total"] == sum(v for k, v in macs.items() if k != "total") == counts("gpt3-175b").total_macs
    assert report["flops"] == 2 * macs["total"] and report["input"] == {"seq_len": 2048}
    assert report["published"]["parameters"] == 175e9


def test_count_table_for_text_and_image_models(capsys):
    assert main(["count", "swin-t", "--image-size", "300x200", "--batch", "2"]) == 0
    out = capsys.readouterr().out
    c = counts("swin-t", image_size=(300, 200), batch=2)
    assert "2 images of 300 x 200" in out and f"{c.total_macs:,}" in out
    assert "1 MAC = 2 FLOPs" in out and "4.5G multiply-adds at 224 x 224; ours there 4.49G (-0.2%)" in out
    assert main(["count", "bert-base", "--seq-len", "128"]) == 0
    out = capsys.readouterr().out
    assert f"{parameter_table('bert-base')['total']:,}" in out and "projections" in out and "scores" in out
    assert "1 x 128 tokens" in out and f"{counts('bert-base', seq_len=128).total_macs:,}" in out
    assert main(["count", "detr-r50"]) == 0
    assert "backbone" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["count", "gpt2", "--image-size", "224"], "--image-size is for image models"),
    (["count", "vit-b16", "--seq-len", "8"], "--seq-len is for text models"),
    (["count", "vit-b16", "--image-size", "22x"], "--image-size must be a side or HEIGHTxWIDTH"),
    (["count", "gpt2", "--batch", "0"], "--batch must be a positive integer"),
])
def test_bad_count_arguments_are_named(args, message, capsys):
    try:
        code = main(args)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    assert code == 2 and message in capsys.readouterr().err


def test_numbers_doc_is_what_the_script_writes(tmp_path):
    script = runpy.run_path(str(ROOT / "scripts" / "make_numbers.py"))
    text = script["render"]()
    assert (ROOT / "docs" / "numbers.md").read_text() == text, "run python scripts/make_numbers.py"
    assert "| gpt3-175b | 175B | 174,604,259,328 | -0.2% |" in text
    assert "| swin-t | 28M | 28,288,354 | +1.0% | 4.5G MACs at 224 x 224 | 4.49G | -0.2% |" in text
    assert "| detr-r50 | 41M | 41,524,768 | +1.3% | 86G MACs at 800 x 1066 | 81.25G | -5.5% |" in text
    assert script["main"](["--out", str(tmp_path / "n.md")]) == 0 and (tmp_path / "n.md").read_text() == text
