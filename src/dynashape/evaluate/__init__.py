"""The papers' evaluation protocols for any checkpoint (``dynashape evaluate``): LEAD's (Sober Reasoning's
avg@n) and MEDS's (pass@k up to 128, the eigen ratio of wrong answers), on MATH-500, GSM8K or a user's JSONL,
with vLLM on a GPU or the project's own sampler; results.json, generations.jsonl and results.md with plots.

Modules: ``protocols`` (settings as data), ``benchmarks`` (what ``--data`` names), ``backends`` (vLLM,
transformers), ``cache`` (the resumable generation cache), ``settings`` (what an evaluation runs, and whether
two compare), ``sampling`` (what the cache lacks, sampled and verified), ``results`` (the numbers), ``report``
(results.md), ``run`` (the command's body). Nothing heavy is imported here.
"""
