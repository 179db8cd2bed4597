"""Exact match by real generation, and a look at what a model writes (``lengen generate``).

The default exact-match score of a decoder sequence task is teacher forced (one forward pass,
``seq_acc`` of :func:`lengen.eval.evaluate`): greedy decoding reproduces answer + EOS iff every
answer token and the EOS is the argmax given the true prefix. This module decodes for real, with
``model.generate`` (batched greedy decoding with a KV cache; CONTRACT item 2): for error analysis,
for users, and to test that the two scores agree. It scores exactly the sequences the
teacher-forced evaluation scores (same seed, same batches).

    exact_match_generated(model, task, "len=30", n_sequences=200, batch_size=50, seed=1234)
    # {'seq_acc': 0.93, 'sequences': 200, 'sequences_correct': 186, 'correct': [True, ...]}
    print(show_generations(model, task, split="len=30", n=4))

A generated answer is right iff it equals the target answer followed by EOS: ``generate`` stops a
row at its EOS and is given as many new tokens as the longest target answer + EOS of the batch, so
a missing, early or late EOS is a mismatch.
"""
from __future__ import annotations

import torch
from tqdm.auto import tqdm

from lengen.config import SEED
from lengen.errors import ConfigError
from lengen.eval.evaluate import eval_stream
from lengen.rundir.load import load_run
from lengen.tasks.sequence.base import EOS, SequenceTask, prompts_and_answers
from lengen.tasks.splits import split_name
from lengen.threads import use_threads

MARK = ">>{}<<"     # how the first wrong output token is shown


def require_sequence_task(task) -> SequenceTask:
    if not isinstance(task, SequenceTask):
        raise ValueError(f"task {task.name} is not a decoder sequence task (prompt -> answer); "
                         f"generation needs one of copy, reverse, sort, summation, ...")
    return task


def generate_answers(model, prompts: list[torch.Tensor], max_new_tokens: int,
                     eos_id: int = EOS, positions: torch.Tensor | None = None
                     ) -> list[torch.Tensor]:
    """Greedy continuations of ``prompts`` (1-D LongTensors), each up to and including its EOS,
    at most ``max_new_tokens`` long, in eval mode without gradients. ``positions`` ([T] or
    [B, T] covering prompt + max_new_tokens) are passed on when given."""
    generate = getattr(model, "generate", None)
    if generate is None:
        raise RuntimeError("this model has no generate(); generation needs lengen's Transformer "
                           "with Transformer.generate (incremental decoding)")
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            kw = {} if positions is None else {"positions": positions}
            out = generate(prompts, max_new_tokens, eos_id=eos_id, **kw)
    finally:
        model.train(was_training)
    return [o.reshape(-1).cpu() for o in out]


#: the most examples lengen generate prints
MAX_SHOWN = 1000
#: greedy decoding goes at most this many times beyond the longest answer the run was trained or
#: configured to evaluate (it runs one token at a time, and the time grows with the square)
FAR_FACTOR = 10


def check_decode_length(task: SequenceTask, answer_tokens: int, what: str) -> None:
    """Refuse decoding answers far beyond what the run was trained or configured for: more than
    :data:`FAR_FACTOR` x the longest answer of its training lengths and evaluation splits."""
    longest = max(task._parse(s) for s in task.splits())
    longest = max(longest, task.max_train_length)
    limit = FAR_FACTOR * (task.answer_length(longest) + 1)
    if answer_tokens > limit:
        raise ConfigError(
            f"{what} asks for answers of {answer_tokens} tokens, far beyond what this run was "
            f"trained on or configured to evaluate (up to {longest} items, "
            f"{split_name(longest)}); lengen generate decodes one token at a time and stops at "
            f"{FAR_FACTOR}x that ({limit} tokens). Pick a shorter split, or score long lengths "
            f"with lengen eval RUN --splits {what if what.startswith('len=') else 'len=K'} "
            f"(teacher-forced, one pass, the same exact-match score)")


def first_error(output: torch.Tensor, target: torch.Tensor) -> int | None:
    """Index of the first output token that differs from the target (``len(output)`` when the
    output is a strict prefix of the target), or None when they are equal."""
    out, tgt = output.tolist(), target.tolist()
    for i, (o, t) in enumerate(zip(out, tgt)):
        if o != t:
            return i
    return None if len(out) == len(tgt) else min(len(out), len(tgt))


def generated_batches(model, task, split: str, n_sequences: int, batch_size: int, seed: int,
                      device="cpu"):
    """Yield ``(prompts, answers, outputs)`` per evaluation batch of ``split``: greedy decoding of
    the very sequences, at the very positions, that teacher-forced evaluation scores
    (:func:`lengen.eval.evaluate.eval_stream`; randomized samplers draw per evaluation block), so
    the two can be compared row by row. Positions that a sampler reads from the tokens (position
    coupling, Abacus) are computed by ``generate`` from the model's own output instead, which
    equals the teacher-forced positions as long as the output is right."""
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        stream = list(eval_stream(model, task, split, n_sequences, batch_size, seed, device))
    finally:
        model.train(was_training)
    from_tokens = getattr(getattr(model, "sampler", None), "reads_tokens", False)
    for _, batch, pos in stream:
        prompts, answers = prompts_and_answers(batch)
        if from_tokens:
            # positions read from the tokens (coupling, abacus): generate computes them from
            # what the model writes, step by step; equal to these wherever the output is right
            pos = None
        elif pos is not None:
            # teacher forcing feeds prompt + answer; generation needs one more column (for the
            # EOS it writes last and never feeds back): any finite value will do
            pos = torch.cat([pos, pos[..., -1:]], -1)
        outputs = generate_answers(model, [p.to(device) for p in prompts],
                                   max(a.numel() for a in answers), positions=pos)
        yield [p.cpu() for p in prompts], [a.cpu() for a in answers], outputs


def exact_match_generated(model, task, split: str, n_sequences: int, batch_size: int,
                          seed: int, device="cpu") -> dict:
    """Greedy-decoding exact match of answer + EOS over the first ``n_sequences`` evaluation
    sequences of ``split`` for ``seed`` (the sequences :func:`lengen.eval.evaluate` scores).
    Returns ``seq_acc``, ``sequences``, ``sequences_correct`` and ``correct`` (one bool per
    sequence, in evaluation order)."""
    task = require_sequence_task(task)
    task.check_split(split)
    model.check_length(task.max_input_length([split]))
    correct = []
    for _, answers, outputs in generated_batches(model, task, split, n_sequences, batch_size,
                                                 seed, device):
        correct += [torch.equal(o, a.cpu()) for o, a in zip(outputs, answers)]
    n = len(correct)
    return {"seq_acc": sum(correct) / max(n, 1), "sequences": n,
            "sequences_correct": sum(correct), "correct": correct}


def evaluate_generated(model, task, splits: list[str], *, n_sequences: int, batch_size: int,
                       seed: int = 1234, device="cpu", meta: dict | None = None) -> list[dict]:
    """Rows ``{..meta, split, metric: 'seq_acc_generated', value, sequences}`` per split, in the
    long format of :func:`lengen.eval.evaluate` (so sweeps and plots read them alike)."""
    rows = []
    for split in splits:
        r = exact_match_generated(model, task, split, n_sequences, batch_size, seed, device)
        rows.append(dict(meta or {}, split=split, metric="seq_acc_generated", value=r["seq_acc"],
                         sequences=r["sequences"]))
    return rows


def format_example(task: SequenceTask, prompt, target, output, header: str = "") -> str:
    """Prompt, target and output, the first wrong output token marked ``>>x<<``."""
    err = first_error(output, target)
    names = task.decode(output).split(" ") if output.numel() else []
    if err is not None:
        if err < len(names):
            names[err] = MARK.format(names[err])
        else:
            names.append(MARK.format("(end)"))             # stopped before the target did
    verdict = "right" if err is None else f"WRONG from answer token {err}"
    return "\n".join([f"{header}{verdict}",
                      f"  prompt  {task.decode(prompt)}",
                      f"  target  {task.decode(target)}",
                      f"  output  {' '.join(names)}"])


def show_generations(model, task, *, split: str | None = None, prompt: str | None = None,
                     n: int = 8, seed: int = 1234, batch_size: int = 64, device="cpu",
                     progress: bool = False) -> str:
    """Text with ``n`` evaluation examples of ``split`` (default: the first length beyond
    training), or the one ``prompt`` (token names, items only or ``[WORD] .. [SEP]``): prompt,
    target and greedy output of each, and a count of the right ones. Refuses ``n`` above
    :data:`MAX_SHOWN` and answers far beyond the run's lengths (:func:`check_decode_length`);
    ``progress`` shows a bar over the batches when there are several."""
    task = require_sequence_task(task)
    if prompt is not None and split is not None:
        raise ValueError("give either a split or a prompt, not both")
    if n < 1:
        raise ValueError(f"--n must be >= 1, got {n}")
    if n > MAX_SHOWN:
        raise ConfigError(f"--n {n} would decode and print {n} examples; lengen generate shows "
                          f"at most {MAX_SHOWN} (it is for reading answers). For the accuracy "
                          f"over many sequences use lengen eval RUN --sequences {n} (or "
                          f"exact_match_generated from Python)")
    if prompt is not None:
        p, a = task.parse_prompt(prompt)
        check_decode_length(task, a.numel(), f"the prompt ({p.numel() - 2} items)")
        model.check_length(p.numel() + a.numel() - 1)
        prompts, answers, title = [p], [a], f"prompt ({p.numel() - 2} items)"
        outputs = generate_answers(model, [p.to(device)], a.numel())
    else:
        split = split or split_name(task.max_train_length + 1)
        task.check_split(split)
        check_decode_length(task, task.answer_length(task._parse(split)) + 1, split)
        model.check_length(task.max_input_length([split]))
        title = f"{split}, evaluation seed {seed}"
        # the very sequences and positions evaluation scores (and exact_match_generated decodes)
        prompts, answers, outputs = [], [], []
        batches = generated_batches(model, task, split, n, batch_size, seed, device)
        if progress and n > batch_size:        # long legitimate work: say how far it is
            batches = tqdm(batches, total=-(-n // batch_size), desc="generate", unit="batch",
                           leave=False)
        for ps, ans, outs in batches:
            prompts += ps
            answers += ans
            outputs += outs
    blocks = [format_example(task, q, a, o, header=f"[{i}] ")
              for i, (q, a, o) in enumerate(zip(prompts, answers, outputs))]
    right = sum(first_error(o, a) is None for o, a in zip(outputs, answers))
    return "\n".join([f"{task.name}: {title}, greedy decoding"] + blocks
                     + [f"{right}/{len(outputs)} right"])


def run_generate(run_dir: str, *, split: str | None = None, prompt: str | None = None,
                 n: int = 8, seed: int | None = None, device="cpu", threads: int = 0) -> str:
    """``lengen generate``: :func:`show_generations` for a run directory's model, on ``threads``
    torch threads (0: :func:`lengen.threads.choose_threads`'s choice for the model)."""
    if seed is not None:
        SEED.check(seed, "seed")          # --seed: an evaluation data seed, an integer >= 0
    cfg, task, model = load_run(run_dir, device=device)
    use_threads(threads, cfg.model.d_model, device)
    require_sequence_task(task)
    return show_generations(model, task, split=split, prompt=prompt, n=n,
                            seed=cfg.eval.seed if seed is None else seed,
                            batch_size=cfg.eval.batch_size, device=device, progress=True)


__all__ = ["exact_match_generated", "evaluate_generated", "generate_answers", "first_error",
           "format_example", "show_generations", "run_generate"]
