"""Losses, optimiser and schedule, the loop, a time budget, checkpoints, devices, activation checkpointing."""

from aiayn.io import atomic_write, write_json, write_text
from aiayn.models.checkpoint import load, save
from aiayn.training import device, distributed
from aiayn.training.activations import checkpoint_blocks
from aiayn.training.average import average_checkpoints
from aiayn.training.budget import timing_updates, updates_in
from aiayn.training.loop import fit
from aiayn.training.losses import label_smoothed_loss
from aiayn.training.schedule import adamw_cosine, decay_groups, noam_lr, noam_optimizer, warmup_cosine
from aiayn.training.state import load_train_state, save_train_state, train_state_info

__all__ = ["adamw_cosine", "atomic_write", "average_checkpoints", "checkpoint_blocks", "decay_groups", "device",
           "distributed", "fit", "label_smoothed_loss", "load", "load_train_state", "noam_lr", "noam_optimizer", "save",
           "save_train_state", "timing_updates", "train_state_info", "updates_in", "warmup_cosine", "write_json",
           "write_text"]
