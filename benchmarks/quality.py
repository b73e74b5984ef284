"""Students worth shipping (issue 34): on the five shipped GLUE tasks' full training sets, over seeds, the teacher
fine-tuned on the whole set, TF-IDF + logistic regression and the majority class on the same examples, MediaPipe
Model Maker's average-word-embedding classifier (SST-2), and the toolkit's best recipe per student family, each
with its `.tflite` size and Pixel 4 estimate; rows to docs/results/quality.json, every run's dev score against the
CPU-seconds it and the stages it stands on cost to docs/results/quality_cost.json, Markdown tables (what to ship
on each task, every method's scores, the issue's goals as measured), and (--plot) docs/quality.png, accuracy against
training cost.

    python -m benchmarks.quality                               # the issue's table (--methods recipes), resumable
    python -m benchmarks.quality --methods all                 # every method: the ablations and augmented runs too
    python -m benchmarks.quality --tasks sst2 --seeds 0        # one task, one seed
    python -m benchmarks.quality --collect                     # rows of the finished runs, run nothing
    python -m benchmarks.quality --table --write --plot        # table into docs/quality.md, draw docs/quality.png

The teacher is the demo's (all-MiniLM-L6-v2 adapted by `train-teacher --init-from`, configs/demo.json), fine-tuned
on each task; every student learns from it. Task-agnostic stages run once and serve every task and seed:

    pkt           `mobilebert_h384` by progressive knowledge transfer, PKT_STEPS (the demo's 6 x 50 + 200 is
                  `pkt-short`, kept to measure what the longer transfer adds)
    subset2       the teacher's layers 0 and 5 (`init --layers spread:2`, no distillation): 2 x 384
    subset2-narrow  the same two layers with each FFN narrowed to its NARROW_FFN most important neurons of 1,536
                  (`init ... --intermediate-size`, DynaBERT's importance: mobilekd/models/narrow.py), so that its
                  Pixel 4 estimate fits a third of the teacher's (subset2's is 0.1 ms over it)
    tinybert4     `tinybert4_h156` by TinyBERT's general distillation, TINYBERT_STEPS
    bert3         the teacher's first 3 layers (`init --layers first:3`, BERT-PKD's start; --methods family)
    distilbert    the teacher's layers 0, 3, 5 (`init --layers spread:3`) by DistilBERT's triple loss,
                  DISTILBERT_STEPS (--methods family)

Per task and seed (the seed draws the data order, the classifier's start and dropout), every run scored on the full
dev set; a row's value is the model after the last step, not one picked on dev:

    teacher        the adapted teacher fine-tuned on the whole training set (it is also the seed's KD teacher)
    teacher-long   the same for TEACHER_LONG's epochs (SST-2: 3 against 1), a stronger teacher (on request)
    pkt-kd         the PKT student with logit KD from the seed's teacher          (MobileBERT family)
    pkt-kd-aug     the PKT student with logit KD alone over the augmented transfer set, as subset2-kd-aug
                   (MobileBERT family): small tasks only
    subset2-kd     the layer subset with logit KD                                 (the teacher's layers)
    subset2-narrow-kd  the narrowed layer subset with logit KD                    (the teacher's layers, narrowed)
    subset2-narrow-td  the narrowed layer subset by TinyBERT's two-step task distillation, as tinybert-td (the
                   teacher's layers 2 and 5 matched, `layer_maps.uniform`): a start taken from the teacher and
                   layer matching together, over the task's own examples (on request, on SUBSET_TD: SST-2)
    subset2-narrow-td-long  the same with LONG_INTERMEDIATE_EPOCHS epochs of layer matching, as tinybert-td-long
    subset2-kd-aug the layer subset with logit KD alone (--alpha 0) over the teacher-labelled augmented transfer
                   set (TinyBERT's augmentation, AUGMENT copies; AUGMENTED_EPOCHS epochs): small tasks only
    subset2-narrow-kd-aug  the narrowed layer subset the same way: small tasks only
    subset2-narrow-kd-aug-long  the same for SET_EPOCHS' epochs over the augmented set: what longer training adds
                   (small tasks only)
    subset2-narrow-kd-aug-wide  the same over a wider augmented set, WIDE_AUGMENT's new copies an example, for
                   SET_EPOCHS' epochs (0.9 times -long's steps): what more pairs add at about the same steps
                   (where WIDE_AUGMENT has the task)
    subset2-narrow-kd-aug-wide-long  the same for SET_EPOCHS' epochs over the wider set (3 against 2): what a
                   third epoch over the wider set adds (where WIDE_AUGMENT has the task)
    subset2-narrow-kd-aug-wide-longer  the same for SET_EPOCHS' epochs over the wider set (4 against 3): what a
                   fourth epoch adds (where WIDE_AUGMENT has the task; TASK_RECIPES' narrowed-subset recipe on STS-B)
    tinybert-td    TinyBERT's two-step task distillation, over its augmented set (AUGMENT new copies an example;
                   none for SST-2: there the plan runs tinybert-td-aug) (TinyBERT family)
    tinybert-td-aug  tinybert-td over an augmented set where AUGMENT has none (TD_AUGMENT: SST-2, 2 new copies an
                   example): what TinyBERT's augmentation adds there (where TD_AUGMENT has the task; TASK_RECIPES'
                   TinyBERT recipe on SST-2)
    tinybert-td-wide  tinybert-td over a wider augmented set, TD_WIDE_AUGMENT's new copies an example (TinyBERT's own
                   N), for WIDE_TD_EPOCHS' epochs of each step: what more distinct sentences add at close to the same
                   steps (where TD_WIDE_AUGMENT has the task: CoLA)
    tinybert-td-teacher-long  tinybert-td taught by teacher-long: what a stronger teacher adds (on request, where
                   TEACHER_LONG has the task)
    tinybert-td-short  tinybert-td at a smaller budget: SHORT_INTERMEDIATE_EPOCHS epochs of layer matching and
                   AUGMENTED_EPOCHS of prediction (TinyBERT's own), against the task's 5 and 5: what that saves and
                   costs (small tasks only)
    tinybert-td-long  tinybert-td with LONG_INTERMEDIATE_EPOCHS epochs of layer matching (SST-2: 3 against 1): what
                   longer matching adds (on request, where LONG_INTERMEDIATE_EPOCHS has the task)
    tinybert-td-long-pred1  tinybert-td-long with PRED_EPOCHS epochs of the prediction step (SST-2: 1 against 2):
                   what a shorter step 2 saves and costs (on request, where PRED_EPOCHS and tinybert-td-long have
                   the task)
    bilstm-kd-aug  Tang et al.'s BiLSTM with KD over its transfer set             (BiLSTM family)
    bilstm-kd-aug-short  the same for BILSTM_EPOCHS' fewer epochs over the transfer set (3 against 10): what the
                   BiLSTM's budget saves and costs
    pkt            the PKT student on the labels alone   (ABLATION_TASKS only: what task KD adds)
    pkt-short-kd   the demo's shorter PKT student + KD   (ABLATION_TASKS only: what longer transfer adds)
    bert3-ft, bert3-kd, bert3-pkd-skip, bert3-pkd-last  BERT-PKD's student fine-tuned on the labels, with logit KD,
                   with PKD-Skip's and PKD-Last's patience loss (--methods family, FAMILY_METHODS)
    distilbert-ft  DistilBERT's student fine-tuned on the labels (--methods family)
    subset2-narrow-pkd-skip  the narrowed layer subset with PKD-Skip's patience loss and KD (on request, on
                   PATIENCE_TASKS: STS-B and CoLA)
    tfidf, majority, model-maker (SST-2): the baselines, on the same training examples

The default plan (`--methods recipes`) is the teacher, the baselines and one recipe per student family, RECIPES,
each family's own on a task where measurement chose it (TASK_RECIPES: the narrowed subset over the wider augmented
set on STS-B, TinyBERT over SST-2's augmented set and over CoLA's wider one, TinyBERT and the BiLSTM at smaller
budgets on RTE); the other methods measure what a change adds (docs/quality.md). `--methods family` runs the source
documents' family (FAMILY_METHODS) at these budgets, beside TinyBERT's and MobileBERT's runs, and the report judges
benchmarks.methods' orderings over them (`family_orderings`).

Fine-tuning runs evaluate on dev every EVAL_POINTS-th of their steps; the evaluations (mobilekd/finetune/evaluation.py
writes them to history.json) are the cost curves: each point's CPU-seconds are the run's own wall seconds (one
thread) at that step plus the stages it stands on (teacher adaptation, task-agnostic distillation, the task
teacher's fine-tuning for KD) and making the cached set it trains over and its teacher's outputs over that set
(`set_made_seconds`, `outputs_made_seconds`, whichever run made them, in place of its own seconds getting them),
each charged in full to every run. A point inside a run is that run's
model part way through its learning-rate schedule, not a run trained for that budget: an upper bound on the time a
budget needs, and a fair one only at a run's end.

Each family's SST-2 model of the first seed run (0 by default) is exported (fp32, parity on the whole dev set; the
BiLSTM as the file an app ships, with TFLite's fused LSTM kernel) and timed beside the teacher's, Model Maker's and
the files earlier invocations exported in one `mobilekd latency` run (1 thread, sequence 128), the plan's last:
nothing trains beside it; a family's size and latency are given to its rows of every task, those of runs gone from
OUT included. Model Maker runs in a virtual environment of its own under OUT (benchmarks/model_maker.py: its pins
are not ours).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks import methods, teacher_value
from benchmarks.baselines import baseline_rows
from benchmarks.runner import (RESUMABLE, VERDICTS, WITHIN, Job, by_seed, columns, comparison, comparison_flags,
                               finetune_rows, finished_results, host_fields, mean_std_cell, merge_rows, method_table,
                               metric_rank, paired_differences, recorded_host, task_panels, values, verdict,
                               with_needs, within)
from mobilekd.errors import UserError
from mobilekd.fileio import RECORDED, REPO_ROOT, read_json, record_keys, save_png

# task -> (--max-len, the teacher's epochs, the students' epochs); SST-2's 67,349 examples are 2,105 steps an epoch
TASKS = {"sst2": ("64", "1", "2"), "mrpc": ("128", "3", "5"), "stsb": ("64", "3", "5"), "cola": ("64", "3", "5"),
         "rte": ("128", "3", "5")}
# the students' epochs over the task's own examples (KD and the `pkt` ablation; not over an augmented set) where a
# held-out tenth of the training set said otherwise (finetune --select-on train-slice, seed 0, docs/quality.md): on
# MRPC both students' F1 there was highest at 0.68 epochs (PKT 0.784, the narrowed subset 0.785), 1.3 and 0.6
# points lower at 1.4 epochs, 4.1 and 3.0 lower at 5
OWN_SET_EPOCHS = {"mrpc": "1"}
ABLATION_TASKS = ("sst2", "mrpc")
PKT_STEPS = ["--layer-steps", "500", "--pd-steps", "500"]
PKT_SHORT_STEPS = teacher_value.TRANSFER[2:]  # the demo's: --layer-steps 50 --pd-steps 200
TINYBERT_STEPS = ["--layer-steps", "300", "--pd-steps", "200"]
# DistilBERT's triple loss into the teacher's layers 0, 3 and 5 (the family's runs, FAMILY_METHODS): TINYBERT_STEPS'
# flags, 3 x 300 + 200 = 1,100 steps (benchmarks.methods ran 500)
DISTILBERT_STEPS = TINYBERT_STEPS
# subset2-narrow's FFN width: at 1,280 of 1,536 neurons its forward pass is 0.298 of the teacher's FLOPs at sequence
# 128 (subset2's 0.333, whose Pixel 4 estimate, 11.3 ms, is 0.337 of the teacher's 33.5): a tenth under the third
NARROW_FFN = "1280"
AUGMENT = {"sst2": "0", "mrpc": "4", "stsb": "4", "cola": "4", "rte": "4"}  # new copies per example (TinyBERT)
# only where there is an augmented set (elsewhere: the -kd run)
AUGMENTED_ONLY = ("subset2-kd-aug", "subset2-narrow-kd-aug", "pkt-kd-aug", "subset2-narrow-kd-aug-long",
                  "subset2-narrow-kd-aug-wide", "subset2-narrow-kd-aug-wide-long", "subset2-narrow-kd-aug-wide-longer",
                  "tinybert-td-short")
# tinybert-td-aug's new copies an example, and the tasks it runs on: TinyBERT augments SST-2 too (20 copies,
# huawei-noah/Pretrained-Language-Model TinyBERT/data_augmentation.py, `main`); 2 copies make SST-2's set 178,183
# sentences, 2.65 times its own, so its 1 epoch of layer matching takes close to tinybert-td-long's 3 epochs' steps;
# it measured +0.50 +- 0.37 points over tinybert-td-long over 3 seeds, +0.89 +- 0.61 over 5 (seeds 3-4 new to the
# choice; docs/quality.md) for the set (2,516 s once: the masked-LM candidates of its 298,196 one-piece words) and
# 2.6 times the prediction step's steps
TD_AUGMENT = {"sst2": "2"}
# subset2-narrow-kd-aug-wide's new copies an example, and the tasks it runs on: over AUGMENT's 4 the 6-epoch runs'
# STS-B dev Pearson was flat over their last 1,676 steps (docs/quality.md); TinyBERT makes 30 on the small tasks
# (TinyBERT/data_augmentation.py, `main`). 12 make the set about 2.7 times as large, so its 2 epochs take close to
# -long's 6 epochs' steps over AUGMENT's: more distinct pairs, not more steps
WIDE_AUGMENT = {"stsb": "12"}
# tinybert-td-wide's new copies an example, and the tasks it runs on: TinyBERT's own N for CoLA (N_PER_TASK,
# mobilekd/data/augment.py; TinyBERT/data_augmentation.py, `main`) against AUGMENT's 4, its one goal share that fails
# (docs/quality.md); CoLA's sentences are short, so many tries repeat and are dropped: its set is 219,153 sentences,
# 25.6 times the task's, and WIDE_TD_EPOCHS' 1 epoch of each step over it is 1.07 times tinybert-td's steps (5 + 5
# epochs over AUGMENT's 40,858): more distinct sentences, not more steps
TD_WIDE_AUGMENT = {"cola": "30"}
WIDE_TD_EPOCHS = {"cola": "1"}
# method -> its new copies an example by task, where it is not AUGMENT's (`copies`)
COPIES = {"tinybert-td-aug": TD_AUGMENT, "tinybert-td-wide": TD_WIDE_AUGMENT,
          "subset2-narrow-kd-aug-wide": WIDE_AUGMENT, "subset2-narrow-kd-aug-wide-long": WIDE_AUGMENT,
          "subset2-narrow-kd-aug-wide-longer": WIDE_AUGMENT}
# the methods that train over the augmented set where AUGMENT has one
AUGMENTED = ("tinybert-td", "tinybert-td-teacher-long", "tinybert-td-long", "tinybert-td-long-pred1",
             *AUGMENTED_ONLY)
# teacher-long's epochs, and the tasks it and the students it teaches run on: SST-2's teacher is fine-tuned for 1
# epoch (the others for 3); 3 epochs gave +1.0 points and its TinyBERT student -1.0 (3 seeds, docs/quality.md)
TEACHER_LONG = {"sst2": "3"}
# the AUGMENTED_ONLY methods' epochs over the augmented set (SET_EPOCHS where named); a pair's set is up to
# 1 + 2 x 4 times the task's, 8.8 x on STS-B: 3 epochs over it are 5.3 x the steps of subset2-kd's 5
AUGMENTED_EPOCHS = "3"
# subset2-narrow-kd-aug-long's epochs over the augmented set: at 3, STS-B's dev Pearson still rose over the third
# epoch (seeds 0-2: +0.024, +0.012, +0.011 from step 3,360 to the last, 4,758), as the learning rate decayed
# subset2-narrow-kd-aug-wide-long's: over -wide's 2, STS-B's dev Pearson still rose over its last two evaluations
# (seeds 0-2: +0.44, +0.70, +0.68 points from step 6,790 to 8,548); -wide-longer's: over -wide-long's 3, it still
# moved over its last two evaluations (seeds 0-2: +0.56, -0.06, +0.51 points); a fourth added +0.90 +- 0.13, and
# over its own last two evaluations it moved +0.58, +0.43 and +0.02 (steps 13,587 to 17,096)
SET_EPOCHS = {"subset2-narrow-kd-aug-long": "6", "subset2-narrow-kd-aug-wide": "2",
              "subset2-narrow-kd-aug-wide-long": "3", "subset2-narrow-kd-aug-wide-longer": "4"}
INTERMEDIATE_EPOCHS = {"sst2": "1"}  # TinyBERT's step 1 (default: the students' epochs)
# tinybert-td-long's step 1, and the tasks it runs on: SST-2's 1 epoch of layer matching is the shortest of the
# plan's (the others match for 5 over their augmented sets; TinyBERT's README, huawei-noah/Pretrained-Language-Model
# TinyBERT/README.md, task distillation step 1: `--num_train_epochs 10`), and its dev accuracy was flat over the last
# third of the prediction step: 3 epochs added 0.50 +- 0.36 points over 1 over 3 seeds, a tie over 5 (+0.37 +- 0.42;
# docs/quality.md)
LONG_INTERMEDIATE_EPOCHS = {"sst2": "3"}
# tinybert-td-long-pred1's step 2 (prediction-layer distillation), and the tasks it runs on: TinyBERT's README runs it
# for 3 epochs (huawei-noah/Pretrained-Language-Model TinyBERT/README.md, `--pred_distill ... --num_train_epochs 3`),
# but over tinybert-td-long's 2 on SST-2 dev accuracy peaked 1.25-1.5 epochs in on every seed (0.8773, 0.8761,
# 0.8819) and ended 0.45 points lower on average; one epoch, its learning rate decayed to zero within it, measured
# -0.46 +- 0.50 points against 2 (a tie, 3 seeds, docs/quality.md): the peaks were the dev set's noise, and the
# recipe keeps 2. It runs where tinybert-td-long does.
PRED_EPOCHS = {"sst2": "1"}
# method -> its students' epochs by task, where set apart
STEP_EPOCHS = {"tinybert-td-long-pred1": PRED_EPOCHS, "tinybert-td-wide": WIDE_TD_EPOCHS}
LONG_MATCHING = ("tinybert-td-long", "tinybert-td-long-pred1", "subset2-narrow-td-long")  # LONG_INTERMEDIATE_EPOCHS'
# the narrowed subset by TinyBERT's two steps: the tasks it runs on (over the task's own examples; SST-2 has no
# augmented set), with and without longer matching, so that the -long run has its 1-epoch run beside it
SUBSET_TD = ("sst2",)
# tinybert-td-short's step 1 (its step 2: AUGMENTED_EPOCHS, the 3 of TinyBERT's README, huawei-noah/Pretrained-
# Language-Model TinyBERT/README.md, task distillation, `--pred_distill ... --num_train_epochs 3`; its step 1 there
# is 10 epochs over a set of about 20 copies an example): tinybert-td's 5 + 5 over the pair tasks' 9-fold sets are
# its costliest runs (MRPC 3,322 + 1,745 s), and its MRPC F1 rose through the whole prediction step
SHORT_INTERMEDIATE_EPOCHS = "2"
TRANSFER = {"sst2": "2", "mrpc": "10", "stsb": "10", "cola": "10", "rte": "10"}  # BiLSTM transfer-set samples
EVAL_POINTS = 8
PLOT_TASKS = ("sst2", "mrpc")  # the cost curves drawn: SST-2 and a pair task (all are in the rows)
TEACHER_LR, STUDENT_LR = teacher_value.TEACHER_LR, teacher_value.STUDENT_LR
BILSTM = ["--embedding-size", "64", "--loss", "kd"]
# the BiLSTM's epochs over its transfer set, per method: 10 (`mobilekd bilstm`'s default; the official configs'
# 30, confs/birnn_sst2.json, are over a set 10-20 times the training set); -short: 3, to measure what the BiLSTM's
# 6.1 of the default plan's 31.3 single-thread hours before it (docs/quality.md) can spare
BILSTM_EPOCHS = {"bilstm-kd-aug": "10", "bilstm-kd-aug-short": "3"}

TASK_DISTILLATION = ["--method", "tinybert"]  # TinyBERT's two steps: layer matching, then the prediction layer
# method -> (student family, its start (a stage), finetune flags beyond the shared ones, the teacher method whose
# run of the same task and seed teaches it task KD, or None)
METHODS = {
    "teacher": ("teacher", "adapt", [], None),
    "teacher-long": ("teacher", "adapt", [], None),
    "pkt-kd": ("mobilebert", "pkt", ["--method", "kd"], "teacher"),
    "pkt-kd-aug": ("mobilebert", "pkt", ["--method", "kd", "--alpha", "0"], "teacher"),
    "subset2-kd": ("subset2", "subset2", ["--method", "kd"], "teacher"),
    "subset2-kd-aug": ("subset2", "subset2", ["--method", "kd", "--alpha", "0"], "teacher"),
    "subset2-narrow-kd": ("subset2-narrow", "subset2-narrow", ["--method", "kd"], "teacher"),
    "subset2-narrow-kd-aug": ("subset2-narrow", "subset2-narrow", ["--method", "kd", "--alpha", "0"], "teacher"),
    "subset2-narrow-td": ("subset2-narrow", "subset2-narrow", TASK_DISTILLATION, "teacher"),
    "subset2-narrow-td-long": ("subset2-narrow", "subset2-narrow", TASK_DISTILLATION, "teacher"),
    "subset2-narrow-kd-aug-long": ("subset2-narrow", "subset2-narrow", ["--method", "kd", "--alpha", "0"],
                                   "teacher"),
    "subset2-narrow-kd-aug-wide": ("subset2-narrow", "subset2-narrow", ["--method", "kd", "--alpha", "0"],
                                   "teacher"),
    "subset2-narrow-kd-aug-wide-long": ("subset2-narrow", "subset2-narrow", ["--method", "kd", "--alpha", "0"],
                                        "teacher"),
    "subset2-narrow-kd-aug-wide-longer": ("subset2-narrow", "subset2-narrow", ["--method", "kd", "--alpha", "0"],
                                          "teacher"),
    "tinybert-td": ("tinybert", "tinybert4", TASK_DISTILLATION, "teacher"),
    "tinybert-td-teacher-long": ("tinybert", "tinybert4", TASK_DISTILLATION, "teacher-long"),
    "tinybert-td-long": ("tinybert", "tinybert4", TASK_DISTILLATION, "teacher"),
    "tinybert-td-long-pred1": ("tinybert", "tinybert4", TASK_DISTILLATION, "teacher"),
    "tinybert-td-aug": ("tinybert", "tinybert4", TASK_DISTILLATION, "teacher"),
    "tinybert-td-wide": ("tinybert", "tinybert4", TASK_DISTILLATION, "teacher"),
    "tinybert-td-short": ("tinybert", "tinybert4", TASK_DISTILLATION, "teacher"),
    "bilstm-kd-aug": ("bilstm", None, [], "teacher"),
    "bilstm-kd-aug-short": ("bilstm", None, [], "teacher"),
    "pkt": ("mobilebert", "pkt", ["--method", "ft"], None),
    "pkt-short-kd": ("mobilebert", "pkt-short", ["--method", "kd"], "teacher"),
    "bert3-ft": ("bert3", "bert3", ["--method", "ft"], None),
    "bert3-kd": ("bert3", "bert3", ["--method", "kd"], "teacher"),
    "bert3-pkd-skip": ("bert3", "bert3", ["--method", "pkd-skip"], "teacher"),
    "bert3-pkd-last": ("bert3", "bert3", ["--method", "pkd-last"], "teacher"),
    "distilbert-ft": ("distilbert", "distilbert", ["--method", "ft"], None),
    "subset2-narrow-pkd-skip": ("subset2-narrow", "subset2-narrow", ["--method", "pkd-skip"], "teacher"),
}
# subset2-narrow-pkd-skip's tasks: BERT-PKD's patience loss on the student within a third of the teacher's latency,
# where on the teacher's first 3 layers PKD-Skip held over KD by the most (STS-B +17.3 +- 9.8 Pearson points, CoLA
# +3.3 +- 2.6 Matthews, 3 seeds; docs/quality.md) and where a goal fails or the subset's KD keeps least (CoLA's 90%;
# STS-B's 52% over its own pairs)
PATIENCE_TASKS = ("stsb", "cola")
# the source documents' family at these budgets (--methods family; benchmarks.methods ran it on 1,000 examples a
# task): BERT-PKD's students, the teacher's first 3 layers by FT, KD, PKD-Skip and PKD-Last, and DistilBERT's,
# layers 0, 3, 5 distilled task-agnostically then fine-tuned; TinyBERT and MobileBERT are their families' rows above.
# Not timed (no SST-2 run): 3 x 384 students are half the teacher's Pixel 4 estimate (docs/methods.md), above the
# third the goals allow
FAMILY_METHODS = ("bert3-ft", "bert3-kd", "bert3-pkd-skip", "bert3-pkd-last", "distilbert-ft")
FAMILY = "family"  # --methods' name of FAMILY_METHODS
# benchmarks.methods' methods -> the runs here that stand for them (`family_method`)
AS_METHODS = {"ft": "bert3-ft", "kd": "bert3-kd", "pkd-skip": "bert3-pkd-skip", "pkd-last": "bert3-pkd-last",
              "distilbert": "distilbert-ft", "tinybert-aug": "tinybert-td", "mobilebert": "pkt"}
# the methods that run only on some tasks: method -> those tasks
ONLY_ON = {"teacher-long": TEACHER_LONG, "tinybert-td-teacher-long": TEACHER_LONG,
           "tinybert-td-long": LONG_INTERMEDIATE_EPOCHS,
           "tinybert-td-long-pred1": [t for t in PRED_EPOCHS if t in LONG_INTERMEDIATE_EPOCHS],
           "tinybert-td-aug": TD_AUGMENT, "tinybert-td-wide": TD_WIDE_AUGMENT,
           "subset2-narrow-kd-aug-wide": WIDE_AUGMENT,
           "subset2-narrow-kd-aug-wide-long": WIDE_AUGMENT, "subset2-narrow-kd-aug-wide-longer": WIDE_AUGMENT,
           "subset2-narrow-td": SUBSET_TD, "subset2-narrow-pkd-skip": PATIENCE_TASKS,
           "subset2-narrow-td-long": [t for t in SUBSET_TD if t in LONG_INTERMEDIATE_EPOCHS]}
ABLATIONS = ("pkt", "pkt-short-kd")
# the default plan, the issue's table: the teacher and one recipe per student family (with TASK_RECIPES' swaps:
# --methods recipes); the other methods measure what a change adds (--methods NAME ... or all), outside the 6 hours
# the issue gives the benchmark
RECIPES = ("teacher", "pkt-kd", "subset2-narrow-kd", "tinybert-td", "bilstm-kd-aug")
# a family's recipe on a task where measurement chose another method of the family (docs/quality.md): on STS-B the
# narrowed subset keeps 96% of the teacher over the wider augmented set (WIDE_AUGMENT) for 4 epochs, +0.90 +- 0.13
# Pearson points over 3 (-wide-long, itself +1.09 +- 0.43 over 2: -wide, itself +1.58 +- 0.67 over AUGMENT's set for
# 6 epochs at about as many steps), 92% over AUGMENT's and 52% over the task's own pairs; on SST-2 TinyBERT over the
# augmented set (TD_AUGMENT) adds 0.89 +- 0.61 points over 3 epochs of layer matching on the task's own sentences
# (tinybert-td-long, itself +0.37 +- 0.42 over 1, a tie; 5 seeds each); on CoLA TinyBERT over TinyBERT's own 30
# copies a sentence (TD_WIDE_AUGMENT) has the higher mean, +1.5 +- 1.7 Matthews points over AUGMENT's 4 seed by seed
# (a tie, 3 seeds) at close to the same steps and cost, and keeps 75% of the teacher against 71%; on RTE, where
# TinyBERT's student sits at the majority class at any budget measured, 2 + 3 epochs of its two steps
# (tinybert-td-short) tie 5 + 5 (+0.36 +- 0.62 points, 3 seeds) at 0.43 of the seconds a run of their own, and the
# BiLSTM's 3 epochs over its transfer set (bilstm-kd-aug-short) are 0.60 +- 0.42 points above its 10 (3 seeds) at
# 0.36 of a run's seconds (the 10 on an Intel Xeon); on MRPC and CoLA 3 epochs tie 10 with lower means (-1.2 and
# -3.1 points), on SST-2 and STS-B they cost 0.9 +- 0.1 and 1.1 +- 0.5 points (holds): there the BiLSTM keeps 10
TASK_RECIPES = {"stsb": {"subset2-narrow-kd": "subset2-narrow-kd-aug-wide-longer"},
                "sst2": {"tinybert-td": "tinybert-td-aug"}, "cola": {"tinybert-td": "tinybert-td-wide"},
                "rte": {"tinybert-td": "tinybert-td-short", "bilstm-kd-aug": "bilstm-kd-aug-short"}}
DEFAULT = "recipes"  # --methods' name of the default plan: RECIPES, as TASK_RECIPES gives them on each task
SWAPS = "; ".join(f"{new} for {old} on {task}" for task, swap in TASK_RECIPES.items() for old, new in swap.items())
BASELINES = ("tfidf", "majority", "model-maker")
FAMILIES = {"teacher": "all-MiniLM-L6-v2 (adapted), 6 x 384", "mobilebert": "mobilebert_h384 (PKT)",
            "subset2": "teacher layers 0, 5 (2 x 384)",
            "subset2-narrow": f"teacher layers 0, 5, FFN {NARROW_FFN} of 1536 (2 x 384)", "tinybert": "tinybert4_h156",
            "bilstm": "BiLSTM (Tang et al.)", "bert3": "teacher layers 0-2 (3 x 384)",
            "distilbert": "teacher layers 0, 3, 5 by DistilBERT (3 x 384)"}
EXPORTED = {"teacher": "teacher", "mobilebert": "pkt-kd", "subset2": "subset2-kd",
            "subset2-narrow": "subset2-narrow-kd", "tinybert": "tinybert-td",
            "bilstm": "bilstm-kd-aug"}  # family -> the method whose SST-2 model is exported and timed, but for
# TASK_RECIPES' SST-2 swap where it is planned (measurement_jobs)
ORDER = [*METHODS, *BASELINES]
MODEL_MAKER = "average word embedding"  # Model Maker's rows' student
TIMED = {**FAMILIES, "model-maker": MODEL_MAKER}  # the `student` of the rows whose file each family's timing is
RESULTS = "docs/results/quality.json"  # the benchmark's rows (--results), relative to the repository


def stage_dirs(out: Path) -> dict[str, Path]:
    s = out / "students"
    return {"adapt": out / "teacher", "pkt": s / "pkt", "pkt-short": s / "pkt_short", "subset2": s / "subset2",
            "subset2-narrow": s / f"subset2_ffn{NARROW_FFN}", "tinybert4": s / "tinybert4", "bert3": s / "bert3",
            "spread3": s / "spread3", "distilbert": s / "distilbert"}


def run_dir(out: Path, task: str, method: str, seed: int) -> Path:
    return out / "finetune" / task / method / f"seed{seed}"


def recipe(task: str, method: str) -> str:
    """The method that stands for `method` on `task`: TASK_RECIPES' swap where it names one, else `method`."""
    return TASK_RECIPES.get(task, {}).get(method, method)


def recipes(task: str) -> list[str]:
    """The default plan's methods on `task`: RECIPES, a family's replaced where TASK_RECIPES names another."""
    return [recipe(task, m) for m in RECIPES]


def methods_for(task: str, chosen=tuple(METHODS)) -> list[str]:
    """The methods run on `task` (the ablations on ABLATION_TASKS only, AUGMENTED_ONLY where AUGMENT has a set,
    ONLY_ON's methods on their tasks), of those `chosen` (DEFAULT among them: the task's `recipes`), and the
    teachers they learn from."""
    if DEFAULT in chosen:
        chosen = [*chosen, *recipes(task)]

    def runs_on(m):
        return ((m not in ABLATIONS or task in ABLATION_TASKS) and (m not in AUGMENTED_ONLY or AUGMENT[task] != "0")
                and task in ONLY_ON.get(m, TASKS))

    wanted = {m for m in chosen if m in METHODS and runs_on(m)}
    wanted |= {METHODS[m][3] for m in wanted if METHODS[m][3]}
    return [m for m in METHODS if m in wanted]


def own_seconds(r: dict) -> float:
    """A run's seconds without those it spent getting each cached file it shared (`RECORDED`: its set, the teacher's
    outputs over it), where what making the file cost is known (so that it is counted once: `set_costs`,
    `outputs_costs`): its own work, the same whichever run made the file."""
    return r["train_seconds"] - sum(got for got, _ in shared_files(r))


def unshared_seconds(r: dict) -> float:
    """What making the cached files a run read cost, beyond what it spent getting them (`own_seconds`' files): the
    making a run that read a file is charged, as the run that made it was."""
    return sum(made - got for got, made in shared_files(r))


def shared_files(r: dict) -> list[tuple[float, float]]:
    """For each cached file a run (its row or results) records what making it cost (`RECORDED`): the seconds the run
    spent getting it, and what making it cost, whichever run made it."""
    keys = [record_keys(kind)[1:] for kind in RECORDED]
    return [(r[got], r[made]) for got, made in keys if r.get(made) is not None]


def set_costs(found: list[dict]) -> dict[tuple[str, str], float]:
    """Each cached set the runs of `found` shared (`shared_set`: the augmented set, the BiLSTM's transfer set), as
    (its task, its name) -> what making it cost (`set_made_seconds`, whichever run made it)."""
    costs = {}
    for r in found:
        if r.get("set_made_seconds") is not None:
            key = (r["task"], r["shared_set"])
            costs[key] = max(costs.get(key, 0.0), r["set_made_seconds"])
    return costs


def outputs_costs(found: list[dict]) -> dict[str, float]:
    """The teachers' passes over the training sets of the runs of `found` (`outputs_made_seconds`, whichever run
    made them), each file once, for SEEDS_ASKED seeds, by task: a file is one seed's teacher's over one set, read by
    every run of that seed over it, so SEEDS_ASKED times the mean over the measured seeds of the seed's files."""
    name, _, made = record_keys("outputs")
    files: dict[str, dict[int, dict[str, float]]] = {}
    for r in found:
        if r.get(made) is not None:
            files.setdefault(r["task"], {}).setdefault(r["seed"], {})[r[name]] = r[made]
    return {task: SEEDS_ASKED * statistics.mean(sum(f.values()) for f in seeds.values())
            for task, seeds in files.items()}


def steps_per_epoch(task: str) -> int:
    from mobilekd.data.tasks import load_task, task_data
    return -(-len(load_task(task, task_data(task, None)).train) // 32)


def copies(task: str, method: str) -> str:
    """The new copies an example of the augmented set `method` trains over on `task` (TinyBERT's augmentation: COPIES'
    where it names the method, else AUGMENT for the methods over it); "0": the task's own examples."""
    if method in COPIES:
        return COPIES[method].get(task, "0")
    return AUGMENT[task] if method in AUGMENTED else "0"


def augmented_epochs(method: str) -> str:
    return SET_EPOCHS.get(method, AUGMENTED_EPOCHS)


def student_epochs(task: str, method: str) -> str:
    """The epochs of `method`'s student training on `task` (TinyBERT's: its prediction step): STEP_EPOCHS' where it
    names them, else SET_EPOCHS' or AUGMENTED_EPOCHS over an augmented set alone, else the task's."""
    if task in STEP_EPOCHS.get(method, {}):
        return STEP_EPOCHS[method][task]
    if method in AUGMENTED_ONLY:
        return augmented_epochs(method)
    if copies(task, method) != "0":  # tinybert-td over its augmented set: the task's epochs
        return TASKS[task][2]
    return OWN_SET_EPOCHS.get(task, TASKS[task][2])


def teacher_epochs(task: str, method: str) -> str:
    """A teacher method's fine-tuning epochs on `task`."""
    return TEACHER_LONG.get(task, TASKS[task][1]) if method == "teacher-long" else TASKS[task][1]


def two_steps(task: str, method: str) -> str:
    """A run of TinyBERT's task distillation's epochs, "step 1 + step 2"."""
    return f"{intermediate_epochs(task, method)} + {student_epochs(task, method)}"


def epochs_against(n: str, what: str, m: str) -> str:
    """A goal line's "N epochs of WHAT against M add", in the singular where N is 1."""
    one = n == "1"
    return f"{n} epoch{'' if one else 's'} of {what} against {m} add{'s' if one else ''}"


def intermediate_epochs(task: str, method: str) -> str | None:
    """The epochs of TinyBERT's step 1 (layer-by-layer matching) in a run of TinyBERT's task distillation; None for
    the others."""
    if METHODS[method][2] != TASK_DISTILLATION:
        return None
    if method == "tinybert-td-short":
        return SHORT_INTERMEDIATE_EPOCHS
    if method in LONG_MATCHING and task in LONG_INTERMEDIATE_EPOCHS:
        return LONG_INTERMEDIATE_EPOCHS[task]
    return INTERMEDIATE_EPOCHS.get(task, student_epochs(task, method))


def stage_jobs(out: Path) -> list[Job]:
    d = stage_dirs(out)
    teacher = d["adapt"]
    distill = ["distill", "--teacher", str(teacher), "--strategy"]
    return [Job("adapt", ["train-teacher", *teacher_value.ADAPT, "--out", str(teacher), *RESUMABLE], teacher),
            Job("distill/pkt", [*distill, "pkt", "--student", teacher_value.STUDENT, *PKT_STEPS, "--out",
                                str(d["pkt"]), *RESUMABLE], d["pkt"], ["adapt"]),
            Job("distill/pkt-short", [*distill, "pkt", "--student", teacher_value.STUDENT, *PKT_SHORT_STEPS,
                                      "--out", str(d["pkt-short"]), *RESUMABLE], d["pkt-short"], ["adapt"]),
            Job("init/subset2", ["init", str(teacher), str(d["subset2"]), "--layers", "spread:2"], d["subset2"],
                ["adapt"]),
            Job("init/subset2-narrow", ["init", str(teacher), str(d["subset2-narrow"]), "--layers", "spread:2",
                                        "--intermediate-size", NARROW_FFN], d["subset2-narrow"], ["adapt"]),
            Job("distill/tinybert4", [*distill, "tinybert", "--student", "tinybert4_h156", "--layer-map", "uniform",
                                      *TINYBERT_STEPS, "--out", str(d["tinybert4"]), *RESUMABLE], d["tinybert4"],
                ["adapt"]),
            *methods.family_stages(teacher, d["bert3"], d["spread3"], d["distilbert"], DISTILBERT_STEPS)]


def stage_of(name: str) -> str:
    return {"adapt": "adapt", "subset2": "init/subset2", "subset2-narrow": "init/subset2-narrow", "bert3": "init/bert3",
            "spread3": "init/spread3"}.get(
        name, f"distill/{name}")


def task_jobs(out: Path, task: str, seed: int, chosen=tuple(METHODS)) -> list[Job]:
    max_len, _, epochs = TASKS[task]
    d = stage_dirs(out)
    per_epoch = steps_per_epoch(task)

    def every(n_epochs: str) -> int:  # EVAL_POINTS evaluations over n_epochs of the task's own examples
        return max(1, int(n_epochs) * per_epoch // EVAL_POINTS)

    plan = []
    for method in methods_for(task, chosen):
        family, start, flags, taught = METHODS[method]
        r = run_dir(out, task, method, seed)
        teacher = run_dir(out, task, taught, seed) if taught else None
        if family == "teacher":
            plan.append(Job(f"{task}/{method}/{seed}", [
                "finetune", "--task", task, "--model", str(d["adapt"]), "--epochs", teacher_epochs(task, method),
                "--max-len", max_len, "--lr", TEACHER_LR, "--seed", str(seed), "--eval-every", "0", "--out", str(r),
                *RESUMABLE], r, ["adapt"]))
        elif family == "bilstm":
            plan.append(Job(f"{task}/{method}/{seed}", [
                "bilstm", "--teacher", str(teacher), "--task", task, "--epochs", BILSTM_EPOCHS[method], *BILSTM,
                "--augment", TRANSFER[task], "--max-len", max_len, "--seed", str(seed), "--out", str(r), *RESUMABLE], r,
                [f"{task}/{taught}/{seed}"]))
        else:
            augmented = copies(task, method) != "0"
            if augmented:
                flags = [*flags, "--augment", copies(task, method), "--augment-model", str(d["adapt"])]
            step1 = intermediate_epochs(task, method)
            if step1 is not None and step1 != student_epochs(task, method):  # finetune's default: --epochs
                flags = [*flags, "--intermediate-epochs", step1]
            plan.append(Job(f"{task}/{method}/{seed}", [
                "finetune", "--task", task, "--model", str(d[start]), "--epochs", student_epochs(task, method),
                "--max-len", max_len, "--lr", STUDENT_LR, "--seed", str(seed), "--eval-every",
                str(every(epochs) * (1 + int(copies(task, method))) * int(student_epochs(task, method))
                    // int(AUGMENTED_EPOCHS if method in AUGMENTED_ONLY else epochs)
                    if augmented else  # augmented: more steps, over its own epochs
                    every(student_epochs(task, method))), *flags,
                *(["--teacher", str(teacher)] if taught else []), "--out", str(r), *RESUMABLE],
                r, [stage_of(start)] + ([f"{task}/{taught}/{seed}"] if taught else [])))
    return plan


def measurement_jobs(out: Path, chosen=tuple(METHODS), seed: int = 0) -> list[Job]:
    """Each family's SST-2 model of `seed` exported, then all timed with Model Maker's file in one run (a file's size
    and speed are its architecture's: any seed's model stands for its family, so a file an earlier invocation exported
    from another method of the family, e.g. `tinybert-td` before TASK_RECIPES swapped in `tinybert-td-long`, is kept:
    its parity is that model's)."""
    plan, tflite, exports, planned = [], {}, [], methods_for("sst2", chosen)
    for family, method in EXPORTED.items():
        # the family's SST-2 recipe where measurement chose another (TASK_RECIPES) and it is planned, else EXPORTED's
        method = next((m for m in (recipe("sst2", method), method) if m in planned), None)
        if method is None:
            if exported(out, family).is_file():  # an earlier invocation's file: timed with the others
                tflite[family] = exported(out, family)
            continue
        tflite[family] = exported(out, family)
        exports.append(f"export/{family}")
        plan.append(Job(exports[-1], [
            "export", "--model", str(run_dir(out, "sst2", method, seed)), "--seq-len", "128", "--quantize", "none",
            *(["--fused-lstm"] if family in FUSED else []), "--parity-examples", "872", "--out",
            str(tflite[family].parent)], tflite[family].parent, [f"sst2/{method}/{seed}"]))
    files = [f"{k}={v}" for k, v in tflite.items()]
    if (mm := model_maker_file(out)) is not None:
        files.append(f"model-maker={mm}")
    if not files:  # nothing exported here, now or before
        return plan
    timed = out / "latency" / "+".join(f.split("=")[0] for f in files)  # a run per set of files timed together
    plan.append(Job("latency", ["latency", "--models", "--quantize", "none", "--threads", "1", "--devices", "pixel4",
                                "--seq-len", "128", "--out", str(timed), "--tflite", *files],
                    timed, exports))
    return plan


FUSED = ("bilstm",)  # families whose file is TFLite's fused LSTM kernel: the file an app ships (38 ops, not 6,272)


def exported(out: Path, family: str) -> Path:
    """A family's timed SST-2 file (fp32): the fused-LSTM file for a BiLSTM."""
    if family in FUSED:
        return out / "tflite" / f"{family}-fused" / "model_none_fused.tflite"
    return out / "tflite" / family / "model_none.tflite"


def model_maker_dir(out: Path, seed: int) -> Path:
    return out / "model_maker" / f"sst2_seed{seed}"


def model_maker_file(out: Path) -> Path | None:
    """The .tflite of Model Maker's lowest finished seed (its results.json is written last), the one timed."""
    done = sorted((int(d.name.removeprefix("sst2_seed")), d) for d in (out / "model_maker").glob("sst2_seed*")
                  if d.name.removeprefix("sst2_seed").isdigit() and (d / "results.json").is_file())
    return done[0][1] / "model.tflite" if done else None


def jobs(out: Path, tasks: list[str], seeds: list[int], chosen=tuple(METHODS)) -> list[Job]:
    """The shared stages the `chosen` methods stand on, then seed by seed and task by task (partial results are
    whole seeds), the exports once SST-2's runs of the first seed exist, and the timing after every other run has
    ended (done or failed): a latency run beside training reads host milliseconds up to ten times too slow."""
    plan = []
    for seed in seeds:
        for task in tasks:
            plan += task_jobs(out, task, seed, chosen)
            if seed == seeds[0] and task == "sst2":
                plan += measurement_jobs(out, chosen, seed)
    stages = stage_jobs(out)
    names = {j.name for j in stages}
    # the stages the runs stand on, and those the stages stand on: `distill/pkt` needs `adapt`, which no run needs
    # itself when the plan has no teacher (--methods pkt)
    plan = with_needs(stages + plan, lambda j: j.name not in names)
    for job in plan:
        if job.name == "latency":
            job.after = [j.name for j in plan if j.name != "latency" and j.name not in job.needs]
    return plan


LATENCY_FIELDS = ("tflite_bytes", "host_ms", "pixel4_ms")


def measured(out: Path) -> dict[str, dict]:
    """Per family (and model-maker): its .tflite's size, host latency (1 thread) and Pixel 4 estimate."""
    reports = sorted((out / "latency").glob("*/report.json"), key=lambda p: (len(p.parent.name.split("+")),
                                                                           p.stat().st_mtime))
    rows = read_json(reports[-1])["rows"] if reports else {}  # the run that timed the most files together
    files = {family: exported(out, family) for family in EXPORTED}
    sizes = {family: parity[f.name]["size_bytes"] for family, f in files.items()
             if (f.parent / "parity.json").is_file() and f.name in (parity := read_json(f.parent / "parity.json"))}
    if (mm := model_maker_file(out)) is not None:
        files["model-maker"], sizes["model-maker"] = mm, mm.stat().st_size
    # a family's timing only where the run timed the file it ships (not an earlier form of it, e.g. the unfused BiLSTM)
    return {family: dict(zip(LATENCY_FIELDS, (size, rows[family]["host"]["1"]["p50_ms"],
                                              rows[family]["estimate_ms"]["pixel4"])))
            for family, size in sizes.items()
            if family in rows and Path(rows[family].get("file", "")).resolve() == files[family].resolve()}


def recorded(results: Path) -> dict[str, dict]:
    """Per family (and model-maker): the size and latency the results file holds for it already, from an earlier
    invocation whose files are gone from OUT (a family is exported and timed once, from one of its SST-2 models).
    The file's rows are taken as this benchmark's, whatever OUT wrote them."""
    found = {}
    for r in read_json(results) if results.is_file() else []:
        family = family_of(r)  # a family's older shape (another `student`) was another file
        if family is not None and all(k in r for k in LATENCY_FIELDS) and r.get("student") == TIMED[family]:
            found.setdefault(family, {k: r[k] for k in LATENCY_FIELDS})
    return found


def family_of(row: dict) -> str | None:
    """The family whose file a row's size and latency are (None for the baselines without one)."""
    return "model-maker" if row["method"] == "model-maker" else METHODS.get(row["method"], (None,))[0]


def restamped(results: Path, fresh: dict[str, dict]) -> list[dict]:
    """The results file's rows of the families timed in OUT whose size or latency differ from that timing: rows of
    runs gone from OUT keep their scores and take the family's one timing (every row of a family, one run's). Only
    rows of the student timed (their `student` is the family's as it stands): a family's older shape keeps its own."""
    return [{**r, **fresh[f]} for r in (read_json(results) if results.is_file() else [])
            if (f := family_of(r)) in fresh and r.get("student") == TIMED[f]
            and any(r.get(k) != fresh[f][k] for k in LATENCY_FIELDS)]


def stage_seconds(out: Path) -> dict[str, float]:
    """Each finished shared stage's wall seconds (one thread: its CPU-seconds)."""
    found = {}
    for name, d in stage_dirs(out).items():
        if (d / "summary.json").is_file():
            found[name] = read_json(d / "summary.json").get("wall_seconds", 0.0)
        elif (d / "model.safetensors").is_file():
            found[name] = 0.0  # init: a copy of layers
    return found


def charged(out: Path, task: str, method: str, seed: int, stages: dict[str, float]) -> float | None:
    """The CPU-seconds of the stages a run stands on (None while one is unfinished)."""
    family, start, _, taught = METHODS[method]
    names = ["adapt"] + ([start] if start not in (None, "adapt") else [])
    if any(n not in stages for n in names):
        return None
    cost = sum(stages[n] for n in names)
    if taught:
        t = finished_results(run_dir(out, task, taught, seed))
        if t is None:
            return None
        cost += t["wall_seconds"]
    return cost


def budget(task: str, method: str) -> dict:
    """The budget a row was trained with, recorded in it."""
    max_len = TASKS[task][0]
    family, start, _, _ = METHODS[method]
    b = {"epochs": float(teacher_epochs(task, method) if family == "teacher" else
                         BILSTM_EPOCHS[method] if family == "bilstm" else student_epochs(task, method)),
         "max_len": int(max_len)}
    steps = {"pkt": PKT_STEPS, "pkt-short": PKT_SHORT_STEPS, "tinybert4": TINYBERT_STEPS,
             "distilbert": DISTILBERT_STEPS}.get(start)
    if steps:
        b["agnostic_steps"] = f"{steps[1]} a layer + {steps[3]} PD"
    if start == "subset2-narrow":
        b["intermediate_size"] = int(NARROW_FFN)
    if method in AUGMENTED or copies(task, method) != "0":
        b["augment"] = int(copies(task, method))
    if intermediate_epochs(task, method) is not None:
        b["intermediate_epochs"] = float(intermediate_epochs(task, method))
    if family == "bilstm":
        b["augment"] = int(TRANSFER[task])
    return b


def precisions(r: dict) -> dict:
    """A run's precisions (each "bf16" or "no": fp32), for its rows: its training's (`--mixed-precision auto` decides
    it per host) and, where it had them, its teacher's outputs' and its augmented set's masked-LM pass's."""
    trained = "+".join(dict.fromkeys(s["precision"] for s in r.get("training", []) if s.get("precision")))
    return {**({"train_precision": trained} if trained else {}),
            **{k: r[k] for k in ("teacher_outputs_precision", "augment_precision") if r.get(k)}}


def rows(out: Path, tasks: list[str], seeds: list[int], results: Path) -> tuple[list[dict], list[dict]]:
    """The finished runs' rows (the last evaluation's dev scores, one row per metric, with the run's budget and the
    seconds of the shared stage it starts from, `start_seconds`) and their cost curves; each family's size and
    latency as measured in OUT, else as `results` recorded them, else as this benchmark's own results (RESULTS)
    did: a file's size and speed are its architecture's, wherever its rows trained (e.g. on a lent GPU, into a
    results file of their own); and the recorded rows of every family timed in OUT, with that timing (`restamped`)."""
    fresh = measured(out)
    files = dict.fromkeys(f.resolve() for f in (REPO_ROOT / RESULTS, results))  # read once where they are one
    latency = {k: v for f in files for k, v in recorded(f).items()} | fresh  # the later file's figures win
    stages = stage_seconds(out)
    found, curves = [], []
    for task in tasks:
        for seed in seeds:
            for method in methods_for(task):
                family = METHODS[method][0]
                d = run_dir(out, task, method, seed)
                r = finished_results(d)
                if r is None:
                    continue
                history = read_json(d / "history.json") if (d / "history.json").is_file() else [
                    {"step": r["steps"], "wall_seconds": r["wall_seconds"], "metrics": r["metrics"]}]
                start = METHODS[method][1]
                found += [{**row, "train_examples": r.get("train_examples"), **budget(task, method), **precisions(r),
                           **({"start_seconds": round(stages[start], 1)} if start in stages else {}),
                           **latency.get(family, {})}
                          for row in finetune_rows(d, None if dev_once(r) else history[-1]["metrics"], task=task,
                                                   method=method, seed=seed, student=FAMILIES[family])]
                extra = charged(out, task, method, seed, stages)
                if extra is not None:  # a run that read a cached file is charged making it, as its maker was
                    extra += unshared_seconds(r)
                    if dev_once(r):  # one point: its dev score, read once after training (validation is no dev)
                        history = [{"step": r["steps"], "wall_seconds": r["wall_seconds"], "metrics": r["metrics"]}]
                    curves += [{"task": task, "method": method, "seed": seed, "metric": r["best_metric"],
                                "value": round(next(iter(h["metrics"].values()))[r["best_metric"]], 4),
                                "step": h["step"], **host_fields(r), "cpu_seconds": round(h["wall_seconds"] + extra, 1)}
                               for h in history if h.get("wall_seconds") is not None]
            if not any(r["task"] == task and r["seed"] == seed for r in found):
                continue  # the baselines stand beside a seed's runs, not alone
            for b in baseline_rows(task, ["--max-len", TASKS[task][0]], seed):
                found.append(b)
                if b["method"] == "tfidf" and metric_rank(task, b["metric"]) == 0:
                    curves.append({**{k: b[k] for k in ("task", "method", "seed", "metric", "value", "host")},
                                   "step": 0, "cpu_seconds": b["train_seconds"]})
            mm = model_maker_dir(out, seed) / "results.json"
            if task == "sst2" and mm.is_file():
                m = read_json(mm)
                found.append({"task": task, "method": "model-maker", "seed": seed, "metric": "accuracy",
                              "value": round(m["accuracy"], 4), "student": MODEL_MAKER,
                              "train_seconds": m["train_seconds"], "train_examples": m["train_examples"],
                              "epochs": m["epochs"], **latency.get("model-maker", {}), **recorded_host(m)})
                curves.append({"task": task, "method": "model-maker", "seed": seed, "metric": "accuracy",
                               "value": round(m["accuracy"], 4), "step": 0, "cpu_seconds": m["train_seconds"],
                               **recorded_host(m)})
    keys = {(r["task"], r["method"], r["seed"], r["metric"]) for r in found}
    found += [r for r in restamped(results, fresh) if (r["task"], r["method"], r["seed"], r["metric"]) not in keys]
    return found, curves


def dev_once(r: dict) -> bool:
    """Whether a run read dev once, after its last choice (finetune's `dev_scored`, `mobilekd.finetune.selection`):
    its results' dev metrics are its kept model's, and its history holds no dev score."""
    return "dev_scored" in r


def merge_curves(path: Path, curves: list[dict]) -> list[dict]:
    """Write the cost curves of the runs found into `path`: a run found again replaces every point of its old curve,
    so a run re-made at another budget (other steps) leaves none of its old points behind; curves of runs gone from
    OUT are kept."""
    return merge_rows(path, curves, order, key=("task", "method", "seed", "metric"))


def order(r: dict):
    """Rows by task, metric, method (ORDER's; a method this code does not know, say one an invocation of a newer
    version wrote beside it, last, by name), seed and step."""
    method = (ORDER.index(r["method"]), "") if r["method"] in ORDER else (len(ORDER), r["method"])
    return (list(TASKS).index(r["task"]), metric_rank(r["task"], r["metric"]), method, r["seed"], r.get("step", 0))


def table(results: list[dict]) -> str:
    """Mean +- std over seeds per task (official metric) and method, each with its mean share of the teacher that
    taught each run (`teacher_shares`, as the goal table's)."""
    return method_table(results, ORDER, shares=lambda task, metric, method: [] if method == "teacher" else
                        teacher_shares(results, task, metric, method))


KEEP = {"sst2": 0.97, "mrpc": 0.95, "stsb": 0.95, "cola": 0.90, "rte": 0.90}  # the share of the teacher


def teacher_pixel4(results: list[dict]) -> float | None:
    return next((r["pixel4_ms"] for r in results if r["method"] == "teacher" and r.get("pixel4_ms")), None)


def best_student(results: list[dict], task: str, metric: str) -> str | None:
    """The student method (no ablation) with the best mean on `task`'s `metric` among those whose Pixel 4 estimate is
    at most a third of the teacher's: the issue's rule (None before the teacher is timed, or with no such student).
    Of those, only the ones measured over the most seeds: a single run does not displace a verdict over three."""
    teacher_ms = teacher_pixel4(results)
    pixel = {r["method"]: r["pixel4_ms"] for r in results if r.get("pixel4_ms") is not None}
    small = [m for m in METHODS if METHODS[m][0] != "teacher" and m not in ABLATIONS
             and values(results, task, metric, m) and teacher_ms and pixel.get(m, float("inf")) <= teacher_ms / 3]
    return max(small, key=lambda m: (len(by_seed(results, task, metric, m)),
                                     statistics.mean(values(results, task, metric, m)))) if small else None


def teacher_shares(results: list[dict], task: str, metric: str, method: str) -> list[float]:
    """`method`'s score over its teacher's, seed by seed: over the teacher that taught the run (`teacher_value`, which
    runs record: `mobilekd.rundir.teacher_record`) where its row has it, else over the seed's row of the method's
    teacher (rows of runs from before; a seed's teacher made again replaces that row, so theirs may be another
    teacher's)."""
    teacher = by_seed(results, task, metric, METHODS.get(method, (None,) * 4)[3] or "teacher")
    shares: dict[int, list[float]] = {}  # a seed run on several hosts: the mean of its runs' shares (`by_seed`)
    for r in results:
        if (r["task"], r["metric"], r["method"]) == (task, metric, method):
            over = r.get("teacher_value", teacher.get(r["seed"]))
            if over is not None and over > 0:
                shares.setdefault(r["seed"], []).append(r["value"] / over)
    return [statistics.fmean(v) for _, v in sorted(shares.items())]


@dataclass
class Goal:
    """One of the issue's goals for a task's student, as measured: what the student is held against (`against`:
    a baseline's method, or "teacher" for its share of the teacher), the seed-by-seed differences or shares
    (`measured`), the target as the goal table prints it, and `runner.verdict`'s judgement."""
    student: str
    against: str
    measured: list[float]
    target: str
    verdict: str

    @property
    def share(self) -> bool:
        return self.against == "teacher"

    @property
    def name(self) -> str:
        return f"{self.student} {'/' if self.share else '-'} {self.against}"


MODEL_MAKER_MARGIN, PUBLISHED_MOBILEBERT, PUBLISHED_MARGIN = 0.06, 0.9036, -0.03  # the SST-2 goals
TRIVIAL = ("majority", "tfidf")  # a share of the teacher that these keep too says nothing of a student


def share_verdict(results: list[dict], task: str, metric: str, share: list[float]) -> str:
    """`runner.verdict` of a student's shares of its teacher against KEEP, unless a trivial model (`TRIVIAL`) keeps
    that share too (its mean share at least KEEP, as the majority class does on MRPC's F1 and RTE): then the goal
    cannot tell a student from no model and is not judged."""
    for base in TRIVIAL:
        theirs = teacher_shares(results, task, metric, base)
        if theirs and statistics.mean(theirs) >= KEEP[task]:
            return f"not judged ({base} keeps {100 * statistics.mean(theirs):.1f}% too)"
    return verdict(share, KEEP[task])



def student_goals(results: list[dict], task: str, metric: str, student: str) -> list[Goal]:
    """The issue's goals for `student` on `task`, each where its rows allow, in the goal table's order: above
    TF-IDF + LR and the majority class, seed by seed; at least KEEP's share of the teacher that taught each run
    (`teacher_shares`); on SST-2, above Model Maker's average-word-embedding classifier by MODEL_MAKER_MARGIN and
    within PUBLISHED_MARGIN of MediaPipe Model Maker's published MobileBERT, 90.36% (not the paper's figure, which is
    92.8 on GLUE's test set: Sun et al., 2020, Table 4)."""
    found = []
    for base in ("tfidf", "majority"):
        d = paired_differences(results, task, metric, student, base)
        if d:
            found.append(Goal(student, base, d, "> 0", verdict(d)))
    share = teacher_shares(results, task, metric, student)
    if share:
        found.append(Goal(student, "teacher", share, f">= {KEEP[task]:g}", share_verdict(results, task, metric,
                                                                                        share)))
    if task == "sst2":
        d = paired_differences(results, task, metric, student, "model-maker")
        if d:
            found.append(Goal(student, "model-maker", d, f"> {MODEL_MAKER_MARGIN:g}", verdict(d, MODEL_MAKER_MARGIN)))
        gap = [x - PUBLISHED_MOBILEBERT for x in values(results, task, metric, student)]
        found.append(Goal(student, f"Model Maker's published MobileBERT {PUBLISHED_MOBILEBERT}", gap,
                          f"> {PUBLISHED_MARGIN:g}",
                          verdict(gap, PUBLISHED_MARGIN)))
    return found


def ship_table(results: list[dict]) -> str:
    """What to ship, task by task: the student the goals judge (`best_student`: the best mean among the students
    measured over the most seeds whose Pixel 4 estimate is at most a third of the teacher's), its dev score, its
    share of the teacher and its margin over TF-IDF + LR, seed by seed, its file and Pixel 4 estimate, and how
    many of its task's goals (`student_goals`) hold, naming those that do not."""
    lines = ["| task (metric) | student to ship | its recipe | dev, mean ± std | of the teacher | over TF-IDF "
             "(points) | .tflite MB | Pixel 4 ms (est.) | goals |", "|---|---|---|---|---|---|---|---|---|"]
    def points(fractions, note="", signed=False):  # as points (x 100), the number of runs left to the score's cell
        return mean_std_cell([100 * f for f in fractions], note, signed=signed, digits=1, runs=False)

    for task, metric in [c for c in columns(results) if metric_rank(*c) == 0]:
        best = best_student(results, task, metric)
        if best is None:
            continue
        first = next(r for r in results if r["method"] == best)
        timed = next((r for r in results if r["method"] == best and r.get("pixel4_ms") is not None), {})
        found = {g.against: g for g in student_goals(results, task, metric, best)}
        share, over = found.get("teacher"), found.get("tfidf")
        missed = ", ".join(f"{'the share of the teacher' if g.share else g.against} {g.verdict}"
                           for g in found.values() if g.verdict != "holds")
        held = sum(g.verdict == "holds" for g in found.values())
        cells = [mean_std_cell(values(results, task, metric, best)),
                 points(share.measured, "%") if share else "-", points(over.measured, signed=True) if over else "-",
                 f"{timed['tflite_bytes'] / 1e6:.1f}" if timed.get("tflite_bytes") else "-",
                 f"{timed['pixel4_ms']:.1f}" if timed else "-",
                 f"{held} of {len(found)} hold" + (f" ({missed})" if missed else "")]
        lines.append(f"| {task} ({metric}) | {first.get('student', '-')} | `{best}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def goals(results: list[dict]) -> str:
    """The issue's goals per task, seed by seed against 2 standard errors (`runner.verdict`): the best student whose
    Pixel 4 estimate is at most a third of the teacher's, against TF-IDF + LR, the majority class and its share of
    the teacher; on SST-2 against Model Maker (+6 points) and MobileBERT's published 90.36% (-3 points); and what
    each ablation (the augmented transfer set, and longer training over it) adds, and what narrowing the layer
    subset's FFNs costs."""
    lines = ["| goal | measured, seed by seed | target | verdict |", "|---|---|---|---|"]
    two_sided = False
    for task, metric in [c for c in columns(results) if metric_rank(*c) == 0]:
        best = best_student(results, task, metric)
        if best is None:
            continue
        for goal in student_goals(results, task, metric, best):
            lines.append(f"| {task}: {goal.name} | {mean_std_cell(goal.measured, signed=not goal.share)} | "
                         f"{goal.target} | {goal.verdict} |")
        for a, b, name in (("pkt-kd", "pkt", "task KD adds"), ("pkt-kd", "pkt-short-kd", "longer PKT adds"),
                           ("subset2-kd-aug", "subset2-kd", "the augmented transfer set adds"),
                           ("subset2-narrow-kd-aug", "subset2-narrow-kd", "the augmented transfer set adds"),
                           ("pkt-kd-aug", "pkt-kd", "the augmented transfer set adds"),
                           ("teacher-long", "teacher", epochs_against(teacher_epochs(task, "teacher-long"),
                                                                      "the teacher", teacher_epochs(task, "teacher"))),
                           ("tinybert-td-teacher-long", "tinybert-td", f"a teacher of "
                            f"{teacher_epochs(task, 'teacher-long')} epochs against {teacher_epochs(task, 'teacher')}"
                            f" adds its student"),
                           *((long, short, epochs_against(intermediate_epochs(task, long), "TinyBERT's layer matching",
                                                          intermediate_epochs(task, short)))
                             for long, short in (("tinybert-td-long", "tinybert-td"),
                                                 ("subset2-narrow-td-long", "subset2-narrow-td"))),
                           ("subset2-narrow-td", "subset2-narrow-kd", "TinyBERT's two steps against logit KD add"),
                           ("tinybert-td-aug", "tinybert-td", f"TinyBERT's augmented set "
                            f"({copies(task, 'tinybert-td-aug')} new copies an example) adds"),
                           ("tinybert-td-aug", "tinybert-td-long", f"the augmented set against "
                            f"{intermediate_epochs(task, 'tinybert-td-long')} epochs of layer matching over the task's"
                            f" own examples adds"),
                           ("tinybert-td-wide", "tinybert-td", f"TinyBERT's own {copies(task, 'tinybert-td-wide')} "
                            f"new copies an example against {copies(task, 'tinybert-td')}, "
                            f"{two_steps(task, 'tinybert-td-wide')} epochs against {two_steps(task, 'tinybert-td')}, "
                            f"add"),
                           ("tinybert-td-long-pred1", "tinybert-td-long",
                            epochs_against(student_epochs(task, "tinybert-td-long-pred1"),
                                           "TinyBERT's prediction step", student_epochs(task, "tinybert-td-long"))),
                           ("bilstm-kd-aug", "bilstm-kd-aug-short", epochs_against(
                               BILSTM_EPOCHS["bilstm-kd-aug"], "the BiLSTM's training over its transfer set",
                               BILSTM_EPOCHS["bilstm-kd-aug-short"])),
                           ("tinybert-td", "tinybert-td-short",
                            f"{two_steps(task, 'tinybert-td')} epochs of TinyBERT's two steps against "
                            f"{two_steps(task, 'tinybert-td-short')} add"),
                           ("subset2-narrow-kd-aug-long", "subset2-narrow-kd-aug",
                            f"{augmented_epochs('subset2-narrow-kd-aug-long')} epochs over it against "
                            f"{AUGMENTED_EPOCHS} add"),
                           ("subset2-narrow-kd-aug-wide", "subset2-narrow-kd-aug-long",
                            f"{copies(task, 'subset2-narrow-kd-aug-wide')} new copies an example against "
                            f"{copies(task, 'subset2-narrow-kd-aug-long')}, at close to the same steps, add"),
                           ("subset2-narrow-kd-aug-wide-long", "subset2-narrow-kd-aug-wide",
                            f"{augmented_epochs('subset2-narrow-kd-aug-wide-long')} epochs over the wider set against "
                            f"{augmented_epochs('subset2-narrow-kd-aug-wide')} add"),
                           ("subset2-narrow-kd-aug-wide-longer", "subset2-narrow-kd-aug-wide-long",
                            f"{augmented_epochs('subset2-narrow-kd-aug-wide-longer')} epochs over the wider set "
                            f"against {augmented_epochs('subset2-narrow-kd-aug-wide-long')} add")):
            d = paired_differences(results, task, metric, a, b)
            if d:
                lines.append(f"| {task}: {name} ({a} - {b}) | {mean_std_cell(d, signed=True)} | > 0 | {verdict(d)} |")
        d = paired_differences(results, task, metric, "subset2-narrow-kd", "subset2-kd")
        if d:  # an equivalence: the cut should cost nothing, so both sides are judged
            lines.append(f"| {task}: narrowing the FFNs to fit the latency (subset2-narrow-kd - subset2-kd) | "
                         f"{mean_std_cell(d, signed=True)} | within ±0.01 | {within(d, 0.01)} |")
            two_sided = True
    lines += wall_goals(results)
    return "\n".join(lines) + f"\n\n{VERDICTS}" + (f" {WITHIN}" if two_sided else "") + "\n"


def family_method(task: str, method: str) -> str | None:
    """The method of this benchmark that stands on `task` for benchmarks.methods' `method`, for the source documents'
    orderings at these budgets (`family_orderings`), or None: the same student and task step over the full training
    set (AS_METHODS); TinyBERT with augmentation as TASK_RECIPES gives it (augmented on every task), without only
    where `tinybert-td` has no augmented set (SST-2: the same epochs, as benchmarks.methods' pair); MobileBERT's PKT
    student fine-tuned on the labels (`pkt`, on ABLATION_TASKS)."""
    if method == "tinybert":
        return "tinybert-td" if copies(task, "tinybert-td") == "0" else None
    return recipe(task, AS_METHODS[method]) if method in AS_METHODS else None


def family_orderings(results: list[dict]) -> str:
    """benchmarks.methods' orderings of the source documents' family over this benchmark's full-set runs
    (`family_method`), where both methods of a pair ran; "" where none did. The goals' table above it says what
    the verdicts mean."""
    return methods.orderings(results, family_method, title="ordering (full training sets)", legend=False)


def report(results: list[dict]) -> str:
    """The command's tables: what to ship per task, every method's scores, the goals as measured, the source
    documents' orderings at these budgets, and where the default plan's hours go."""
    costs, family = costs_table(results), family_orderings(results)
    return (f"{ship_table(results)}\n{table(results)}\n{goals(results)}" + (f"\n{family}" if family else "")
            + (f"\n{costs}" if costs else ""))


SEEDS_ASKED, HOURS_ASKED = 3, 6.0  # the issue's: 3 seeds, "within 6 hours on 2 cores"
WORKERS = 2  # runs at a time on 2 cores: the --workers default (benchmarks/runner.py, comparison_flags)


SETS, OUTPUTS, STAGES = "cached sets", "teachers' outputs", "shared stages"  # plan_seconds' items beside the runs


def plan_seconds(results: list[dict], chosen=tuple(METHODS)) -> tuple[dict[str, dict[str, float]],
                                                                        dict[str, list[str]]]:
    """The single-thread seconds of `python -m benchmarks.quality --methods chosen` over SEEDS_ASKED seeds, from the
    seconds its rows recorded, by what spends them -> task -> seconds: every planned run (and the TF-IDF and Model
    Maker baselines) at the mean of its task and method's measured seeds (`own_seconds`), times SEEDS_ASKED; a
    cached set the planned runs share (TinyBERT's augmented set, the BiLSTM's transfer set) once, at what making it
    cost (SETS: `set_costs`), and a seed's teacher's outputs over a set once a seed (OUTPUTS: `outputs_costs`), where
    rows record that, whichever run made them, in the plan or not; every shared stage once (STAGES, under "all":
    `start_seconds`); and what no row records yet (method -> its tasks, "stages" -> their names), left out."""
    spent, missing, starts, planned = {}, {}, set(), []
    for task in TASKS:
        for method in [*methods_for(task, chosen), "tfidf", *(["model-maker"] if task == "sst2" else [])]:
            measured = {r["seed"]: r for r in results
                        if (r["task"], r["method"]) == (task, method) and r.get("train_seconds") is not None}
            if method in METHODS and METHODS[method][1] is not None:
                starts.add(METHODS[method][1])
            if not measured:
                missing.setdefault(method, []).append(task)
                continue
            spent.setdefault(method, {})[task] = SEEDS_ASKED * statistics.mean(
                own_seconds(r) for r in measured.values())
            planned += measured.values()
    for (task, _), seconds in set_costs(planned).items():
        sets = spent.setdefault(SETS, {})
        sets[task] = sets.get(task, 0.0) + seconds
    if outputs := outputs_costs(planned):
        spent[OUTPUTS] = outputs
    for start in sorted(starts):
        seconds = [r["start_seconds"] for r in results if r.get("start_seconds") is not None
                   and r["method"] in METHODS and METHODS[r["method"]][1] == start]
        if seconds:
            stages = spent.setdefault(STAGES, {})
            stages["all"] = stages.get("all", 0.0) + max(seconds)
        else:
            missing.setdefault("stages", []).append(start)
    return spent, missing


def wall_estimate(results: list[dict], chosen=tuple(METHODS)) -> tuple[float, dict[str, list[str]]]:
    """An estimate of the wall hours of `python -m benchmarks.quality --methods chosen` over SEEDS_ASKED seeds with
    WORKERS runs at a time: `plan_seconds`' sum spread over the workers, and what it leaves out. Its bias has no
    known sign: rows timed beside other work, and rows that do not record their cached set's making (runs before
    mobilekd kept it), which count it in every seed, make it larger; what it leaves out, exports and timing, Model
    Maker's install and its runs before the others, and the wait for the stages, make it smaller."""
    spent, missing = plan_seconds(results, chosen)
    return single_thread_hours(spent) / WORKERS, missing


def single_thread_hours(spent: dict[str, dict[str, float]]) -> float:
    """The sum of `plan_seconds`' seconds, in hours."""
    return sum(sum(by_task.values()) for by_task in spent.values()) / 3600


def left_out(missing: dict[str, list[str]]) -> str:
    """What `plan_seconds` left out (no row records it yet), as a phrase: method (its tasks), stages (their names)."""
    return "; ".join(f"{m} ({'every task' if m != 'stages' and len(t) == len(TASKS) else ', '.join(t)})"
                     for m, t in missing.items())


def costs_table(results: list[dict]) -> str:
    """Where the default plan's hours go: `plan_seconds` in single-thread hours by item and task, costliest first,
    their total, and that total over WORKERS (`wall_estimate`), then what it leaves out, if anything; empty where the
    rows are no plan (`estimable_rows`)."""
    results = estimable_rows(results)
    if not results:
        return ""
    spent, missing = plan_seconds(results, [DEFAULT])
    cols = [*TASKS, "all"]
    lines = [f"| single-thread hours, {SEEDS_ASKED} seeds | " + " | ".join(cols) + " | total |",
             "|---|" + "---|" * (len(cols) + 1)]
    for item, by_task in sorted(spent.items(), key=lambda kv: -sum(kv[1].values())):
        cells = [f"{by_task[c] / 3600:.2f}" if c in by_task else "-" for c in cols]
        lines.append(f"| {item} | " + " | ".join(cells) + f" | {sum(by_task.values()) / 3600:.2f} |")
    total = single_thread_hours(spent)
    lines.append(f"| all, over {WORKERS} workers (the wall estimate) | " + " | ".join("" for _ in cols) +
                 f" | {total:.2f} / {WORKERS} = {total / WORKERS:.2f} |")
    return "\n".join(lines) + "\n" + (f"\nLeft out, no row records them yet: {left_out(missing)}.\n" if missing else "")


def estimable_rows(results: list[dict]) -> list[dict]:
    """The rows a plan's wall time is estimated from: runs on a CPU alone (a lent GPU's rows are another budget), and
    none unless the methods' rows cover every task (a command run on some tasks, or the baselines alone, is no plan)."""
    results = [r for r in results if "gpu" not in r]
    return results if set(TASKS) <= {r["task"] for r in results if r["method"] in METHODS} else []


def wall_goals(results: list[dict]) -> list[str]:
    """The issue's "the whole quality benchmark within 6 hours on 2 cores", estimated by `wall_estimate` for the
    default plan (the issue's table, `recipes`) and for every method (--methods all), from `estimable_rows`."""
    results = estimable_rows(results)
    if not results:
        return []
    lines = []
    for name, chosen in ((f"the default plan (teacher, baselines, {', '.join(RECIPES[1:])}; {SWAPS})", [DEFAULT]),
                         ("every method (--methods all: the ablations and augmented runs too)", tuple(METHODS))):
        hours, missing = wall_estimate(results, chosen)
        judged = ("fails (an estimate)" if hours > HOURS_ASKED else "not judged (some runs left out)" if missing
                  else "holds (an estimate)")
        left = f"; left out, no row records them yet: {left_out(missing)}" if missing else ""
        hosts = ", ".join(f"`{h}`" for h in sorted({str(r.get("host")) for r in results if r.get("train_seconds")}))
        lines.append(f"| wall time of {name}, {SEEDS_ASKED} seeds on {WORKERS} cores | about {hours:.1f} h "
                     f"(an estimate: the rows' seconds summed over the hosts {hosts}, in the precision each chose; "
                     f"the plan has never run whole{left}) | <= {HOURS_ASKED:g} h | {judged} |")
    return lines


def plot(curves: list[dict], path: Path) -> None:
    """Dev score against CPU-seconds, one curve per method (the mean over seeds at each evaluation), a panel per
    task of `curves`; a method keeps its colour in every panel (tab20, then tab20b: no two of ORDER's methods share
    one while there are at most 40)."""
    from matplotlib import colormaps
    colours = [*colormaps["tab20"].colors, *colormaps["tab20b"].colors]
    drawn = task_panels(curves, 5.5, 4.2)
    if drawn is None:
        return
    fig, panels = drawn
    for ax, task in panels:
        mine = [r for r in curves if r["task"] == task]
        for method in ORDER:
            pts = [r for r in mine if r["method"] == method]
            if not pts:
                continue
            steps = sorted({r["step"] for r in pts})
            x = [statistics.mean(r["cpu_seconds"] for r in pts if r["step"] == s) / 3600 for s in steps]
            y = [statistics.mean(r["value"] for r in pts if r["step"] == s) for s in steps]
            ax.plot(x, y, "o-" if len(x) > 1 else "s", label=method, markersize=4,
                    color=colours[ORDER.index(method) % len(colours)])
        ax.set_xscale("log")
        ax.set_xlabel("CPU-hours, stages it stands on included (one thread)")
        ax.set_ylabel(f"{task} dev {mine[0]['metric']}")
        ax.set_title(task)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path)


def parse(argv=None) -> argparse.Namespace:
    """The command's flags; --methods all as every method."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/quality", RESULTS, list(TASKS), TASKS, plot="docs/quality.png")
    p.add_argument("--curves", default="docs/results/quality_cost.json", help="the cost curves' rows")
    p.add_argument("--methods", nargs="+", choices=[*METHODS, DEFAULT, FAMILY, "all"], default=[DEFAULT],
                   help=f"the methods to run (default {DEFAULT}, the issue's table: {', '.join(RECIPES)}; {SWAPS}; "
                        f"{FAMILY}: {', '.join(FAMILY_METHODS)}; all: every method; a method's teacher runs with it)")
    p.add_argument("--no-model-maker", action="store_true", help="leave Model Maker out (it installs TensorFlow "
                                                                 "2.15 into a venv of its own under OUT)")
    args = p.parse_args(argv)
    args.methods = list(METHODS) if "all" in args.methods else [
        m for name in args.methods for m in (FAMILY_METHODS if name == FAMILY else [name])]
    return args


def main(argv=None):
    args = parse(argv)
    out = (REPO_ROOT / args.out).resolve()
    curves_path = REPO_ROOT / args.curves

    failed = []

    def plan():
        if not args.no_model_maker and "sst2" in args.tasks:  # first: its file is timed with ours
            from benchmarks import model_maker
            try:
                failed.extend(f"model-maker seed {s}" for s in model_maker.run(out / "model_maker", args.seeds))
            except UserError as err:  # it cannot install: the other runs go on
                print(f"error: {err}", file=sys.stderr)
                failed.append("model-maker")
        return jobs(out, args.tasks, args.seeds, args.methods)

    def found():
        results, curves = rows(out, args.tasks, args.seeds, REPO_ROOT / args.results)
        merge_curves(curves_path, curves)
        return results

    def draw(_, path):
        curves = read_json(curves_path) if curves_path.is_file() else []
        plot([r for r in curves if r["task"] in args.tasks and r["task"] in PLOT_TASKS], path)

    code = comparison(args, plan, found, order, report, draw)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return code or (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
