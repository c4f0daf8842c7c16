"""``distill``: distil an MoE language model into a small dense student with AMiD or a baseline loss.

The teacher is a ``hf-moe-lm`` (zoo, a library item, or an uploaded zip/tar of a Hugging Face
checkpoint folder, unpacked by the upload safety checks); the text a built-in or library corpus or
an uploaded file (plain text, JSONL, or a table with a ``text`` column). The student is a dense Qwen3 causal LM of
the requested size sharing the teacher's tokenizer. Training windows come from the chosen text's
train split, evaluation windows from its test split. Reports held-out forward and reverse KL to
the teacher, top-1 agreement, the student's perplexity, the teacher's NLL of student samples,
gradient-norm statistics and non-finite step counts, with loss, gradient-norm and held-out KL
curves; the student is saved as a loadable checkpoint (with the teacher's tokenizer).

A teacher larger than the worker's memory (``load``: auto, whole, layer-by-layer; ``mlcore.hf.memory``
decides from the checkpoint's headers) is never held whole: one layer-by-layer pass stores its
float32 logits of every training and held-out window on disk, training and evaluation read them,
and a second pass scores the student's samples (:mod:`mlcore.distill.streamed_teacher`).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlcore.charts import step_lines
from mlcore.hf.memory import LOAD_MODES
from mlcore.jobs import (
    Bool,
    Choice,
    Comparison,
    Dataset,
    Estimate,
    File,
    Float,
    Int,
    JobContext,
    JobError,
    JobSpec,
    Metric,
    Model,
    Seed,
)
from mlcore.jobs.binding import bind

if TYPE_CHECKING:
    from mlcore.distill.pipeline import TrainConfig

LOSSES = ("amid", "fkl", "rkl", "skew-kl", "taid", "abkd")
MAX_TRAIN_TOKENS = 4_000_000
#: Parameters that are not the training loop's: the student's shape, the loss, and the data.
STUDENT_PARAMS = ("student_hidden", "student_layers", "student_intermediate", "student_heads")
LOSS_PARAMS = ("loss", "alpha", "lam", "divergence", "order", "ab_a", "ab_b", "detach_q", "teacher_temperature")
DATA_PARAMS = ("model", "dataset", "seq_len", "train_windows", "eval_windows", "load")
#: Text uploads as :mod:`mlcore.sniff` names them; :mod:`mlcore.data.textset` reads each by its structure.
TEXT_FORMATS = ("txt", "jsonl", "json", "csv")


def _validate(p: dict[str, Any]) -> list[tuple[str, str]]:
    errors = []
    if p["student_hidden"] % p["student_heads"]:
        errors.append(("student_heads", f"Must divide the student's hidden size ({p['student_hidden']})."))
    if p["train_windows"] * p["seq_len"] > MAX_TRAIN_TOKENS:
        errors.append(("train_windows", f"train windows × sequence length may not exceed {MAX_TRAIN_TOKENS} tokens."))
    if p["loss"] == "amid" and p["detach_q"] and "q" not in p["order"]:
        errors.append(("detach_q", "With q detached inside r, D(p‖r) and D(r‖p) do not train the student."))
    if p["loss"] == "amid" and p["divergence"] == "ab" and 0 in (p["ab_a"], p["ab_b"], p["ab_a"] + p["ab_b"]):
        errors.append(("ab_a", "The α-β divergence needs a, b and a + b non-zero."))
    return errors


def _estimate(p: dict[str, Any]) -> Estimate:
    # Dominated by logits: the cached teacher pool plus a batch's student, teacher and loss tensors.
    vocab = 50_000  # an upper bound for the zoo and typical uploads; the job re-checks with the real vocabulary
    pool = min(p["train_windows"] * p["seq_len"] * vocab * 4, 512 * 2**20)
    step = p["batch_size"] * p["seq_len"] * vocab * 4 * 12
    return Estimate(memory_bytes=pool + step + 2 * 2**30, seconds=0.2 * p["steps"])


def _summarize(scalars: Mapping[str, Any]) -> str:
    return (
        f"Student ({scalars['compression']:.0f}× smaller than the teacher): held-out KL(p‖q) "
        f"{scalars['forward_kl']:.3f}, top-1 agreement {scalars['top1_agreement']:.0%}, perplexity "
        f"{scalars['student_ppl']:.1f} against the teacher's {scalars['teacher_ppl']:.1f}."
    )


spec = JobSpec(
    name="distill",
    metrics=(
        Metric(
            key="student_ppl",
            label="Student perplexity",
            better="lower",
            description="Held-out perplexity of the distilled student.",
        ),
        Metric(
            key="teacher_ppl",
            label="Teacher perplexity",
            better="lower",
            description="Held-out perplexity of the MoE teacher (the ceiling).",
        ),
        Metric(
            key="top1_agreement",
            label="Top-1 agreement",
            unit="%",
            better="higher",
            description="Share of held-out tokens where student and teacher predict the same next token.",
        ),
        Metric(
            key="compression",
            label="Compression",
            unit="×",
            better="higher",
            description="Teacher parameters per student parameter.",
        ),
    ),
    comparison=Comparison.none("Student against teacher: both perplexities stand side by side in the metrics."),
    title="Distil a language model (AMiD and baselines)",
    summary="Train a small student to imitate a teacher LM through AMiD's α-mixture or a classic KD loss.",
    version=2,
    queue="gpu",
    soft_time_limit=6 * 3600,
    time_limit=6 * 3600 + 300,
    params=(
        Model(
            name="model",
            accepts=("hf-moe-lm",),
            default="zoo:moe-lm-tiny",
            replaced_by=("checkpoint",),
            help="The teacher (a causal MoE LM).",
        ),
        File(
            name="checkpoint",
            label="Teacher checkpoint",
            formats=("zip", "tar"),
            max_bytes=20 * 2**30,
            help="Or upload the teacher: a zip or tar(.gz) of a Hugging Face MoE checkpoint folder (config.json, "
            "safetensors weights, tokenizer.json); it replaces the model above.",
        ),
        Dataset(
            name="dataset",
            accepts=("text",),
            default="zoo:stdlib-docs",
            replaced_by=("text_file",),
            help="Text to distil on.",
        ),
        File(
            name="text_file",
            formats=TEXT_FORMATS,
            max_bytes=200 * 2**20,
            help='Or upload text: plain UTF-8, JSONL with a "text" field per line, or CSV/TSV with a text column; '
            "it replaces the dataset above.",
        ),
        Int(name="student_hidden", default=32, min=8, max=4096, help="Student width."),
        Int(name="student_layers", default=2, min=1, max=48, help="Student transformer layers."),
        Int(name="student_intermediate", default=64, min=8, max=16384, help="Student MLP width."),
        Int(name="student_heads", default=2, min=1, max=64, help="Student attention heads (divide the width)."),
        Choice(
            name="loss",
            default="amid",
            options=LOSSES,
            help="AMiD (α, λ below), forward KL, reverse KL, skew KL (α=−1, λ=0.1), TAID (λ 0.4→1), ABKD.",
        ),
        Float(name="alpha", default=0.5, min=-10.0, max=10.0, help="AMiD α: −1 arithmetic, 1 geometric, 3 harmonic."),
        Float(name="lam", label="λ", default=0.5, min=0.0, max=1.0, help="AMiD's teacher weight in the assistant."),
        Choice(name="divergence", default="ab", options=("ab", "kl"), help="AMiD's divergence: α-β or forward KL."),
        Choice(
            name="order",
            default="p||r",
            options=("p||r", "r||p", "q||r", "r||q"),
            help="AMiD's argument order: D(p‖r) is the default (p teacher, q student, r assistant).",
        ),
        Float(name="ab_a", default=0.2, min=-5.0, max=5.0, help="α-β divergence a (AMiD and ABKD)."),
        Float(name="ab_b", default=0.7, min=-5.0, max=5.0, help="α-β divergence b (AMiD and ABKD)."),
        Bool(name="detach_q", default=False, help="AMiD: stop the gradient through the student inside r (TAID does)."),
        Int(name="steps", default=400, min=1, max=200_000, help="Optimiser steps."),
        Int(name="batch_size", default=8, min=1, max=1024, help="Sequences per step."),
        Float(name="lr", default=1e-3, min=1e-6, max=1.0, help="AdamW peak learning rate (cosine schedule)."),
        Int(name="seq_len", default=64, min=8, max=4096, help="Tokens per sequence."),
        Int(name="train_windows", default=256, min=1, max=100_000, help="Training sequences (the pool is reused)."),
        Int(name="eval_windows", default=64, min=1, max=4096, help="Held-out sequences."),
        Int(name="eval_every", default=50, min=0, max=100_000, help="Held-out evaluation interval (0: end only)."),
        Bool(name="bf16", default=False, help="Run the student and the loss under bf16 autocast."),
        Float(
            name="teacher_temperature",
            default=1.0,
            min=0.05,
            max=10.0,
            help="Divide the teacher's logits by this; below 1 gives a peaked teacher (many near-zero probabilities).",
        ),
        Choice(
            name="load",
            default="auto",
            options=LOAD_MODES,
            help="whole: the teacher in memory; layer-by-layer: one decoder layer at a time, each read once for "
            "every sequence, the teacher's logits of every training and held-out sequence stored on disk and its "
            "layers read once more to score the student's samples (for teachers larger than the worker's memory); "
            "auto: whole when it fits.",
        ),
        Seed(name="seed"),
    ),
    validate=_validate,
    estimate=_estimate,
    guide=(
        "Lower held-out forward KL (p‖q) means the student covers the teacher's distribution; lower reverse KL "
        "(q‖p) that it avoids what the teacher deems unlikely. Top-1 agreement counts tokens where both pick the "
        "same next token. Non-finite steps were skipped; a large gradient-norm spread signals an unstable loss.\n\n"
        "**What you can bring.** The teacher: a library hf-moe-lm, or an uploaded zip or tar(.gz) of a Hugging Face "
        "MoE checkpoint folder (config.json, safetensors weights, tokenizer.json; the folder may be the archive's "
        "root or one level down). The text: a library text item, or an uploaded UTF-8 file (plain text; JSONL with "
        'a "text" field per line; CSV or TSV with a text column; a byte-order mark and Windows line ends are fine). '
        "An upload replaces the model or dataset picked above; the job records only what it used. "
        "*Try with a sample* distils zoo:moe-lm-olmoe, an OLMoE checkpoint in the Hugging Face layout, on "
        "zoo:sample-notes, text in the formats users bring (a JSONL file with a byte-order mark and Windows line "
        "ends, and a CSV whose quoted text column holds commas)."
    ),
    # The sample brings its own data: a transformers OLMoE checkpoint as the teacher (not the default Qwen3-MoE)
    # and text as users export it (JSONL with a byte-order mark and CRLF, a CSV of quoted texts).
    sample={
        "model": "zoo:moe-lm-olmoe",
        "dataset": "zoo:sample-notes",
        "steps": 60,
        "train_windows": 32,
        "eval_windows": 16,
        "eval_every": 20,
        "seed": 0,
    },
    summarize=_summarize,
)


def _loss_config(p: dict[str, Any]) -> Any:
    from dataclasses import replace

    from mlcore.distill.amid import PRESETS, amid_config

    ab = (p["ab_a"], p["ab_b"])
    if p["loss"] == "amid":
        return amid_config(
            p["alpha"], p["lam"], divergence=p["divergence"], order=p["order"], detach_q=p["detach_q"], ab=ab
        )
    return replace(PRESETS[p["loss"]], ab=ab)


def _texts(inputs: dict[str, Any], ctx: JobContext) -> tuple[str, list[str], list[str]]:
    """The text's name, its training blocks and its held-out blocks; the log says which files gave how much."""
    from mlcore.data.textset import TextDatasetError, load_text_dataset

    try:
        data = load_text_dataset(Path(inputs["text_file"] if "text_file" in inputs else inputs["dataset"]))
    except TextDatasetError as exc:
        raise JobError(f"Text: {exc}.") from None
    ctx.log(f"text {data.name}: {data.read_from()}")
    return data.name, data.split("train"), data.split("test") + data.split("calibration")


def _teacher_folder(inputs: dict[str, Any]) -> Path:
    """The teacher's checkpoint folder: an uploaded archive's (unpacked and checked by the runner), or the model's."""
    if "checkpoint" in inputs:
        from mlcore.sniff import unpacked_checkpoint

        return unpacked_checkpoint(Path(inputs["checkpoint"]), label="Teacher checkpoint")
    return Path(inputs["model"])


def _teacher_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        raise JobError("The teacher checkpoint has no tokenizer; include tokenizer.json next to config.json.")
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    if tokenizer.eos_token_id is None:
        raise JobError("The teacher's tokenizer has no end-of-text token; set eos_token in tokenizer_config.json.")
    return tokenizer


def _teacher_config(folder: Path) -> Any:
    """The teacher's config after the loader's safety checks, before any weight is read."""
    from mlcore.hf.architectures import HFModelError
    from mlcore.hf.loading import checked_config

    try:
        return checked_config(folder)
    except HFModelError as exc:
        raise JobError(str(exc)) from None


def _load_mode(params: dict[str, Any], folder: Path, ctx: JobContext, *, windows: int, vocab: int) -> str:
    """Whole or layer by layer (``mlcore.hf.memory``), logged with both needs; refused when neither fits."""
    from mlcore.distill.streamed_teacher import plan_teacher_load
    from mlcore.hf.architectures import HFModelError

    try:
        mode, needs = plan_teacher_load(
            folder,
            params["load"],
            device=ctx.device,
            windows=windows,
            seq_len=params["seq_len"],
            batch_size=params["batch_size"],
            vocab=vocab,
        )
    except HFModelError as exc:
        raise JobError(str(exc)) from None
    ctx.log(needs.log_line(mode))
    return mode


def _load_teacher(folder: Path, device: Any) -> Any:
    from mlcore.hf import load_model
    from mlcore.hf.architectures import HFModelError

    try:
        model = load_model(folder, device=device)
    except HFModelError as exc:
        raise JobError(str(exc)) from None
    except (RuntimeError, ValueError, OSError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise JobError(f"Could not load the teacher: {first[:300]}.") from None
    return model.requires_grad_(False)


@contextmanager
def _streamed_teacher(folder: Path, ctx: JobContext) -> Iterator[Any]:
    """The teacher with one decoder layer in memory at a time; a checkpoint that does not load, or a
    model that cannot run layer by layer (``HFModelError`` from the pass), as one sentence."""
    from mlcore.hf import layer_by_layer
    from mlcore.hf.architectures import HFModelError

    with ExitStack() as stack:
        try:
            model = stack.enter_context(layer_by_layer(folder, device=ctx.device))
        except HFModelError as exc:
            raise JobError(str(exc)) from None
        except (RuntimeError, ValueError, OSError, KeyError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise JobError(f"Could not read the teacher layer by layer: {first[:300]}.") from None
        try:
            yield model
        except HFModelError as exc:
            raise JobError(str(exc)) from None


def _counting(ctx: JobContext, span: Any) -> Callable[[int, int], None]:
    """After each decoder layer of a pass: progress, and a stop if the job was cancelled."""

    def on_layer(done: int, total: int) -> None:
        ctx.raise_if_cancelled()
        span.count(done, total, "decoder layer")

    return on_layer


def _stored_logits(
    params: dict[str, Any], folder: Path, ctx: JobContext, windows: tuple[Any, Any], vocab: int, scratch: Path
) -> tuple[Any, Any, str, int]:
    """The teacher's logits of the training and held-out windows from one layer-by-layer pass, stored
    in ``scratch``, the teacher's class name and parameter count; refused before any weight is read
    when the file would exceed the cap or the disk."""
    import shutil

    from mlcore.distill.pipeline import parameter_count
    from mlcore.distill.streamed_teacher import LogitsTooLarge, check_storable, pass_batch, store_teacher_logits

    count = len(windows[0]) + len(windows[1])
    try:
        size = check_storable(count, params["seq_len"], vocab, free=shutil.disk_usage(scratch).free)
    except LogitsTooLarge as exc:
        raise JobError(str(exc)) from None
    ctx.log(
        f"the teacher does not run whole: one layer-by-layer pass stores its float32 logits of {count:,} sequences "
        f"({size / 2**20:,.0f} MB on disk) for training and the held-out evaluation"
    )
    reading = ctx.span(0.01, 0.05, "teacher logits, layer by layer")
    with _streamed_teacher(folder, ctx) as model:
        stored = store_teacher_logits(
            model,
            windows,
            scratch / "teacher-logits.f32",
            batch_size=pass_batch(params["seq_len"], vocab),
            temperature=params["teacher_temperature"],
            on_layer=_counting(ctx, reading),
            spill_dir=scratch,
            # A big teacher's pass is long: a killed attempt's re-run continues from its last finished layer.
            resume_dir=None if ctx.resume_dir is None else ctx.resume_dir / "teacher-pass",
            on_resume=lambda done, total: ctx.log(
                f"the teacher's pass continues from decoder layer {done + 1} of {total}: an earlier attempt "
                "finished the rest"
            ),
        )
        # A streamed model's decoder layers sit on the meta device: their shapes still count.
        name, parameters = type(model).__name__, parameter_count(model)
    return stored[0], stored[1], name, parameters


def _streamed_sample_quality(
    params: dict[str, Any], folder: Path, ctx: JobContext, student: Any, prompts: Any, new_tokens: int, scratch: Path
) -> dict[str, float]:
    """Sample quality with a teacher that does not run whole: the student samples, then a second
    layer-by-layer pass (one more read of the checkpoint) gives the teacher's NLL of the samples."""
    from mlcore.distill.pipeline import sample_metrics, sample_student
    from mlcore.distill.streamed_teacher import pass_batch, score_samples

    ids = sample_student(student, prompts, new_tokens=new_tokens, seed=params["seed"])
    ctx.log(
        "scoring the student's samples: a second layer-by-layer pass over the teacher's checkpoint "
        "(the samples exist only after training)"
    )
    scoring = ctx.span(0.93, 0.98, "scoring the samples, layer by layer")
    with _streamed_teacher(folder, ctx) as model:
        nll = score_samples(
            model,
            ids,
            prompts.shape[1],
            batch_size=pass_batch(ids.shape[1], int(model.config.vocab_size)),
            temperature=params["teacher_temperature"],
            on_layer=_counting(ctx, scoring),
            spill_dir=scratch,
        )
    return sample_metrics(nll, ids[:, prompts.shape[1] :].cpu())


def _curves(ctx: JobContext, result: Any) -> None:
    stride = max(1, len(result.loss) // 500)  # at most ~500 points per curve in the page
    loss = [{"step": s, "loss": v} for s, v in result.loss[::stride]]
    norms = [{"step": s, "grad_norm": v} for s, v in result.grad_norm[::stride]]
    ctx.chart("loss", step_lines("Distillation loss", loss, "loss", "Loss per token"))
    ctx.chart("grad_norm", step_lines("Gradient norm (before clipping)", norms, "grad_norm", "‖g‖₂"))
    heldout = [
        {"step": step, "kl": metrics[name], "direction": label}
        for step, metrics in result.evals
        for name, label in (("forward_kl", "forward KL(p‖q)"), ("reverse_kl", "reverse KL(q‖p)"))
    ]
    ctx.chart(
        "heldout_kl", step_lines("Held-out KL to the teacher", heldout, "kl", "Nats per token", color="direction")
    )


def _train_config(params: dict[str, Any]) -> TrainConfig:
    from mlcore.distill.pipeline import TrainConfig

    return bind(TrainConfig, params, skip=(*STUDENT_PARAMS, *LOSS_PARAMS, *DATA_PARAMS))


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mlcore.distill.pipeline import (
        SharpenedTeacher,
        build_student,
        distill,
        parameter_count,
        sample_quality,
    )
    from mlcore.distill.pipeline import student_config as make_student_config
    from mlcore.eval.perplexity import heldout_windows

    if "model" not in inputs and "checkpoint" not in inputs:
        raise JobError("Pick a teacher model (e.g. zoo:moe-lm-tiny) or upload a teacher checkpoint.")
    if "text_file" not in inputs and "dataset" not in inputs:
        raise JobError("Pick a text dataset (e.g. zoo:stdlib-docs) or upload a text file.")
    loss_config = _loss_config(params)
    ctx.progress(0.0, "reading the teacher's config")
    teacher_folder = _teacher_folder(inputs)
    teacher_config = _teacher_config(teacher_folder)
    tokenizer = _teacher_tokenizer(teacher_folder)
    context = int(getattr(teacher_config, "max_position_embeddings", params["seq_len"]))
    if params["seq_len"] > context:
        raise JobError(f"Sequence length {params['seq_len']} exceeds the teacher's context ({context}); lower it.")
    name, train_texts, test_texts = _texts(inputs, ctx)
    train = heldout_windows(tokenizer, train_texts, length=params["seq_len"], max_windows=params["train_windows"])
    heldout = heldout_windows(tokenizer, test_texts, length=params["seq_len"], max_windows=params["eval_windows"])
    if len(train) < 1 or len(heldout) < 1:
        raise JobError(f"The text yields too few {params['seq_len']}-token sequences; upload more or shorten them.")
    vocab = int(teacher_config.vocab_size)
    mode = _load_mode(params, teacher_folder, ctx, windows=len(train) + len(heldout), vocab=vocab)

    with ExitStack() as stack:
        teacher: Any = None
        targets = heldout_targets = None
        if mode == "whole":
            ctx.progress(0.01, "loading the teacher")
            teacher = _load_teacher(teacher_folder, ctx.device)
            if params["teacher_temperature"] != 1.0:
                teacher = SharpenedTeacher(teacher, params["teacher_temperature"])
            teacher_name, teacher_parameters = type(teacher).__name__, parameter_count(teacher)
        else:
            Path(ctx.workdir).mkdir(parents=True, exist_ok=True)
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="moelab-teacher-", dir=ctx.workdir)))
            targets, heldout_targets, teacher_name, teacher_parameters = _stored_logits(
                params, teacher_folder, ctx, (train, heldout), vocab, scratch
            )

        config = make_student_config(
            teacher_config,
            hidden=params["student_hidden"],
            layers=params["student_layers"],
            intermediate=params["student_intermediate"],
            heads=params["student_heads"],
        )
        student = build_student(config, seed=params["seed"], device=ctx.device)
        sizes = {"teacher_parameters": teacher_parameters, "student_parameters": parameter_count(student)}
        ctx.log(
            f"teacher {teacher_name} ({sizes['teacher_parameters']:,} parameters) → dense Qwen3 student "
            f"({sizes['student_parameters']:,}); {len(train)} training and {len(heldout)} held-out windows of "
            f"{params['seq_len']} tokens from {name}; loss {params['loss']}: {loss_config.describe()}"
            + (" under bf16 autocast" if params["bf16"] else "")
            + (f", teacher logits / {params['teacher_temperature']:g}" if params["teacher_temperature"] != 1.0 else "")
        )
        train_config = _train_config(params)

        def on_step(step: int, result: Any) -> None:
            ctx.raise_if_cancelled()
            ctx.metric("loss", result.loss[-1][1], step=step)
            ctx.metric("grad_norm", result.grad_norm[-1][1], step=step)
            if result.evals and result.evals[-1][0] == step + 1:
                for key in ("forward_kl", "reverse_kl", "top1_agreement", "student_ppl"):
                    ctx.metric(f"heldout_{key}", result.evals[-1][1][key], step=step + 1)
                _curves(ctx, result)
            if step % 10 == 0:
                ctx.progress(0.05 + 0.85 * step / params["steps"], f"step {step} of {params['steps']}")

        result = distill(
            teacher,
            student,
            train,
            heldout,
            loss_config,
            train_config,
            on_step=on_step,
            targets=targets,
            heldout_targets=heldout_targets,
        )
        targets = heldout_targets = None  # the stored logits' file goes with the scratch folder
        ctx.progress(0.92, "sampling from the student")
        prompts = heldout[: min(16, len(heldout)), : max(1, params["seq_len"] // 4)]
        new_tokens = min(32, context - prompts.shape[1])
        if teacher is not None:
            samples = sample_quality(teacher, student, prompts, new_tokens=new_tokens, seed=params["seed"])
        else:
            samples = _streamed_sample_quality(params, teacher_folder, ctx, student, prompts, new_tokens, scratch)
    final_eval = result.evals[-1][1]
    for key in ("forward_kl", "reverse_kl", "top1_agreement", "student_ppl"):
        ctx.metric(f"heldout_{key}", final_eval[key], step=params["steps"])
    _curves(ctx, result)
    metrics = {
        **result.metrics,
        **samples,
        **sizes,
        "compression": sizes["teacher_parameters"] / sizes["student_parameters"],
    }
    for key, value in metrics.items():
        ctx.metric(key, value)
    ctx.log(
        f"held-out KL(p‖q) {metrics['forward_kl']:.4f}, KL(q‖p) {metrics['reverse_kl']:.4f}, top-1 agreement "
        f"{metrics['top1_agreement']:.3f}, student ppl {metrics['student_ppl']:.2f} "
        f"(teacher {metrics['teacher_ppl']:.2f}); "
        f"{result.nonfinite_loss_steps + result.nonfinite_grad_steps} non-finite steps skipped"
    )

    folder = ctx.workdir / "student"
    student.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    ctx.artifact("student", folder)
    ctx.register(
        "hf-lm",
        folder,
        {"name": f"student of {teacher_folder.name} ({params['loss']})", "loss": params["loss"]},
    )
    report = ctx.workdir / "report.json"
    report.write_text(
        json.dumps(
            {
                "loss": {"name": params["loss"], "description": loss_config.describe(), **vars(loss_config)},
                "train": vars(train_config),
                "metrics": metrics,
                "evals": [{"step": s, **m} for s, m in result.evals],
            },
            indent=1,
            default=str,
        )
    )
    ctx.artifact("report.json", report, "application/json")
    ctx.progress(1.0, "done")
    return metrics
