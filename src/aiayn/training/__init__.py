"""Losses, optimiser and schedule, the loop, checkpoints."""

from aiayn.io import atomic_write, write_json, write_text
from aiayn.training.average import average_checkpoints
from aiayn.training.checkpoint import load, save
from aiayn.training.loop import fit
from aiayn.training.losses import label_smoothed_loss
from aiayn.training.schedule import adamw_cosine, decay_groups, noam_lr, noam_optimizer, warmup_cosine
from aiayn.training.state import load_train_state, save_train_state

__all__ = ["average_checkpoints", "atomic_write", "load", "save", "write_json", "write_text", "fit", "label_smoothed_loss", "noam_lr",
           "noam_optimizer", "load_train_state", "save_train_state", "adamw_cosine", "decay_groups", "warmup_cosine"]
