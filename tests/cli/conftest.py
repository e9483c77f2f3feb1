"""Runs and inputs shared by the command-line tests: a tiny run of every task, trained once per session."""

import numpy as np
import pytest
import torch

from aiayn import recipes
from aiayn.data import date_lines, make_pairs
from aiayn.data.detection import SHAPES, draw_shapes
from aiayn.data.images import synthetic_digits

TINY = {"progress": False, "verbose": False, "steps": 3, "warmup": 1, "eval_every": 0, "model": {"d_model": 32}}


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """A tiny run of every task (three updates each: what matters here is where they run, not what they learnt);
    training them also runs each recipe's validation and final evaluation, which move their batches too."""
    out = str(tmp_path_factory.mktemp("runs"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {
            "translation": recipes.train("copy", n_train=300, n_test=10, max_tokens=128, out=out, **TINY)["run"],
            "lm": recipes.train("lm", n_train=200, n_test=5, block=16, batch_size=4, out=out, **TINY)["run"],
            "mlm": recipes.train("mlm", n_train=200, n_test=10, batch_size=4, out=out, **TINY)["run"],
            "image": recipes.train("image", n_train=64, n_test=16, batch_size=8, out=out, **TINY)["run"],
            "detect": recipes.train("detect", image_size=48, max_objects=1, n_test=4, batch_size=2, out=out,
                                    **TINY)["run"],
            "denoise": recipes.train("denoise", n_train=100, n_test=5, batch_size=4, vocab_size=300, out=out,
                                     **TINY)["run"],
        }
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    """Data for every kind of run: translation pairs, a text file, digit pictures, a shapes picture and a tiny
    Pascal VOC folder of shapes (the detect run's classes)."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("inputs")
    pairs = make_pairs("copy", 0, 6, seed=5)[1]
    (folder / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    (folder / "text.txt").write_text("\n".join(date_lines(12, seed=7)) + "\n")
    digits, labels = synthetic_digits(8, seed=9)
    Image.fromarray(digits[0, 0].numpy()).save(folder / "digit.png")
    np.save(folder / "digit.npy", digits[1, 0].numpy())
    mnist = folder / "mnist"
    mnist.mkdir()
    (mnist / "t10k-images-idx3-ubyte").write_bytes(bytes([0, 0, 8, 3]) + b"".join(
        n.to_bytes(4, "big") for n in (8, 28, 28)) + digits[:, 0].numpy().tobytes())
    (mnist / "t10k-labels-idx1-ubyte").write_bytes(bytes([0, 0, 8, 1]) + (8).to_bytes(4, "big")
                                                  + labels.to(torch.uint8).numpy().tobytes())
    shapes, _ = draw_shapes(np.random.default_rng(5), size=48, max_objects=1)
    Image.fromarray(shapes.permute(1, 2, 0).numpy()).resize((64, 48)).save(folder / "shapes.png")
    voc = folder / "voc"
    for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (voc / sub).mkdir(parents=True)
    for i in range(3):
        picture, target = draw_shapes(np.random.default_rng([7, i]), size=48, max_objects=2)
        Image.fromarray(picture.permute(1, 2, 0).numpy()).save(voc / "JPEGImages" / f"im{i}.jpg")
        objects = "".join(
            f"<object><name>{SHAPES[int(c)]}</name><bndbox><xmin>{(cx - w / 2) * 48 + 1:.0f}</xmin>"
            f"<ymin>{(cy - h / 2) * 48 + 1:.0f}</ymin><xmax>{(cx + w / 2) * 48:.0f}</xmax>"
            f"<ymax>{(cy + h / 2) * 48:.0f}</ymax></bndbox></object>"
            for c, (cx, cy, w, h) in zip(target["labels"].tolist(), target["boxes"].tolist()))
        (voc / "Annotations" / f"im{i}.xml").write_text(
            f"<annotation><size><width>48</width><height>48</height><depth>3</depth></size>{objects}</annotation>")
    (voc / "ImageSets" / "Main" / "val.txt").write_text("im0\nim1\nim2\n")
    return {"pairs": pairs, "tsv": folder / "pairs.tsv", "text": folder / "text.txt", "mnist": mnist,
            "images": [folder / "digit.png", folder / "digit.npy"], "shapes": folder / "shapes.png", "voc": voc}
