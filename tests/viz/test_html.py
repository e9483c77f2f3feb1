"""The HTML attention viewer: one self-contained file whose data are the model's weights, and whose text
can never become markup. (Clicking through it in a real browser is not tested here: no browser is
installed on the CI machine.)"""

import json
import re
from html.parser import HTMLParser

import pytest
import torch

import aiayn
from aiayn.cli import main
from aiayn.data import CharTokenizer
from aiayn.viz import attention_weights
from aiayn.viz.html import attention_html

EVIL = ['<script>alert(1)</script>', '"><img src=x onerror=alert(2)>', "</script><script>alert(3)", "a&amp;b"]


class Scripts(HTMLParser):
    """The page's elements and the text of each <script>, as a browser's parser splits them."""

    def __init__(self):
        super().__init__()
        self.tags, self.scripts, self._in = [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in = dict(attrs)
            self.scripts.append([dict(attrs), ""])

    def handle_endtag(self, tag):
        if tag == "script":
            self._in = None

    def handle_data(self, data):
        if self._in is not None:
            self.scripts[-1][1] += data


def parse(path):
    p = Scripts()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def test_the_page_carries_the_weights_and_tokens_as_data(tmp_path):
    torch.manual_seed(0)
    w = [torch.rand(2, 3, 4).softmax(-1), torch.rand(2, 3, 4).softmax(-1)]
    page = attention_html({"encoder-decoder attention": w}, {"encoder-decoder attention": (["a", "b", "c"], EVIL)},
                          tmp_path / "view.html", title=EVIL[0])
    p = parse(page)
    assert [t for t, _ in p.tags if t in ("script", "img")] == ["script", "script"]  # no injected element
    (data_attrs, raw), (code_attrs, code) = p.scripts
    assert data_attrs == {"type": "application/json", "id": "aiayn-data"} and "src" not in code_attrs
    data = json.loads(raw)
    assert data["title"] == EVIL[0] and data["kinds"][0]["keys"] == EVIL  # the text itself, unchanged
    torch.testing.assert_close(torch.tensor(data["kinds"][0]["weights"]), torch.stack(w), atol=1e-6, rtol=0)
    assert "innerHTML" not in code and "textContent" in code  # tokens reach the page as text only
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", page.read_text())  # self-contained


def test_viz_attention_html_for_a_run_holds_the_models_weights(tmp_path):
    tok = CharTokenizer.train(["hello world"])
    model = aiayn.build("transformer-tiny", src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size,
                        n_encoder_layers=2, n_decoder_layers=1, max_len=64)
    run = tmp_path / "run"
    aiayn.save(model, run)
    tok.save(run / "src_tokenizer.json")
    tok.save(run / "tgt_tokenizer.json")
    html = tmp_path / "view.html"
    assert main(["viz", "attention", "--run", str(run), "--text", "hello", "--target", "hel", "--out",
                 str(tmp_path / "png"), "--html", str(html)]) == 0
    data = json.loads(parse(html).scripts[0][1])
    assert [k["name"] for k in data["kinds"]] == ["encoder self-attention", "decoder self-attention",
                                                  "encoder-decoder attention"]
    model = aiayn.load(run).eval()
    src, tgt = torch.tensor([tok.encode("hello") + [2]]), torch.tensor([[1] + tok.encode("hel")])
    expected = attention_weights(model, lambda: model(src, tgt))
    for kind in data["kinds"]:
        torch.testing.assert_close(torch.tensor(kind["weights"]), torch.stack(expected[kind["name"]]), atol=1e-6,
                                   rtol=0)
    assert data["kinds"][2]["queries"] == ["<s>", "h", "e", "l"] and data["kinds"][2]["keys"][-1] == "</s>"


def test_weights_that_do_not_fit_the_tokens_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"layer 0: weights \(2, 3, 3\) must be \(heads, 3 queries, 4 keys\)"):
        attention_html({"x": [torch.rand(2, 3, 3)]}, {"x": (["a"] * 3, ["b"] * 4)}, tmp_path / "v.html")


def test_the_page_opens_at_the_view_it_is_given_and_refuses_one_it_lacks(tmp_path):
    w = {"self": [torch.rand(2, 3, 3).softmax(-1)] * 2}
    tokens = {"self": (["a", "b", "c"],) * 2}
    page = attention_html(w, tokens, tmp_path / "v.html", view={"layer": 1, "head": 0, "hover": 2})
    assert json.loads(parse(page).scripts[0][1])["view"] == {"layer": 1, "head": 0, "hover": 2}
    assert "view" not in json.loads(parse(attention_html(w, tokens, tmp_path / "w.html")).scripts[0][1])
    for view, message in (({"layer": 2}, r"layer=2 must be in \[0, 2\)"), ({"hover": 3}, r"hover=3 must be in"),
                          ({"kind": 1}, r"kind=1 must be in \[0, 1\)"), ({"token": 0}, "unknown keys")):
        with pytest.raises(ValueError, match=message):
            attention_html(w, tokens, tmp_path / "x.html", view=view)


def _chromium():
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.browser
@pytest.mark.skipif(_chromium() is None, reason="needs chromium (Debian's package; .ci/run installs it)")
def test_in_a_real_browser_hovering_a_token_shows_the_models_weights_and_no_text_runs(tmp_path):
    import subprocess

    torch.manual_seed(1)
    w = [torch.rand(2, 3, 4).softmax(-1) for _ in range(2)]  # 2 layers of (H=2, T=3, S=4)
    page = attention_html({"self": [torch.rand(2, 3, 3).softmax(-1)], "cross": w},
                          {"self": (["q0", "q1", "q2"],) * 2, "cross": (["q0", "q1", "q2"], EVIL)},
                          tmp_path / "view.html", title=EVIL[1])
    url = page.as_uri() + "#kind=1&layer=1&head=1&hover=2"  # cross, layer 1, head 1, hover the third query
    out = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    dom = Scripts()
    dom.feed(out.stdout)
    keys = [a for t, a in dom.tags if t == "div" and a.get("data-side") == "k"]
    shown = torch.tensor([float(a["data-weight"]) for a in keys])
    torch.testing.assert_close(shown, w[1][1, 2], atol=1e-5, rtol=0)  # what the hovered token attends to
    hovered = [a for t, a in dom.tags if t == "div" and a.get("data-side") == "q" and "on" in a.get("class", "")]
    assert [a["data-index"] for a in hovered] == ["2"]
    assert sum(t == "line" for t, _ in dom.tags) == int((w[1][1, 2] >= 0.01).sum())  # one line per visible weight
    assert [t for t, _ in dom.tags if t in ("script", "img")] == ["script", "script"]  # nothing injected ran
    for text in EVIL:
        assert text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in out.stdout  # shown as text


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="needs chromium (Debian's package; .ci/run installs it)")
def test_in_a_real_browser_the_page_opens_hovering_the_token_of_its_view(tmp_path):
    import subprocess

    torch.manual_seed(2)
    w = [torch.rand(3, 4, 4).softmax(-1) for _ in range(2)]  # 2 layers of (H=3, T=4, S=4)
    page = attention_html({"self": w}, {"self": (["the", "animal", "it", "was"],) * 2}, tmp_path / "view.html",
                          view={"layer": 1, "head": 2, "hover": 2})
    out = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    dom = Scripts()
    dom.feed(out.stdout)
    shown = torch.tensor([float(a["data-weight"]) for t, a in dom.tags if t == "div" and a.get("data-side") == "k"])
    torch.testing.assert_close(shown, w[1][2, 2], atol=1e-5, rtol=0)  # layer 1, head 2, from "it"
