"""The ``aiayn`` command. Every subcommand is also a plain function (:mod:`aiayn.cli.train`, ...)."""

from __future__ import annotations

import argparse
import json
import os
import sys


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line of help, status 2, no traceback
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="aiayn", description="Attention Is All You Need, and the models it started.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    t = sub.add_parser("train", help="train a model; with no arguments, the default job (about two minutes on a CPU)")
    t.add_argument("--task", default="dates", choices=["dates", "copy", "lm", "mlm", "denoise", "image", "detect"],
                   help="dates: free English dates -> ISO (default); copy: copy random strings; lm: a GPT "
                        "language model (on made-up date lines, or on --data FILE); mlm: BERT pre-training "
                        "(masked LM + next sentence, on made-up date pairs or on --data FILE); denoise: BART "
                        "pre-training (reconstruct corrupted lines: made-up dates or --data FILE); image: ViT or "
                        "Swin image classification (digits the package draws, or --data mnist --data-dir DIR); "
                        "detect: DETR object detection (shapes the package draws, or --data voc --data-dir DIR)")
    t.add_argument("--data", nargs="+", default=None, metavar="DATA",
                   help="a corpus instead of a synthetic task: 'multi30k' (with --data-dir), a TSV file of pairs "
                        "(Tatoeba's cmn.txt), or two aligned text files (plain or .gz); with --task lm, any text file")
    t.add_argument("--data-dir", default=None, help="folder of the Multi30k files, or of MNIST (IDX or CSV)")
    t.add_argument("--test-dir", default=None, help="image: folder of MNIST test images (default: hold out of the "
                                                    "training folder)")
    t.add_argument("--src-lang", default="de")
    t.add_argument("--tgt-lang", default="en")
    t.add_argument("--tokenizer", choices=["char", "bpe"], default=None,
                   help="default: char for synthetic tasks, joint BPE for a corpus")
    t.add_argument("--vocab-size", type=int, default=None,
                   help="subword vocabulary size (default 8000 BPE; lm 4000 BPE; mlm 2000 WordPiece; "
                        "denoise 1000 BPE)")
    t.add_argument("--n-test", type=int, default=None, help="held-out pairs (default 500; 1000 for a corpus file)")
    t.add_argument("--preset", default=None,
                   help="default transformer-tiny; gpt-tiny for lm, bert-tiny for mlm, bart-tiny for denoise, "
                        "vit-tiny for image (or swin-tiny)")
    t.add_argument("--steps", type=int, default=None,
                   help="optimizer updates (default 1000; lm 1500; denoise 600; image 400; detect 2000)")
    t.add_argument("--max-tokens", type=int, default=1024, help="padded tokens per batch")
    t.add_argument("--accum", type=int, default=1, help="batches per update (gradient accumulation)")
    t.add_argument("--eval-every", type=int, default=None,
                   help="validate every N updates, keeping the best checkpoint (default: at the end; 200 for lm)")
    t.add_argument("--block", type=int, default=64, help="lm: context length of training blocks")
    t.add_argument("--batch-size", type=int, default=None,
                   help="lm: blocks per batch (16); mlm: pairs (32); denoise: lines (64); image: images (128); "
                        "detect: images (16)")
    t.add_argument("--noise", default="permute,infill",
                   help="denoise: corruptions, from permute, rotate, mask, delete, infill (default permute,infill)")
    t.add_argument("--noise-ratio", type=float, default=0.3, help="denoise: share of tokens masked or deleted")
    t.add_argument("--lr", type=float, default=None,
                   help="peak learning rate of AdamW with cosine decay (lm 3e-3, image 2e-3, detect 1e-3)")
    t.add_argument("--lr-backbone", type=float, default=3e-4, help="detect: learning rate of the CNN backbone")
    t.add_argument("--image-size", type=int, default=128, help="detect: side of the (synthetic or resized) images")
    t.add_argument("--save-every", type=int, default=500,
                   help="write the training state every N updates (and on Ctrl-C), so --resume can continue")
    t.add_argument("--resume", default=None, metavar="DIR",
                   help="continue the run in DIR where it stopped, with its own arguments (--steps may extend it)")
    t.add_argument("--bf16", action="store_true", help="bf16 autocast (slow on CPUs without bf16 units)")
    t.add_argument("--compile", action="store_true", help="translation, lm: train through torch.compile (an option "
                                                          "to measure; on a small CPU it did not pay)")
    t.add_argument("--fsdp", action="store_true",
                   help="under torchrun: shard weights, gradients and optimizer state over the ranks (FSDP) "
                        "instead of copying the model to each")
    t.add_argument("--beam", type=int, default=1, help="beam size of the final evaluation (1 = greedy)")
    t.add_argument("--warmup", type=int, default=None,
                   help="warm-up steps of the schedule (translation 200, section 5.3; image 50; detect 200)")
    t.add_argument("--lr-factor", type=float, default=0.3, help="multiplies the schedule's learning rate")
    t.add_argument("--dropout", type=float, default=None, help="override the preset's dropout (not image/detect)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", default="runs", help="folder that gets the run folder (default runs/)")
    t.add_argument("--name", default=None, help="run folder name (default: the task)")
    t.add_argument("--no-progress", action="store_true")

    tr = sub.add_parser("translate", help="translate text with a saved run")
    tr.add_argument("--run", required=True, help="run folder written by `aiayn train`")
    tr.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")
    tr.add_argument("text", nargs="*", help="sentences to translate; none: read lines from standard input")

    e = sub.add_parser("evaluate", help="BLEU and chrF of a saved run on a corpus")
    e.add_argument("--run", required=True, help="run folder written by `aiayn train`")
    e.add_argument("--data", nargs="+", required=True, help="'multi30k', a TSV file of pairs, or two aligned files")
    e.add_argument("--data-dir", default=None, help="folder of the Multi30k files")
    e.add_argument("--split", default="test_2016_flickr", help="Multi30k split (train, val, test_2016_flickr)")
    e.add_argument("--src-lang", default="de")
    e.add_argument("--tgt-lang", default="en")
    e.add_argument("--beam", type=int, default=4, help="beam size (1 = greedy)")

    a = sub.add_parser("average", help="average checkpoints (the paper averages its last 5, section 6.1)")
    a.add_argument("checkpoints", nargs="+", help="checkpoint files or run folders")
    a.add_argument("--out", required=True, help="file or folder for the averaged checkpoint")

    g = sub.add_parser("generate", help="continue a prompt with a language model, streaming the text")
    g.add_argument("--run", required=True, help="run folder of `aiayn train --task lm` or `aiayn convert`")
    g.add_argument("--prompt", default="", help="text to continue (default: none, start from end-of-text)")
    g.add_argument("--max-new-tokens", type=int, default=200)
    g.add_argument("--temperature", type=float, default=0.8, help="0 is greedy")
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None, help="nucleus sampling: keep the most likely tokens "
                                                               "whose probabilities sum to P")
    g.add_argument("--stop", action="append", default=None, metavar="TEXT", help="stop before this text (repeatable)")
    g.add_argument("--seed", type=int, default=None, help="make sampling repeatable")

    cv = sub.add_parser("convert", help="a Hugging Face model folder -> an aiayn run folder (weights + tokenizer)")
    cv.add_argument("paths", nargs="+", metavar="[KIND] FOLDER OUT",
                    help="KIND (optional: hf, hf-gpt2, hf-marian) checks the folder's model type")

    em = sub.add_parser("embed", help="L2-normalised sentence embeddings from a BERT (Hugging Face folder or run)")
    em.add_argument("--model", required=True, help="a Hugging Face BERT folder (e.g. all-MiniLM-L6-v2) or a run")
    em.add_argument("--similarity", action="store_true", help="print the cosine similarities instead")
    em.add_argument("text", nargs="*", help="sentences; none: read lines from standard input")

    cl = sub.add_parser("classify", help="the top classes of image files with a run of `aiayn train --task image`")
    cl.add_argument("--run", required=True, help="run folder of `aiayn train --task image`")
    cl.add_argument("--top", type=int, default=3, help="classes shown per image")
    cl.add_argument("images", nargs="+", help="PNG, JPEG or .npy files")

    d = sub.add_parser("detect", help="find objects in an image with a run of `aiayn train --task detect`")
    d.add_argument("--run", required=True, help="run folder of `aiayn train --task detect`")
    d.add_argument("--threshold", type=float, default=0.7, help="keep boxes whose class probability is above this")
    d.add_argument("--out", default=None, help="picture with the boxes drawn (default RUN/detections/IMAGE.png)")
    d.add_argument("image", help="an image file")

    c = sub.add_parser("count", help="parameters and forward multiply-adds of a preset, by part (no weights needed)")
    c.add_argument("preset")
    c.add_argument("--seq-len", type=int, default=None,
                   help="text models: positions (encoder-decoder: source and target each); default max_len")
    c.add_argument("--image-size", default=None, metavar="S|HxW",
                   help="image models: a side or HEIGHTxWIDTH; default the preset's (DETR: 800x1066)")
    c.add_argument("--batch", type=int, default=1, help="examples per forward pass (default 1)")
    c.add_argument("--json", action="store_true")

    b = sub.add_parser("bench", help="speed and memory against torch.nn.Transformer and Hugging Face, side by side; "
                                     "writes benchmarks/results/*.json and docs/benchmarks.md")
    b.add_argument("cases", nargs="*", metavar="CASE",
                   help="train-small train-base decode-greedy decode-beam gpt2-generate gpt2-train swin-forward "
                        "vit-forward scaling (default: all)")
    b.add_argument("--out", default="benchmarks/results", help="folder of the results files")
    b.add_argument("--docs", default="docs/benchmarks.md", help="the page regenerated from every results file")
    b.add_argument("--rounds", type=int, default=None,
                   help="timed units per side, alternating (default: the harness's MIN_ROUNDS, 7)")
    b.add_argument("--report-only", action="store_true",
                   help="run nothing: regenerate --docs from the results files in --out")
    b.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    b.add_argument("--quick", action="store_true", help="toy sizes: checks every case runs; measures nothing")
    b.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="float32 eager either way")

    v = sub.add_parser("viz", help="pictures as PNG: positional encodings, masks, the schedule, label smoothing, "
                                   "attention cost, a run's attention")
    v.add_argument("what", choices=["positional", "masks", "schedule", "smoothing", "complexity", "attention", "all"])
    v.add_argument("--out", default="viz", help="folder for the PNG files (default viz/)")
    v.add_argument("--run", default=None, help="attention: a run folder of `aiayn train`")
    v.add_argument("--text", default=None, help="attention: the source sentence")
    v.add_argument("--target", default=None, help="attention: the translation to draw it for (default: the model's "
                                                   "greedy one)")
    v.add_argument("--html", default=None, metavar="FILE",
                   help="attention: also write an interactive viewer (one self-contained HTML file)")
    v.add_argument("--d-model", type=int, default=128, help="positional: d_model (default 128)")
    v.add_argument("--positions", type=int, default=100, help="positional: positions shown (default 100)")
    v.add_argument("--sides", type=int, nargs="+", default=[14, 28, 42, 56],
                   help="complexity: map sides, multiples of --window (default 14 28 42 56)")
    v.add_argument("--window", type=int, default=7, help="complexity: window side M (default 7)")
    return p


def _positive(parser: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    for name in names:
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        if args.command == "train":
            from aiayn.cli.train import resume_training, train
            from aiayn.training import distributed

            distributed.init(fsdp=args.fsdp)  # under torchrun: join the other ranks
            if args.fsdp and not distributed.active():
                print("--fsdp: one process holds the whole model, so nothing is sharded (start it with torchrun)",
                      file=sys.stderr)
            if not distributed.is_main():  # rank 0 alone prints
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)

            if args.steps is not None:
                _positive(parser, args, "steps")
            if args.resume:
                resume_training(args.resume, args.steps, progress=not args.no_progress)
                return 0
            _positive(parser, args, "max_tokens", "lr_factor", "accum", "beam", "block")
            for name in ("vocab_size", "batch_size", "lr", "warmup"):
                if getattr(args, name) is not None:
                    _positive(parser, args, name)
            if args.dropout is not None and not 0 <= args.dropout < 1:
                parser.error(f"--dropout must be in [0, 1), got {args.dropout}")
            for name in ("eval_every", "save_every"):
                if (getattr(args, name) or 0) < 0:
                    parser.error(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
            if args.task in ("lm", "mlm", "denoise") and args.data and len(args.data) != 1:
                parser.error(f"--task {args.task} takes one text file as --data, got {len(args.data)}")
            common = {"accum": args.accum, "save_every": args.save_every, "seed": args.seed, "out": args.out,
                      "name": args.name, "progress": not args.no_progress}
            dropout = {} if args.dropout is None else {"dropout": args.dropout}  # text models: a config override
            if args.task == "detect":
                from aiayn.cli.detect import train_detr

                if args.data not in (None, ["voc"]):
                    parser.error(f"--task detect takes --data voc (with --data-dir), got {' '.join(args.data)}")
                _positive(parser, args, "lr_backbone", "image_size")
                train_detr(data=args.data[0] if args.data else None, data_dir=args.data_dir,
                           preset=args.preset or "detr-tiny", steps=args.steps or 2000,
                           batch_size=args.batch_size or 16, lr=args.lr or 1e-3, lr_backbone=args.lr_backbone,
                           warmup=args.warmup or 200, image_size=args.image_size,
                           eval_every=500 if args.eval_every is None else args.eval_every, **common)
                return 0
            if args.task == "image":
                from aiayn.cli.image import train_image

                if args.data not in (None, ["mnist"]):
                    parser.error(f"--task image takes --data mnist (with --data-dir), got {' '.join(args.data)}")
                train_image(model=args.preset or "vit-tiny", data=args.data[0] if args.data else None,
                            data_dir=args.data_dir, test_dir=args.test_dir, steps=args.steps or 400,
                            batch_size=args.batch_size or 128, lr=args.lr or 2e-3, warmup=args.warmup or 50,
                            eval_every=100 if args.eval_every is None else args.eval_every, **common)
                return 0
            if args.task == "denoise":
                from aiayn.cli.denoise import train_denoise

                if not 0 <= args.noise_ratio <= 1:
                    parser.error(f"--noise-ratio must be in [0, 1], got {args.noise_ratio}")
                train_denoise(data=args.data[0] if args.data else None, vocab_size=args.vocab_size or 1000,
                              preset=args.preset or "bart-tiny", steps=args.steps or 600,
                              batch_size=args.batch_size or 64, noise=args.noise.split(","), ratio=args.noise_ratio,
                              eval_every=200 if args.eval_every is None else args.eval_every, **common, **dropout)
                return 0
            if args.task == "mlm":
                from aiayn.cli.mlm import train_mlm

                train_mlm(data=args.data[0] if args.data else None, vocab_size=args.vocab_size or 2000,
                          preset=args.preset or "bert-tiny", steps=args.steps or 1000,
                          batch_size=args.batch_size or 32,
                          eval_every=250 if args.eval_every is None else args.eval_every, **common, **dropout)
                return 0
            if args.task == "lm":
                from aiayn.cli.lm import train_lm
                train_lm(data=args.data[0] if args.data else None, tokenizer=args.tokenizer,
                         vocab_size=args.vocab_size or 4000, preset=args.preset or "gpt-tiny", steps=args.steps or 1500,
                         block=args.block, batch_size=args.batch_size or 16, lr=args.lr or 3e-3,
                         eval_every=200 if args.eval_every is None else args.eval_every, bf16=args.bf16,
                         compile=args.compile, **common,
                         **dropout)
                return 0
            n_test = args.n_test or (1000 if args.data and args.data != ["multi30k"] else 500)
            train(task=args.task, data=args.data, data_dir=args.data_dir, src_lang=args.src_lang,
                  tgt_lang=args.tgt_lang, tokenizer=args.tokenizer, vocab_size=args.vocab_size or 8000,
                  preset=args.preset or "transformer-tiny", steps=args.steps or 1000, max_tokens=args.max_tokens,
                  eval_every=args.eval_every or 0, bf16=args.bf16, compile=args.compile, beam=args.beam,
                  warmup=args.warmup or 200,
                  lr_factor=args.lr_factor, n_test=n_test, **common, **dropout)
        elif args.command == "translate":
            from aiayn.cli.train import translate

            _positive(parser, args, "beam")
            if args.text:
                for src, hyp in zip(args.text, translate(args.run, args.text, beam=args.beam)):
                    print(f"{src} -> {hyp}")
            else:  # a filter: one translation per input line, in order
                lines = [line.rstrip("\n") for line in sys.stdin]
                for hyp in translate(args.run, lines, beam=args.beam):
                    print(hyp)
        elif args.command == "evaluate":
            from aiayn.cli.train import evaluate

            _positive(parser, args, "beam")
            r = evaluate(args.run, args.data, args.data_dir, args.split, args.src_lang, args.tgt_lang, args.beam)
            print(f"BLEU {r['bleu']:.2f}  chrF {r['chrf']:.2f}  exact match {r['exact_match']:.1%}  on {r['n']:,} "
                  f"pairs, beam {args.beam}\n{r['signature']}")
        elif args.command == "generate":
            from aiayn.cli.lm import generate, print_stream

            _positive(parser, args, "max_new_tokens")
            print_stream(generate(args.run, args.prompt, args.max_new_tokens, args.temperature, args.top_k,
                                  args.top_p, args.stop, args.seed))
        elif args.command == "convert":
            from aiayn.cli.convert import convert

            if len(args.paths) not in (2, 3):
                parser.error(f"convert takes [KIND] FOLDER OUT, got {len(args.paths)} paths")
            kind = args.paths[0] if len(args.paths) == 3 else "hf"
            print(f"converted into {convert(args.paths[-2], args.paths[-1], kind)}")
        elif args.command == "detect":
            from aiayn.cli.detect import detect

            if not 0 <= args.threshold < 1:
                parser.error(f"--threshold must be in [0, 1), got {args.threshold}")
            detect(args.run, args.image, args.threshold, args.out)
        elif args.command == "classify":
            from aiayn.cli.image import classify

            _positive(parser, args, "top")
            for r in classify(args.run, args.images, top=args.top):
                print(f"{r['path']}: " + ", ".join(f"{t['class']} ({t['probability']:.1%})" for t in r["top"]))
        elif args.command == "embed":
            from aiayn.cli.embed import embed

            texts = args.text or [line.rstrip("\n") for line in sys.stdin]
            vectors = embed(args.model, texts)
            rows = (vectors @ vectors.T) if args.similarity else vectors
            for row in rows.tolist():
                print(json.dumps([round(v, 6) for v in row]))
        elif args.command == "average":
            from aiayn.training import average_checkpoints

            print(f"averaged {len(args.checkpoints)} checkpoints into {average_checkpoints(args.checkpoints, args.out)}")
        elif args.command == "count":
            from aiayn.cli.count import count, format_count

            image_size = None
            if args.image_size is not None:
                sides = args.image_size.lower().split("x")
                if len(sides) not in (1, 2) or not all(x.isdigit() and int(x) > 0 for x in sides):
                    parser.error(f"--image-size must be a side or HEIGHTxWIDTH, e.g. 224 or 800x1066; got "
                                 f"{args.image_size!r}")
                image_size = int(sides[0]) if len(sides) == 1 else (int(sides[0]), int(sides[1]))
            report = count(args.preset, args.seq_len, image_size, args.batch)
            print(json.dumps(report, indent=2) if args.json else format_count(report))
        elif args.command == "bench":
            from aiayn.benchmark import run_bench

            if args.report_only:
                from aiayn.benchmark.report import write_report

                print(f"wrote {write_report(args.out, args.docs)}")
                return 0
            for name in ("rounds", "threads"):
                if getattr(args, name) is not None:
                    _positive(parser, args, name)
            rounds = {} if args.rounds is None else {"rounds": args.rounds}
            run_bench(args.cases or None, out=args.out, threads=args.threads, quick=args.quick, docs=args.docs,
                      device=args.device, **rounds)
        elif args.command == "viz":
            from aiayn.cli.viz import viz

            for path in viz(args.what, args.out, args.run, args.text, args.d_model, args.positions, args.sides,
                            window=args.window, target=args.target, html=args.html):
                print(f"wrote {path}")
    except (ValueError, FileNotFoundError) as e:
        print(f"aiayn {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (FloatingPointError, RuntimeError) as e:
        from aiayn.cli.runs import FolderLocked

        if not isinstance(e, (FloatingPointError, FolderLocked)):
            raise
        print(f"aiayn {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print(f"\naiayn {args.command}: interrupted: {e}", file=sys.stderr)
        return 130
    finally:
        if args.command == "train":
            from aiayn.training import distributed

            distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
