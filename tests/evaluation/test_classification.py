"""The classification metrics against hand-counted cases."""

import pytest
import torch

from aiayn.evaluation.classification import confusion_matrix


def test_the_confusion_matrix_counts_true_rows_and_predicted_columns():
    predicted, target = torch.tensor([0, 2, 2, 1, 0]), torch.tensor([0, 2, 1, 1, 2])
    assert confusion_matrix(predicted, target, 3).tolist() == [[1, 0, 0], [0, 1, 1], [1, 0, 1]]
    assert confusion_matrix(torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long), 2).sum() == 0


def test_a_class_outside_the_matrix_is_refused_not_counted_in_another_cell():
    # a prediction of 3 of 3 classes landed in the next row's first cell
    with pytest.raises(ValueError, match=r"predicted holds classes 3..3, outside \[0, 3\)"):
        confusion_matrix(torch.tensor([3]), torch.tensor([0]), 3)
    with pytest.raises(ValueError, match=r"target holds classes -1..0, outside \[0, 3\)"):
        confusion_matrix(torch.tensor([0, 1]), torch.tensor([-1, 0]), 3)
    with pytest.raises(ValueError, match="must have one shape"):
        confusion_matrix(torch.tensor([0, 1]), torch.tensor([0]), 3)
