"""The model-file examples of ``resources/examples`` (each makes its data): ``fieldscope
check-model`` passes them (exit 0) and flags a broken copy (exit 1, one line per problem), and
a short run recovers the parameter their data were made with."""

from __future__ import annotations

import pytest

from app import cli
from core.config import parse_config
from core.store.run_store import RunReader
from support.engine_cases import run
from support.model_files import copy_example


@pytest.mark.parametrize("name, parameter, truth", [("lognormal_tracer", "b1", 1.5), ("beam_noise_map", "gain", 1.2)])
def test_field_examples_pass_check_model_and_recover_their_parameter(tmp_path, capsys, name, parameter, truth):
    path = copy_example(name, tmp_path)
    assert cli.main(["check-model", str(path)]) == 0
    assert "model file OK" in capsys.readouterr().out
    text = path.read_text().replace("num_warmup = 300", "num_warmup = 150").replace("num_samples = 500",
                                                                                    "num_samples = 200")
    status, _ = run(parse_config(text, base_dir=tmp_path), text, tmp_path / "run")
    assert status == "finished"
    draws = RunReader(tmp_path / "run").param(parameter)
    assert abs(draws.mean() - truth) < 4 * draws.std(), (draws.mean(), draws.std())


def test_check_model_exits_1_with_one_line_per_problem(tmp_path, capsys):
    path = copy_example("beam_noise_map", tmp_path)
    model = tmp_path / "model.py"
    model.write_text(model.read_text().replace("return -0.5 * tf.reduce_sum(r * r)",
                                               "return -0.5 * tf.reduce_sum(tf.stop_gradient(r) * r)"))
    assert cli.main(["check-model", str(path)]) == 1
    out = capsys.readouterr().out
    problems = [line for line in out.splitlines() if line.startswith("PROBLEM: ")]
    assert len(problems) == 2        # the gain, the field: each half its true gradient
    assert "with respect to gain at" in problems[0] and "with respect to the field" in problems[1]
    assert all("autodiff is 0.5 times the finite difference" in line for line in problems)
