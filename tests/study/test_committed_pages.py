"""Every committed results page is a function of its committed runs and its study file: `dynashape results` on the
folder, through the study file the folder names, rewrites the page and its JSON byte for byte, apart from the
moment it was written (the JSON's ``generated``, the page's timestamps) and the report's own path, which the test
chooses."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from dynashape.study.pages import write_page

ROOT = Path(__file__).resolve().parents[2]
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")

# (comparison folder, committed page, whether its runs are marked as deviating from the registered evaluation)
PAGES = [
    ("results/comparison", "docs/results.md", False),
    ("results/comparison-v2", "docs/results-v2.md", False),
    ("results/comparison-v2-as-run", "docs/results-v2-as-run.md", True),
    ("results/comparison-field", "docs/results-field.md", False),
]


def _without_stamps(text: str) -> str:
    return STAMP.sub("<time>", text)


@pytest.mark.parametrize(("folder", "page", "deviating"), PAGES, ids=[p for _, p, _ in PAGES])
def test_a_committed_page_regenerates_unchanged_from_its_runs(folder, page, deviating, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # pages name their folder as the command was given it: relative to the repository
    monkeypatch.setenv("MPLBACKEND", "Agg")
    committed = ROOT / page
    report = tmp_path / committed.name
    shutil.copy(committed, report)  # the page's pre-registered block is kept from the file it rewrites
    write_page(folder, report, deviating=deviating)

    made = report.read_text().replace(str(report), page)
    assert _without_stamps(made) == _without_stamps(committed.read_text())
    made_json, committed_json = (json.loads(p.with_suffix(".json").read_text()) for p in (report, committed))
    for data in (made_json, committed_json):
        assert data.pop("generated")
    assert made_json == committed_json
    assert sorted(p.name for p in report.with_suffix("").iterdir()) == sorted(
        p.name for p in committed.with_suffix("").iterdir()
    )  # the same plots, linked from the page


def test_the_stamp_mask_hides_only_times():
    assert _without_stamps("written 2026-12-06T21:04:25Z, 0.704") == "written <time>, 0.704"
