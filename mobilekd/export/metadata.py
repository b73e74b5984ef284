"""TFLite metadata, so Android apps load the `.tflite` as is.

A classifier gets the layout of MediaPipe's `TextClassifier` (and the TFLite Task Library's `BertNLClassifier`):
the three inputs tagged ids / mask / segment ids, a BertTokenizer process unit carrying `vocab.txt`, and a
classification output carrying the label file. A question-answering model gets the layout of the Task Library's
`BertQuestionAnswerer`: the same inputs and tokenizer, outputs named `start_logits` and `end_logits`.

Written with MediaPipe's metadata writers. The 1.2.2 wheel lacks the compiled `_pywrap_metadata_version` they
import; `_install_version_shim` stands in for it (see `minimum_parser_version`). Their populator re-packs the
flatbuffer and drops weights stored after it (ai-edge-quantizer writes fp16/int8 weights there), so
`mobilekd.export.graph.inline_buffers` moves those into the flatbuffer first.
"""

from __future__ import annotations

import gc
import sys
import types
from pathlib import Path

from mobilekd.errors import UserError
from mobilekd.export.graph import inline_buffers
from mobilekd.export.signatures import DEFAULT_SIGNATURE, INPUT_NAMES
from mobilekd.models.heads import HEADS

TENSOR_NAMES = {role: f"{DEFAULT_SIGNATURE}_{name}" for role, name in zip(("ids", "mask", "segment"), INPUT_NAMES)}


def minimum_parser_version(metadata_buffer: bytes) -> str:
    """The oldest metadata parser that reads `metadata_buffer` (the version table in metadata_schema.fbs).

    Our writers use at most a VOCABULARY associated file (1.0.1) and BertTokenizerOptions (1.1.0).
    """
    from mediapipe.tasks.metadata import metadata_schema_py_generated as fb

    meta = fb.ModelMetadataT.InitFromObj(fb.ModelMetadata.GetRootAsModelMetadata(bytes(metadata_buffer), 0))
    subgraphs = meta.subgraphMetadata or []
    if any(s.inputProcessUnits or s.outputProcessUnits for s in subgraphs):
        return "1.1.0"
    tensors = [t for s in subgraphs for t in (s.inputTensorMetadata or []) + (s.outputTensorMetadata or [])]
    files = (meta.associatedFiles or []) + [f for t in tensors for f in (t.associatedFiles or [])]
    if any(f.type == fb.AssociatedFileType.VOCABULARY for f in files):
        return "1.0.1"
    return "1.0.0"


def _install_version_shim() -> None:
    package = "mediapipe.tasks.cc.metadata.python"
    try:
        __import__(f"{package}._pywrap_metadata_version")
    except ImportError:
        shim = types.ModuleType(f"{package}._pywrap_metadata_version")
        shim.GetMinimumMetadataParserVersion = minimum_parser_version
        parent = sys.modules.setdefault(package, types.ModuleType(package))
        parent._pywrap_metadata_version = sys.modules[shim.__name__] = shim


def add_metadata(path, head: str, vocab_file, labels: list[str] | None = None) -> None:
    """Rewrite the `.tflite` at `path` (a temp file of the caller's) with metadata for `head`."""
    _install_version_shim()
    from mediapipe.tasks.python.metadata.metadata_writers import metadata_writer as mw
    from mediapipe.tasks.python.metadata.metadata_writers import text_classifier

    path = Path(path)
    model = bytearray(inline_buffers(path.read_bytes()))
    tokenizer = mw.BertTokenizer(str(vocab_file))
    layout = HEADS[head].metadata
    if layout == "text_classifier":
        writer = text_classifier.MetadataWriter.create_for_bert_model(
            model, tokenizer, mw.Labels().add(labels), TENSOR_NAMES["ids"], TENSOR_NAMES["mask"],
            TENSOR_NAMES["segment"])
    elif layout == "bert_question_answerer":
        writer = mw.MetadataWriter(model).add_general_info(
            "BertQuestionAnswerer", "Answers a question with a span of the given context.")
        writer.add_bert_text_input(tokenizer, TENSOR_NAMES["ids"], TENSOR_NAMES["mask"], TENSOR_NAMES["segment"])
        for name in qa_output_order(path, HEADS[head].outputs):
            writer.add_feature_output(name=name, description=f"{name.replace('_', ' ')} of each token")
    else:
        with_metadata = [h.name for h in HEADS.values() if h.metadata]
        raise UserError(f"TFLite metadata is written for {' and '.join(with_metadata)} models, not {head!r}")
    content, _ = writer.populate()
    path.write_bytes(bytes(content))
    del writer  # its __del__ removes a temp folder, and fails if left to interpreter shutdown
    gc.collect()


def qa_output_order(path, outputs: tuple[str, ...]) -> list[str]:
    """Subgraph output order of a QA export: the signature names output_0, output_1 (the head's `outputs`, start
    then end) map onto tensors whose order the converter chooses."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    signature = interpreter._get_full_signature_list()[DEFAULT_SIGNATURE]["outputs"]
    names = {index: outputs[int(name.removeprefix("output_"))] for name, index in signature.items()}
    return [names[d["index"]] for d in interpreter.get_output_details()]


def read_metadata(path) -> dict:
    """The metadata JSON and associated file names of a `.tflite`, as MediaPipe's displayer shows them."""
    import json

    _install_version_shim()
    from mediapipe.tasks.python.metadata import metadata

    displayer = metadata.MetadataDisplayer.with_model_file(str(path))
    return {"metadata": json.loads(displayer.get_metadata_json()),
            "associated_files": sorted(displayer.get_packed_associated_file_list())}
