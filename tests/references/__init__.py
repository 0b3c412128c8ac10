"""The parity references: the installed transformers processors (or, for Phi-3-vision,
a transcription of the published remote code), fed ``common.reference_input``.

One module per family, named after its module under ``sglang_mm_grpc/families``
(``qwen``, ``llava``, ``llava_next``, ``pixtral``, ``llama4``, ``phi3v``, ``phi4mm``,
``inkling``, ``inkling2``); what they share is in ``common``. A family's module holds
everything specific to it:

* ``reference(...)``: its processor built from preprocessor_config.json (and
  processor_config.json) values, as ``from_pretrained`` builds it, with a word-level
  tokenizer holding its special tokens where the processor needs one;
* ``processor(src)``: the same for a preset's ``ModelSource`` (what
  ``harness.Pairs`` takes), where a processor exists;
* its prompt and tokenizer helpers;
* ``FIXTURE_SETS``, when its reference needs torch: set name -> generator of the
  committed fixture cases; ``scripts/gen_fixtures.py`` finds it by the module's name.

Tests import a family's module as ``hf_<family>`` (``from references import qwen as
hf_qwen``): the family's own module under ``sglang_mm_grpc`` has the same name.
"""
