"""Objectives as data: matches evaluate to the hand-composed losses, refusals name the problem, and the
package keeps its layering (no library module imports a program)."""

import ast
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from mobilekd.errors import UserError
from mobilekd.models.heads import HEADS, MobileBertForPreTraining, head_of_architectures
from mobilekd.models.presets import PRESETS
from mobilekd.transfer.losses import attention_transfer, cosine_hidden, feature_map_transfer, mean_transfer
from mobilekd.transfer.objectives import (Features, Match, check_matches, evaluate, mobilebert_matches,
                                          projections_for, refuse)


def _features(config, seed, **change):
    torch.manual_seed(seed)
    model = MobileBertForPreTraining(config.replace(**change)).eval()
    ids = torch.randint(1000, 5000, (2, 12))
    with torch.no_grad():
        return Features(model(ids, output_feature_maps=True, output_attentions=True).encoder)


def test_mobilebert_matches_are_the_papers_layer_wise_loss():
    teacher = _features(PRESETS["demo_teacher"].config, 0)
    student = _features(PRESETS["demo_student"].config, 1)
    t, s = teacher.encoder, student.encoder
    terms = evaluate(mobilebert_matches([0, 1, 2, 3], [1, 3], mean=5000.0), teacher, student)
    assert list(terms) == ["fmt_L1", "at_L1", "mean_L1", "fmt_L3", "at_L3", "mean_L3", "loss"]
    expected = 0.0
    for l in (1, 3):  # weighted terms in the matches' order, averaged over the two layers
        expected = expected + 100.0 * feature_map_transfer(t.feature_maps[l], s.feature_maps[l]) / 2
        expected = expected + 1.0 * attention_transfer(t.attentions[l], s.attentions[l]) / 2
        expected = expected + 5000.0 * mean_transfer(t.feature_maps[l], s.feature_maps[l]) / 2
    assert torch.equal(terms["loss"], expected)
    assert torch.equal(terms["at_L3"], attention_transfer(t.attentions[3], s.attentions[3]))


def test_other_methods_matches_cls_embeddings_and_a_learned_projection():
    teacher_cfg = PRESETS["demo_teacher"].config
    student_cfg = teacher_cfg.replace(hidden_size=64, embedding_size=32, intra_bottleneck_size=64)
    teacher, student = _features(teacher_cfg, 0), _features(student_cfg, 1)
    matches = [Match(feature="embeddings", loss="mse", projection=True),
               Match(feature="hidden", loss="mse", teacher_layer=3, student_layer=1, projection=True),
               Match(feature="cls", loss="cosine", weight=2.0, teacher_layer=3, student_layer=3, projection=True)]
    assert check_matches(matches, teacher_cfg, student_cfg) == []
    projections = projections_for(matches, teacher_cfg, student_cfg)
    assert set(projections) == {"embeddings", "L1", "L3"}  # one per site the student's features are read at
    assert projections["L1"].weight.shape == (128, 64)
    terms = evaluate(matches, teacher, student, projections)
    cls = cosine_hidden(teacher.encoder.feature_maps[3][:, 0],
                        projections["L3"](student.encoder.feature_maps[3][:, 0]))
    assert torch.equal(terms["cosine_cls_L3"], cls.detach())
    mse_emb = torch.nn.functional.mse_loss(projections["embeddings"](student.encoder.embeddings),
                                           teacher.encoder.embeddings)
    assert terms["mse_embeddings"].item() == pytest.approx(mse_emb.item(), rel=1e-6)
    # two student layers touched (1 and 3): the weighted sum is averaged over them
    total = (terms["mse_embeddings"] + terms["mse_L1"] + 2.0 * terms["cosine_cls_L3"]) / 2
    assert terms["loss"].item() == pytest.approx(total.item(), rel=1e-6)
    loss = terms["loss"]
    loss.backward()  # the projections learn with the student
    assert projections["L1"].weight.grad is not None


def test_matches_that_cannot_run_are_refused_with_the_reason():
    teacher, student = PRESETS["demo_teacher"].config, PRESETS["demo_student"].config
    wide = PRESETS["mobilebert"].config
    problems = check_matches([Match(feature="hidden", loss="fmt", teacher_layer=0, student_layer=0)], teacher, wide)
    assert problems == ["feature-map widths differ (teacher hidden_size 128, student 512) and the match has no "
                        "projection"]
    assert check_matches([Match(feature="attention", loss="at", teacher_layer=0, student_layer=0)], teacher,
                         student.replace(num_attention_heads=3, intra_bottleneck_size=33)) == [
        "the teacher's 4 attention heads cannot be grouped into the student's 3 (the count must divide)"]
    assert check_matches([Match(feature="attention", loss="mse", teacher_layer=0, student_layer=0, projection=True)],
                         teacher, student) == ["mse_L0: only feature maps (hidden, cls, embeddings) can be projected"]
    assert "layers must be teacher 0..3 and student 0..3, got 4 and 0" in check_matches(
        [Match(feature="hidden", loss="fmt", teacher_layer=4, student_layer=0)], teacher, student)[0]
    assert "unknown loss 'l7'" in check_matches([Match(feature="hidden", loss="l7", teacher_layer=0,
                                                       student_layer=0)], teacher, student)[0]
    assert "unknown feature 'ffn'" in check_matches([Match(feature="ffn", loss="mse")], teacher, student)[0]
    with pytest.raises(UserError, match="^teacher and student cannot be paired: the teacher's 4 attention heads"):
        refuse(check_matches(mobilebert_matches([0], [0]), teacher,
                             student.replace(num_attention_heads=3, intra_bottleneck_size=33)))


def test_attention_transfer_across_head_counts_averages_groups_of_teacher_heads():
    """12 teacher heads over a 4-head student (all-MiniLM-L6-v2 -> mobilebert_h384): heads 0-2 -> 0, 3-5 -> 1..."""
    teacher_cfg = PRESETS["demo_teacher"].config.replace(num_attention_heads=8)
    student_cfg = PRESETS["demo_student"].config  # 4 heads
    teacher, student = _features(teacher_cfg, 0), _features(student_cfg, 1)
    assert check_matches(mobilebert_matches([0], [0]), teacher_cfg, student_cfg) == []
    terms = evaluate(mobilebert_matches([0, 1, 2, 3], [2]), teacher, student)
    t = teacher.encoder.attentions[2]
    grouped = torch.stack([t[:, 2 * h:2 * h + 2].mean(1) for h in range(4)], dim=1)
    assert torch.allclose(grouped.sum(-1), torch.ones(1))  # still distributions
    assert terms["at_L2"].item() == pytest.approx(attention_transfer(grouped, student.encoder.attentions[2]).item(),
                                                  rel=1e-6)


def test_one_head_registry_names_classes_architectures_and_outputs():
    assert head_of_architectures(["BertForSequenceClassification"]) == "classification"
    assert head_of_architectures(["MobileBertForQuestionAnswering"]) == "qa"
    assert head_of_architectures(["BertModel"]) == "pretraining"
    config = PRESETS["demo_student"].config.replace(id2label={0: "negative", 1: "positive"})
    ids = torch.randint(1000, 5000, (1, 8))
    for head in HEADS.values():
        torch.manual_seed(0)
        outputs = head.app_outputs(head.model_class(config).eval(), ids, torch.ones_like(ids), torch.zeros_like(ids))
        assert len(outputs) == len(head.outputs), head.name


# What each part of the tree may import (README, "Layout"); the recipes and the tests may import anything.
LIBRARY = {
    "mobilekd": {"mobilekd"},  # the library below the recipes: itself only
    "android_bench": {"android_bench", "mobilekd"},
    "teacher_ib_bert": {"teacher_ib_bert", "mobilekd"},
    # the comparisons share benchmarks.runner; some time files through android_bench
    "benchmarks": {"mobilekd", "teacher_ib_bert", "android_bench", "benchmarks"},
}
# the benchmarks sit on top of the programs they run: they read the recipes' own constants and parsers (ship's,
# export's) rather than copy them
MAY_IMPORT_PROGRAMS = ("benchmarks",)
PROGRAMS = ("mobilekd.recipes", "mobilekd.cli", "mobilekd.__main__")
OURS = {"mobilekd", "android_bench", "teacher_ib_bert", "benchmarks"}


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_no_library_module_imports_a_program_and_layers_hold():
    bad = []
    for top, allowed in LIBRARY.items():
        for path in sorted((ROOT / top).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if module.startswith(PROGRAMS):
                continue
            for name in _imports(path):
                program = name.startswith(PROGRAMS) and top not in MAY_IMPORT_PROGRAMS
                if program or name.split(".")[0] in OURS - allowed:
                    bad.append(f"{module} imports {name}")
                if module.startswith("mobilekd.export") and name.startswith("mobilekd.finetune"):
                    bad.append(f"{module} imports {name}")  # export reads tasks from mobilekd.data
    assert bad == []


# The library's inner floors, lowest first: a module imports from its own floor's package, from lower floors, and
# from the ground floor (mobilekd/*.py: errors, fileio, flags, host, bf16, ...), never from a floor above; train and
# export share a floor and import nothing of each other.
FLOORS = {"data": 0, "models": 1, "train": 2, "export": 2, "transfer": 3, "finetune": 4, "search": 5, "recipes": 6}


def _back_up_imports(package_root) -> list[str]:
    bad = []
    for path in sorted(package_root.rglob("*.py")):
        parts = path.relative_to(package_root.parent).with_suffix("").parts
        if len(parts) == 2 and parts[1] not in ("cli", "__main__"):  # the ground floor, below every folder
            mine, floor = None, -1
        elif len(parts) >= 3 and parts[1] in FLOORS:
            mine, floor = parts[1], FLOORS[parts[1]]
        else:
            continue
        for name in _imports(path):
            other = name.split(".")[1] if name.startswith("mobilekd.") else None
            if other in FLOORS and other != mine and FLOORS[other] >= floor:
                bad.append(f"{'.'.join(parts)} imports {name}")
    return bad


def test_inner_floors_import_only_downwards(tmp_path):
    assert _back_up_imports(ROOT / "mobilekd") == []
    # the check sees a back-up import between inner floors, as the one data/augment.py had into train/
    package = tmp_path / "mobilekd"
    (package / "data").mkdir(parents=True)
    (package / "data" / "augment.py").write_text("from mobilekd.train.precision import read_only_flag\n")
    (package / "export").mkdir()
    (package / "export" / "x.py").write_text("import mobilekd.train.loop\n")
    (package / "host.py").write_text("from mobilekd.data.tasks import Task\n")
    assert _back_up_imports(package) == ["mobilekd.data.augment imports mobilekd.train.precision",
                                         "mobilekd.export.x imports mobilekd.train.loop",
                                         "mobilekd.host imports mobilekd.data.tasks"]


def test_the_benchmarks_runner_knows_no_recipe():
    """A run marks its own output complete (`mobilekd.rundir.owned`): the runner asks `completed`, and imports no
    recipe to learn what one writes."""
    assert not [name for name in _imports(ROOT / "benchmarks" / "runner.py") if name.startswith("mobilekd.recipes")]
