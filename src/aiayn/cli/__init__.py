"""The ``aiayn`` command. Every subcommand is also a plain function (:mod:`aiayn.cli.train`, ...)."""

from __future__ import annotations

import argparse
import json
import sys


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line of help, status 2, no traceback
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="aiayn", description="Attention Is All You Need, and the models it started.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    t = sub.add_parser("train", help="train a model; with no arguments, the default job (about two minutes on a CPU)")
    t.add_argument("--task", default="dates", choices=["dates", "copy", "lm", "mlm"],
                   help="dates: free English dates -> ISO (default); copy: copy random strings; lm: a GPT "
                        "language model (on made-up date lines, or on --data FILE); mlm: BERT pre-training "
                        "(masked LM + next sentence, on made-up date pairs or on --data FILE)")
    t.add_argument("--data", nargs="+", default=None, metavar="DATA",
                   help="a corpus instead of a synthetic task: 'multi30k' (with --data-dir), a TSV file of pairs "
                        "(Tatoeba's cmn.txt), or two aligned text files (plain or .gz); with --task lm, any text file")
    t.add_argument("--data-dir", default=None, help="folder of the Multi30k files")
    t.add_argument("--src-lang", default="de")
    t.add_argument("--tgt-lang", default="en")
    t.add_argument("--tokenizer", choices=["char", "bpe"], default=None,
                   help="default: char for synthetic tasks, joint BPE for a corpus")
    t.add_argument("--vocab-size", type=int, default=None,
                   help="subword vocabulary size (default 8000 BPE; lm 4000 BPE; mlm 2000 WordPiece)")
    t.add_argument("--n-test", type=int, default=None, help="held-out pairs (default 500; 1000 for a corpus file)")
    t.add_argument("--preset", default=None, help="default transformer-tiny, or gpt-tiny for --task lm")
    t.add_argument("--steps", type=int, default=None, help="optimizer updates (default 1000; 1500 for --task lm)")
    t.add_argument("--max-tokens", type=int, default=1024, help="padded tokens per batch")
    t.add_argument("--accum", type=int, default=1, help="batches per update (gradient accumulation)")
    t.add_argument("--eval-every", type=int, default=None,
                   help="validate every N updates, keeping the best checkpoint (default: at the end; 200 for lm)")
    t.add_argument("--block", type=int, default=64, help="lm: context length of training blocks")
    t.add_argument("--batch-size", type=int, default=None, help="lm: blocks per batch (16); mlm: pairs (32)")
    t.add_argument("--lr", type=float, default=3e-3, help="lm: peak learning rate (AdamW, cosine decay)")
    t.add_argument("--save-every", type=int, default=500,
                   help="write the training state every N updates (and on Ctrl-C), so --resume can continue")
    t.add_argument("--resume", default=None, metavar="DIR",
                   help="continue the run in DIR where it stopped, with its own arguments (--steps may extend it)")
    t.add_argument("--bf16", action="store_true", help="bf16 autocast (slow on CPUs without bf16 units)")
    t.add_argument("--beam", type=int, default=1, help="beam size of the final evaluation (1 = greedy)")
    t.add_argument("--warmup", type=int, default=200, help="warm-up steps of the schedule (section 5.3)")
    t.add_argument("--lr-factor", type=float, default=0.3, help="multiplies the schedule's learning rate")
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

    c = sub.add_parser("count", help="parameters of a preset, by part")
    c.add_argument("preset")
    c.add_argument("--json", action="store_true")
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

            if args.steps is not None:
                _positive(parser, args, "steps")
            if args.resume:
                from aiayn.cli.lm import resume_lm
                from aiayn.cli.runs import read_args

                task = read_args(args.resume).get("task")
                if task == "mlm":
                    parser.error("--resume does not continue --task mlm runs yet")
                resume = resume_lm if task == "lm" else resume_training
                resume(args.resume, args.steps, progress=not args.no_progress)
                return 0
            _positive(parser, args, "max_tokens", "warmup", "lr_factor", "accum", "beam", "block", "lr")
            for name in ("vocab_size", "batch_size"):
                if getattr(args, name) is not None:
                    _positive(parser, args, name)
            for name in ("eval_every", "save_every"):
                if (getattr(args, name) or 0) < 0:
                    parser.error(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
            if args.task == "mlm":
                from aiayn.cli.mlm import train_mlm

                if args.data and len(args.data) != 1:
                    parser.error(f"--task mlm takes one text file as --data, got {len(args.data)}")
                train_mlm(data=args.data[0] if args.data else None, vocab_size=args.vocab_size or 2000,
                          preset=args.preset or "bert-tiny", steps=args.steps or 1000,
                          batch_size=args.batch_size or 32, seed=args.seed, out=args.out,
                          name=args.name, progress=not args.no_progress,
                          eval_every=250 if args.eval_every is None else args.eval_every)
                return 0
            if args.task == "lm":
                from aiayn.cli.lm import train_lm

                if args.data and len(args.data) != 1:
                    parser.error(f"--task lm takes one text file as --data, got {len(args.data)}")
                train_lm(data=args.data[0] if args.data else None, tokenizer=args.tokenizer,
                         vocab_size=args.vocab_size or 4000, preset=args.preset or "gpt-tiny", steps=args.steps or 1500,
                         block=args.block, batch_size=args.batch_size or 16, accum=args.accum, lr=args.lr,
                         eval_every=200 if args.eval_every is None else args.eval_every, save_every=args.save_every,
                         bf16=args.bf16, seed=args.seed, out=args.out, name=args.name, progress=not args.no_progress)
                return 0
            n_test = args.n_test or (1000 if args.data and args.data != ["multi30k"] else 500)
            train(task=args.task, data=args.data, data_dir=args.data_dir, src_lang=args.src_lang,
                  tgt_lang=args.tgt_lang, tokenizer=args.tokenizer, vocab_size=args.vocab_size or 8000,
                  preset=args.preset or "transformer-tiny", steps=args.steps or 1000, max_tokens=args.max_tokens,
                  accum=args.accum, eval_every=args.eval_every or 0, save_every=args.save_every, bf16=args.bf16,
                  beam=args.beam, warmup=args.warmup, lr_factor=args.lr_factor, n_test=n_test, seed=args.seed,
                  out=args.out, name=args.name, progress=not args.no_progress)
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
            from aiayn.analysis import parameter_table
            from aiayn.models import preset

            table = parameter_table(preset(args.preset))
            if args.json:
                print(json.dumps({"preset": args.preset, "parameters": table}, indent=2))
            else:
                print(f"{args.preset}: parameters by part")
                for part, n in table.items():
                    print(f"  {part:<14}{n:>16,}  {n / table['total']:>6.1%}")
    except (ValueError, FileNotFoundError) as e:
        print(f"aiayn {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"\naiayn {args.command}: interrupted: {e}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
