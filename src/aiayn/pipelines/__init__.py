"""Answering with a saved model: loading it, and what each task does with it. Training is :mod:`aiayn.recipes`'.

    aiayn.pipeline(folder)              a model loaded once, for many calls (:mod:`~aiayn.pipelines.base`)
    pipelines.loading                   on a device or in int8: every loader goes through ``ready``
    pipelines.translation               load_run, translate, translate_texts
    pipelines.lm                        load_lm_run, generate (streamed), stream_text, complete
    pipelines.embed                     load_bert, embed, embed_texts, bert_tokenizer
    pipelines.textclass                 load_classifier, classify_texts, and how a classifier reads a text
    pipelines.image                     classify, classify_images, read_image_file, pixel_norm
    pipelines.detect                    load_detector, find_objects, detect (drawn)

A pipeline module imports the library (models, data, decoding, training's device and checkpoint helpers) and never
a recipe; the recipes import these for what training shares with answering (a classifier reads its texts the same
way in both), and each task's scoring of a saved run (:mod:`aiayn.recipes.evaluate`) answers through them.
"""

from aiayn.pipelines.base import METHODS, TLDR, Pipeline, pipeline, tldr, tokenizer

__all__ = ["METHODS", "TLDR", "Pipeline", "pipeline", "tldr", "tokenizer"]
