"""The ``aiayn`` command: it parses arguments, calls the library (:mod:`aiayn.recipes` and the rest) and prints."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn, cast

from aiayn.cli.flags import COMPILE_HELP, DEVICE_HELP, DTYPE_HELP, FORCE_HELP, INT8_HELP
from aiayn.defaults import DTYPES
from aiayn.defaults import TEXT_GENERATION as LM
from aiayn.version import __version__
from aiayn.viz.files import WHATS


class _Formatter(argparse.HelpFormatter):
    """Help that gives every flag's default, unless its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (not action.option_strings or action.default is argparse.SUPPRESS or "default" in text
                or isinstance(action, (argparse._HelpAction, argparse._VersionAction))):
            return text
        d = action.default
        shown = ("none" if d is None else ("on" if d else "off") if isinstance(d, bool)
                 else " ".join(map(str, d)) if isinstance(d, list) else d)
        return f"{text} (default: {shown})".lstrip().replace("%", "%%") if text else f"default: {shown}"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line of help, status 2, no traceback
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="aiayn", description="Attention Is All You Need, and the models it started.")
    p.add_argument("--version", action="version", version=f"aiayn {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    sub.add_parser("train", help="train a recipe (translation, lm, mlm, denoise, image, detect, textclass, or a named "
                                 "preset); with no arguments, the default job (about two minutes on a CPU); "
                                 "`aiayn train RECIPE --help` lists its settings", add_help=False)
    tr = sub.add_parser("translate", help="translate text with a saved run")
    tr.add_argument("--run", required=True, help="run folder written by `aiayn train`")
    tr.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")
    tr.add_argument("--n-best", type=int, default=1, help="the best N beams of each text, best first, on N lines "
                                                          "(at most --beam)")
    tr.add_argument("--device", default=None, help=DEVICE_HELP)
    tr.add_argument("--int8", action="store_true", help=INT8_HELP)
    tr.add_argument("--compile", action="store_true", help=COMPILE_HELP)
    tr.add_argument("--dtype", choices=DTYPES, default=None, help=DTYPE_HELP)
    tr.add_argument("text", nargs="*", help="sentences to translate; none: the lines of --input, else of standard "
                                            "input")
    _batch_flags(tr, "one translation per line")

    e = sub.add_parser("evaluate", help="score a saved run: BLEU and chrF (translation), perplexity (lm), masked-token "
                                        "accuracy (mlm), accuracy and confusion matrix (image), mAP (detect), "
                                        "accuracy, precision, recall and confusion matrix (textclass)")
    e.add_argument("--run", required=True, help="run folder written by `aiayn train`")
    e.add_argument("--data", nargs="+", default=None,
                   help="translation: 'multi30k', a TSV file of pairs, or two aligned files; lm, mlm: a text file; "
                        "textclass: a folder of one text file per class, or a label<TAB>text file")
    e.add_argument("--data-dir", default=None, help="translation: the Multi30k folder; image: MNIST files (IDX or "
                                                    "CSV); detect: a Pascal VOC folder")
    e.add_argument("--split", default=None, help="translation: the Multi30k split (default test_2016_flickr); "
                                                 "detect: the VOC split (default val); textclass: train, val or "
                                                 "test of the run's own split (default: every text)")
    e.add_argument("--src-lang", default=None, help="translation: default the run's")
    e.add_argument("--tgt-lang", default=None, help="translation: default the run's")
    e.add_argument("--beam", type=int, default=None, help="translation: beam size (default 4; 1 = greedy)")
    e.add_argument("--weights", default=None, help="translation: other weights of the run's model than its last, "
                                                   "e.g. average.safetensors or best.safetensors")
    e.add_argument("--mem-len", type=int, default=None, help="lm with a memory (Transformer-XL): positions it keeps "
                                                             "(default the model's; longer reads more context)")
    e.add_argument("--device", default=None, help=DEVICE_HELP)
    e.add_argument("--int8", action="store_true", help=INT8_HELP)
    e.add_argument("--json", action="store_true", help="print the numbers as JSON")
    a = sub.add_parser("average", help="average checkpoints (the paper averages its last 5, section 6.1)")
    a.add_argument("checkpoints", nargs="+", help="checkpoint files or run folders")
    a.add_argument("--out", required=True, help="file or folder for the averaged checkpoint")

    g = sub.add_parser("generate", help="continue a prompt with a language model, streaming the text")
    g.add_argument("--run", required=True, help="run folder of `aiayn train --task lm` or `aiayn convert`")
    g.add_argument("--prompt", default="", help="text to continue (default: none, start from end-of-text)")
    g.add_argument("--max-new-tokens", type=int, default=None,
                   help=f"tokens made after the prompt, at most (default {LM['max_new_tokens']}, or the room the "
                        f"model's positions leave; more than that room is refused)")
    g.add_argument("--temperature", type=float, default=LM["temperature"], help="divides the logits; 0 is greedy")
    g.add_argument("--top-k", type=int, default=LM["top_k"], help="sample among the K most likely tokens only "
                                                                  "(0: all)")
    g.add_argument("--top-p", type=float, default=LM["top_p"], help="nucleus sampling: keep the most likely tokens "
                                                                    "whose probabilities sum to P")
    g.add_argument("--repetition-penalty", type=float, default=LM["repetition_penalty"],
                   help="divide the logits of tokens already in the text by it (CTRL's penalty; 1: none)")
    g.add_argument("--no-repeat-ngram-size", type=int, default=LM["no_repeat_ngram_size"],
                   help="never repeat an n-gram of this size (0: no ban)")
    g.add_argument("--min-new-tokens", type=int, default=LM["min_new_tokens"],
                   help="tokens made before the end-of-text token may come")
    g.add_argument("--stop", action="append", default=None, metavar="TEXT", help="stop before this text (repeatable)")
    g.add_argument("--seed", type=int, default=None, help="make sampling repeatable")
    g.add_argument("--num-beams", type=int, default=1,
                   help="beam search over N hypotheses: the most likely text, nothing sampled (--temperature, "
                        "--top-k, --top-p unused), printed whole instead of streamed (1: no search)")
    g.add_argument("--device", default=None, help=DEVICE_HELP)
    g.add_argument("--int8", action="store_true", help=INT8_HELP)
    g.add_argument("--compile", action="store_true", help=COMPILE_HELP)
    g.add_argument("--dtype", choices=DTYPES, default=None, help=DTYPE_HELP)
    _batch_flags(g, "JSON lines {prompt, text}; one prompt a line of --input, generated one after another",
                 batch_size=False)

    cv = sub.add_parser("convert", help="a Hugging Face model folder -> an aiayn run folder (weights + tokenizer)")
    cv.add_argument("paths", nargs="+", metavar="[KIND] FOLDER OUT",
                    help="KIND (optional: hf, hf-gpt2, hf-marian) checks the folder's model type; FOLDER may be a "
                         "Hugging Face model id (gpt2, org/name), fetched into the Hugging Face cache")
    cv.add_argument("--revision", default=None, help="a model id's branch, tag or commit (DETR: no_timm)")
    cv.add_argument("--force", action="store_true", help=FORCE_HELP)

    ex = sub.add_parser("export", help="a run -> a Hugging Face folder (transformers' from_pretrained opens it), "
                                       "ONNX graphs (onnxruntime runs them) or a CTranslate2 model")
    ex.add_argument("run", help="a run folder or checkpoint")
    ex.add_argument("--to", choices=["hf", "onnx", "ctranslate2"], required=True, help="hf: config.json, "
                    "model.safetensors, tokenizer files and a model card; onnx: the graphs (needs the export extra); "
                    "ctranslate2: model.bin, its vocabulary and the tokenizer files, made by CTranslate2's converter "
                    "(needs the ctranslate2 extra)")
    ex.add_argument("--quantization", default=None, metavar="TYPE",
                    help="--to ctranslate2 only: the weights' type (int8, int8_float16, float16, bfloat16, ...; "
                         "default float32, as trained)")
    ex.add_argument("out", help="the folder to write")
    ex.add_argument("--force", action="store_true", help=FORCE_HELP)

    em = sub.add_parser("embed", help="L2-normalised sentence embeddings from a BERT (Hugging Face folder or run)")
    em.add_argument("--model", required=True, help="a Hugging Face BERT folder (e.g. all-MiniLM-L6-v2) or a run")
    em.add_argument("--similarity", action="store_true", help="print the cosine similarities instead")
    em.add_argument("--device", default=None, help=DEVICE_HELP)
    em.add_argument("--int8", action="store_true", help=INT8_HELP)
    em.add_argument("text", nargs="*", help="sentences; none: the lines of --input, else of standard input")
    _batch_flags(em, "the vectors as a .npy array (N, C) when FILE ends in .npy, else JSON lines")

    cl = sub.add_parser("classify", help="the top classes of texts (a run of `aiayn train textclass`) or of image "
                                         "files (a run of `aiayn train image`); the run says which")
    cl.add_argument("--run", required=True, help="run folder of `aiayn train textclass` or `aiayn train image`")
    cl.add_argument("--top", type=int, default=3, help="classes shown per input (a text run: at most its classes)")
    cl.add_argument("--device", default=None, help=DEVICE_HELP)
    cl.add_argument("--int8", action="store_true", help=INT8_HELP)
    cl.add_argument("inputs", nargs="*", metavar="TEXT|IMAGE",
                    help="a textclass run: texts (none: the lines of --input, else of standard input); an image "
                         "run: PNG, JPEG or .npy files")
    _batch_flags(cl, "JSON lines {text, label, score, top}; textclass runs")

    d = sub.add_parser("detect", help="find objects in an image with a run of `aiayn train --task detect`")
    d.add_argument("--run", required=True, help="run folder of `aiayn train --task detect`")
    d.add_argument("--threshold", type=float, default=0.7, help="keep boxes whose class probability is above this")
    d.add_argument("--device", default=None, help=DEVICE_HELP)
    d.add_argument("--int8", action="store_true", help=INT8_HELP)
    d.add_argument("--out", default=None, help="picture with the boxes drawn (default RUN/detections/IMAGE.png)")
    d.add_argument("image", help="an image file")

    c = sub.add_parser("count", help="parameters and forward multiply-adds of a preset, a run folder or a Hugging "
                                     "Face folder, by part (a preset needs no weights)")
    c.add_argument("preset", metavar="PRESET|FOLDER", help="a preset name (aiayn.presets()), a run folder of `aiayn "
                                                           "train` or a Hugging Face model folder")
    c.add_argument("--seq-len", type=int, default=None,
                   help="text models: positions (encoder-decoder: source and target each); default max_len")
    c.add_argument("--image-size", default=None, metavar="S|HxW",
                   help="image models: a side or HEIGHTxWIDTH; default the preset's (DETR: 800x1066)")
    c.add_argument("--batch", type=int, default=1, help="examples per forward pass (default 1)")
    c.add_argument("--json", action="store_true", help="print the numbers as JSON")

    b = sub.add_parser("bench", help="speed and memory against torch.nn.Transformer, Hugging Face, CTranslate2 and "
                                     "onnxruntime, side by side; writes OUT/<case>.json, and a page of them with "
                                     "--docs (this repository's: --out benchmarks/results --docs docs/benchmarks.md)")
    b.add_argument("cases", nargs="*", metavar="CASE",
                   help="cases to run (default: all; --list names them; the -ct2 and -ort cases, against "
                        "CTranslate2 and onnxruntime, need pip install \"aiayn[bench]\"; the -llamacpp cases "
                        "llama-cpp-python and its converter: bash benchmarks/llamacpp.sh)")
    b.add_argument("--list", action="store_true", help="print the cases' names and exit")
    b.add_argument("--compile", action="store_true",
                   help="run each CASE's compiled variant, CASE-compiled (ours over a static cache, the step "
                        "compiled, against ours eager and the same peers); without CASE, every compiled case")
    b.add_argument("--out", required=True, metavar="FOLDER",
                   help="folder of the results files, made if needed (required: no default)")
    b.add_argument("--docs", default=None, metavar="PAGE.md",
                   help="regenerate this markdown page from every results file in --out (default: no page)")
    b.add_argument("--rounds", type=int, default=None,
                   help="timed units per side, alternating (default: the harness's MIN_ROUNDS, 7)")
    b.add_argument("--report-only", action="store_true",
                   help="run nothing: regenerate --docs from the results files in --out")
    b.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    b.add_argument("--quick", action="store_true", help="toy sizes: checks every case runs; measures nothing")
    b.add_argument("--together", action="store_true",
                   help="time every side in this one process (default: each side, ours and each peer, in a worker "
                        "process of its own, so no runtime slows another)")
    b.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="float32 either way, eager unless the case is a compiled one")

    v = sub.add_parser("viz", help="pictures as PNG: positional encodings, masks, the look-ahead mask, Swin's "
                                   "windows, the schedule, label smoothing, attention cost, a model's attention, a "
                                   "run's training history; `aiayn viz WHAT --help` lists WHAT's flags")
    v.add_argument("what", choices=list(WHATS))
    _viz_flags(v, "all")

    from aiayn.cli import serve  # its flags; Starlette and uvicorn are imported only when it runs

    serve.add_parser(sub)
    return p


# what each picture of `aiayn viz` draws (aiayn.viz.files), and the flags it takes besides --out
VIZ = {
    "positional": ("sinusoidal encodings (both layouts) and their dot products", ["--d-model", "--positions"]),
    "masks": ("padding, causal, combined and Swin's shifted-window masks", []),
    "lookahead": ("the look-ahead mask of a few tokens", ["--text"]),
    "swin-windows": ("Swin's windows: patches, windows, shifted regions", []),
    "schedule": ("section 5.3's learning rate for a few d_model and warm-ups", []),
    "smoothing": ("section 5.4's label-smoothed target", []),
    "complexity": ("global against window attention, measured and by formula", ["--sides", "--window"]),
    "attention": ("every kind of attention a text model has, reading a sentence",
                  ["--run", "--text", "--target", "--layer", "--head", "--from-token", "--html", "--device"]),
    "history": ("a run's loss, learning rate, speed and validation numbers", ["--run"]),
    "relative": ("a Transformer-XL's mean attention by relative distance, each layer and head",
                 ["--run", "--text", "--device"]),
}


def _viz_flags(p: argparse.ArgumentParser, what: str) -> None:
    """The flags of ``aiayn viz WHAT`` (every picture's for ``all``)."""
    takes = {f for _, flags in VIZ.values() for f in flags} if what == "all" else set(VIZ[what][1])
    p.add_argument("--out", default="viz", help="folder for the PNG files (default viz/); when one picture is "
                                                "asked for, a path ending in .png is the file")
    flags: list[tuple[str, dict[str, Any]]] = [
        ("--run", {"help": "attention: a text model, a run folder (translation, denoise, lm, mlm, textclass) or a "
                           "Hugging Face folder (BERT, GPT-2, Marian); history: any run folder; relative: a "
                           "Transformer-XL run"}),
        ("--text", {"help": "attention: the sentence the model reads (a translation's source); lookahead: the "
                            "tokens (default '<Begin> I have a cat'); relative: a text file (or text) long enough "
                            "to fill the memory"}),
        ("--target", {"help": "attention, encoder-decoders: the translation to draw it for (default: the model's "
                              "greedy one)"}),
        ("--layer", {"type": int, "help": "attention: draw only this layer (from 0; default: every layer)"}),
        ("--head", {"type": int, "help": "attention: draw only this head (from 0; default: every head)"}),
        ("--from-token", {"metavar": "WORD", "help": "attention: lines from this word to every token, one panel "
                          "per head (its first occurrence; its first piece when it is cut into several)"}),
        ("--html", {"metavar": "FILE", "help": "attention: also write an interactive viewer (one self-contained "
                                               "HTML file)"}),
        ("--d-model", {"type": int, "default": 512, "help": "positional: d_model"}),
        ("--positions", {"type": int, "default": 20, "help": "positional: positions shown"}),
        ("--sides", {"type": int, "nargs": "+", "default": [14, 28, 42, 56],
                     "help": "complexity: map sides, multiples of --window"}),
        ("--window", {"type": int, "default": 7, "help": "complexity: window side M"}),
        ("--device", {"help": "attention: " + DEVICE_HELP}),
    ]
    for flag, options in flags:
        if flag in takes:
            p.add_argument(flag, **{"default": None, **options})
        else:  # parsed as before (the pictures share one namespace), not listed in this picture's help
            p.add_argument(flag, **{"default": None, **options, "help": argparse.SUPPRESS})


def _viz_help(what: str) -> str:
    """The help of ``aiayn viz WHAT``: what it draws, and its flags only."""
    p = _Parser(prog=f"aiayn viz {what}", description=(VIZ[what][0] if what in VIZ else "every picture above "
                "(attention only with --run and --text)") + "; written as PNG.")
    _viz_flags(p, what)
    return p.format_help()

    return p


def _batch_flags(p: argparse.ArgumentParser, output: str, batch_size: bool = True) -> None:
    """``--input``, ``--output``, ``--batch-size`` and ``--force`` of a command that works through a file."""
    p.add_argument("--input", metavar="FILE", default=None, help="read the texts from FILE, one a line (UTF-8)")
    p.add_argument("--output", metavar="FILE", default=None,
                   help=f"write to FILE instead of printing ({output}), atomically, with a progress bar on stderr")
    if batch_size:
        p.add_argument("--batch-size", type=int, default=64, help="texts per forward pass")
    p.add_argument("--force", action="store_true", help="replace --output when it exists (refused otherwise)")


def _texts(parser: argparse.ArgumentParser, args: argparse.Namespace, given: list[str]) -> list[str]:
    """The texts of a command: its arguments, else the lines of ``--input``, else of standard input; and its
    ``--output`` and ``--batch-size`` checked before any model is loaded."""
    if given and args.input is not None:
        parser.error("give texts as arguments or --input FILE, not both")
    if args.output is not None and Path(args.output).exists() and not args.force:
        raise FileExistsError(f"--output {args.output} exists; pass --force to replace it")
    if getattr(args, "batch_size", 1) <= 0:
        parser.error(f"--batch-size must be positive, got {args.batch_size}")
    if given:
        return list(given)
    if args.input is not None:
        with open(args.input, "rb") as f:
            return _lines(f, args.input)
    return _stdin_lines()


def _batches(texts: list[str], size: int, show: bool, unit: str = "text") -> Iterator[list[str]]:
    """``texts`` in slices of ``size``, with a progress bar on stderr counting texts when ``show``."""
    from tqdm.auto import tqdm

    with tqdm(total=len(texts), unit=unit, file=sys.stderr, disable=not show, dynamic_ncols=True) as bar:
        for i in range(0, len(texts), size):
            yield texts[i : i + size]
            bar.update(len(texts[i : i + size]))


def _write(path: str, text: str) -> None:
    """Write an ``--output`` file atomically (:func:`aiayn.io.write_text`) and say so on stderr."""
    from aiayn.io import write_text

    print(f"wrote {write_text(path, text)}", file=sys.stderr)


def _json_lines(rows: list[Any]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def _run_on(args: argparse.Namespace) -> dict[str, Any]:
    """``device`` and ``quantize`` of a command that runs a saved model."""
    return {"device": args.device, "quantize": "int8" if args.int8 else None}


def _compiled_cases(parser: argparse.ArgumentParser, cases: list[str], names: list[str]) -> list[str]:
    """``aiayn bench --compile [CASE ...]``: each case's ``-compiled`` variant (all of them without a case)."""
    if not cases:
        return [n for n in names if n.endswith("-compiled")]
    missing = [c for c in cases if f"{c}-compiled" not in names and not c.endswith("-compiled")]
    if missing:
        parser.error(f"--compile: no compiled variant of {', '.join(missing)} (those with one: "
                     f"{', '.join(n.removesuffix('-compiled') for n in names if n.endswith('-compiled'))})")
    return [c if c.endswith("-compiled") else f"{c}-compiled" for c in cases]


def _cast(model: Any, args: argparse.Namespace) -> None:
    """The model cast to ``--dtype`` (:func:`aiayn.pipelines.loading.to_dtype`), in place."""
    from aiayn.pipelines.loading import to_dtype

    to_dtype(model, args.dtype, "int8" if args.int8 else None)


def _positive(parser: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    for name in names:
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["viz"] and len(argv) > 1 and argv[1] in WHATS and {"-h", "--help"} & set(argv):
        print(_viz_help(argv[1]), end="")
        return 0
    args, rest = parser.parse_known_args(argv)
    if args.command != "train" and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command is None:
        parser.print_help()
        return 0
    try:
        if args.command == "train":
            return _train(rest)
        elif args.command == "translate":
            from aiayn.decoding.settings import check

            check(num_beams=args.beam, num_return_sequences=args.n_best)
            if args.n_best > args.beam:
                parser.error(f"--n-best {args.n_best} needs a beam at least as wide (--beam {args.beam})")
            texts = _texts(parser, args, args.text)
            p = _pipeline("translate", args.run, _run_on(args), compile=args.compile)
            _cast(p.model, args)
            show = args.output is not None or args.input is not None
            hyps = [h for b in _batches(texts, args.batch_size, show)
                    for h in p.translate(b, beam=args.beam, num_return_sequences=args.n_best)]
            best = [h if isinstance(h, list) else [h] for h in hyps]  # each text's n best
            if args.output is not None:
                _write(args.output, "".join(h + "\n" for n in best for h in n))
            elif args.text:
                for src, n in zip(texts, best):
                    print("\n".join(f"{src} -> {h}" for h in n))
            else:  # a filter: one translation per input line (n with --n-best), in order
                for n in best:
                    print("\n".join(n))
        elif args.command == "evaluate":
            from aiayn.recipes.evaluate import evaluate

            if args.beam is not None:
                from aiayn.decoding.settings import check

                check(num_beams=args.beam)  # the same words as translate's --beam
            options = {**{k: getattr(args, k) for k in ("data", "data_dir", "split", "src_lang", "tgt_lang", "beam",
                                                        "weights", "mem_len")}, **_run_on(args)}
            scores = evaluate(args.run, **{k: v for k, v in options.items() if v is not None})
            print(json.dumps(scores, indent=2) if args.json else _format_scores(scores))
        elif args.command == "generate":
            from aiayn.decoding.settings import check

            numbers = ("max_new_tokens", "top_k", "top_p", "repetition_penalty", "no_repeat_ngram_size",
                       "min_new_tokens")
            check(do_sample=args.temperature > 0 and args.num_beams == 1, temperature=args.temperature,
                  num_beams=args.num_beams, seed=args.seed,
                  **{k: getattr(args, k) for k in numbers})  # NaN is refused here, not read as greedy
            options = {"stop": args.stop, "seed": args.seed, "do_sample": args.temperature > 0,
                       **{k: getattr(args, k) for k in numbers if getattr(args, k) is not None}}
            if args.temperature > 0:
                options["temperature"] = args.temperature
            if args.num_beams > 1:  # a search: nothing is drawn
                options.update(do_sample=False, num_beams=args.num_beams)
                options.pop("temperature", None)
            if args.input is None and args.output is None and args.num_beams == 1:  # one prompt, streamed
                from aiayn.pipelines.lm import generate

                print_stream(generate(args.run, args.prompt, compile=args.compile, dtype=args.dtype, **options,
                                      **_run_on(args)))
                return 0
            if args.input is not None and args.prompt:
                parser.error("give one --prompt or --input FILE of prompts, not both")
            prompts = _texts(parser, args, [] if args.input is not None else [args.prompt])
            p = _pipeline("generate", args.run, _run_on(args), compile=args.compile)
            _cast(p.model, args)
            if args.input is None and args.output is None:  # one prompt, searched: its text
                print(p.generate(args.prompt, **options))
                return 0
            rows = [{"prompt": prompt, "text": p.generate(prompt, **options)}
                    for batch in _batches(prompts, 1, show=True, unit="prompt") for prompt in batch]
            if args.output is not None:
                _write(args.output, _json_lines(rows))
            else:
                print(_json_lines(rows), end="")
        elif args.command == "convert":
            from aiayn.convert.folder import convert

            if len(args.paths) not in (2, 3):
                parser.error(f"convert takes [KIND] FOLDER OUT, got {len(args.paths)} paths")
            kind = args.paths[0] if len(args.paths) == 3 else "hf"
            print(f"converted into {convert(args.paths[-2], args.paths[-1], kind, args.revision, force=args.force)}")
        elif args.command == "export":
            from aiayn.convert.folder import export

            out = export(args.run, args.out, args.to, force=args.force, quantization=args.quantization)
            print(f"exported into {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
        elif args.command == "detect":
            from aiayn.pipelines.detect import detect

            if not 0 <= args.threshold < 1:
                parser.error(f"--threshold must be in [0, 1), got {args.threshold}")
            detect(args.run, args.image, args.threshold, args.out, **_run_on(args))
        elif args.command == "classify":
            _positive(parser, args, "top")
            if not _is_textclass(args.run):
                from aiayn.pipelines.image import classify

                if not args.inputs:
                    parser.error(f"{args.run} classifies images: give image files")
                if args.input is not None or args.output is not None:
                    parser.error("--input and --output are for textclass runs; give image files as arguments")
                for r in classify(args.run, args.inputs, top=args.top, **_run_on(args)):
                    print(f"{r['path']}: " + ", ".join(f"{t['class']} ({t['probability']:.1%})" for t in r["top"]))
                return 0
            texts = _texts(parser, args, args.inputs)
            p = _pipeline("classify", args.run, _run_on(args))
            top = min(args.top, len(p.parts["classes"]))
            show = args.output is not None or args.input is not None
            found = [r for b in _batches(texts, args.batch_size, show) for r in p.classify(b, top=top)]
            if args.output is not None:
                _write(args.output, _json_lines(found))
            for r in found if args.output is None else []:
                print(f"{r['text']}: " + ", ".join(f"{t['class']} ({t['probability']:.1%})" for t in r["top"]))
        elif args.command == "embed":
            import torch

            texts = _texts(parser, args, args.text)
            p = _pipeline("embed", args.model, _run_on(args))
            show = args.output is not None or args.input is not None
            parts = [p.embed(b, batch_size=args.batch_size) for b in _batches(texts, args.batch_size, show)]
            vectors = torch.cat(parts) if parts else torch.empty(0, cast(Any, p.model).cfg.d_model)  # (N, C)
            table = (vectors @ vectors.T) if args.similarity else vectors
            if args.output is not None and args.output.endswith(".npy"):
                import numpy as np

                from aiayn.io import atomic_write

                def save(tmp: str) -> None:
                    with open(tmp, "wb") as f:  # a file, not a name: np.save would add .npy to the name
                        np.save(f, table.numpy())

                print(f"wrote {atomic_write(args.output, save)}", file=sys.stderr)
            else:
                lines = "".join(json.dumps([round(v, 6) for v in row]) + "\n" for row in table.tolist())
                if args.output is not None:
                    _write(args.output, lines)
                else:
                    print(lines, end="")
        elif args.command == "average":
            from aiayn.training import average_checkpoints

            out = average_checkpoints(args.checkpoints, args.out)
            print(f"averaged {len(args.checkpoints)} checkpoints into {out}")
        elif args.command == "count":
            from aiayn.analysis.report import count, format_count

            image_size = None
            if args.image_size is not None:
                sides = args.image_size.lower().split("x")
                if len(sides) not in (1, 2) or not all(x.isdigit() and int(x) > 0 for x in sides):
                    parser.error(f"--image-size must be a side or HEIGHTxWIDTH, e.g. 224 or 800x1066; got "
                                 f"{args.image_size!r}")
                image_size = int(sides[0]) if len(sides) == 1 else (int(sides[0]), int(sides[1]))
            report = (count(args.preset, args.seq_len, image_size, args.batch) if not Path(args.preset).is_dir()
                      else _count_folder(args.preset, args.seq_len, image_size, args.batch))
            print(json.dumps(report, indent=2) if args.json else format_count(report))
        elif args.command == "bench":
            from aiayn.benchmark import run_bench
            from aiayn.benchmark.run import NAMES

            if args.list:
                print("\n".join(NAMES))
                return 0
            if args.compile:
                args.cases = _compiled_cases(parser, args.cases, NAMES)
            if args.report_only:
                from aiayn.benchmark.report import write_report

                if args.docs is None:
                    parser.error("--report-only regenerates a page: give --docs PAGE.md")
                print(f"wrote {write_report(args.out, args.docs)}")
                return 0
            for name in ("rounds", "threads"):
                if getattr(args, name) is not None:
                    _positive(parser, args, name)
            rounds = {} if args.rounds is None else {"rounds": args.rounds}
            run_bench(args.cases or None, out=args.out, threads=args.threads, quick=args.quick, docs=args.docs,
                      device=args.device, apart=not args.together, **rounds)
        elif args.command == "serve":
            from aiayn.cli import serve

            return serve.run(args)
        elif args.command == "viz":
            from aiayn.viz.files import viz

            for path in viz(args.what, args.out, args.run, args.text, args.d_model, args.positions, args.sides,
                            window=args.window, target=args.target, html=args.html, device=args.device,
                            layer=args.layer, head=args.head, from_token=args.from_token):
                print(f"wrote {path}")
    except (ValueError, OSError) as e:  # bad input, or a file that cannot be read or written: named in e
        if hasattr(e, "for_door"):  # a generation setting (aiayn.decoding.settings): named by its flag
            e = ValueError(e.for_door(_flag(args.command, getattr(e, "name", ""))))
        return _refused(args.command, e)
    except ImportError as e:  # an optional dependency missing: our message says which extra installs it
        if "pip install" not in str(e):
            raise
        print(f"aiayn {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (FloatingPointError, RuntimeError) as e:
        from aiayn.training.session import FolderLocked

        if not isinstance(e, (FloatingPointError, FolderLocked)):
            raise
        print(f"aiayn {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print(f"\naiayn {args.command}: interrupted: {e}", file=sys.stderr)
        return 130
    return 0


def _train(argv: list[str]) -> int:
    """``aiayn train``: the recipe's Config from the arguments, then the recipe (or the resumed run)."""
    from aiayn import recipes
    from aiayn.cli.train import to_config
    from aiayn.training import distributed
    from aiayn.training.session import FolderLocked

    try:
        cfg, args = to_config(argv, _Parser)
    except (ValueError, OSError) as e:  # a --config or --resume file that cannot be read
        return _refused("train", e)
    fsdp = getattr(args, "fsdp", False)
    progress = not getattr(args, "no_progress", False)
    try:
        where = getattr(args, "device", None) or (cfg.device if cfg is not None else None)
        if where is None:  # resumed on the device it was saved with
            from aiayn.training.session import read_args

            where = read_args(args.resume).get("device")
        distributed.init(fsdp=fsdp, device=where)  # under torchrun: join the other ranks
        if fsdp and not distributed.active():
            print("--fsdp: one process holds the whole model, so nothing is sharded (start it with torchrun)",
                  file=sys.stderr)
        if not distributed.is_main():  # rank 0 alone prints
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)
        if cfg is None:
            recipes.resume(args.resume, getattr(args, "steps", None), progress=progress,
                           device=getattr(args, "device", None))
        else:
            recipes.train(cfg, progress=progress)
    except (ValueError, OSError) as e:
        return _refused("train", e)
    except (FloatingPointError, FolderLocked) as e:
        print(f"aiayn train: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print(f"\naiayn train: interrupted: {e}", file=sys.stderr)
        return 130
    finally:
        distributed.shutdown()
    return 0


def _stdin_lines() -> list[str]:
    """The lines of standard input, decoded as UTF-8 whatever the locale says (see :func:`_lines`)."""
    return _lines(sys.stdin.buffer, "standard input")


def _lines(raw_lines: Iterable[bytes], name: str) -> list[str]:
    """The lines of a file opened in binary, decoded as UTF-8.

    Raises:
        ValueError: naming the first line that is not UTF-8 (a wrong encoding would otherwise go through as
            unreadable characters and be translated as such).
    """
    lines = []
    for n, raw in enumerate(raw_lines, 1):
        try:
            lines.append(raw.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError as e:
            raise ValueError(f"{name}, line {n}: not UTF-8 ({e.reason} at byte {e.start}); convert it "
                             f"first, e.g. with iconv -f latin1 -t utf-8") from e
    return lines


def _count_folder(folder: str, seq_len: int | None, image_size: int | tuple[int, int] | None,
                  batch: int) -> dict[str, Any]:
    """:func:`aiayn.analysis.report.count` of the model in a run folder (its saved config) or a Hugging Face
    folder (converted on the meta device: its config, no weights in memory)."""
    from aiayn.analysis import parameter_table
    from aiayn.analysis.formulas import counts, default_size
    from aiayn.analysis.report import UNITS
    from aiayn.models import family_of

    if (Path(folder) / "config.json").is_file():
        import torch

        from aiayn.convert import from_hf

        with torch.device("meta"):
            cfg = from_hf(folder).cfg
    else:
        from aiayn.models.checkpoint import saved_config

        cfg = saved_config(folder)
    image = family_of(cfg).inputs == "image"
    if (seq_len if image else image_size) is not None:
        raise ValueError(f"--{'seq-len' if image else 'image-size'} does not fit {folder}, "
                         f"{'an image' if image else 'a text'} model")
    for flag, value in (("--seq-len", seq_len), ("--batch", batch)):
        if value is not None and value <= 0:
            raise ValueError(f"{flag} must be positive, got {value}")
    c = counts(cfg, seq_len=seq_len, image_size=image_size, batch=batch)
    size: Any = (image_size if image else seq_len) or default_size(cfg)
    if image:
        size = [size, size] if isinstance(size, int) else list(size)
    return {"preset": str(folder), "input": {"image_size" if image else "seq_len": size}, "batch": batch,
            "parameters": parameter_table(cfg), "macs": {**c.macs, "total": c.total_macs}, "flops": c.flops,
            "units": UNITS, "published": None}


def _is_textclass(run: str) -> bool:
    """Whether ``run`` is a textclass run (a BERT or GPT with ``classes.json``), whose ``classify`` reads texts."""
    from aiayn.models.checkpoint import saved_config

    folder = Path(run)
    if not (folder / "classes.json").is_file():
        return False
    from aiayn.models import family_of

    return family_of(saved_config(folder)).inputs == "text"


def _pipeline(method: str, source: str, run_on: dict[str, Any], compile: bool = False) -> Any:
    """A :class:`aiayn.pipelines.Pipeline` whose ``method`` the command calls, with the model of ``source``, loaded
    by the loader the command used before it worked through files (so a wrong folder is refused with the same
    message); ``compile``: its decoding compiled (translate, generate)."""
    from aiayn.pipelines import Pipeline

    if method == "translate":
        from aiayn.pipelines.translation import load_run

        model, src_tok, tgt_tok = load_run(source, **run_on)
        return Pipeline("translation", model, Path(source), compile=compile, src_tok=src_tok, tgt_tok=tgt_tok)
    if method == "generate":
        from aiayn.pipelines.lm import load_lm_run

        model, tok = load_lm_run(source, **run_on)
        return Pipeline("text-generation", model, Path(source), compile=compile, tok=tok)
    if method == "embed":
        from aiayn.pipelines.embed import load_bert

        model, tok, max_len = load_bert(source, **run_on)
        return Pipeline("feature-extraction", model, Path(source), tok=tok, max_len=max_len)
    from aiayn.pipelines.textclass import load_classifier, text_length

    model, tok, classes = load_classifier(source, **run_on)
    return Pipeline("text-classification", model, Path(source), tok=tok, classes=classes,
                    max_len=text_length(source, model))


# the flags that set a generation setting under another name than --setting-name
_FLAGS = {"translate": {"num_beams": "--beam", "num_return_sequences": "--n-best"},
          "evaluate": {"num_beams": "--beam"}}


def _flag(command: str, setting: str) -> str:
    """The flag of ``command`` that sets the generation ``setting`` (``top_p`` -> ``--top-p``)."""
    return _FLAGS.get(command, {}).get(setting, "--" + setting.replace("_", "-"))


def _refused(command: str, e: BaseException) -> int:
    """Say why ``command`` was refused in one line (the file or argument at fault is in ``e``); status 2."""
    message = " ".join(str(e).split()) or type(e).__name__  # one line, whatever the message held
    print(f"aiayn {command}: error: {message}", file=sys.stderr)
    return 2


def _format_scores(scores: dict) -> str:
    """One line per number of :func:`aiayn.recipes.evaluate.evaluate`."""
    lines = []
    for key, value in scores.items():
        if isinstance(value, float):
            lines.append(f"{key:<14} {value:.4f}")
        elif isinstance(value, (int, str)):
            lines.append(f"{key:<14} {value}")
        elif isinstance(value, list) and value and all(isinstance(v, (float, str)) for v in value):  # per class
            lines.append(f"{key:<14} " + " ".join(f"{v:.4f}" if isinstance(v, float) else v for v in value))
        elif key == "confusion":
            lines.append("confusion (rows: true class, columns: predicted)")
            lines.extend("  " + " ".join(f"{n:5d}" for n in row) for row in value)
    return "\n".join(lines)


def print_stream(pieces) -> None:
    """Write the pieces of a generation as they come."""
    for piece in pieces:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")


if __name__ == "__main__":
    sys.exit(main())
