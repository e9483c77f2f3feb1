"""aiayn train plm (XLNet's permutation language model): the factorisation orders against the paper's rules
written as a loop, a short run that learns against the unigram baseline, and fine-tuning it with textclass."""

import collections
import math

import pytest
import torch

import aiayn
from aiayn import recipes
from aiayn.recipes.plm import PermutationLM, permutation

SMALL = {"batch_size": 16, "seq_len": 32, "n_train": 3000, "n_test": 200, "eval_blocks": 64, "lr": 3e-3,
         "model": {"d_model": 64, "n_heads": 2, "d_ff": 128, "mem_len": 32}}


def test_the_targets_see_each_other_in_one_strict_order():
    """Over several targets the visibility among them is a strict total order (the factorisation order): each
    sees exactly the targets before it, so the k-th sees k - 1 of them and every one it sees sees fewer."""
    _, perm, mapping, _ = permutation(torch.zeros(3, 12, dtype=torch.long), 4, torch.Generator().manual_seed(1))
    for b in range(3):
        targets = mapping[b].argmax(-1).tolist()  # 3 of 12
        sees = {i: {j for j in targets if j != i and not perm[b, i, j]} for i in targets}
        assert sorted(len(s) for s in sees.values()) == [0, 1, 2]
        for i in targets:
            assert all(sees[j] < sees[i] for j in sees[i])  # transitive and antisymmetric


def test_the_orders_predict_their_last_sixth_and_hide_what_the_paper_hides():
    ids = torch.arange(100, 112).view(2, 6)
    _, perm, mapping, labels = permutation(ids, 3, torch.Generator().manual_seed(0))
    assert mapping.shape == (2, 2, 6) and labels.shape == (2, 2)
    for b in range(2):
        targets = mapping[b].argmax(-1).tolist()
        assert targets == sorted(targets) and mapping[b].sum().item() == 2
        assert labels[b].tolist() == [int(ids[b, t]) for t in targets]
        # the order the mask implies: a target that sees the other target comes after it
        first, second = targets if perm[b, targets[0], targets[1]] else targets[::-1]
        for i in range(6):
            for j in range(6):
                if j not in targets:  # a non-target is seen by everyone
                    hidden = False
                elif i not in targets:  # a target by no non-target
                    hidden = True
                else:  # a target by the targets after it in the order, never by itself
                    hidden = not (i == second and j == first)
                assert bool(perm[b, i, j]) == hidden, (b, i, j)


@pytest.fixture(scope="module")
def plm_run(tmp_path_factory):
    return recipes.train("plm", steps=300, eval_every=300, out=str(tmp_path_factory.mktemp("plm")), progress=False,
                         verbose=False, **SMALL)


def test_a_short_run_trains_and_fine_tunes_into_a_classifier(tmp_path):
    """The short version of the two slow checks below: the loss falls, and textclass takes the run."""
    short = recipes.train("plm", steps=40, eval_every=20, warmup=5, out=str(tmp_path / "plm"), progress=False,
                          verbose=False, **SMALL)
    first, last = short["validation"]
    assert last["val_loss"] < first["val_loss"]
    # a config that keeps every position (the released XLNets') trains with a memory of seq_len, not a growing one
    unbounded = PermutationLM(recipes.config("plm", **{**SMALL, "model": {**SMALL["model"], "mem_len": None}}), None,
                              lambda *a, **k: None)
    assert unbounded.new_memory(unbounded.model).mem_len == SMALL["seq_len"]
    result = recipes.train("textclass", model_type="xlnet", init_from=str(short["run"]), steps=10, eval_every=10,
                           warmup=2, out=str(tmp_path), progress=False, verbose=False)
    model = aiayn.load(result["run"])
    assert type(model).__name__ == "XLNet" and model.cfg.head == "classification"
    assert model.cfg.d_model == 64  # the pre-trained body's config
    assert aiayn.pipeline(result["run"])("monday, december 7th, 2026")["label"] in ("jan-jun", "jul-dec")


@pytest.mark.slow
def test_the_permutation_lm_learns_past_the_unigram_baseline(plm_run):
    # Baseline: the unigram entropy of the training tokens (4.3 nats here), what knowing only how often each
    # token occurs achieves. Seeds 0 and 1 of this run reach 3.0 after 300 updates.
    task = PermutationLM(recipes.config("plm", **SMALL), None, lambda *a, **k: None)
    counts = collections.Counter(task.train_ids.tolist())
    n = sum(counts.values())
    entropy = -sum(c / n * math.log(c / n) for c in counts.values())
    assert entropy > 4.0
    assert plm_run["validation"][-1]["val_loss"] < entropy - 0.6


@pytest.mark.slow
def test_textclass_fine_tunes_the_pretrained_xlnet(plm_run, tmp_path):
    result = recipes.train("textclass", model_type="xlnet", init_from=str(plm_run["run"]), steps=150,
                           eval_every=50, lr=1e-3, out=str(tmp_path), progress=False, verbose=False)
    # made-up dates labelled by half-year: chance is 50%; this run reaches 96% on validation after 100 updates,
    # 99.8% on test after 150
    assert result["test_accuracy"] > 0.8
    assert aiayn.pipeline(result["run"])("monday, december 7th, 2026")["label"] == "jul-dec"
