"""run_dir/tb/ holds every metric of metrics.jsonl at its step, once, also after an interruption and a resume."""

from __future__ import annotations

import numpy as np
import pytest

from dynashape.train.run import read_metrics, train

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def _tensorboard_scalars(tb_dir) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})  # 0: keep every event
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def _expected(metrics) -> dict[str, list[tuple[int, float]]]:
    """metrics.jsonl as TensorBoard stores it: one float32 per metric and step, the step itself not a metric."""
    tags = {k for m in metrics for k in m} - {"step"}
    return {tag: [(int(m["step"]), float(np.float32(m[tag]))) for m in metrics if tag in m] for tag in tags}


def test_scalars_equal_metrics_jsonl(tiny_config, parity_verifier, tmp_path):
    train(tiny_config("lead"), tmp_path, progress=False, verifier=parity_verifier, report=False)
    metrics = read_metrics(tmp_path)
    assert [m["step"] for m in metrics] == [1.0, 2.0, 3.0]
    scalars = _tensorboard_scalars(tmp_path / "tb")
    assert {"accuracy", "length/mean", "lead/lambda_l", "time/step"} <= set(scalars)
    assert [step for step, _ in scalars["accuracy"]] == [1, 2, 3]
    assert scalars == _expected(metrics)


class Interrupt(KeyboardInterrupt):
    pass


def test_interrupted_and_resumed_run_logs_each_step_once(tiny_config, parity_verifier, tmp_path):
    cfg = tiny_config("grpo", steps=4, checkpoint_every=2)

    def ctrl_c_after_step_3(m):
        if m["step"] == 3:
            raise Interrupt

    with pytest.raises(Interrupt):
        train(cfg, tmp_path, progress=False, verifier=parity_verifier, on_step=ctrl_c_after_step_3)
    interrupted = read_metrics(tmp_path)
    assert [m["step"] for m in interrupted] == [1.0, 2.0, 3.0]
    assert _tensorboard_scalars(tmp_path / "tb") == _expected(interrupted)  # on disk despite the exception

    resumed = train(cfg, tmp_path, progress=False, verifier=parity_verifier, report=False)
    assert resumed.resumed_from == 2  # step 3 is redone from the checkpoint at step 2
    metrics = read_metrics(tmp_path)
    assert [m["step"] for m in metrics] == [1.0, 2.0, 3.0, 4.0]
    assert metrics[2]["time/step"] != interrupted[2]["time/step"], "step 3 was measured again"
    scalars = _tensorboard_scalars(tmp_path / "tb")
    assert [step for step, _ in scalars["length/mean"]] == [1, 2, 3, 4]
    assert scalars == _expected(metrics)  # the redone step 3, not the interrupted run's
    assert len(list((tmp_path / "tb").glob("events.out.tfevents.*"))) == 2
